"""Fusion of a hybrid search's lists, pure: Reciprocal Rank Fusion (``Σ_i w_i / (k + rank_i(d))``) or a weighted
sum of z-score or min-max normalised scores, each list shifted so that its lowest is 0 (what a missing id gets).
Results are sorted by score, highest first, ties by id ascending."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

from hybridsearch.errors import QueryError
from hybridsearch.settings import QuerySettings

T = TypeVar("T")
Method = Literal["rrf", "zscore", "minmax"]
METHODS: tuple[Method, ...] = get_args(Method)
LISTS = ("bm25", "knn")  # a hybrid search's lists, in the order of Fusion.weights


@dataclass(frozen=True)
class Fusion:
    """How a hybrid search merges its lists, weighted (bm25, knn); ``source``: where it came from."""

    method: Method = "rrf"
    k: int = 60
    weights: tuple[float, float] = (1.0, 1.0)
    source: Literal["default", "settings", "index"] = "default"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise QueryError(f"unknown fusion {self.method!r}", fix=f"use one of {', '.join(METHODS)}")
        if self.k < 1:
            raise QueryError(f"RRF k must be at least 1, got {self.k}")
        if any(not math.isfinite(w) or w < 0 for w in self.weights):
            raise QueryError(f"fusion weights must be finite and non-negative, got {list(self.weights)}")

    def weight(self, name: str) -> float:
        return self.weights[LISTS.index(name)]

    @property
    def label(self) -> str:
        """What it does, for people: ``RRF k=60, weights bm25 1 / kNN 1``."""
        how = f"RRF k={self.k}" if self.method == "rrf" else f"{self.method} sum"
        return f"{how}, weights bm25 {self.weights[0]:g} / kNN {self.weights[1]:g}"

    def describe(self) -> str:
        """:attr:`label` and where the fusion came from (``... (default)``)."""
        return f"{self.label} ({self.source})"

    def to_meta(self) -> dict[str, Any]:
        """The form recorded in an index's ``_meta.fusion``: method, weights and (for RRF) k."""
        meta: dict[str, Any] = {"method": self.method, "weights": list(self.weights)}
        if self.method == "rrf":
            meta["k"] = self.k
        return meta

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Fusion:
        """The fusion recorded by :meth:`to_meta`, marked as the index's. Raises QueryError when malformed."""
        fix = "record it again: `hsp index fusion rrf|zscore|minmax` (or `hsp calibrate-fusion`)"
        if meta.get("method") not in METHODS:
            raise QueryError(f"the index's recorded fusion {dict(meta)!r} names no known method", fix=fix)
        try:
            weights = tuple(float(w) for w in meta["weights"])
            if len(weights) != len(LISTS):
                raise ValueError(f"{len(weights)} weights")
            return cls(method=meta["method"], k=int(meta.get("k", 60)), weights=(weights[0], weights[1]),
                       source="index")
        except (KeyError, TypeError, ValueError, QueryError) as exc:
            raise QueryError(f"the index's recorded fusion {dict(meta)!r} is malformed ({exc})", fix=fix) from None

    def fuse(self, lists: Mapping[str, Sequence[tuple[str, float]]]) -> list[tuple[str, float]]:
        """Fuse ``{name: [(id, raw score), ...]}`` (best first) into sorted ``(id, score)`` pairs."""
        scores: dict[str, float] = {}
        for share in self.shares(lists).values():
            for doc, v in share.items():
                scores[doc] = scores.get(doc, 0.0) + v
        return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))

    def shares(self, lists: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, dict[str, float]]:
        """Each list's share of each id's fused score, ``{name: {id: share}}``; a repeated id counts once, first."""
        out: dict[str, dict[str, float]] = {}
        for name, lst in lists.items():
            w = self.weight(name)
            if self.method == "rrf":
                out[name] = {doc: w / (self.k + rank) for rank, doc in enumerate(unique(d for d, _ in lst), start=1)}
                continue
            first: dict[str, float] = {}
            for doc, score in lst:
                first.setdefault(doc, score)
            normed = normalise(list(first.values()), self.method)
            floor = min(normed, default=0.0)
            out[name] = {doc: w * (v - floor) for doc, v in zip(first, normed, strict=True)}
        return out


def fusion_for(q: QuerySettings, meta: Mapping[str, Any]) -> Fusion:
    """The fusion of an index: ``HSP_QUERY__FUSION`` unless auto, else ``meta["fusion"]``, else RRF ``rrf_k``."""
    weights = (2.0 * (1.0 - q.knn_share), 2.0 * q.knn_share)  # they sum to 2: a share of 0.5 gives 1 and 1
    if q.fusion != "auto":
        return Fusion(method=q.fusion, k=q.rrf_k, weights=weights, source="settings")
    recorded = meta.get("fusion")
    if isinstance(recorded, Mapping):
        return Fusion.from_meta(recorded)
    return Fusion(method="rrf", k=q.rrf_k, weights=weights)


def normalise(scores: Sequence[float], method: Literal["minmax", "zscore"] = "minmax") -> list[float]:
    """Scores rescaled per list: ``minmax`` to [0, 1] (all equal → 1), ``zscore`` to mean 0, sd 1 (sd 0 → 0)."""
    if not scores:
        return []
    if method == "minmax":
        lo, hi = min(scores), max(scores)
        return [1.0 if hi == lo else (s - lo) / (hi - lo) for s in scores]
    mean = sum(scores) / len(scores)
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    return [0.0 if sd == 0 else (s - mean) / sd for s in scores]


def interpolate(rerank_scores: Sequence[float], fused_scores: Sequence[float], weight: float) -> list[float]:
    """``weight`` × min-max(rerank) + (1 − ``weight``) × min-max(fused), per candidate. Raises QueryError."""
    if not 0.0 <= weight <= 1.0 or not math.isfinite(weight):
        raise QueryError(f"rerank blend weight must be in [0, 1], got {weight}")
    if len(rerank_scores) != len(fused_scores):
        raise QueryError(f"{len(rerank_scores)} rerank scores for {len(fused_scores)} fused scores")
    r, f = normalise(rerank_scores), normalise(fused_scores)
    return [weight * a + (1.0 - weight) * b for a, b in zip(r, f, strict=True)]


def unique(ids: Iterable[T]) -> list[T]:
    """``ids`` without repeats, first occurrence kept, order preserved."""
    return list(dict.fromkeys(ids))
