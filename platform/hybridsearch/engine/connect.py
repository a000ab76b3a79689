"""Each library's client built from :class:`ClusterSettings`, and the engine that answers (:func:`detect`).

Elasticsearch 8.x and 9.x get the forward-compatible ``elasticsearch`` 8.x client, OpenSearch ``opensearch-py``;
both get the parsed nodes of :mod:`hybridsearch.cluster_url`, the credentials as one ``Authorization`` header,
and retry :data:`~hybridsearch.retry.RETRIED_STATUSES` themselves. Their nodes raise a failure that retrying
cannot fix as our error at once (:func:`diagnose`: an untrusted certificate, or a URL whose scheme the node does
not speak, found by probing the other scheme).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import elastic_transport
import elasticsearch
import opensearchpy
from elastic_transport import AiohttpHttpNode, NodeConfig, Urllib3HttpNode
from elasticsearch.serializer import NdjsonSerializer, OrjsonSerializer
from opensearchpy import AsyncHttpConnection, AsyncOpenSearch, Urllib3HttpConnection

from hybridsearch.engine.dialect import EngineInfo
from hybridsearch.engine.errors import causes_of, tls_failure
from hybridsearch.errors import ConfigError, SchemeMismatch
from hybridsearch.retry import RETRIED_STATUSES
from hybridsearch.settings import ClusterSettings

# ------------------------------------------------------------------------------------------ diagnosis

#: seconds each scheme probe may take (only run after a request failed)
PROBE_TIMEOUT_S = 2.0


def speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` completes a TLS handshake (any certificate: only the protocol is asked)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as raw, ctx.wrap_socket(raw):
            return True
    except OSError:  # ssl.SSLError included
        return False


def speaks_plain_http(host: str, port: int) -> bool:
    """Whether ``host:port`` answers a plain-text HTTP request with an HTTP status line."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as s:
            s.sendall(b"HEAD / HTTP/1.0\r\nHost: " + host.encode("idna") + b"\r\n\r\n")
            got = b""
            while len(got) < 5 and (part := s.recv(5 - len(got))):
                got += part
            return got == b"HTTP/"
    except (OSError, UnicodeError):
        return False


def diagnose(exc: Exception, base_url: str) -> Exception:
    """Our error for a connection failure to ``base_url`` that retrying cannot fix, else ``exc``: SchemeMismatch
    when the node speaks the other scheme (probed, blocking, a few seconds at most), TlsFailure for a hopeless
    handshake. A timeout, or nothing listening, is not probed."""
    if isinstance(exc, opensearchpy.ConnectionTimeout):
        return exc
    parts = urlsplit(base_url)
    host, scheme = parts.hostname or "", parts.scheme
    port = parts.port or (443 if scheme == "https" else 80)
    node = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    failure = tls_failure(exc, base_url)
    nobody = any(isinstance(e, ConnectionRefusedError | TimeoutError | socket.gaierror) for e in causes_of(exc))
    if scheme == "https" and failure is not None and not failure.untrusted and speaks_plain_http(host, port):
        return SchemeMismatch(node, speaks_tls=False, use=f"http://{node}{parts.path.rstrip('/')}")
    if scheme == "http" and failure is None and not nobody and speaks_tls(host, port):
        return SchemeMismatch(node, speaks_tls=True, use=f"https://{node}{parts.path.rstrip('/')}")
    return failure or exc


class _Node(Urllib3HttpNode):
    """The default sync node, except that a failure retrying cannot fix (:func:`diagnose`) raises our error at
    once (not retried, the node not marked dead). The three classes below keep the same rule."""

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


class _OsConnection(Urllib3HttpConnection):
    def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().perform_request(*args, **kwargs)
        except opensearchpy.ConnectionError as exc:  # SSLError and ConnectionTimeout included
            raise diagnose(exc, self.host + (self.url_prefix or "")) from exc


