""":class:`EngineClient` and :class:`AsyncEngineClient` send a :class:`~.request.Request` through one
``elastic_transport`` transport on either engine; it retries :data:`~hybridsearch.retry.RETRIED_STATUSES`."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar, Protocol
from urllib.parse import quote, urlencode

import elastic_transport
from elastic_transport import AiohttpHttpNode, ApiResponseMeta, AsyncTransport, NodeConfig, Transport, Urllib3HttpNode
from elastic_transport.client_utils import basic_auth_to_header
from elasticsearch.serializer import NdjsonSerializer, OrjsonSerializer

from hybridsearch.cluster_url import parse_node, speaks
from hybridsearch.engine import request
from hybridsearch.engine.dialect import Dialect, EngineInfo
from hybridsearch.engine.errors import causes_of, engine_errors, error_type_of, http_error
from hybridsearch.engine.request import RAISE, Json, Request
from hybridsearch.errors import ClusterError, ConfigError, SchemeMismatch, TlsFailure
from hybridsearch.retry import RETRIED_STATUSES
from hybridsearch.settings import ClusterSettings

#: OpenSSL reasons of handshakes that fail the same way on every try (not a TLS port, no shared protocol)
HOPELESS_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNSUPPORTED_PROTOCOL",
                          "TLSV1_ALERT_PROTOCOL_VERSION"})


def diagnose(exc: Exception, base_url: str) -> Exception:
    """The TlsFailure (or SchemeMismatch, after one probe) a failure to connect to ``base_url`` is, else ``exc``."""
    causes = list(causes_of(exc))  # aiohttp's wrapper of a verify error lacks its details: look for them first
    if verify := [e for e in causes if isinstance(e, ssl.SSLCertVerificationError)]:
        said = next((e.verify_message for e in verify if getattr(e, "verify_message", None)), None)
        return TlsFailure(base_url, "certificate verify failed" + (f": {said}" if said else ""), untrusted=True)
    hopeless = next((e.reason for e in causes if isinstance(e, ssl.SSLError) and e.reason in HOPELESS_TLS), None)
    nobody = any(isinstance(e, ConnectionRefusedError | TimeoutError | socket.gaierror) for e in causes)
    node = parse_node(base_url)
    tls = node.scheme == "http"  # what the node would speak instead
    if (not nobody if tls else hopeless is not None) and speaks(node.host, node.port, tls=tls):
        return SchemeMismatch(node.address, speaks_tls=tls, use=replace(node, scheme="https" if tls else "http").url)
    return exc if hopeless is None else TlsFailure(base_url, hopeless.lower().replace("_", " "), untrusted=False)


class _Node(Urllib3HttpNode):
    """The library's node; a failure :func:`diagnose` names raises at once (not retried), as on asyncio."""

    def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().perform_request(*args, **kwargs)
        except elastic_transport.ConnectionError as exc:  # TlsError included
            raise diagnose(exc, self.base_url) from exc


