"""hybridsearch: hybrid BM25 + dense search on Elasticsearch with client-side RRF and reranking. The public API is
what ``__all__`` lists (``tests/unit/test_exported_members.py`` guards it); everything else may change."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hybridsearch.errors import (
    AccessDenied,
    AliasConflict,
    AuthenticationFailed,
    ClusterError,
    ClusterUnavailable,
    ConfigError,
    HybridSearchError,
    IndexMismatch,
    IndexNotFound,
    IngestError,
    ModelError,
    QueryError,
    RerankerError,
    RerankerModelError,
    TlsFailure,
)
from hybridsearch.query.filters import AllOf, AnyOf, Exists, Filter, NoneOf, Range, Term, Terms
from hybridsearch.query.results import Highlight, Hit, Mode, PassageSource, SearchResult, StageScore, Timings, WhyReport
from hybridsearch.settings import Settings, get_settings, load_settings

if TYPE_CHECKING:
    from hybridsearch.query.client import AsyncSearchClient, SearchClient

__version__ = "0.1.0"
__all__ = [
    "AccessDenied",
    "AliasConflict",
    "AllOf",
    "AnyOf",
    "AsyncSearchClient",
    "AuthenticationFailed",
    "ClusterError",
    "ClusterUnavailable",
    "ConfigError",
    "Exists",
    "Filter",
    "Highlight",
    "Hit",
    "HybridSearchError",
    "IndexMismatch",
    "IndexNotFound",
    "IngestError",
    "Mode",
    "ModelError",
    "NoneOf",
    "PassageSource",
    "QueryError",
    "Range",
    "RerankerError",
    "RerankerModelError",
    "SearchClient",
    "SearchResult",
    "Settings",
    "StageScore",
    "Term",
    "Terms",
    "Timings",
    "TlsFailure",
    "WhyReport",
    "__version__",
    "get_settings",
    "load_settings",
]
_LAZY = {"SearchClient", "AsyncSearchClient"}


def __getattr__(name: str) -> Any:
    """Import the search clients on first use, so ``import hybridsearch`` stays light (no torch)."""
    if name in _LAZY:
        from hybridsearch.query import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
