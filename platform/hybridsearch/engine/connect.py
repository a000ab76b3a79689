"""Building each library's client from :class:`ClusterSettings`, and finding out which engine answers.

Elasticsearch 8.x and 9.x are served by the ``elasticsearch`` 8.19 client: Elastic's clients are forward
compatible (an 8.x client talks to 8.x and 9.x servers), while a 9.x client refuses 8.x servers. OpenSearch
gets ``opensearch-py``. Both are given the parsed nodes of :mod:`hybridsearch.cluster_url` (never a URL string)
and the credentials as one ``Authorization`` header, and retry :data:`hybridsearch.retry.RETRIED_STATUSES`
themselves. Detection asks ``GET /`` through the Elasticsearch client's transport (``version.distribution`` is
``opensearch`` there) and falls back on ``GET _nodes/_local`` and the ``X-Elastic-Product`` header where ``GET /``
is not served (the Elasticsearch integ-test zip answers 405). ``HSP_ES__ENGINE`` skips it.

The nodes turn failures that retrying cannot fix into our errors at once (:func:`diagnose`): an untrusted
certificate (TlsFailure), and a URL whose scheme the node does not speak (SchemeMismatch): an ``http://`` URL to a
node that closes plain requests is probed for TLS, an ``https://`` URL whose handshake fails is probed for plain
HTTP, so that the message says ``the node at host:port speaks TLS`` instead of "is a node running?".
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import elastic_transport
import elasticsearch
import opensearchpy
from elastic_transport import AiohttpHttpNode, NodeConfig, Urllib3HttpNode
from elasticsearch.serializer import NdjsonSerializer, OrjsonSerializer
from opensearchpy import AsyncHttpConnection, AsyncOpenSearch, Urllib3HttpConnection

from hybridsearch.engine.dialect import Dialect, EngineKind, dialect_for
from hybridsearch.engine.errors import causes_of, tls_failure
from hybridsearch.errors import ConfigError, HybridSearchError, SchemeMismatch
from hybridsearch.retry import RETRIED_STATUSES
from hybridsearch.settings import ClusterSettings

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
    def has_disk_usage(self) -> bool:
        """Whether the engine answers ``_disk_usage`` (:func:`~hybridsearch.engine.request.disk_usage`):
        Elasticsearch only."""
        return self.kind == "elasticsearch"

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
        segment is deleted copies (documents overwritten in place) or the filter is selective (a tenant, a user's
        metadata filter); ``fanout`` explores the graph as Lucene did before ACORN."""
        if self.kind == "elasticsearch" and self.at_least(9, 1):
            return {"index.dense_vector.hnsw_filter_heuristic": "fanout"}
        return {}

    @property
    def chunk_index_creation_settings(self) -> dict[str, Any]:
        """Static settings a new chunk index gets: OpenSearch 3.x's k-NN derived source off (with it, whole-_source
        reads fail with 503 from segments holding deleted documents)."""
        return {"index.knn.derived_source.enabled": False} if self.kind == "opensearch" and self.at_least(3, 0) else {}

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


# ------------------------------------------------------------------------------------------ clients


class _Node(Urllib3HttpNode):
    """The default sync node, except that a failure retrying cannot fix (:func:`diagnose`) raises our error at
    once (not retried, the node not marked dead)."""

    def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().perform_request(*args, **kwargs)
        except elastic_transport.ConnectionError as exc:  # TlsError included
            raise (diagnose(exc, self.base_url) or exc) from exc


