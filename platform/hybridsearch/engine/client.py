""":class:`EngineClient` and :class:`AsyncEngineClient` send a :class:`~.request.Request` through the engine's
library (``perform_request``) and answer with plain JSON; errors are the libraries' own (:func:`.engine_errors`).
The libraries retry :data:`~hybridsearch.retry.RETRIED_STATUSES`; a failure retrying cannot fix raises at once."""

from __future__ import annotations

import asyncio
import base64
import copy
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Iterable, Iterator, Mapping
from functools import partial
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import elastic_transport
import elasticsearch
import elasticsearch.helpers
import opensearchpy
import opensearchpy.helpers
from elastic_transport import AiohttpHttpNode, Urllib3HttpNode
from elasticsearch.serializer import NdjsonSerializer, OrjsonSerializer

from hybridsearch.engine import request
from hybridsearch.engine.dialect import Dialect, EngineInfo, EngineKind
from hybridsearch.engine.errors import API_ERRORS, causes_of, engine_errors, error_type_of, status_of
from hybridsearch.engine.request import RAISE, Json, Request
from hybridsearch.errors import ConfigError, SchemeMismatch, TlsFailure
from hybridsearch.retry import RETRIED_STATUSES
from hybridsearch.settings import ClusterSettings

PROBE_TIMEOUT_S = 2.0  # the one scheme probe, only run after a request failed to connect
#: OpenSSL reasons of handshakes that fail the same way on every try (not a TLS port, no shared protocol)
HOPELESS_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNSUPPORTED_PROTOCOL",
                          "TLSV1_ALERT_PROTOCOL_VERSION"})


def speaks(host: str, port: int, *, tls: bool) -> bool:
    """Whether ``host:port`` completes a TLS handshake (any certificate), or without ``tls``, answers plain HTTP."""
    try:
        if tls:
            return bool(ssl.get_server_certificate((host, port), timeout=PROBE_TIMEOUT_S))
        probe = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT_S)
        try:
            probe.request("HEAD", "/")
            return probe.getresponse().status > 0
        finally:
            probe.close()
    except (OSError, UnicodeError, http.client.HTTPException):  # ssl.SSLError included
        return False


def diagnose(exc: Exception, base_url: str) -> Exception:
    """TlsFailure (SchemeMismatch when one probe finds the other scheme spoken) for a failure to connect to
    ``base_url`` that retrying cannot fix, else ``exc``; a timeout, or nothing listening, is not probed."""
    causes = list(causes_of(exc))  # aiohttp's wrapper of a verify error lacks its details: look for them first
    if verify := [e for e in causes if isinstance(e, ssl.SSLCertVerificationError)]:
        said = next((e.verify_message for e in verify if getattr(e, "verify_message", None)), None)
        return TlsFailure(base_url, "certificate verify failed" + (f": {said}" if said else ""), untrusted=True)
    hopeless = next((e.reason for e in causes if isinstance(e, ssl.SSLError) and e.reason in HOPELESS_TLS), None)
    nobody = isinstance(exc, opensearchpy.ConnectionTimeout) or any(
        isinstance(e, ConnectionRefusedError | TimeoutError | socket.gaierror) for e in causes)
    parts = urlsplit(base_url)
    tls, host = parts.scheme == "http", parts.hostname or ""  # what the node would speak instead
    port = parts.port or (80 if tls else 443)
    node = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if (not nobody if tls else hopeless is not None) and speaks(host, port, tls=tls):
        return SchemeMismatch(node, speaks_tls=tls, use=f"{'https' if tls else 'http'}://{node}{parts.path.rstrip('/')}")
    return exc if hopeless is None else TlsFailure(base_url, hopeless.lower().replace("_", " "), untrusted=False)


class _Node(Urllib3HttpNode):
    """The library's node; a failure :func:`diagnose` names raises at once (not retried), as in the three below."""

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


