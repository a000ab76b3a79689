"""Progress as events, for every long workflow (ingestion, evaluation, calibration, training): the core counts,
the command line draws.

A workflow takes a :data:`ProgressSink` (``None``: nobody listens) and reports :class:`ProgressEvent` s to it:
per task (``"lists"``, ``"bm25"``, ``"ingest"``, ``"training"``) how many units are done of how many, a short
detail (``"epoch 1.00 loss 0.4132"``), and when it is finished; a :attr:`ProgressEvent.note` is a line meant to
stay visible (an epoch's validation figures). Nothing here draws or imports a display library: the one renderer
is :class:`hybridsearch.cli.progress.RichProgress`, and tests pass a list's ``append``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressEvent:
    """One step of one task: ``done`` of ``total`` units (``total`` None: open-ended)."""

    task: str
    done: int = 0
    total: int | None = None
    detail: str = ""
    finished: bool = False
    note: str | None = None  # a line to keep (printed above the bars), not a count


ProgressSink = Callable[[ProgressEvent], None]


class Task:
    """A counter for one task that reports every change to ``sink`` (nothing when ``sink`` is None).
    Finishes by itself when ``done`` reaches ``total``."""

    def __init__(self, sink: ProgressSink | None, name: str, total: int | None = None) -> None:
        self.sink, self.name, self.total, self.done, self.detail = sink, name, total, 0, ""
        self.finished = False
        self._emit()

    def _emit(self) -> None:
        if self.sink is not None:
            self.sink(ProgressEvent(self.name, self.done, self.total, self.detail, self.finished))

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int | None = None, detail: str | None = None) -> None:
        if done is not None:
            self.done = done
        if detail is not None:
            self.detail = detail
        self.finished = self.total is not None and self.done >= self.total
        self._emit()

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._emit()


def note(sink: ProgressSink | None, task: str, text: str) -> None:
    """Report a line to keep (e.g. an epoch's validation figures)."""
    if sink is not None:
        sink(ProgressEvent(task, note=text))


def tracker(sink: ProgressSink | None) -> Callable[[str, int], Callable[[int], None]]:
    """``(description, total) -> advance(n)`` callbacks, for steps that take that shape."""
    def track(name: str, total: int) -> Callable[[int], None]:
        return Task(sink, name, total).advance
    return track