class _AsyncNode(AiohttpHttpNode):
    async def perform_request(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # as the base
        try:
            return await super().perform_request(*args, **kwargs)
        except elastic_transport.ConnectionError as exc:
            raise await asyncio.to_thread(diagnose, exc, self.base_url) from exc


class _OrjsonNdjson(NdjsonSerializer, OrjsonSerializer):
    """``_msearch`` and ``_bulk`` bodies (one JSON line per item) written and read with orjson."""


SERIALIZERS = {OrjsonSerializer.mimetype: OrjsonSerializer(), _OrjsonNdjson.mimetype: _OrjsonNdjson()}


def auth_headers(cfg: ClusterSettings) -> dict[str, str]:
    """The ``Authorization`` header of ``cfg``'s API key, user and password, else of the node URLs' credentials."""
    if cfg.api_key is not None:
        return {"authorization": f"ApiKey {cfg.api_key.get_secret_value()}"}
    node = cfg.nodes[0]
    user, password = (cfg.username, cfg.password.get_secret_value() if cfg.password else "") \
        if cfg.username is not None else (node.username, node.password or "")
    return {} if user is None else {"authorization": basic_auth_to_header((user, password))}


def _answer(request: Request, meta: ApiResponseMeta, body: Any) -> Any:
    """A 2xx answer's body (True for HEAD), ``request.absent`` for a 404 it allows; else raises the library's error."""
    if 200 <= meta.status < 300:
        return True if request.method == "HEAD" else body
    error = http_error(meta, body)
    if request.absent is RAISE or meta.status != 404 or error_type_of(error) == "index_not_found_exception":
        raise error
    return request.absent


def _from_root(meta: ApiResponseMeta, body: Any) -> EngineInfo | None:
    """The engine ``GET /`` names; None where it is not served (405 on the integ-test zip); raises for 401/403."""
    if meta.status in (401, 403):
        raise http_error(meta, body)
    if meta.status >= 300:
        return None
    info = body.get("version", {}) if isinstance(body, dict) else {}
    return EngineInfo("opensearch" if info.get("distribution") == "opensearch" else "elasticsearch", info.get("number"))


def _from_nodes(meta: ApiResponseMeta, body: Any) -> EngineInfo:
    """The engine ``GET _nodes/_local`` names: Elasticsearch sends ``X-Elastic-Product``."""
    nodes = body.get("nodes", {}) if isinstance(body, dict) else {}
    version = next((n.get("version") for n in nodes.values()), None)
    return EngineInfo("elasticsearch" if meta.headers.get("x-elastic-product") else "opensearch", version)


_NODES = "/_nodes/_local?filter_path=nodes.*.version"
_JSON = {"accept": "application/json"}


class Sender(Protocol):
    """What sends requests synchronously: an :class:`EngineClient`, or the query log's sender."""

    @property
    def engine(self) -> EngineInfo: ...

    @property
    def dialect(self) -> Dialect: ...

    def send(self, request: Request) -> Any: ...


class _Clients:
    """What both senders share: the settings, the library's transport to ``cfg``'s nodes, and the engine once known
    (``HSP_ES__ENGINE`` or ``engine`` names it); ``max_retries`` and ``request_timeout`` replace ``cfg``'s."""

    _library: ClassVar[tuple[Any, Any]]  # the transport class and its node class

    def __init__(self, cfg: ClusterSettings, engine: EngineInfo | None = None, *, max_retries: int | None = None,
                 request_timeout: float | None = None) -> None:
        self.cfg = cfg
        self._engine = engine if engine is not None or cfg.engine == "auto" else EngineInfo(cfg.engine)
        self._lock = threading.Lock()  # detection (sync)
        nodes = [NodeConfig(n.scheme, n.host, n.port, path_prefix=n.path, headers=auth_headers(cfg),
                            request_timeout=cfg.request_timeout if request_timeout is None else request_timeout,
                            verify_certs=cfg.verify_certs,
                            ca_certs=str(cfg.ca_certs) if cfg.ca_certs and n.scheme == "https" else None)
                 for n in cfg.nodes]
        kind, node = self._library
        self.transport = kind(nodes, node_class=node, serializers=SERIALIZERS, retry_on_timeout=True,
                              retry_on_status=RETRIED_STATUSES, max_retries=cfg.max_retries if max_retries is None
                              else max_retries)

    @property
    def dialect(self) -> Dialect:
        return self.engine.dialect

    @property
    def engine(self) -> EngineInfo:
        if self._engine is None:
            raise RuntimeError("await detect() first")
        return self._engine

    def _sent(self, request: Request) -> Any:
        """The transport's ``perform_request`` of ``request``, to call."""
        if self.cfg.api_key is not None and self.engine.kind == "opensearch":
            raise ConfigError("OpenSearch has no API keys (HSP_ES__API_KEY is set)",
                              fix="Use HSP_ES__USERNAME and HSP_ES__PASSWORD of an internal user for OpenSearch")
        kind = "application/x-ndjson" if isinstance(request.body, list) else "application/json"
        headers = _JSON if request.body is None else {**_JSON, "content-type": kind}
        query = urlencode(request.params, quote_via=quote, safe=",*")
        return partial(self.transport.perform_request, request.method, f"{request.path}?{query}" if query
                       else request.path, body=request.body, headers=headers)


class EngineClient(_Clients):
    """One cluster, any engine, detected on the first call; thread-safe."""

    _library = (Transport, _Node)

    @property
    def engine(self) -> EngineInfo:
        """The engine serving the cluster (asked once). Raises the library's errors."""
        if self._engine is not None:
            return self._engine
        with self._lock:
            if self._engine is None:
                ask = partial(self.transport.perform_request, "GET", headers=_JSON)
                self._engine = _from_root(*ask("/")) or _from_nodes(*ask(_NODES))
        return self._engine

    def send(self, request: Request) -> Any:
        """Send ``request``; its answer as plain JSON."""
        return _answer(request, *self._sent(request)())

    def scan(self, *, index: str, query: Json | None = None, size: int = 1000, scroll: str = "5m",
             preserve_order: bool = False) -> Iterator[Json]:
        """Every hit of ``query`` (a search body) on ``index`` by scroll, in index order unless ``preserve_order``.
        Raises ClusterError when a shard failed."""
        body = dict(query or {}) if preserve_order else {**(query or {}), "sort": "_doc"}
        page = self.send(request.search(index, body, scroll=scroll, size=size))
        try:
            while page.get("_scroll_id") and page["hits"]["hits"]:
                yield from page["hits"]["hits"]
                if failed := page["_shards"].get("failed"):
                    raise ClusterError(f"scroll over {index} failed on {failed} of {page['_shards']['total']} shards")
                page = self.send(request.scroll(page["_scroll_id"], scroll))
        finally:
            if page.get("_scroll_id"):
                self.send(request.clear_scroll(page["_scroll_id"]))

    def close(self) -> None:
        self.transport.close()


class AsyncEngineClient(_Clients):
    """:meth:`EngineClient.send` on asyncio; the engine is asked by :meth:`detect`."""

    _library = (AsyncTransport, _AsyncNode)

    async def detect(self) -> EngineInfo:
        """The engine (asked once)."""
        if self._engine is None:
            ask = partial(self.transport.perform_request, "GET", headers=_JSON)
            self._engine = _from_root(*await ask("/")) or _from_nodes(*await ask(_NODES))
        return self._engine

    async def send(self, request: Request) -> Any:
        """:meth:`EngineClient.send`, awaited."""
        await self.detect()
        return _answer(request, *await self._sent(request)())

    async def close(self) -> None:
        await self.transport.close()


def cluster_info(es: EngineClient) -> dict[str, Any]:
    """Engine, health and node versions via ``_cluster/health`` and ``_nodes``."""
    with engine_errors("cluster health"):
        engine = es.engine
        health = es.send(request.cluster_health())
        nodes = es.send(request.nodes_info(filter_path="nodes.*.version"))
    versions = sorted({n["version"] for n in nodes.get("nodes", {}).values()})
    return {"engine": engine.kind, "cluster_name": health["cluster_name"], "status": health["status"],
            "number_of_nodes": health["number_of_nodes"], "versions": versions}