class _OsConnection(opensearchpy.Urllib3HttpConnection):
    def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().perform_request(*args, **kwargs)
        except opensearchpy.ConnectionError as exc:  # SSLError and ConnectionTimeout included
            raise diagnose(exc, self.host + (self.url_prefix or "")) from exc


class _OsAsyncConnection(opensearchpy.AsyncHttpConnection):  # type: ignore[misc]  # untyped base
    async def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().perform_request(*args, **kwargs)
        except opensearchpy.ConnectionError as exc:
            raise await asyncio.to_thread(diagnose, exc, self.host + (self.url_prefix or "")) from exc


class _OrjsonNdjson(NdjsonSerializer, OrjsonSerializer):
    """``_msearch`` and ``_bulk`` bodies (one JSON line per item) written and read with orjson."""


#: orjson for every JSON body, NDJSON included (the library only offers it for single bodies)
SERIALIZERS = {OrjsonSerializer.mimetype: OrjsonSerializer(), _OrjsonNdjson.mimetype: _OrjsonNdjson()}


def auth_headers(cfg: ClusterSettings) -> dict[str, str]:
    """The ``Authorization`` header of ``cfg``'s API key, user name and password, else the credentials the node
    URLs carried (UTF-8, so that any password works)."""
    if cfg.api_key is not None:
        return {"authorization": f"ApiKey {cfg.api_key.get_secret_value()}"}
    node = cfg.nodes[0]
    user, password = (cfg.username, cfg.password.get_secret_value() if cfg.password else "") \
        if cfg.username is not None else (node.username, node.password or "")
    if user is None:
        return {}
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def library_client(cfg: ClusterSettings, kind: EngineKind, *, asyncio: bool = False, max_retries: int | None = None,
                   request_timeout: float | None = None) -> Any:
    """``Elasticsearch`` or ``OpenSearch`` (or their asyncio twins) on ``cfg``'s nodes; ``max_retries`` and
    ``request_timeout`` replace ``cfg``'s."""
    kwargs: dict[str, Any] = {"max_retries": cfg.max_retries if max_retries is None else max_retries,
                              "retry_on_status": RETRIED_STATUSES, "retry_on_timeout": True,
                              "headers": auth_headers(cfg)}
    if any(n.scheme == "https" for n in cfg.nodes):  # the clients refuse TLS options for http nodes
        if cfg.ca_certs is not None:
            kwargs["ca_certs"] = str(cfg.ca_certs)
        if not cfg.verify_certs:
            kwargs["verify_certs"] = False
    timeout = cfg.request_timeout if request_timeout is None else request_timeout
    hosts = [n.url for n in cfg.nodes]  # both read scheme, host (IPv6 too), port and path prefix from a URL
    if kind == "elasticsearch":
        es, node = (elasticsearch.AsyncElasticsearch, _AsyncNode) if asyncio else (elasticsearch.Elasticsearch, _Node)
        return es(hosts, node_class=node, request_timeout=timeout, serializers=SERIALIZERS, **kwargs)
    if cfg.api_key is not None:
        raise ConfigError("OpenSearch has no API keys (HSP_ES__API_KEY is set)",
                          fix="Use HSP_ES__USERNAME and HSP_ES__PASSWORD of an internal user for OpenSearch")
    client, conn = (opensearchpy.AsyncOpenSearch, _OsAsyncConnection) if asyncio else \
        (opensearchpy.OpenSearch, _OsConnection)
    return client(hosts, connection_class=conn, timeout=timeout, pool_maxsize=10, **kwargs)  # as elasticsearch's


