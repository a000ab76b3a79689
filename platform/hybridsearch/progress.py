"""Progress as events: a long workflow reports :class:`ProgressEvent` s to a :data:`ProgressSink` (``None``: nobody
listens). Nothing here draws: the one renderer is :class:`hybridsearch.cli.output.RichProgress`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace


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
        self.sink = sink
        self._emit(ProgressEvent(name, total=total))

    def _emit(self, event: ProgressEvent) -> None:
        self.event = event
        if self.sink is not None:
            self.sink(event)

    def advance(self, n: int = 1) -> None:
        self.update(self.event.done + n)

    def update(self, done: int | None = None, detail: str | None = None) -> None:
        done = self.event.done if done is None else done
        self._emit(replace(self.event, done=done, detail=self.event.detail if detail is None else detail,
                           finished=self.event.total is not None and done >= self.event.total))

    def finish(self) -> None:
        if not self.event.finished:
            self._emit(replace(self.event, finished=True))


def note(sink: ProgressSink | None, task: str, text: str) -> None:
    """Report a line to keep (e.g. an epoch's validation figures)."""
    if sink is not None:
        sink(ProgressEvent(task, note=text))

