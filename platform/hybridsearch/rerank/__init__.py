"""Rerank stage: cross-encoder scoring in-process or through the reranker service."""

from __future__ import annotations

from hybridsearch.rerank.base import Reranker
from hybridsearch.rerank.http import HttpReranker
from hybridsearch.rerank.local import LocalReranker
from hybridsearch.settings import ModelsSettings, RerankerSettings

__all__ = ["HttpReranker", "LocalReranker", "Reranker", "make_reranker"]


def make_reranker(cfg: RerankerSettings, models: ModelsSettings) -> Reranker | None:
    """None when disabled, an HttpReranker when a URL is set, else a LocalReranker (loaded on first score)."""
    if not cfg.enabled:
        return None
    if cfg.url:
        return HttpReranker(cfg.url, cfg.timeout, cfg.token.get_secret_value() if cfg.token else None)
    return LocalReranker(cfg, models)
