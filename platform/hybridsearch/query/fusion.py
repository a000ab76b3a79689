"""Rank fusion: Reciprocal Rank Fusion and a normalised linear combination. Pure functions.

RRF (Cormack, Clarke & Büttcher, 2009): ``score(d) = Σ_i w_i / (k + rank_i(d))`` with ranks from 1,
summed over the lists that contain ``d``. Results are sorted by score, highest first; equal scores
are ordered by id ascending so the output is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeVar

from hybridsearch.errors import QueryError
from hybridsearch.settings import QuerySettings

T = TypeVar("T")
Norm = Literal["minmax", "zscore"]
LISTS = ("bm25", "knn")  # a hybrid search's lists, in the order of Fusion.weights


@dataclass(frozen=True)
class Fusion:
    """How a hybrid search merges its lists: RRF with ``k``, or a linear sum of ``norm``-normalised scores, each
    list weighted by ``weights`` (bm25, knn). ``source`` says where it came from: the index's calibration
    (``hsp calibrate-fusion``), the settings (``HSP_QUERY__FUSION=rrf|linear``) or the default (RRF k=60, equal
    weights)."""

    method: Literal["rrf", "linear"] = "rrf"
    k: int = 60
    weights: tuple[float, float] = (1.0, 1.0)
    norm: Norm = "minmax"
    source: Literal["default", "settings", "index"] = "default"

    def __post_init__(self) -> None:
        if self.k < 1:
            raise QueryError(f"RRF k must be at least 1, got {self.k}")
        _weights(len(LISTS), self.weights)

    def weight(self, name: str) -> float:
        """The weight of list ``name`` (``bm25``, ``knn``)."""
        return self.weights[LISTS.index(name)]

    @property
    def label(self) -> str:
        """What it does, for people: ``RRF k=60, weights bm25 1 / kNN 1``."""
        how = f"RRF k={self.k}" if self.method == "rrf" else f"linear {self.norm}"
        return f"{how}, weights bm25 {self.weights[0]:g} / kNN {self.weights[1]:g}"

    def describe(self) -> str:
        """:attr:`label` and where the fusion came from: ``RRF k=60, weights bm25 1 / kNN 1 (default)``."""
        return f"{self.label} ({self.source})"

    def to_meta(self) -> dict[str, Any]:
        """The form recorded in an index's ``_meta.fusion`` (everything but ``source``)."""
        meta = asdict(self)
        meta.pop("source")
        meta["weights"] = list(self.weights)
        return meta

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Fusion:
        """The fusion recorded by :meth:`to_meta`, marked as the index's. Raises QueryError when malformed."""
        try:
            weights = tuple(float(w) for w in meta["weights"])
            return cls(method=meta["method"], k=int(meta.get("k", 60)), weights=(weights[0], weights[1]),
                       norm=meta.get("norm", "minmax"), source="index")
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise QueryError(f"the index's recorded fusion {dict(meta)!r} is malformed ({exc})") from None

    def fuse(self, lists: Mapping[str, Sequence[tuple[str, float]]]) -> list[tuple[str, float]]:
        """Fuse ``{name: [(id, raw score), ...]}`` (best first): :func:`fuse` or :func:`linear_fuse`."""
        names = list(lists)
        weights = [self.weight(n) for n in names]
        if self.method == "rrf":
            return fuse([[key for key, _ in lists[n]] for n in names], k=self.k, weights=weights)
        return linear_fuse([lists[n] for n in names], weights, self.norm)

    def shares(self, lists: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, dict[str, float]]:
        """Each list's share of each id's fused score, ``{name: {id: share}}`` (ids unique in each list, best
        first): its RRF term, or its weighted normalised score."""
        out: dict[str, dict[str, float]] = {}
        for name, lst in lists.items():
            w = self.weight(name)
            if self.method == "rrf":
                out[name] = {key: rrf_term(rank, self.k, w) for rank, (key, _) in enumerate(lst, start=1)}
            else:
                normed = normalise([s for _, s in lst], self.norm)
                out[name] = {key: w * v for (key, _), v in zip(lst, normed, strict=True)}
        return out


def fusion_for(q: QuerySettings, meta: Mapping[str, Any]) -> Fusion:
    """The fusion searches of an index with ``_meta`` ``meta`` use: ``HSP_QUERY__FUSION=rrf|linear`` when set,
    else (``auto``) the index's calibrated fusion (``_meta.fusion``), else RRF with ``rrf_k`` and equal weights."""
    if q.fusion == "rrf":
        return Fusion(method="rrf", k=q.rrf_k, source="settings")
    if q.fusion == "linear":
        return Fusion(method="linear", weights=hybrid_weights(q.linear_alpha), norm=q.linear_norm, source="settings")
    recorded = meta.get("fusion")
    if isinstance(recorded, Mapping):
        return Fusion.from_meta(recorded)
    return Fusion(method="rrf", k=q.rrf_k)


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
