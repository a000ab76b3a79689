"""Run records in ``<prefix>-ingest-runs``: written when a run starts, refreshed by a heartbeat, completed
at the end, and, for runs that died without finishing, marked ``killed`` by the next run.

A run's record says ``running`` from its first moment, with the host, the process id and a heartbeat time
(``heartbeat_at``, every :data:`HEARTBEAT_S` seconds, with the counts so far). Nothing can write a record
for a process that is killed with SIGKILL, loses its machine or its node, so the next run looks at the
records still ``running``: one whose process is gone (same host, no such pid) or whose heartbeat is older
than :data:`LEASE_S` is rewritten as ``killed`` (``ended_at`` = its last heartbeat).

Records are written through :class:`hybridsearch.index.logs.LogWriter`: the index is never created by a write
with guessed mappings (a missing one is created from its spec), and a write that fails says why (a write block
or the disk flood stage as :class:`~hybridsearch.errors.IndexBlocked`, naming the index and the fix). A final
record that cannot be stored is kept in ``<dead_letter_dir>/unrecorded-runs/<run id>.json`` and stored by the
next run on this machine before it looks for dead runs, so a run that finished is never recorded as ``killed``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.errors import HybridSearchError
from hybridsearch.index.logs import LogWriter
from hybridsearch.settings import IngestSettings, Settings

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
        if not es.send(request.index_exists(runs)):
            return []
        es.send(request.refresh(runs))
        hits = es.send(request.search(runs, request.body(query={"term": {"status": "running"}},
                                                         size=1000)))["hits"]["hits"]
    killed = []
    writer = LogWriter(es, settings, "ingest_runs")
    for h in hits:
        if not is_dead(h["_source"], host, at):
            continue
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
    run ids stored. Raises the first write failure (the files stay for the next try)."""
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
    """The ``<prefix>-ingest-runs`` document of one run, kept current while it runs.

    Failures to write it are logged, never raised: the record must not stop an ingest. ``error`` holds the last
    failure (None once a write succeeded again); a final record that cannot be stored is kept in a file
    (:func:`unrecorded_dir`, path in ``unrecorded_path``) for the next run to store.
    """

    def __init__(self, es: EngineClient, settings: Settings, result: IngestResult, lock: threading.Lock) -> None:
        self.es, self.index, self.result, self.lock = es, settings.index.ingest_runs, result, lock
        self.settings = settings
        self.error: HybridSearchError | None = None
        self.unrecorded_path: Path | None = None
        self._writer = LogWriter(es, settings, "ingest_runs")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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

    def start(self) -> list[str]:
        """Store records earlier runs could not, mark dead runs killed, write this run as ``running`` and start the
        heartbeat; returns the ids of the runs marked killed."""
        try:
            store_unrecorded(self.es, self.settings)
        except HybridSearchError as exc:
            log.warning("could not store the final records of earlier ingest runs: %s", exc)
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
        if not self._write(refresh=True):
            self._keep()
