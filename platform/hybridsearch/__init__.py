"""hybridsearch: hybrid BM25 + dense search on Elasticsearch with client-side RRF and reranking."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hybridsearch.errors import HybridSearchError
from hybridsearch.settings import Settings, get_settings, load_settings

if TYPE_CHECKING:
    from hybridsearch.query.client import AsyncSearchClient, SearchClient

__version__ = "0.1.0"
__all__ = ["AsyncSearchClient", "HybridSearchError", "SearchClient", "Settings", "__version__", "get_settings",
           "load_settings"]
_LAZY = {"SearchClient", "AsyncSearchClient"}


def __getattr__(name: str) -> Any:
    """Import the search clients on first use, so ``import hybridsearch`` stays light (no torch)."""
    if name in _LAZY:
        from hybridsearch.query import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
