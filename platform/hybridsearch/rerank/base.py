"""What a reranker is: the interface the query layer calls after fusion, the order of its scores, and what a
trained model's ``card.json`` says about serving it (``serving.blend`` and ``serving.max_length``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

CARD_FILE = "card.json"
KIND = "hybridsearch-domain-reranker"


class Reranker(Protocol):
    """Scores passages for one query; ``blend``: its recommended share in the final order (0 to 1) or None."""

    name: str

    @property
    def blend(self) -> float | None: ...

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One score per passage (higher is more relevant), in the input order. Raises RerankerError."""


class PairScorer(Protocol):
    """What the reranker service runs: a loadable model scoring flat ``(query, passage)`` pairs."""

    name: str

    def load(self) -> None:
        """Load the model now (blocking). Raises RerankerModelError."""

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """One score per pair, in input order. Raises RerankerError."""


def order_by_score(scores: Sequence[float], top_n: int | None = None) -> list[int]:
    """Indices of ``scores`` best first (ties keep the input order), at most ``top_n``."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return order if top_n is None else order[: max(top_n, 0)]


def valid_blend(value: object) -> float | None:
    """``value`` as a blend weight when it is a number in [0, 1] (not a bool), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
        return float(value)
    return None


def serving_hints(model: str | Path) -> tuple[float | None, int | None]:
    """``(serving.blend, serving.max_length)`` from the card in folder ``model``, each None where absent or invalid."""
    try:
        card = json.loads((Path(model).expanduser() / CARD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    serving = card.get("serving") if isinstance(card, dict) and card.get("kind") == KIND else None
    if not isinstance(serving, dict):
        return None, None
    n = serving.get("max_length")
    length = n if isinstance(n, int) and not isinstance(n, bool) and n >= 8 else None
    return valid_blend(serving.get("blend")), length


def effective_blend(setting: float | None, recommended: object) -> tuple[float, str]:
    """The blend a search uses and where it came from: ``setting``, else the card's ``recommended`` one, else 1."""
    if setting is not None:
        return setting, "HSP_RERANKER__BLEND"
    card = valid_blend(recommended)
    return (card, "model card") if card is not None else (1.0, "default")
