"""The interface the query layer calls after fusion.

A reranker scores ``(query, passage)`` pairs; higher is more relevant. Implementations raise
:class:`hybridsearch.errors.RerankerError` when they cannot answer; the query layer then keeps
the fused order and says why in the result. A reranker may recommend how much of the final order its
scores decide (``blend``: its model's training card); ``HSP_RERANKER__BLEND`` overrides it
(:func:`hybridsearch.rerank.card.effective_blend`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Reranker(Protocol):
    """Scores passages for one query.

    ``blend``: the reranker's recommended share in the final order of the reranked top, from 0 (fused order) to
    1 (reranker order); None when it has no recommendation (then 1 is used unless ``HSP_RERANKER__BLEND`` says).
    """

    name: str

    @property
    def blend(self) -> float | None:
        """The recommended blend, or None (an attribute does as well as a property)."""
        ...

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One score per passage, in the input order. Raises RerankerError."""
        ...


@runtime_checkable
class PairScorer(Protocol):
    """What the reranker service runs: a loadable model scoring flat ``(query, passage)`` pairs."""

    name: str

    def load(self) -> None:
        """Load the model now (blocking). Raises RerankerModelError."""
        ...

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """One score per pair, in input order. Raises RerankerError."""
        ...
