"""Rerank stage: cross-encoder scoring in-process or through the reranker service.

``make_reranker(cfg)`` picks the implementation: none when ``HSP_RERANKER__ENABLED=false``,
:class:`HttpReranker` when ``HSP_RERANKER__URL`` is set, else :class:`LocalReranker` (model loads
on first score; a load failure raises RerankerModelError, a RerankerError, from ``score``).
"""

from __future__ import annotations

from hybridsearch.rerank.base import PairScorer, Reranker
from hybridsearch.rerank.http import HttpReranker
from hybridsearch.rerank.local import LocalReranker, load_cross_encoder
from hybridsearch.rerank.ranking import order_by_score
from hybridsearch.settings import RerankerSettings

__all__ = ["HttpReranker", "LocalReranker", "PairScorer", "Reranker", "load_cross_encoder", "make_reranker",
           "order_by_score"]


def make_reranker(cfg: RerankerSettings) -> Reranker | None:
    """The reranker ``cfg`` asks for, or None when reranking is disabled. Loads nothing yet."""
    if not cfg.enabled:
        return None
    if cfg.url:
        return HttpReranker.from_settings(cfg)
    return LocalReranker(cfg)
