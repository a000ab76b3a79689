"""Asynchronous query log: one document per search, written by a background thread for Kibana.

``submit`` never blocks the search: documents go into a bounded queue, and when it is full they
are dropped and counted (``dropped``). A daemon thread bulk-writes batches to
``<prefix>-query-log`` (creating that index with its mappings first when missing and allowed). ``flush`` waits until
everything queued has been written; ``close`` flushes and stops the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from hybridsearch.access import require_privileges
from hybridsearch.engine import EngineClient, engine_errors
from hybridsearch.indices import create_index, index_body
from hybridsearch.settings import Settings

log = logging.getLogger(__name__)
_STOP = object()


class QueryLogger:
    """Background writer of query-log documents (see the module docstring)."""

    def __init__(self, es: EngineClient, settings: Settings, *, max_queue: int = 10_000, batch: int = 500) -> None:
        self.es = es
        self.settings = settings
        self.index = settings.index.query_log
        self.batch = batch
        self.dropped = 0
        self.written = 0
        self.failed = 0
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max_queue)
        self._index_ready = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="hsp-query-log", daemon=True)
        self._thread.start()

    def submit(self, doc: dict[str, Any]) -> bool:
        """Queue ``doc`` without waiting; False (and ``dropped`` + 1) when the queue is full or closed."""
        if self._closed:
            self.dropped += 1
            return False
        try:
            self._queue.put_nowait(doc)
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every queued document has been handled; False when ``timeout`` passed first."""
        done = threading.Event()

        def waiter() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=waiter, daemon=True).start()
        return done.wait(timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """Flush and stop the writer thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            log.warning("query log queue still full at close; %d documents not written", self._queue.qsize())
            return
        self._thread.join(timeout)

    def _ensure_index(self) -> None:
        """Create the query-log index with its mappings when it is missing (never let a write auto-create it
        with guessed mappings); PermissionDenied when these credentials may not."""
        if self._index_ready:
            return
        with engine_errors(f"check {self.index}"):
            if not self.es.indices.exists(index=self.index):
                require_privileges(self.es, [self.index], ("create_index",), f"create the query log {self.index}")
                create_index(self.es, self.index, index_body("query_log", self.settings, self.es.dialect))
        self._index_ready = True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            docs: list[object] = [item]
            while len(docs) < self.batch:
                try:
                    docs.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(d is _STOP for d in docs)
            self._write([d for d in docs if isinstance(d, dict)])
            for _ in docs:
                self._queue.task_done()
            if stop:
                return

    def _write(self, docs: list[dict[str, Any]]) -> None:
        if not docs:
            return
        try:
            self._ensure_index()
            # op_type create: enough for a role granted only create_doc on its query log (append-only)
            actions = ({"_op_type": "create", "_index": self.index, "_source": d} for d in docs)
            ok, errors = self.es.bulk(actions, raise_on_error=False, raise_on_exception=False, stats_only=True)
            self.written += int(ok)
            self.failed += int(errors) if isinstance(errors, int) else len(errors)
        except Exception as exc:  # noqa: BLE001 - logging must never break searching
            self.failed += len(docs)
            log.warning("query log: could not write %d documents to %s: %s", len(docs), self.index, exc)
