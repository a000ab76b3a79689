"""Building each library's client from :class:`ClusterSettings`, and finding out which engine answers.

Elasticsearch 8.x and 9.x are served by the ``elasticsearch`` 8.19 client: Elastic's clients are forward
compatible (an 8.x client talks to 8.x and 9.x servers), while a 9.x client refuses 8.x servers. OpenSearch
gets ``opensearch-py``. Detection asks ``GET /`` (``version.distribution`` is ``opensearch`` there) and falls
back on ``GET _nodes/_local`` and the ``X-Elastic-Product`` header where ``GET /`` is not served (the
Elasticsearch integ-test zip). It goes through the transport with plain ``application/json``, which every
engine accepts. ``HSP_ES__ENGINE`` skips it.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any

import elasticsearch
import opensearchpy
from elastic_transport import AiohttpHttpNode, TlsError, Urllib3HttpNode
from elasticsearch.serializer import NdjsonSerializer, OrjsonSerializer
from opensearchpy import AsyncHttpConnection, Urllib3HttpConnection

from hybridsearch.engine.dialect import Dialect, EngineKind, dialect_for
from hybridsearch.engine.errors import tls_failure
from hybridsearch.errors import ConfigError
from hybridsearch.settings import ClusterSettings

RETRY_STATUSES = (429, 502, 503, 504)
#: oldest versions with everything the platform sends (kNN pre-filters, int8 HNSW; OpenSearch: lucene sq and
#: method_parameters in the knn query, flat_object)
MIN_VERSION: dict[EngineKind, tuple[int, int]] = {"elasticsearch": (8, 12), "opensearch": (2, 16)}


@dataclass(frozen=True)
class EngineInfo:
    """Which engine answers: kind and version (None when set by ``HSP_ES__ENGINE`` and not asked)."""

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

    @property
    def name(self) -> str:
        label = "OpenSearch" if self.kind == "opensearch" else "Elasticsearch"
        return f"{label} {self.version}" if self.version else label

    @property
    def source_with_vectors(self) -> Any:
        """``_source`` that returns the vector too: Elasticsearch 9.1+ leaves vectors out unless asked."""
        v = self.version_tuple
        if self.kind == "elasticsearch" and (v is None or v[:2] >= (9, 1)):
            return {"exclude_vectors": False}
        return True

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
        v = self.version_tuple
        if self.kind == "elasticsearch" and v is not None and v[:2] >= (9, 1):
            return {"index.dense_vector.hnsw_filter_heuristic": "fanout"}
        return {}

    def support_problem(self) -> str | None:
        """Why this engine version cannot serve the platform, or None."""
        have, need = self.version_tuple, MIN_VERSION[self.kind]
        if have is None or have[:2] >= need:
            return None
        return (f"{self.name} is not supported: hybridsearch needs {self.name.split()[0]} "
                f"{need[0]}.{need[1]} or newer (kNN with pre-filters, int8 HNSW vectors)")


# ------------------------------------------------------------------------------------------ Elasticsearch


class _Node(Urllib3HttpNode):
    """The default sync node, except that a hopeless TLS failure raises TlsFailure (not retried)."""

    def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().perform_request(*args, **kwargs)
        except TlsError as exc:
            raise (tls_failure(exc, self.base_url) or exc) from exc


class _AsyncNode(AiohttpHttpNode):
    """The default asyncio node, with the same TLS rule as :class:`_Node`."""

    async def perform_request(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # as the base
        try:
            return await super().perform_request(*args, **kwargs)
        except TlsError as exc:
            raise (tls_failure(exc, self.base_url) or exc) from exc


class _OrjsonNdjson(NdjsonSerializer, OrjsonSerializer):
    """``_msearch`` and ``_bulk`` bodies (one JSON line per item) written and read with orjson."""


#: orjson for every JSON body, NDJSON included (the library only offers it for single bodies): a query vector
#: of 384 floats is written about ten times faster, and an answer of 100 hits read about four times faster
#: (``ops/bench_query.py``'s raw probe: -0.4 to -0.6 ms per kNN request). The compatibility-mode media types
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
    return elasticsearch.AsyncElasticsearch(**es_kwargs(cfg), node_class=_AsyncNode)


# ------------------------------------------------------------------------------------------ OpenSearch


class _OsConnection(Urllib3HttpConnection):
    """opensearch-py's default sync connection, with the same TLS rule as :class:`_Node`."""

    def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().perform_request(*args, **kwargs)
        except opensearchpy.SSLError as exc:
            raise (tls_failure(exc, self.host) or exc) from exc


class _OsAsyncConnection(AsyncHttpConnection):
    async def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().perform_request(*args, **kwargs)
        except opensearchpy.SSLError as exc:
            raise (tls_failure(exc, self.host) or exc) from exc


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


def os_async_client(cfg: ClusterSettings) -> opensearchpy.AsyncOpenSearch:
    return opensearchpy.AsyncOpenSearch(**os_kwargs(cfg), connection_class=_OsAsyncConnection)


# ------------------------------------------------------------------------------------------ detection


def _auth_headers(cfg: ClusterSettings) -> dict[str, str]:
    if cfg.api_key is not None:
        return {"authorization": f"ApiKey {cfg.api_key.get_secret_value()}"}
    if cfg.username is not None:
        token = f"{cfg.username}:{cfg.password.get_secret_value() if cfg.password else ''}"
        return {"authorization": "Basic " + base64.b64encode(token.encode()).decode()}
    return {}


def detect(cfg: ClusterSettings, es: elasticsearch.Elasticsearch) -> EngineInfo:
    """Ask the cluster which engine it is, through ``es``'s transport (plain JSON, no product check).
    ``HSP_ES__ENGINE`` (``cfg.engine``) other than ``auto`` answers without asking. Raises the library's
    errors: call inside :func:`~hybridsearch.engine.errors.engine_errors`, like every call."""
    if cfg.engine != "auto":
        return EngineInfo(cfg.engine, None, detected=False)
    headers = {"accept": "application/json", **_auth_headers(cfg)}
    meta, body = es.transport.perform_request("GET", "/", headers=headers)
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
