"""The engine seam: the only part of the package that imports ``elasticsearch``, ``opensearchpy`` or
``elastic_transport``, so everything above it is the same on Elasticsearch 8.x/9.x and OpenSearch.

A request is data built by :mod:`.request` and sent by :mod:`.client` (sync and asyncio); :mod:`.connect` builds
the libraries' clients and detects the engine; :mod:`.dialect` holds what differs (the JSON, the version rules);
:mod:`.errors` translates the libraries' errors into :mod:`hybridsearch.errors`. Outside the seam nothing
branches on an engine kind or defaults to a dialect (``tests/unit/test_engine_boundary.py``).
"""

from __future__ import annotations

from typing import Any

from hybridsearch.engine import request
from hybridsearch.engine.client import AsyncEngineClient, EngineClient, Sender
from hybridsearch.engine.dialect import (
    ELASTICSEARCH,
    OPENSEARCH,
    Dialect,
    EngineInfo,
    EngineKind,
    unsafe_vector_options,
)
from hybridsearch.engine.errors import API_ERRORS, UNREACHABLE, engine_errors, error_type_of, status_of, translate
from hybridsearch.engine.request import Request
from hybridsearch.settings import ClusterSettings

__all__ = [
    "API_ERRORS", "ELASTICSEARCH", "OPENSEARCH", "UNREACHABLE", "AsyncEngineClient", "Dialect", "EngineClient",
    "EngineInfo", "EngineKind", "Request", "Sender", "cluster_info", "connect",
    "connect_async", "engine_errors", "error_type_of", "request", "status_of", "translate",
    "unsafe_vector_options",
]


def connect(cfg: ClusterSettings, *, max_retries: int | None = None,
            request_timeout: float | None = None) -> EngineClient:
    """A client for the cluster ``cfg`` names (``max_retries`` and ``request_timeout`` override its values).
    Connects on the first call; raises nothing here."""
    return EngineClient(cfg, max_retries=max_retries, request_timeout=request_timeout)


def connect_async(cfg: ClusterSettings) -> AsyncEngineClient:
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
