"""Which mined candidates may serve as negatives: hard, but probably not unjudged relevant documents.

Judgments are sparse (SciFact: 1.1 relevant documents per query), so some of the hybrid top-k that
are not judged relevant are relevant all the same. Training on them as negatives teaches the model
the opposite of what it should learn. :func:`filter_negatives` drops the likeliest of them:

- the fused top ``skip_top`` ranks (off by default: with a judged positive usually at rank 1, the
  non-relevant rank-2 document is the most useful negative there is);
- candidates that *both* retrievers rank above the query's best-ranked judged positive
  (``skip_above_positive``): when BM25 and kNN independently prefer a document over the known
  answer, it is more often an unjudged answer than a hard mistake;
- near-duplicates of a positive passage (word-set Jaccard ≥ ``max_overlap``): the same study's other
  chunk, a preprint, a restated abstract.

Pure functions only; :mod:`hybridsearch.training.negatives` applies them while building pairs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

_WORD = re.compile(r"[a-z0-9]+")
INF = float("inf")


class Candidate(Protocol):
    """What the filter reads of a mined candidate (:class:`hybridsearch.training.negatives.Candidate`)."""

    @property
    def doc_id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def bm25_rank(self) -> int | None: ...
    @property
    def knn_rank(self) -> int | None: ...


C = TypeVar("C", bound=Candidate)


@dataclass(frozen=True)
class NegativePolicy:
    """What :func:`filter_negatives` drops; ``NegativePolicy(0, False, 1.0)`` drops nothing."""

    skip_top: int = 0
    skip_above_positive: bool = True
    max_overlap: float = 0.6

    def describe(self) -> str:
        """One line for cards and logs."""
        parts = []
        if self.skip_top:
            parts.append(f"fused ranks 1-{self.skip_top} skipped")
        if self.skip_above_positive:
            parts.append("candidates both BM25 and kNN rank above the best judged positive skipped")
        if self.max_overlap < 1.0:
            parts.append(f"near-duplicates of a positive (word Jaccard >= {self.max_overlap:g}) skipped")
        return "; ".join(parts) or "no filter"


@dataclass
class FilterStats:
    """How many non-relevant candidates each rule of a :class:`NegativePolicy` removed."""

    considered: int = 0
    kept: int = 0
    skipped_top: int = 0
    skipped_above_positive: int = 0
    skipped_duplicate: int = 0

    def add(self, other: FilterStats) -> None:
        self.considered += other.considered
        self.kept += other.kept
        self.skipped_top += other.skipped_top
        self.skipped_above_positive += other.skipped_above_positive
        self.skipped_duplicate += other.skipped_duplicate


def words(text: str) -> frozenset[str]:
    """Lower-cased alphanumeric words of ``text``."""
    return frozenset(_WORD.findall(text.lower()))


def overlap(a: Iterable[str], b: Iterable[str]) -> float:
    """Jaccard similarity of two word sets (0 when both are empty)."""
    sa, sb = set(a), set(b)
    union = len(sa | sb)
    return len(sa & sb) / union if union else 0.0


def positive_ranks(candidates: Sequence[Candidate], relevant: set[str]) -> tuple[float, float] | None:
    """Best (lowest) BM25 and kNN rank among the judged positives in ``candidates``; a list that found
    none of them counts as infinity. None when no positive is among the candidates (then the rule
    "above the positive in both lists" does not apply: there is nothing to be above)."""
    found = [c for c in candidates if c.doc_id in relevant]
    if not found:
        return None
    bm25 = min((c.bm25_rank for c in found if c.bm25_rank is not None), default=INF)
    knn = min((c.knn_rank for c in found if c.knn_rank is not None), default=INF)
    return float(bm25), float(knn)


def filter_negatives(candidates: Sequence[C], relevant: set[str], positive_passages: Sequence[str],
                     policy: NegativePolicy) -> tuple[list[C], FilterStats]:
    """The non-relevant ``candidates`` (in fused order, deduplicated by the caller) that ``policy``
    lets serve as negatives, and how many each rule removed. A candidate removed by several rules is
    counted under the first: top rank, then above-positive, then duplicate."""
    stats = FilterStats()
    ranks = positive_ranks(candidates, relevant) if policy.skip_above_positive else None
    pos_words = [words(p) for p in positive_passages] if policy.max_overlap < 1.0 else []
    kept: list[C] = []
    for rank, cand in enumerate(candidates, start=1):
        if cand.doc_id in relevant:
            continue
        stats.considered += 1
        if rank <= policy.skip_top:
            stats.skipped_top += 1
        elif ranks is not None and _above_both(cand, ranks):
            stats.skipped_above_positive += 1
        elif pos_words and max(overlap(words(cand.text), p) for p in pos_words) >= policy.max_overlap:
            stats.skipped_duplicate += 1
        else:
            kept.append(cand)
    stats.kept = len(kept)
    return kept, stats


def _above_both(cand: Candidate, ranks: tuple[float, float]) -> bool:
    bm25 = INF if cand.bm25_rank is None else cand.bm25_rank
    knn = INF if cand.knn_rank is None else cand.knn_rank
    return bm25 < ranks[0] and knn < ranks[1]
