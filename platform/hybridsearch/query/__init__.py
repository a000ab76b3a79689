"""Query layer: BM25 + kNN in one _msearch, client-side fusion, optional rerank.

``SearchClient`` / ``AsyncSearchClient`` are imported lazily so ``import hybridsearch.query`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hybridsearch.query.client import AsyncSearchClient, SearchClient

__all__ = ["AsyncSearchClient", "SearchClient"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from hybridsearch.query import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
