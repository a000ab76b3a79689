"""Building each library's client from :class:`ClusterSettings`, and finding out which engine answers.

Elasticsearch 8.x and 9.x are served by the ``elasticsearch`` 8.19 client: Elastic's clients are forward
compatible (an 8.x client talks to 8.x and 9.x servers), while a 9.x client refuses 8.x servers. OpenSearch
gets ``opensearch-py``. Detection asks ``GET /`` (``version.distribution`` is ``opensearch`` there) and falls
back on ``GET _nodes/_local`` and the ``X-Elastic-Product`` header where ``GET /`` is not served (the
Elasticsearch integ-test zip answers 405). ``GET /`` goes to one node directly, outside the transport's
node-failure accounting (the transport would count a 405 as a failed node and log it), and falls back on the
transport (with its retries) when that node does not answer; everything else goes through the transport, with
plain ``application/json``, which every engine accepts. ``HSP_ES__ENGINE`` skips it.

The nodes turn failures that retrying cannot fix into our errors at once (:func:`diagnose`): an untrusted
certificate (TlsFailure), and a URL whose scheme the node does not speak (SchemeMismatch): an ``http://`` URL to a
node that closes plain requests is probed for TLS, an ``https://`` URL whose handshake fails is probed for plain
HTTP, so that the message says ``the node at host:port speaks TLS`` instead of "is a node running?".
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import elastic_transport
import elasticsearch
import opensearchpy
from elastic_transport import AiohttpHttpNode, Urllib3HttpNode
from elasticsearch.serializer import NdjsonSerializer, OrjsonSerializer
from opensearchpy import Urllib3HttpConnection

from hybridsearch.engine.dialect import Dialect, EngineKind, dialect_for
from hybridsearch.engine.errors import causes_of, tls_failure
from hybridsearch.engine.libraries import ready_aiohttp_node
from hybridsearch.errors import ConfigError, HybridSearchError, SchemeMismatch
from hybridsearch.settings import ClusterSettings

RETRY_STATUSES = (429, 502, 503, 504)
#: oldest versions with everything the platform sends (kNN pre-filters, int8 HNSW; OpenSearch: lucene sq and
#: method_parameters in the knn query, flat_object)
MIN_VERSION: dict[EngineKind, tuple[int, int]] = {"elasticsearch": (8, 12), "opensearch": (2, 16)}


@dataclass(frozen=True)
class EngineInfo:
    """Which engine answers: kind and version (None when set by ``HSP_ES__ENGINE`` and not asked).

    Every question that depends on the version goes through :meth:`at_least`, which holds the one rule for an
    unknown version."""

    kind: EngineKind
    version: str | None = None
    detected: bool = True

    @property
    def dialect(self) -> Dialect:
        return dialect_for(self.kind)

    @property
    def version_tuple(self) -> tuple[int, ...] | None:
        if self.version is None:
            return None
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])

    def at_least(self, major: int, minor: int) -> bool:
        """Whether the engine is version ``major.minor`` or later. An unknown version (``HSP_ES__ENGINE`` set, so
        nothing was asked) counts as the newest: what newer versions need is sent, and an older engine refuses
        it with an error (HTTP 400) instead of quietly losing recall or vectors; leave ``HSP_ES__ENGINE`` unset
        for an older engine."""
        have = self.version_tuple
        return have is None or have[:2] >= (major, minor)

    @property
    def name(self) -> str:
        label = "OpenSearch" if self.kind == "opensearch" else "Elasticsearch"
        return f"{label} {self.version}" if self.version else label

    @property
    def source_with_vectors(self) -> Any:
        """``_source`` that returns the vector too: Elasticsearch 9.1+ leaves vectors out unless asked."""
        if self.kind == "elasticsearch" and self.at_least(9, 1):
            return {"exclude_vectors": False}
        return True

    @property
    def rescores_vectors(self) -> bool:
        """Whether a kNN search can rescore quantized vectors on their floats (``rescore_vector``: Elasticsearch
        8.18+; OpenSearch's lucene engine cannot)."""
        return self.kind == "elasticsearch" and self.at_least(8, 18)

    @property
    def chunk_index_settings(self) -> dict[str, Any]:
        """Index settings every chunk index gets on this engine version (dynamic ones: put on older indices too).

        Elasticsearch 9.1+ (Lucene 10.2+) runs a filtered kNN search that the filter lets through fewer than 60 %
        of a segment's documents (deleted ones count) with ACORN, which loses most of its recall where much of a
        segment is deleted copies. The earlier two-write ingestion left half of every fresh segment deleted: dense
        nDCG@10 on SciFact (9.3.2) was 0.410 with ACORN, 0.661 with ``fanout`` on the same index. Ingestion now
        writes each chunk once (:mod:`hybridsearch.ingest.commit`), but changed documents overwritten in place and
        selective filters (a tenant, a user's metadata filter) still meet ACORN's threshold, so chunk indices keep
        ``fanout``, which explores the graph as Lucene did before ACORN."""
        if self.kind == "elasticsearch" and self.at_least(9, 1):
            return {"index.dense_vector.hnsw_filter_heuristic": "fanout"}
        return {}

    def support_problem(self) -> str | None:
        """Why this engine version cannot serve the platform, or None."""
        need = MIN_VERSION[self.kind]
        if self.at_least(*need):
            return None
        return (f"{self.name} is not supported: hybridsearch needs {self.name.split()[0]} "
                f"{need[0]}.{need[1]} or newer (kNN with pre-filters, int8 HNSW vectors)")


# ------------------------------------------------------------------------------------------ diagnosis

#: seconds each scheme probe may take (only run after a request failed)
PROBE_TIMEOUT_S = 2.0


def speaks_tls(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``host:port`` completes a TLS handshake (any certificate: only the protocol is asked)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, ctx.wrap_socket(raw):
            return True
    except OSError:  # ssl.SSLError included
        return False


def speaks_plain_http(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``host:port`` answers a plain-text HTTP request with an HTTP status line."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"HEAD / HTTP/1.0\r\nHost: " + host.encode("idna") + b"\r\n\r\n")
            got = b""
            while len(got) < 5 and (part := s.recv(5 - len(got))):
                got += part
            return got == b"HTTP/"
    except (OSError, UnicodeError):
        return False


def _nobody_listens(exc: BaseException) -> bool:
    """The failure says nothing listens there, or nothing answered in time: no scheme to find out about."""
    return any(isinstance(e, ConnectionRefusedError | TimeoutError | socket.gaierror) for e in causes_of(exc))


def diagnose(exc: BaseException, base_url: str) -> HybridSearchError | None:
    """Our error for a connection failure to ``base_url`` that retrying cannot fix, else None: SchemeMismatch when
    the node speaks the other scheme (probed, blocking, at most a few seconds), TlsFailure for a hopeless TLS
    handshake (untrusted certificate, not a TLS port)."""
    parts = urlsplit(base_url)
    host, scheme = parts.hostname or "", parts.scheme
    port = parts.port or (443 if scheme == "https" else 80)
    node = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    failure = tls_failure(exc, base_url)
    if scheme == "https":
        if failure is not None and not failure.untrusted and speaks_plain_http(host, port):
            return SchemeMismatch(node, speaks_tls=False, use=f"http://{node}{parts.path.rstrip('/')}")
        return failure
    if failure is None and not _nobody_listens(exc) and speaks_tls(host, port):
        return SchemeMismatch(node, speaks_tls=True, use=f"https://{node}{parts.path.rstrip('/')}")
    return failure


# ------------------------------------------------------------------------------------------ Elasticsearch


class _Node(Urllib3HttpNode):
    """The default sync node, except that a failure retrying cannot fix (:func:`diagnose`) raises our error at
    once (not retried, the node not marked dead)."""

    def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().perform_request(*args, **kwargs)
        except elastic_transport.ConnectionError as exc:  # TlsError included
            raise (diagnose(exc, self.base_url) or exc) from exc


class _AsyncNode(AiohttpHttpNode):
    """The default asyncio node, with the same rule as :class:`_Node` (the probes run in a thread). Usable once
    :func:`~hybridsearch.engine.libraries.ready_aiohttp_node` ran (:func:`es_async_client` runs it)."""

    async def perform_request(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # as the base
        try:
            return await super().perform_request(*args, **kwargs)
        except elastic_transport.ConnectionError as exc:
            raise (await asyncio.to_thread(diagnose, exc, self.base_url) or exc) from exc


class _OrjsonNdjson(NdjsonSerializer, OrjsonSerializer):
    """``_msearch`` and ``_bulk`` bodies (one JSON line per item) written and read with orjson."""


#: orjson for every JSON body, NDJSON included (the library only offers it for single bodies): a query vector
#: of 384 floats is written about ten times faster, and an answer of 100 hits read about four times faster
#: (``ops/bench/bench_query.py``'s raw probe: -0.4 to -0.6 ms per kNN request). The compatibility-mode media types
#: that Elasticsearch 9 answers with follow these (``Elasticsearch`` maps them itself).
SERIALIZERS = {OrjsonSerializer.mimetype: OrjsonSerializer(), _OrjsonNdjson.mimetype: _OrjsonNdjson()}


def _tls(cfg: ClusterSettings) -> dict[str, Any]:
    # TLS options only for https URLs (the clients refuse them for http, e.g. a CA exported for another node)
    kwargs: dict[str, Any] = {}
    if any(h.startswith("https://") for h in cfg.hosts):
        if cfg.ca_certs is not None:
            kwargs["ca_certs"] = str(cfg.ca_certs)
        if not cfg.verify_certs:
            kwargs["verify_certs"] = False
    return kwargs


def es_kwargs(cfg: ClusterSettings, max_retries: int | None = None,
              request_timeout: float | None = None) -> dict[str, Any]:
    """Keyword arguments of the sync and async Elasticsearch clients."""
    kwargs: dict[str, Any] = {
        "hosts": cfg.hosts,
        "request_timeout": cfg.request_timeout if request_timeout is None else request_timeout,
        "max_retries": cfg.max_retries if max_retries is None else max_retries,
        "retry_on_status": RETRY_STATUSES,
        "retry_on_timeout": True,
        "serializers": SERIALIZERS,
        **_tls(cfg),
    }
    if cfg.api_key is not None:
        kwargs["api_key"] = cfg.api_key.get_secret_value()
    elif cfg.username is not None:
        kwargs["basic_auth"] = (cfg.username, cfg.password.get_secret_value() if cfg.password else "")
    return kwargs


def es_client(cfg: ClusterSettings, max_retries: int | None = None,
              request_timeout: float | None = None) -> elasticsearch.Elasticsearch:
    return elasticsearch.Elasticsearch(**es_kwargs(cfg, max_retries, request_timeout), node_class=_Node)


def es_async_client(cfg: ClusterSettings) -> elasticsearch.AsyncElasticsearch:
    ready_aiohttp_node()
    return elasticsearch.AsyncElasticsearch(**es_kwargs(cfg), node_class=_AsyncNode)


# ------------------------------------------------------------------------------------------ OpenSearch


def _os_connection_failure(exc: opensearchpy.ConnectionError) -> bool:
    """A failure to connect or talk to the node (not a timeout, which opensearch-py also calls a ConnectionError)."""
    return not isinstance(exc, opensearchpy.ConnectionTimeout)


class _OsConnection(Urllib3HttpConnection):
    """opensearch-py's default sync connection, with the same rule as :class:`_Node`."""

    def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().perform_request(*args, **kwargs)
        except opensearchpy.ConnectionError as exc:  # SSLError included
            if not _os_connection_failure(exc):
                raise
            raise (diagnose(exc, self.host + (self.url_prefix or "")) or exc) from exc


def os_kwargs(cfg: ClusterSettings, max_retries: int | None = None,
              request_timeout: float | None = None) -> dict[str, Any]:
    """Keyword arguments of the sync and async OpenSearch clients. OpenSearch has no API keys."""
    if cfg.api_key is not None:
        raise ConfigError("OpenSearch has no API keys (HSP_ES__API_KEY is set)",
                          fix="Use HSP_ES__USERNAME and HSP_ES__PASSWORD of an internal user for OpenSearch")
    kwargs: dict[str, Any] = {
        "hosts": cfg.hosts,
        "timeout": cfg.request_timeout if request_timeout is None else request_timeout,
        "max_retries": cfg.max_retries if max_retries is None else max_retries,
        "retry_on_status": RETRY_STATUSES,
        "retry_on_timeout": True,
        "pool_maxsize": 10,  # as many connections per node as the elasticsearch client keeps (its default)
        **_tls(cfg),
    }
    if cfg.username is not None:
        kwargs["http_auth"] = (cfg.username, cfg.password.get_secret_value() if cfg.password else "")
    return kwargs


def os_client(cfg: ClusterSettings, max_retries: int | None = None,
              request_timeout: float | None = None) -> opensearchpy.OpenSearch:
    return opensearchpy.OpenSearch(**os_kwargs(cfg, max_retries, request_timeout), connection_class=_OsConnection)


@functools.cache
def _os_async_connection() -> type[Any]:
    """opensearch-py's asyncio connection, with the same rule as :class:`_Node`. Imported here, when the first
    asyncio OpenSearch client is built: it loads aiohttp (:mod:`hybridsearch.engine.libraries`)."""
    from opensearchpy.connection.http_async import AsyncHttpConnection

    class _OsAsyncConnection(AsyncHttpConnection):  # type: ignore[misc]  # untyped base
        async def perform_request(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await super().perform_request(*args, **kwargs)
            except opensearchpy.ConnectionError as exc:
                if not _os_connection_failure(exc):
                    raise
                raise (await asyncio.to_thread(diagnose, exc, self.host + (self.url_prefix or "")) or exc) from exc

    return _OsAsyncConnection


def os_async_client(cfg: ClusterSettings) -> opensearchpy.AsyncOpenSearch:
    from opensearchpy._async.client import AsyncOpenSearch

    return AsyncOpenSearch(**os_kwargs(cfg), connection_class=_os_async_connection())


# ------------------------------------------------------------------------------------------ detection


def _auth_headers(cfg: ClusterSettings) -> dict[str, str]:
    if cfg.api_key is not None:
        return {"authorization": f"ApiKey {cfg.api_key.get_secret_value()}"}
    if cfg.username is not None:
        token = f"{cfg.username}:{cfg.password.get_secret_value() if cfg.password else ''}"
        return {"authorization": "Basic " + base64.b64encode(token.encode()).decode()}
    return {}


def _ask_root(es: elasticsearch.Elasticsearch, headers: dict[str, str]) -> tuple[Any, Any]:
    """``GET /`` from one node, outside the transport's node-failure accounting: the Elasticsearch integ-test zip
    answers it with 405, which the transport would count as a failed node (logging ``Node ... has failed for 1
    times in a row`` on a healthy first connection). When that node does not answer, or answers with a status
    the transport retries, the request goes through the transport instead (retries, other nodes)."""
    node = es.transport.node_pool.get()
    try:
        resp = node.perform_request("GET", "/", headers=elastic_transport.HttpHeaders(headers))
    except elastic_transport.TransportError:
        return es.transport.perform_request("GET", "/", headers=headers)
    if resp.meta.status in RETRY_STATUSES:
        return es.transport.perform_request("GET", "/", headers=headers)
    try:
        body = es.transport.serializers.loads(resp.body, resp.meta.mimetype) if resp.body else None
    except elastic_transport.SerializationError:
        body = None
    return resp.meta, body


def detect(cfg: ClusterSettings, es: elasticsearch.Elasticsearch) -> EngineInfo:
    """Ask the cluster which engine it is, through ``es``'s transport (plain JSON, no product check).
    ``HSP_ES__ENGINE`` (``cfg.engine``) other than ``auto`` answers without asking. Raises the library's
    errors: call inside :func:`~hybridsearch.engine.errors.engine_errors`, like every call."""
    if cfg.engine != "auto":
        return EngineInfo(cfg.engine, None, detected=False)
    headers = {"accept": "application/json", **_auth_headers(cfg)}
    meta, body = _ask_root(es, headers)
    if meta.status in (401, 403):
        error = elasticsearch.exceptions.HTTP_EXCEPTIONS.get(meta.status, elasticsearch.ApiError)
        raise error(message=f"HTTP {meta.status}", meta=meta, body=body)
    if meta.status >= 300:  # not served (the Elasticsearch integ-test zip): ask _nodes
        meta, body = es.transport.perform_request(
            "GET", "/_nodes/_local?filter_path=nodes.*.version", headers=headers)
        nodes = body.get("nodes", {}) if isinstance(body, dict) else {}
        version = next((n.get("version") for n in nodes.values()), None)
        kind: EngineKind = "elasticsearch" if meta.headers.get("x-elastic-product") else "opensearch"
        return EngineInfo(kind, version)
    info = body.get("version", {}) if isinstance(body, dict) else {}
    kind = "opensearch" if info.get("distribution") == "opensearch" else "elasticsearch"
    return EngineInfo(kind, info.get("number"))
