"""A rich progress display for ingest runs: documents, chunks and chunks/s, refreshed a few times a second."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


class IngestProgress:
    """Context manager; ``update(result)`` may be called from any thread. Disabled = does nothing."""

    def __init__(self, enabled: bool = True, console: Console | None = None) -> None:
        self.enabled = enabled
        self._progress: Progress | None = None
        self._task: Any = None
        self._started = time.perf_counter()
        self._console = console or Console(stderr=True)

    def __enter__(self) -> IngestProgress:
        if self.enabled:
            self._progress = Progress(SpinnerColumn(), TextColumn("[bold]ingest[/]"), TextColumn("{task.description}"),
                                      TimeElapsedColumn(), console=self._console, refresh_per_second=4)
            self._progress.start()
            self._task = self._progress.add_task("starting…", total=None)
            self._started = time.perf_counter()
        return self

    def update(self, result: Any) -> None:
        if self._progress is None:
            return
        elapsed = max(time.perf_counter() - self._started, 1e-6)
        written = result.indexed + result.updated
        self._progress.update(self._task, description=(
            f"{result.documents:,} docs ({result.documents_skipped:,} unchanged, {result.documents_failed:,} failed) · "
            f"{written:,} chunks written · {written / elapsed:,.1f} chunks/s"))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