def _from_root(meta: Any, body: Any) -> EngineInfo | None:
    """The engine ``GET /`` names (``version.distribution`` is ``opensearch`` there); None where ``GET /`` is not
    served (the Elasticsearch integ-test zip answers 405); the library's error for 401 and 403."""
    if meta.status in (401, 403):
        error = elasticsearch.exceptions.HTTP_EXCEPTIONS.get(meta.status, elasticsearch.ApiError)
        raise error(message=f"HTTP {meta.status}", meta=meta, body=body)
    if meta.status >= 300:
        return None
    info = body.get("version", {}) if isinstance(body, dict) else {}
    return EngineInfo("opensearch" if info.get("distribution") == "opensearch" else "elasticsearch",
                      info.get("number"))


def _from_nodes(meta: Any, body: Any) -> EngineInfo:
    """The engine ``GET _nodes/_local`` names: Elasticsearch sends ``X-Elastic-Product``."""
    nodes = body.get("nodes", {}) if isinstance(body, dict) else {}
    version = next((n.get("version") for n in nodes.values()), None)
    return EngineInfo("elasticsearch" if meta.headers.get("x-elastic-product") else "opensearch", version)


_NODES = "/_nodes/_local?filter_path=nodes.*.version"


def _absent(request: Request, exc: Exception) -> Any:
    """``request.absent`` when ``exc`` says the thing asked for does not exist; raises ``exc`` otherwise."""
    if request.absent is RAISE or status_of(exc) != 404 or error_type_of(exc) == "index_not_found_exception":
        raise exc
    return copy.deepcopy(request.absent)


def _body(answer: Any) -> Any:
    return answer.body if isinstance(answer, elastic_transport.ApiResponse) else answer


def _answered(results: Iterable[tuple[bool, Json]]) -> Iterator[tuple[bool, Json]]:
    """Bulk results in one shape on every engine: a request that got no answer raises the library's error, as
    ``elasticsearch``'s helper does (``opensearchpy``'s yields its items with status ``"N/A"`` and goes on)."""
    for ok, result in results:
        item = next(iter(result.values()), None) if result else None
        if isinstance(item, Mapping) and not isinstance(item.get("status"), int) \
                and isinstance(exc := item.get("exception"), Exception):
            raise exc
        yield ok, result


class Sender(Protocol):
    """What sends requests synchronously: an :class:`EngineClient`, or the query log's sender."""

    @property
    def engine(self) -> EngineInfo: ...

    @property
    def dialect(self) -> Dialect: ...

    def send(self, request: Request) -> Any: ...


class _Clients:
    """What both senders share: the settings, the engine once known, and the libraries' clients, made once each."""

    def __init__(self, cfg: ClusterSettings, engine: EngineInfo | None, asyncio: bool, **options: Any) -> None:
        self.cfg = cfg
        self._engine = engine if engine is not None or cfg.engine == "auto" else EngineInfo(cfg.engine)
        self._asyncio, self._options = asyncio, options
        self._clients: dict[EngineKind, Any] = {}
        self._lock = threading.RLock()  # detection (sync) and making a library client

    @property
    def dialect(self) -> Dialect:
        return self.engine.dialect

    @property
    def engine(self) -> EngineInfo:
        if self._engine is None:
            raise RuntimeError("await detect() first")
        return self._engine

    def _library(self, kind: EngineKind) -> Any:
        """The library's client for ``kind`` (``Elasticsearch`` or ``OpenSearch``, or their asyncio twins)."""
        with self._lock:
            if kind not in self._clients:
                self._clients[kind] = library_client(self.cfg, kind, asyncio=self._asyncio, **self._options)
            return self._clients[kind]

    def _sent(self, request: Request) -> tuple[Any, str, dict[str, Any]]:
        """The library's ``perform_request``, the path and the keyword arguments that send ``request``
        (opensearch-py takes some parameters as its own: its parameters go in the path, its NDJSON as text)."""
        client, headers = self._library(self.engine.kind), {"accept": "application/json"}
        if request.body is not None:
            headers["content-type"] = "application/x-ndjson" if isinstance(request.body, list) else "application/json"
        if self.engine.kind == "elasticsearch":
            return client.perform_request, request.path, {"params": request.params or None, "headers": headers,
                                                          "body": request.body}
        body: Any = request.body
        if isinstance(body, list):
            body = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in body)
        path = f"{request.path}?{urlencode(request.params)}" if request.params else request.path
        return client.transport.perform_request, path, {"params": {}, "headers": headers, "body": body}

    def _ask(self) -> Any:
        """``GET <path>`` through the Elasticsearch client's transport: plain JSON, no product check."""
        return partial(self._library("elasticsearch").transport.perform_request, "GET",
                       headers={"accept": "application/json", **auth_headers(self.cfg)})