class _OsAsyncConnection(AsyncHttpConnection):  # type: ignore[misc]  # untyped base
    async def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().perform_request(*args, **kwargs)
        except opensearchpy.ConnectionError as exc:
            raise await asyncio.to_thread(diagnose, exc, self.host + (self.url_prefix or "")) from exc


# ------------------------------------------------------------------------------------------ clients


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


def _options(cfg: ClusterSettings, max_retries: int | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"max_retries": cfg.max_retries if max_retries is None else max_retries,
                              "retry_on_status": RETRIED_STATUSES, "retry_on_timeout": True,
                              "headers": auth_headers(cfg)}
    # TLS options only for https nodes (the clients refuse them for http, e.g. a CA exported for another node)
    if any(n.scheme == "https" for n in cfg.nodes):
        if cfg.ca_certs is not None:
            kwargs["ca_certs"] = str(cfg.ca_certs)
        if not cfg.verify_certs:
            kwargs["verify_certs"] = False
    return kwargs


def es_client(cfg: ClusterSettings, max_retries: int | None = None, request_timeout: float | None = None,
              *, asyncio: bool = False) -> Any:
    """An ``Elasticsearch`` (``AsyncElasticsearch`` with ``asyncio``) client of ``cfg``'s nodes."""
    nodes = [NodeConfig(n.scheme, n.host, n.port, path_prefix=n.path) for n in cfg.nodes]
    kwargs = {"request_timeout": cfg.request_timeout if request_timeout is None else request_timeout,
              "serializers": SERIALIZERS, **_options(cfg, max_retries)}
    if asyncio:
        return elasticsearch.AsyncElasticsearch(nodes, node_class=_AsyncNode, **kwargs)
    return elasticsearch.Elasticsearch(nodes, node_class=_Node, **kwargs)


def os_client(cfg: ClusterSettings, max_retries: int | None = None, request_timeout: float | None = None,
              *, asyncio: bool = False) -> Any:
    """An ``OpenSearch`` (``AsyncOpenSearch`` with ``asyncio``) client of ``cfg``'s nodes."""
    if cfg.api_key is not None:
        raise ConfigError("OpenSearch has no API keys (HSP_ES__API_KEY is set)",
                          fix="Use HSP_ES__USERNAME and HSP_ES__PASSWORD of an internal user for OpenSearch")
    hosts = [{"host": n.host, "port": n.port, "url_prefix": n.path, "use_ssl": n.scheme == "https"}
             for n in cfg.nodes]
    kwargs = {"timeout": cfg.request_timeout if request_timeout is None else request_timeout,
              "pool_maxsize": 10,  # as many connections per node as the elasticsearch client keeps
              **_options(cfg, max_retries)}
    if asyncio:
        return AsyncOpenSearch(hosts, connection_class=_OsAsyncConnection, **kwargs)
    return opensearchpy.OpenSearch(hosts, connection_class=_OsConnection, **kwargs)


# ------------------------------------------------------------------------------------------ detection


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


def _asker(cfg: ClusterSettings, es: Any) -> Any:
    return partial(es.transport.perform_request, "GET", headers={"accept": "application/json", **auth_headers(cfg)})


_NODES = "/_nodes/_local?filter_path=nodes.*.version"


def detect(cfg: ClusterSettings, es: elasticsearch.Elasticsearch) -> EngineInfo:
    """Ask the cluster which engine it is, through ``es``'s transport (plain JSON, no product check), unless
    ``HSP_ES__ENGINE`` names it. Raises the library's errors."""
    if cfg.engine != "auto":
        return EngineInfo(cfg.engine)
    ask = _asker(cfg, es)
    return _from_root(*ask("/")) or _from_nodes(*ask(_NODES))


async def detect_async(cfg: ClusterSettings, es: elasticsearch.AsyncElasticsearch) -> EngineInfo:
    """:func:`detect` through an asyncio client."""
    if cfg.engine != "auto":
        return EngineInfo(cfg.engine)
    ask = _asker(cfg, es)
    return _from_root(*await ask("/")) or _from_nodes(*await ask(_NODES))
