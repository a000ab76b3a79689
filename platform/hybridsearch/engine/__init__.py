"""The engine seam: the only part of the package that imports ``elasticsearch``, ``opensearchpy`` or
``elastic_transport``.

Everything engine-specific lives here, so ingestion, queries, fusion, the lifecycle, eval and Kibana code
stay the same on Elasticsearch 8.x/9.x and OpenSearch:

* :mod:`.request`: a request is data (:class:`Request`: method, path, parameters, body), built by pure functions,
  one per engine call;
* :mod:`.client` sends one: :meth:`EngineClient.send` and :meth:`AsyncEngineClient.send`, through each official
  client's public request interface, answered with plain JSON; the libraries' bulk and scroll helpers run on the
  same clients;
* :mod:`.connect` builds each library's client from :class:`~hybridsearch.settings.ClusterSettings` (the parsed
  nodes of :mod:`hybridsearch.cluster_url`, credentials apart) and asks the cluster which engine it is
  (:class:`EngineInfo`);
* :mod:`.dialect` renders what differs in the JSON (vector field, kNN clause, metadata field type);
* :mod:`.errors` reads both libraries' errors and translates them into :mod:`hybridsearch.errors`;
* :mod:`.privileges` is the one shape of the answer on which index privileges the credentials hold.

Outside this package nothing names an engine kind (``"opensearch"``, ``"elasticsearch"``) to branch on, and
nothing defaults to a dialect: callers pass the one their :class:`EngineClient` reports
(``tests/unit/test_engine_boundary.py`` checks both).
"""

from __future__ import annotations

from typing import Any

from hybridsearch.engine import request
from hybridsearch.engine.client import AsyncEngineClient, EngineClient, LoopSender, Sender, index_privileges
from hybridsearch.engine.connect import MIN_VERSION, EngineInfo
from hybridsearch.engine.dialect import (
    ELASTICSEARCH,
    OPENSEARCH,
    Dialect,
    EngineKind,
    VectorSummary,
    dialect_for,
    unsafe_vector_options,
)
from hybridsearch.engine.errors import (
    API_ERRORS,
    UNREACHABLE,
    access_denied,
    engine_errors,
    error_type_of,
    status_of,
    tls_failure,
    translate,
)
from hybridsearch.engine.privileges import IndexPrivileges
from hybridsearch.engine.request import Request
from hybridsearch.settings import ClusterSettings

__all__ = [
    "API_ERRORS", "ELASTICSEARCH", "MIN_VERSION", "OPENSEARCH", "UNREACHABLE", "AsyncEngineClient", "Dialect",
    "EngineClient", "EngineInfo", "EngineKind", "IndexPrivileges", "LoopSender", "Request", "Sender",
    "VectorSummary", "access_denied", "cluster_info", "connect", "connect_async", "dialect_for", "engine_errors",
    "error_type_of", "index_privileges", "request", "status_of", "tls_failure", "translate",
    "unsafe_vector_options",
]


def connect(cfg: ClusterSettings, *, max_retries: int | None = None,
            request_timeout: float | None = None) -> EngineClient:
    """A client for the cluster ``cfg`` names (``max_retries`` and ``request_timeout`` override its values: the
    doctor wants a quick answer). Connects on the first call; raises nothing here."""
    return EngineClient(cfg, max_retries=max_retries, request_timeout=request_timeout)


def connect_async(cfg: ClusterSettings) -> AsyncEngineClient:
    """An asyncio client for the search path."""
    return AsyncEngineClient(cfg)


def cluster_info(es: EngineClient) -> dict[str, Any]:
    """Engine, health and node versions via ``_cluster/health`` and ``_nodes``."""
    with engine_errors("cluster health"):
        engine = es.engine
        health = es.send(request.cluster_health())
        nodes = es.send(request.nodes_info(filter_path="nodes.*.version"))
    versions = sorted({n["version"] for n in nodes.get("nodes", {}).values()})
    return {"engine": engine.kind, "cluster_name": health["cluster_name"], "status": health["status"],
            "number_of_nodes": health["number_of_nodes"], "versions": versions}
