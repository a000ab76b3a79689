"""The engine seam, the only importer of ``elasticsearch`` and ``elastic_transport``: requests as data (:mod:`.request`)
sent by :mod:`.client`, what differs between engines (:mod:`.dialect`), the library's errors read (:mod:`.errors`)."""

from hybridsearch.engine import request
from hybridsearch.engine.client import AsyncEngineClient, EngineClient, Sender, cluster_info
from hybridsearch.engine.dialect import ELASTICSEARCH, OPENSEARCH, Dialect, EngineInfo, EngineKind
from hybridsearch.engine.errors import API_ERRORS, UNREACHABLE, engine_errors, error_type_of, status_of, translate
from hybridsearch.engine.request import Request

__all__ = [
    "API_ERRORS", "ELASTICSEARCH", "OPENSEARCH", "UNREACHABLE", "AsyncEngineClient", "Dialect", "EngineClient",
    "EngineInfo", "EngineKind", "Request", "Sender", "cluster_info", "engine_errors", "error_type_of", "request",
    "status_of", "translate",
]
