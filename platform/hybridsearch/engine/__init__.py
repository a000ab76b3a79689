"""The engine seam: the only part of the package that imports ``elasticsearch`` or ``opensearchpy``.

Everything engine-specific lives here, so ingestion, queries, fusion, the lifecycle, eval and Kibana code
stay the same on Elasticsearch 8.x/9.x and OpenSearch:

* :mod:`.connect` builds each library's client from :class:`~hybridsearch.settings.ClusterSettings` and asks
  the cluster which engine it is (:class:`EngineInfo`);
* :mod:`.client` is what the rest of the package calls (:class:`EngineClient`; its ``indices``, ``cluster``,
  ``nodes`` and ``cat`` calls are in :mod:`.namespaces`), :mod:`.async_client` the asyncio calls of the search
  path (:class:`AsyncEngineClient`), both sending requests in the one form of :mod:`.wire`;
* :mod:`.dialect` renders what differs in the JSON (vector field, kNN clause, metadata field type);
* :mod:`.errors` reads both libraries' errors and translates them into :mod:`hybridsearch.errors`;
* :mod:`.privileges` is the one shape of the answer on which index privileges the credentials hold;
* :mod:`.libraries` loads both libraries first, without the optional packages they would import eagerly and a
  synchronous search never runs (aiohttp until an asyncio client is built, pyarrow, click: a third of a
  command-line search's start-up).

Outside this package nothing names an engine kind (``"opensearch"``, ``"elasticsearch"``) to branch on, and
nothing defaults to a dialect: callers pass the one their :class:`EngineClient` reports
(``tests/unit/test_engine_boundary.py`` checks both).
"""

from __future__ import annotations

from typing import Any

# isort: off
import hybridsearch.engine.libraries  # noqa: F401  # first: it loads both client libraries lean (see there)
# isort: on

from hybridsearch.engine.async_client import AsyncEngineClient
from hybridsearch.engine.client import EngineClient
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
from hybridsearch.settings import ClusterSettings

__all__ = [
    "API_ERRORS", "ELASTICSEARCH", "MIN_VERSION", "OPENSEARCH", "UNREACHABLE", "AsyncEngineClient",
    "Dialect", "EngineClient", "EngineInfo", "EngineKind", "IndexPrivileges", "VectorSummary", "access_denied",
    "cluster_info", "connect", "connect_async", "dialect_for", "engine_errors", "error_type_of", "status_of",
    "tls_failure", "translate", "unsafe_vector_options",
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
        health = es.cluster.health()
        nodes = es.nodes.info(filter_path="nodes.*.version")
    versions = sorted({n["version"] for n in nodes.get("nodes", {}).values()})
    return {"engine": engine.kind, "cluster_name": health["cluster_name"], "status": health["status"],
            "number_of_nodes": health["number_of_nodes"], "versions": versions}
