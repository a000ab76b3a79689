"""The query log: one document per search, queued without blocking it (dropped and counted when the queue is full)
and bulk-written to ``<prefix>-query-log`` by a daemon thread; what failed, and why: ``failed``, ``last_error``."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import queue
import threading
from datetime import UTC, datetime
from typing import Any

from hybridsearch.engine import Sender
from hybridsearch.errors import HybridSearchError
from hybridsearch.index.logs import LogWriter
from hybridsearch.query.build import Plan
from hybridsearch.query.results import SearchResult
from hybridsearch.settings import Settings

log = logging.getLogger(__name__)
_STOP = object()


def query_hash(text: str) -> str:
    """SHA-256 of the searched query text, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def log_doc(p: Plan, result: SearchResult, *, redact: bool) -> dict[str, Any]:
    """The query-log document for one answered search (query text omitted when ``redact``)."""
    doc: dict[str, Any] = {
        "@timestamp": datetime.now(UTC).isoformat(), "query_hash": query_hash(p.query),
        **result.model_dump(include={"mode", "index", "k", "reranked"}), "hits": len(result.hits),
        "zero_hits": not result.hits, "top_ids": [h.doc_id for h in result.hits[:10]],
        "latency_ms": {name.removesuffix("_ms"): ms for name, ms in result.timings.model_dump().items()},
    }
    optional = {"query": None if redact else p.query, "tenant": p.tenant, "filters": p.filter_clause,
                "rerank_reason": result.rerank_reason or None}
    return doc | {name: value for name, value in optional.items() if value is not None}


class QueryLogger:
    """Background writer of query-log documents (see the module docstring)."""

    def __init__(self, es: Sender, settings: Settings, *, max_queue: int = 10_000, batch: int = 500) -> None:
        self.index = settings.index.query_log
        self.batch = batch
        self.dropped = self.written = self.failed = 0
        self.last_error: HybridSearchError | None = None  # why the last failed batch failed
        self._writer = LogWriter(es, settings, "query_log")
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max_queue)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="hsp-query-log", daemon=True)
        self._thread.start()

    def submit(self, doc: dict[str, Any]) -> bool:
        """Queue ``doc`` without waiting; False (and ``dropped`` + 1) when the queue is full or closed."""
        with contextlib.suppress(queue.Full):
            if not self._closed:
                self._queue.put_nowait(doc)
                return True
        self.dropped += 1
        return False

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every queued document has been handled; False when ``timeout`` passed first."""
        waiter = threading.Thread(target=self._queue.join, daemon=True)
        waiter.start()
        waiter.join(timeout)
        return not waiter.is_alive()

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
            # op_type create: enough for a role granted only create_doc on its query log (append-only)
            result = self._writer.write([(None, d) for d in docs], op_type="create")
        except Exception as exc:  # noqa: BLE001 - logging must never break searching
            self.failed += len(docs)
            log.warning("query log: could not write %d documents to %s: %s", len(docs), self.index,
                        getattr(exc, "problem", None) or exc)
            return
        self.written += result.written
        self.failed += result.failed
        if result.error is not None:
            self.last_error = result.error
            log.warning("query log: %d of %d documents not written to %s: %s", result.failed, len(docs), self.index,
                        result.error.problem or result.error)