class _AsyncNode(AiohttpHttpNode):
    """The default asyncio node, with the same rule as :class:`_Node` (the probes run in a thread)."""

    async def perform_request(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # as the base
        try:
            return await super().perform_request(*args, **kwargs)
        except elastic_transport.ConnectionError as exc:
            raise (await asyncio.to_thread(diagnose, exc, self.base_url) or exc) from exc


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


class _OsAsyncConnection(AsyncHttpConnection):  # type: ignore[misc]  # untyped base
    """opensearch-py's asyncio connection, with the same rule as :class:`_Node`."""

    async def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().perform_request(*args, **kwargs)
        except opensearchpy.ConnectionError as exc:
            if not _os_connection_failure(exc):
                raise
            raise (await asyncio.to_thread(diagnose, exc, self.host + (self.url_prefix or "")) or exc) from exc


class _OrjsonNdjson(NdjsonSerializer, OrjsonSerializer):
    """``_msearch`` and ``_bulk`` bodies (one JSON line per item) written and read with orjson."""


#: orjson for every JSON body, NDJSON included (the library only offers it for single bodies); the
#: compatibility-mode media types that Elasticsearch 9 answers with follow these (``Elasticsearch`` maps them)
SERIALIZERS = {OrjsonSerializer.mimetype: OrjsonSerializer(), _OrjsonNdjson.mimetype: _OrjsonNdjson()}


def auth_headers(cfg: ClusterSettings) -> dict[str, str]:
    """The ``Authorization`` header of ``cfg``'s credentials: its API key, its user name and password, else the
    credentials the node URLs carried (UTF-8, so that any password works)."""
    if cfg.api_key is not None:
        return {"authorization": f"ApiKey {cfg.api_key.get_secret_value()}"}
    node = cfg.nodes[0]
    user, password = (cfg.username, cfg.password.get_secret_value() if cfg.password else "") \
        if cfg.username is not None else (node.username, node.password or "")
    if user is None:
        return {}
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _tls(cfg: ClusterSettings) -> dict[str, Any]:
    # TLS options only for https nodes (the clients refuse them for http, e.g. a CA exported for another node)
    kwargs: dict[str, Any] = {}
    if any(n.scheme == "https" for n in cfg.nodes):
        if cfg.ca_certs is not None:
            kwargs["ca_certs"] = str(cfg.ca_certs)
        if not cfg.verify_certs:
            kwargs["verify_certs"] = False
    return kwargs


def _common(cfg: ClusterSettings, max_retries: int | None) -> dict[str, Any]:
    return {"max_retries": cfg.max_retries if max_retries is None else max_retries,
            "retry_on_status": RETRIED_STATUSES, "retry_on_timeout": True, "headers": auth_headers(cfg), **_tls(cfg)}


def es_client(cfg: ClusterSettings, max_retries: int | None = None, request_timeout: float | None = None,
              *, asyncio: bool = False) -> Any:
    """An ``Elasticsearch`` (``AsyncElasticsearch`` with ``asyncio``) client of ``cfg``'s nodes."""
    nodes = [NodeConfig(n.scheme, n.host, n.port, path_prefix=n.path) for n in cfg.nodes]
    kwargs = {"request_timeout": cfg.request_timeout if request_timeout is None else request_timeout,
              "serializers": SERIALIZERS, **_common(cfg, max_retries)}
    if asyncio:
        return elasticsearch.AsyncElasticsearch(nodes, node_class=_AsyncNode, **kwargs)
    return elasticsearch.Elasticsearch(nodes, node_class=_Node, **kwargs)


def os_client(cfg: ClusterSettings, max_retries: int | None = None, request_timeout: float | None = None,
              *, asyncio: bool = False) -> Any:
    """An ``OpenSearch`` (``AsyncOpenSearch`` with ``asyncio``) client of ``cfg``'s nodes. OpenSearch has no API
    keys."""
    if cfg.api_key is not None:
        raise ConfigError("OpenSearch has no API keys (HSP_ES__API_KEY is set)",
                          fix="Use HSP_ES__USERNAME and HSP_ES__PASSWORD of an internal user for OpenSearch")
    hosts = [{"host": n.host, "port": n.port, "url_prefix": n.path, "use_ssl": n.scheme == "https"}
             for n in cfg.nodes]
    kwargs = {"timeout": cfg.request_timeout if request_timeout is None else request_timeout,
              "pool_maxsize": 10,  # as many connections per node as the elasticsearch client keeps
              **_common(cfg, max_retries)}
    if asyncio:
        return AsyncOpenSearch(hosts, connection_class=_OsAsyncConnection, **kwargs)
    return opensearchpy.OpenSearch(hosts, connection_class=_OsConnection, **kwargs)


# ------------------------------------------------------------------------------------------ detection


def _root_request(cfg: ClusterSettings) -> dict[str, Any]:
    return {"headers": {"accept": "application/json", **auth_headers(cfg)}}


def _info(meta: Any, body: Any) -> EngineInfo | None:
    """The engine ``GET /`` names; None when it is not served there; the library's error for 401 and 403."""
    if meta.status in (401, 403):
        error = elasticsearch.exceptions.HTTP_EXCEPTIONS.get(meta.status, elasticsearch.ApiError)
        raise error(message=f"HTTP {meta.status}", meta=meta, body=body)
    if meta.status >= 300:
        return None
    info = body.get("version", {}) if isinstance(body, dict) else {}
    return EngineInfo("opensearch" if info.get("distribution") == "opensearch" else "elasticsearch",
                      info.get("number"))


_NODES = "/_nodes/_local?filter_path=nodes.*.version"


def _from_nodes(meta: Any, body: Any) -> EngineInfo:
    """The engine ``GET _nodes/_local`` names (where ``GET /`` is not served: the Elasticsearch integ-test zip)."""
    nodes = body.get("nodes", {}) if isinstance(body, dict) else {}
    version = next((n.get("version") for n in nodes.values()), None)
    return EngineInfo("elasticsearch" if meta.headers.get("x-elastic-product") else "opensearch", version)


def detect(cfg: ClusterSettings, es: elasticsearch.Elasticsearch) -> EngineInfo:
    """Ask the cluster which engine it is, through ``es``'s transport (plain JSON, no product check).
    ``HSP_ES__ENGINE`` (``cfg.engine``) other than ``auto`` answers without asking. Raises the library's
    errors: call inside :func:`~hybridsearch.engine.errors.engine_errors`, like every call."""
    if cfg.engine != "auto":
        return EngineInfo(cfg.engine, None, detected=False)
    info = _info(*es.transport.perform_request("GET", "/", **_root_request(cfg)))
    return info or _from_nodes(*es.transport.perform_request("GET", _NODES, **_root_request(cfg)))


async def detect_async(cfg: ClusterSettings, es: elasticsearch.AsyncElasticsearch) -> EngineInfo:
    """:func:`detect` through an asyncio client."""
    if cfg.engine != "auto":
        return EngineInfo(cfg.engine, None, detected=False)
    info = _info(*await es.transport.perform_request("GET", "/", **_root_request(cfg)))
    return info or _from_nodes(*await es.transport.perform_request("GET", _NODES, **_root_request(cfg)))
