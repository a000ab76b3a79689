"""Stand-in cross-encoders for the reranker service's tests: no model, calls that can be held and timed."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from hybridsearch.settings import RerankerSettings


class HeldScorer:
    """Scores pairs by passage length. Each call sets ``entered``, waits for ``release`` (up to 10 s; set from the
    start unless ``held``), sleeps ``seconds`` and records its number of pairs in ``calls``."""

    name = "held"

    def __init__(self, seconds: float = 0.0, *, held: bool = True) -> None:
        self.seconds = seconds
        self.release = threading.Event()
        if not held:
            self.release.set()
        self.entered = threading.Event()
        self.calls: list[int] = []

    def load(self) -> None:
        return None

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        self.entered.set()
        self.release.wait(10)
        time.sleep(self.seconds)
        self.calls.append(len(pairs))
        return [float(len(p)) for _, p in pairs]


def cfg(**kw: object) -> RerankerSettings:
    """Service settings for tests: CPU, no batching window, ``kw`` over the defaults."""
    return RerankerSettings.model_validate({"device": "cpu", "batch_window_ms": 0, **kw})
