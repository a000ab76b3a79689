"""Run records in ``<prefix>-ingest-runs``: written when a run starts, refreshed by a heartbeat, completed
at the end, and, for runs that died without finishing, marked ``killed`` by the next run.

A run's record says ``running`` from its first moment, with the host, the process id and a heartbeat time
(``heartbeat_at``, every :data:`HEARTBEAT_S` seconds, with the counts so far). Nothing can write a record
for a process that is killed with SIGKILL, loses its machine or its node, so the next run looks at the
records still ``running``: one whose process is gone (same host, no such pid) or whose heartbeat is older
than :data:`LEASE_S` is rewritten as ``killed`` (``ended_at`` = its last heartbeat).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hybridsearch.engine import EngineClient, engine_errors
from hybridsearch.errors import HybridSearchError
from hybridsearch.settings import Settings

log = logging.getLogger(__name__)

HEARTBEAT_S = 15.0
LEASE_S = 120.0  # a heartbeat older than this means the run is dead, wherever it ran


def now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class IngestResult:
    """What one run did. Document counts are documents; the rest count chunks."""

    run_id: str
    index: str
    source: str
    status: str = "running"  # completed | interrupted | failed; killed (set by a later run)
    shard: str | None = None
    documents: int = 0
    documents_skipped: int = 0
    documents_failed: int = 0
    documents_indexed: int = 0
    chunks: int = 0
    indexed: int = 0
    updated: int = 0
    unchanged: int = 0
    reused: int = 0  # chunks an earlier, stopped run had written (same content): not embedded again
    deleted: int = 0
    failed: int = 0
    retried: int = 0
    seconds: float = 0.0
    chunks_per_second: float = 0.0
    embed_seconds: float = 0.0
    repaired: int = 0  # documents a stopped run had left hidden, made whole and visible by this run
    still_hidden: int = 0  # documents left hidden at the end (not whole: a failed chunk, an interrupted run)
    took_over: list[str] = field(default_factory=list)  # runs that died holding the lease, taken over
    dead_letter_path: str | None = None
    started_at: str = ""
    ended_at: str = ""
    heartbeat_at: str = ""
    host: str = ""
    pid: int = 0
    model: str = ""
    chunker: str = ""

    @property
    def changed_nothing(self) -> bool:
        return (self.indexed == self.updated == self.deleted == self.failed == self.documents_failed
                == self.repaired == 0)

    def summary_doc(self) -> dict[str, Any]:
        """The document stored in ``<prefix>-ingest-runs``."""
        doc = asdict(self)
        doc["@timestamp"] = self.ended_at or self.heartbeat_at or self.started_at
        for key in ("started_at", "ended_at", "heartbeat_at"):  # dates: none yet is null, not ""
            doc[key] = doc[key] or None
        doc["chunker_version"] = doc.pop("chunker")
        doc["chunker"] = self.chunker.split("-", 1)[0]
        return doc


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_dead(record: dict[str, Any], host: str, at: datetime) -> bool:
    """Whether the ``running`` record ``record`` belongs to a run that can no longer finish."""
    beat = record.get("heartbeat_at") or record.get("started_at")
    try:
        last = datetime.fromisoformat(str(beat))
    except ValueError:
        return True
    if at - last > timedelta(seconds=LEASE_S):
        return True
    return record.get("host") == host and not pid_alive(int(record.get("pid") or 0))


def mark_killed(es: EngineClient, settings: Settings) -> list[str]:
    """Rewrite the ``running`` records of dead runs (:func:`is_dead`) as ``killed``; returns their ids."""
    runs, host, at = settings.index.ingest_runs, socket.gethostname(), datetime.now(UTC)
    with engine_errors(f"look for unfinished runs in {runs}"):
        if not es.indices.exists(index=runs):
            return []
        es.indices.refresh(index=runs)
        hits = es.search(index=runs, query={"term": {"status": "running"}}, size=1000)["hits"]["hits"]
    killed = []
    for h in hits:
        if not is_dead(h["_source"], host, at):
            continue
        last = h["_source"].get("heartbeat_at") or h["_source"].get("started_at")
        with engine_errors(f"mark run {h['_id']} killed"):
            es.update(index=runs, id=h["_id"], doc={"status": "killed", "ended_at": last, "@timestamp": last},
                      refresh="wait_for")
        log.warning("ingest run %s (host %s, pid %s) stopped without finishing: recorded as killed",
                    h["_id"], h["_source"].get("host"), h["_source"].get("pid"))
        killed.append(str(h["_id"]))
    return killed


class RunRecord:
    """The ``<prefix>-ingest-runs`` document of one run, kept current while it runs.

    Failures to write it are logged, never raised: the record must not stop an ingest.
    """

    def __init__(self, es: EngineClient, settings: Settings, result: IngestResult, lock: threading.Lock) -> None:
        self.es, self.index, self.result, self.lock = es, settings.index.ingest_runs, result, lock
        self.settings = settings
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self, refresh: bool = False) -> None:
        with self.lock:
            doc = self.result.summary_doc()
        try:
            with engine_errors("store ingest run"):
                self.es.index(index=self.index, id=self.result.run_id, document=doc,
                              refresh="wait_for" if refresh else None)
        except HybridSearchError as exc:
            log.warning("could not record ingest run %s: %s", self.result.run_id, exc)

    def start(self) -> list[str]:
        """Mark dead runs killed, write this run as ``running`` and start the heartbeat; returns the ids of
        the runs marked killed."""
        try:
            killed = mark_killed(self.es, self.settings)
        except HybridSearchError as exc:
            log.warning("could not check for unfinished ingest runs: %s", exc)
            killed = []
        self.result.host, self.result.pid = socket.gethostname(), os.getpid()
        self.result.heartbeat_at = now()
        self._write()
        self._thread = threading.Thread(target=self._beat, name="hsp-heartbeat", daemon=True)
        self._thread.start()
        return killed

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self.lock:
                self.result.heartbeat_at = now()
            self._write()

    def finish(self) -> None:
        """Stop the heartbeat and store the final record (searchable when this returns)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.result.heartbeat_at = now()
        self._write(refresh=True)
