"""Rank fusion: Reciprocal Rank Fusion and a normalised linear combination. Pure functions.

RRF (Cormack, Clarke & Büttcher, 2009): ``score(d) = Σ_i w_i / (k + rank_i(d))`` with ranks from 1,
summed over the lists that contain ``d``. Results are sorted by score, highest first; equal scores
are ordered by id ascending so the output is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal, TypeVar

from hybridsearch.errors import QueryError

T = TypeVar("T")
Norm = Literal["minmax", "zscore"]


def _weights(n: int, weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * n
    if len(weights) != n:
        raise QueryError(f"fusion got {len(weights)} weights for {n} ranked lists")
    if any(not math.isfinite(w) or w < 0 for w in weights):
        raise QueryError(f"fusion weights must be finite and non-negative, got {list(weights)}")
    return [float(w) for w in weights]


def _ordered(scores: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def fuse(
    ranked_lists: Sequence[Sequence[str]], k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Reciprocal Rank Fusion of ``ranked_lists`` (ids, best first); ``k`` defaults to 60, weights to 1.

    An id repeated within one list counts at its first (best) rank only. Returns ``(id, score)`` pairs
    sorted by score descending, ties by id ascending. Raises QueryError for ``k < 1`` or bad weights.
    """
    if k < 1:
        raise QueryError(f"RRF k must be at least 1, got {k}")
    ws = _weights(len(ranked_lists), weights)
    scores: dict[str, float] = {}
    for w, ids in zip(ws, ranked_lists, strict=True):
        for rank, doc in enumerate(unique(ids), start=1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
    return _ordered(scores)


def rrf_term(rank: int, k: int = 60, weight: float = 1.0) -> float:
    """One list's contribution ``weight / (k + rank)`` to an RRF score."""
    return weight / (k + rank)


def normalise(scores: Sequence[float], method: Norm = "minmax") -> list[float]:
    """Scores rescaled per list: ``minmax`` to [0, 1] (all equal → 1), ``zscore`` to mean 0, sd 1 (sd 0 → 0)."""
    if not scores:
        return []
    if method == "minmax":
        lo, hi = min(scores), max(scores)
        return [1.0 if hi == lo else (s - lo) / (hi - lo) for s in scores]
    mean = sum(scores) / len(scores)
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    return [0.0 if sd == 0 else (s - mean) / sd for s in scores]


def linear_fuse(
    scored_lists: Sequence[Sequence[tuple[str, float]]], weights: Sequence[float] | None = None, norm: Norm = "minmax"
) -> list[tuple[str, float]]:
    """Weighted sum of per-list normalised scores; ``scored_lists`` hold ``(id, raw score)``, best first.

    An id absent from a list gets that list's lowest normalised score (0 for minmax). Sorted like :func:`fuse`.
    """
    ws = _weights(len(scored_lists), weights)
    normed: list[dict[str, float]] = []
    for lst in scored_lists:
        seen: dict[str, float] = {}
        for doc, s in lst:
            seen.setdefault(doc, s)
        normed.append(dict(zip(seen, normalise(list(seen.values()), norm), strict=True)))
    ids = {doc for d in normed for doc in d}
    floors = [min(d.values(), default=0.0) if norm == "zscore" else 0.0 for d in normed]
    scores = {doc: sum(w * d.get(doc, floor) for w, d, floor in zip(ws, normed, floors, strict=True)) for doc in ids}
    return _ordered(scores)


def interpolate(rerank_scores: Sequence[float], fused_scores: Sequence[float], weight: float) -> list[float]:
    """``weight`` × min-max(rerank) + (1 − ``weight``) × min-max(fused), per position.

    Both lists score the same candidates in the same order. ``weight`` 1 keeps the reranker's order,
    0 the fused order. Raises QueryError for a weight outside [0, 1] or lists of different lengths.
    """
    if not 0.0 <= weight <= 1.0 or not math.isfinite(weight):
        raise QueryError(f"rerank blend weight must be in [0, 1], got {weight}")
    if len(rerank_scores) != len(fused_scores):
        raise QueryError(f"{len(rerank_scores)} rerank scores for {len(fused_scores)} fused scores")
    r, f = normalise(rerank_scores), normalise(fused_scores)
    return [weight * a + (1.0 - weight) * b for a, b in zip(r, f, strict=True)]


def hybrid_weights(alpha: float) -> tuple[float, float]:
    """``(bm25, dense)`` weights for linear fusion: ``alpha`` is the dense share."""
    return (1.0 - alpha, alpha)


def unique(ids: Iterable[T]) -> list[T]:
    """``ids`` without repeats, first occurrence kept, order preserved."""
    seen: set[T] = set()
    out: list[T] = []
    for i in ids:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out
