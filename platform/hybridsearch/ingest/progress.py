"""An ingest run's progress as :class:`~hybridsearch.progress.ProgressEvent` s (task ``ingest``, open-ended):
documents done, and a detail with the unchanged and failed documents, chunks written and chunks/s. Draws
nothing: ``hsp`` renders the events (:mod:`hybridsearch.cli.progress`)."""

from __future__ import annotations

import time
from typing import Any

from hybridsearch.progress import ProgressSink, Task

TASK = "ingest"


class IngestProgress:
    """Turns the run's counts into events on ``sink`` (None: nothing). ``update(result)`` may be called from any
    thread (the writer's); :meth:`finish` once at the end."""

    def __init__(self, sink: ProgressSink | None) -> None:
        self._task = Task(sink, TASK) if sink is not None else None
        self._started = time.perf_counter()

    def update(self, result: Any) -> None:
        if self._task is None:
            return
        elapsed = max(time.perf_counter() - self._started, 1e-6)
        written = result.indexed + result.updated
        self._task.update(result.documents, detail=(
            f"{result.documents:,} docs ({result.documents_skipped:,} unchanged, {result.documents_failed:,} failed) · "
            f"{written:,} chunks written · {written / elapsed:,.1f} chunks/s"))

    def finish(self) -> None:
        if self._task is not None:
            self._task.finish()
