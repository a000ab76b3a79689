"""Rerank stage: cross-encoder scoring in-process or through the reranker service."""

from hybridsearch.rerank.base import Reranker

__all__ = ["Reranker"]
