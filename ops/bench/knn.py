"""Exact nearest neighbours in numpy and the recall of an approximate (HNSW) search against them, for the
benchmarks that check the engine's kNN against brute force over the indexed vectors (bench_scale, bench_vectors)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: similarity slack within which a returned neighbour counts as tied with the k-th exact one (float32 sums)
TIE_TOLERANCE = 1e-5


def unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (zero rows stay zero), as float32: cosine similarity becomes a dot product."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    out: np.ndarray = (v / np.where(norms == 0, 1, norms)).astype(np.float32)
    return out


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int, batch: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` rows of ``vectors`` with the largest dot product with each query, best first.

    Returns ``(ids, scores)``, both of shape ``(len(queries), k)``. For cosine, pass :func:`unit` vectors.
    Queries go ``batch`` at a time, so memory stays ``batch × len(vectors)`` floats.
    """
    k = min(k, len(vectors))
    ids = np.empty((len(queries), k), dtype=np.int64)
    scores = np.empty((len(queries), k), dtype=np.float32)
    for start in range(0, len(queries), batch):
        sims = queries[start:start + batch] @ vectors.T
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, top, 1), axis=1, kind="stable")
        ids[start:start + batch] = np.take_along_axis(top, order, 1)
        scores[start:start + batch] = np.take_along_axis(sims, ids[start:start + batch], 1)
    return ids, scores


def knn_recall(vectors: np.ndarray, query: np.ndarray, kth_score: float, got: Sequence[int], k: int,
               tolerance: float = TIE_TOLERANCE) -> float:
    """Recall@k of one approximate search: the share of its first ``k`` distinct hits (row numbers of
    ``vectors``; negative: not a known row) whose exact score is at least ``kth_score``, the k-th best exact
    score, less ``tolerance``. A hit tied with the k-th exact neighbour (a duplicate text) counts as found, so
    exact search itself scores 1.0 however ties were broken."""
    hits = [g for g in dict.fromkeys(got) if g >= 0][:k]
    if not hits:
        return 0.0
    found = int(np.count_nonzero(vectors[hits] @ query >= kth_score - tolerance))
    return min(found, k) / k
