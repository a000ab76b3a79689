"""Reading the card of a trained domain reranker (``card.json``): how the model wants to be served.

``hsp train-reranker`` (:mod:`hybridsearch.training.card`) writes the card next to the model. Serving
reads two values from it: the rerank blend chosen on held-out training queries (``serving.blend``)
and the token length it was trained with (``serving.max_length``).
:class:`~hybridsearch.rerank.local.LocalReranker` reads both (:func:`serving_hints`), so a served model is
used the way it was validated.
"""

from __future__ import annotations

import json
from pathlib import Path

CARD_FILE = "card.json"
KIND = "hybridsearch-domain-reranker"


def valid_blend(value: object) -> float | None:
    """``value`` as a blend weight when it is a number in [0, 1] (not a bool), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
        return float(value)
    return None


def serving_hints(model: str | Path) -> tuple[float | None, int | None]:
    """``(serving.blend, serving.max_length)`` from the card of the model folder ``model``, one read;
    each None when ``model`` is not a folder with a readable card of ours or the value is not valid
    (never raises)."""
    path = Path(model).expanduser() / CARD_FILE
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    serving = card.get("serving") if isinstance(card, dict) and card.get("kind") == KIND else None
    if not isinstance(serving, dict):
        return None, None
    n = serving.get("max_length")
    length = n if isinstance(n, int) and not isinstance(n, bool) and n >= 8 else None
    return valid_blend(serving.get("blend")), length


def effective_blend(setting: float | None, recommended: object) -> tuple[float, str]:
    """The blend a search uses and where it came from: ``setting`` (HSP_RERANKER__BLEND) when set, else
    the reranker's ``recommended`` blend (its card) when a number in [0, 1], else 1 (reranker order)."""
    if setting is not None:
        return setting, "HSP_RERANKER__BLEND"
    card = valid_blend(recommended)
    return (card, "model card") if card is not None else (1.0, "default")