class EngineClient(_Clients):
    """One cluster, any engine, detected on the first call (``HSP_ES__ENGINE`` names it instead); thread-safe.
    ``max_retries`` and ``request_timeout`` replace ``cfg``'s. ``close()`` when done."""

    def __init__(self, cfg: ClusterSettings, *, max_retries: int | None = None,
                 request_timeout: float | None = None) -> None:
        super().__init__(cfg, None, False, max_retries=max_retries, request_timeout=request_timeout)

    @property
    def engine(self) -> EngineInfo:
        """The engine serving the cluster (asked once). Raises the library's errors."""
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    ask = self._ask()
                    self._engine = _from_root(*ask("/")) or _from_nodes(*ask(_NODES))
        return self._engine

    def send(self, request: Request) -> Any:
        """Send ``request``; its answer as plain JSON."""
        perform, path, call = self._sent(request)
        try:
            return _body(perform(request.method, path, **call))
        except API_ERRORS as exc:
            return _absent(request, exc)

    def _helpers(self) -> Any:
        return opensearchpy.helpers if self.engine.kind == "opensearch" else elasticsearch.helpers

    def streaming_bulk(self, actions: Iterable[Json], **kwargs: Any) -> Iterator[tuple[bool, Json]]:
        """The library's ``helpers.streaming_bulk``; a request that got no answer raises on every engine."""
        client = self._library(self.engine.kind)
        yield from _answered(self._helpers().streaming_bulk(client, actions, **kwargs))

    def scan(self, *, index: str, query: Json | None = None, size: int = 1000, scroll: str = "5m",
             preserve_order: bool = False) -> Iterator[Json]:
        """Every hit of ``query`` (a search body) on ``index``, by scroll."""
        yield from self._helpers().scan(self._library(self.engine.kind), index=index, query=query, size=size,
                                        scroll=scroll, preserve_order=preserve_order)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


class AsyncEngineClient(_Clients):
    """:meth:`EngineClient.send` on asyncio; the engine is asked by :meth:`detect` (or given)."""

    def __init__(self, cfg: ClusterSettings, engine: EngineInfo | None = None) -> None:
        super().__init__(cfg, engine, True)

    async def detect(self) -> EngineInfo:
        """The engine (asked once)."""
        if self._engine is None:
            ask = self._ask()
            self._engine = _from_root(*await ask("/")) or _from_nodes(*await ask(_NODES))
        return self._engine

    async def send(self, request: Request) -> Any:
        """:meth:`EngineClient.send`, awaited."""
        await self.detect()
        perform, path, call = self._sent(request)
        try:
            return _body(await perform(request.method, path, **call))
        except API_ERRORS as exc:
            return _absent(request, exc)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()


def cluster_info(es: EngineClient) -> dict[str, Any]:
    """Engine, health and node versions via ``_cluster/health`` and ``_nodes``."""
    with engine_errors("cluster health"):
        engine = es.engine
        health = es.send(request.cluster_health())
        nodes = es.send(request.nodes_info(filter_path="nodes.*.version"))
    versions = sorted({n["version"] for n in nodes.get("nodes", {}).values()})
    return {"engine": engine.kind, "cluster_name": health["cluster_name"], "status": health["status"],
            "number_of_nodes": health["number_of_nodes"], "versions": versions}
