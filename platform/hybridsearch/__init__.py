"""hybridsearch: hybrid BM25 + dense search on Elasticsearch with client-side RRF and reranking."""

from __future__ import annotations

from hybridsearch.errors import HybridSearchError
from hybridsearch.settings import Settings, get_settings, load_settings

__version__ = "0.1.0"
__all__ = ["HybridSearchError", "Settings", "__version__", "get_settings", "load_settings"]
