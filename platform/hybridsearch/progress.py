"""Progress as events for every long workflow: a :data:`ProgressSink` (``None``: nobody listens) gets
:class:`ProgressEvent` s per task (units done of how many, a detail, finished, or a note: a line to keep). Nothing
here draws: the one renderer is :class:`hybridsearch.cli.progress.RichProgress`."""

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
    """A counter for one task that reports every change to ``sink``; finished once ``done`` reaches ``total``."""

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

