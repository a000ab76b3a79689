"""The one progress display of ``hsp``: a bar per task of the :class:`~hybridsearch.progress.ProgressEvent` s a
workflow reports (from any thread), a spinner for a task without a total, notes printed above the bars.
"""

from __future__ import annotations

import threading
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Column

from hybridsearch.cli.output import console as make_console
from hybridsearch.progress import ProgressEvent


class RichProgress(Progress):
    """rich's progress display as a :data:`~hybridsearch.progress.ProgressSink`; disabled, it draws nothing."""

    def __init__(self, console: Console | None = None, *, enabled: bool = True, keep_finished: bool = True,
                 width: int = 14) -> None:
        console = console or make_console(stderr=True)
        # the name is never cut; a narrow terminal gets a shorter bar, and the description wraps under its column;
        # a pipe or a file gets text only (no spinner, no bar of box-drawing characters)
        name = TextColumn(f"{{task.fields[name]:>{width}}}", table_column=Column(no_wrap=True))
        text: list[Any] = [MofNCompleteColumn(), TimeElapsedColumn(),
                           TextColumn("{task.description}", table_column=Column(ratio=1))]
        columns = ([SpinnerColumn(), name, BarColumn(bar_width=40 if console.width >= 120 else 10), *text]
                   if console.is_terminal else [name, *text])
        super().__init__(*columns, console=console, disable=not enabled, expand=True)
        self.keep_finished = keep_finished
        self.by_name: dict[str, Any] = {}
        self.events_lock = threading.Lock()

    def __enter__(self) -> RichProgress:
        self.start()
        return self

    def __call__(self, event: ProgressEvent) -> None:
        if self.disable:
            return
        with self.events_lock:
            if event.note is not None:
                self.console.print(event.note)
                return
            if event.task not in self.by_name:
                self.by_name[event.task] = self.add_task(event.detail, total=event.total, name=event.task)
            task = self.by_name[event.task]
            self.update(task, completed=event.done, total=event.total, description=event.detail)
            if event.finished and not self.keep_finished:
                self.remove_task(task)
                del self.by_name[event.task]
