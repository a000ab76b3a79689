"""The interface the query layer calls after fusion.

A reranker scores ``(query, passage)`` pairs; higher is more relevant. Implementations raise
:class:`hybridsearch.errors.RerankerError` when they cannot answer; the query layer then keeps
the fused order and says why in the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Reranker(Protocol):
    """Scores passages for one query."""

    name: str

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
