"""Run records in ``<prefix>-ingest-runs``: written ``running`` when a run starts, refreshed by its lease's
heartbeat, completed at the end; a run that died without finishing is marked ``killed`` by the run that takes its
lease over. Records go through :class:`hybridsearch.index.logs.LogWriter` (never a guessed mapping); a final record
that cannot be stored is kept in ``<dead_letter_dir>/unrecorded-runs/<run id>.json`` and stored by the next run on
this machine before it looks for dead runs, so a run that finished is never recorded as ``killed``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.errors import HybridSearchError
from hybridsearch.index.logs import LogWriter
from hybridsearch.settings import IngestSettings, Settings

log = logging.getLogger(__name__)


def now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class IngestResult:
    """What one run did. Document counts are documents; the rest count chunks."""

    run_id: str
    index: str
    source: str
    status: str = "running"  # completed | interrupted | failed | lease_lost; killed (set by a later run)
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
    documents_deleted: int = 0  # documents a sync deleted: its source no longer yields them
    sync_withheld: str | None = None  # why a sync deleted nothing (the source was not read whole, or too much)
    failed: int = 0
    retried: int = 0
    seconds: float = 0.0
    chunks_per_second: float = 0.0
    embed_seconds: float = 0.0
    titles_cut: int = 0  # documents whose title was cut for embedding (longer than its share of the window)
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
        return (self.indexed == self.updated == self.deleted == self.documents_deleted == self.failed
                == self.documents_failed == self.repaired == 0)

    def summary_doc(self) -> dict[str, Any]:
        """The document stored in ``<prefix>-ingest-runs``."""
        doc = asdict(self)
        doc["@timestamp"] = self.ended_at or self.heartbeat_at or self.started_at
        for key in ("started_at", "ended_at", "heartbeat_at"):  # dates: none yet is null, not ""
            doc[key] = doc[key] or None
        doc["chunker_version"] = doc.pop("chunker")
        doc["chunker"] = self.chunker.split("-", 1)[0]
        return doc


def mark_killed(es: EngineClient, settings: Settings, run_ids: list[str]) -> list[str]:
    """Rewrite the records of ``run_ids`` (dead runs taken over) that still say ``running`` as ``killed``; returns
    their ids."""
    runs = settings.index.ingest_runs
    if not run_ids:
        return []
    with engine_errors(f"look for unfinished runs in {runs}"):
        if not es.send(request.index_exists(runs)):
            return []
        es.send(request.refresh(runs))
        hits = es.send(request.search(runs, request.body(
            query={"bool": {"filter": [{"term": {"status": "running"}}, {"terms": {"run_id": run_ids}}]}},
            size=len(run_ids))))["hits"]["hits"]
    killed = []
    writer = LogWriter(es, settings, "ingest_runs")
    for h in hits:
        last = h["_source"].get("heartbeat_at") or h["_source"].get("started_at")
        done = writer.write([(str(h["_id"]), {"status": "killed", "ended_at": last, "@timestamp": last})],
                            op_type="update", refresh="wait_for")
        if done.error is not None:
            raise done.error
        log.warning("ingest run %s (host %s, pid %s) stopped without finishing: recorded as killed",
                    h["_id"], h["_source"].get("host"), h["_source"].get("pid"))
        killed.append(str(h["_id"]))
    return killed


def unrecorded_dir(cfg: IngestSettings) -> Path:
    """Where final run records that could not be stored wait for the next run: ``<dead_letter_dir>/unrecorded-runs``."""
    return Path(cfg.dead_letter_dir) / "unrecorded-runs"


def store_unrecorded(es: EngineClient, settings: Settings) -> list[str]:
    """Store the final records kept in :func:`unrecorded_dir` (oldest first) and remove their files; returns the
    run ids stored. Raises the first write failure."""
    folder = unrecorded_dir(settings.ingest)
    if not folder.is_dir():
        return []
    writer, stored = LogWriter(es, settings, "ingest_runs"), []
    for path in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("unreadable unrecorded run record %s: %s", path, exc)
            continue
        run_id = str(doc.get("run_id") or path.stem)
        done = writer.write([(run_id, doc)], op_type="index", refresh="wait_for")
        if done.error is not None:
            raise done.error
        path.unlink(missing_ok=True)
        log.info("stored the final record of ingest run %s (%s), kept in %s", run_id, doc.get("status"), path)
        stored.append(run_id)
    return stored


class RunRecord:
    """The ``<prefix>-ingest-runs`` document of one run, kept current by :meth:`beat`. Write failures are logged,
    never raised (``error`` holds the last); a final record not stored is kept in ``unrecorded_path``."""

    def __init__(self, es: EngineClient, settings: Settings, result: IngestResult, lock: threading.Lock) -> None:
        self.es, self.index, self.result, self.lock = es, settings.index.ingest_runs, result, lock
        self.settings = settings
        self.error: HybridSearchError | None = None
        self.unrecorded_path: Path | None = None
        self._writer = LogWriter(es, settings, "ingest_runs")
        self._finished = threading.Event()

    def _write(self, refresh: bool = False) -> bool:
        with self.lock:
            doc = self.result.summary_doc()
        done = self._writer.write([(self.result.run_id, doc)], op_type="index", refresh="wait_for" if refresh else None)
        if done.error is None:
            self.error = None
            return True
        if self.error is None or str(self.error) != str(done.error):  # once per kind of failure, not every beat
            log.warning("could not record ingest run %s in %s: %s", self.result.run_id, self.index, done.error)
        self.error = done.error
        return False

    def _keep(self) -> None:
        """Keep the final record in a file for the next run (:func:`store_unrecorded`)."""
        with self.lock:
            doc = self.result.summary_doc()
        path = unrecorded_dir(self.settings.ingest) / f"{self.result.run_id}.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, default=str), encoding="utf-8")
        except OSError as exc:
            log.warning("could not keep the final record of ingest run %s in %s either: %s", self.result.run_id,
                        path, exc)
            return
        self.unrecorded_path = path
        log.warning("ingest run %s ended %s but its record in %s still says running; the record is kept in %s and "
                    "stored by the next `hsp ingest` of this prefix on this machine", self.result.run_id,
                    self.result.status, self.index, path)

    def start(self, took_over: list[str] | None = None) -> list[str]:
        """Store records earlier runs could not, mark ``took_over`` killed and write this run as ``running``;
        returns the ids marked killed."""
        try:
            store_unrecorded(self.es, self.settings)
        except HybridSearchError as exc:
            log.warning("could not store the final records of earlier ingest runs: %s", exc)
        try:
            killed = mark_killed(self.es, self.settings, took_over or [])
        except HybridSearchError as exc:
            log.warning("could not record the ingest runs taken over as killed: %s", exc)
            killed = []
        self.result.host, self.result.pid = socket.gethostname(), os.getpid()
        self.beat()
        return killed

    def beat(self) -> None:
        """Write the record with the counts so far and the time (nothing once it is finished)."""
        if self._finished.is_set():
            return
        with self.lock:
            self.result.heartbeat_at = now()
        self._write()

    def finish(self) -> None:
        """Store the final record (searchable when this returns)."""
        self._finished.set()
        self.result.heartbeat_at = now()
        if not self._write(refresh=True):
            self._keep()
