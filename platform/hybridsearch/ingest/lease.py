"""One ingest run's hold on a prefix: its lease and the documents it hides (``<prefix>-ingest-state``: ``leases``,
``holds`` per run and ``unfinished``, and ``hidden``, what readers exclude; every change a compare-and-set through
the write alias), and its record (``<prefix>-ingest-runs``). The lease's one heartbeat renews both; :func:`is_dead`
is the one dead-run rule: the next run takes a dead lease over, adopts its holds and records the dead run ``killed``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from hybridsearch.engine import API_ERRORS, EngineClient, engine_errors, request, status_of
from hybridsearch.errors import ClusterError, HybridSearchError, IndexMismatch, IndexNotFound, IngestLocked, LeaseLost
from hybridsearch.index.logs import LogWriter
from hybridsearch.index.spec import write_alias_name
from hybridsearch.index.visibility import HIDDEN_PATH, STATE_ID
from hybridsearch.settings import IndexSettings, Settings

log = logging.getLogger(__name__)

HEARTBEAT_S = 15.0
LEASE_S = 120.0  # a heartbeat older than this means the run is dead, wherever it ran

UNFINISHED = "unfinished"  # the hold of documents whose run stopped before they were whole
WAIT_POLL_S = 2.0
CAS_TRIES = 100

Shard = tuple[int, int] | None
#: run ids whose lease this process holds: another lease of this host and pid is dead although the process lives
_HELD_HERE: set[str] = set()


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


def is_dead(lease: dict[str, Any], host: str, at: datetime) -> bool:
    """The one dead-run rule: the heartbeat of ``lease`` (a state-document entry) is older than :data:`LEASE_S`,
    or it ran on this host and its process is gone."""
    beat = lease.get("heartbeat_at") or lease.get("started_at")
    try:
        last = datetime.fromisoformat(str(beat))
    except ValueError:
        return True
    if at - last > timedelta(seconds=LEASE_S):
        return True
    if lease.get("host") != host:
        return False
    pid = int(lease.get("pid") or 0)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # it lives, as another user's
        pass
    return pid <= 0


def shard_of(doc_id: str, n: int) -> int:
    """Which of ``n`` shards ``doc_id`` falls in: the same on every machine and every run."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "big") % n


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` → ``(i, N)``; raises ValueError unless 0 <= i < N."""
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise ValueError(f"shard {text!r} is not i/N, e.g. 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard {text!r}: need 0 <= i < N")
    return i, n


def stored_shard(text: object) -> Shard:
    """The shard a lease records (None: every document, or an unreadable value, which overlaps everything)."""
    try:
        return parse_shard(text) if isinstance(text, str) else None
    except ValueError:
        return None


def overlaps(a: Shard, b: Shard) -> bool:
    """Whether runs over shards ``a`` and ``b`` (None: every document) may write the same document."""
    return a is None or b is None or a[1] != b[1] or a[0] == b[0]


def owns(shard: Shard, doc_id: str) -> bool:
    return shard is None or shard_of(doc_id, shard[1]) == shard[0]


@dataclass
class State:
    """The state document's content, as read."""

    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    holds: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, source: dict[str, Any] | None) -> State:
        src = source or {}
        return cls(dict(src.get("leases") or {}), {k: list(v) for k, v in (src.get("holds") or {}).items()})

    def doc(self) -> dict[str, Any]:
        holds = {k: sorted(set(v)) for k, v in self.holds.items() if v}
        hidden = sorted({d for v in holds.values() for d in v})
        return {"leases": self.leases, "holds": holds, HIDDEN_PATH: hidden, "updated_at": now()}

    def rehold(self, hold: str, ids: set[str], add: bool) -> bool:
        """Add ``ids`` to ``hold`` (or drop them from it); False when that changes nothing."""
        have = set(self.holds.get(hold, []))
        new = have | ids if add else have - ids
        self.holds[hold] = sorted(new)
        return new != have


class _Conflict(Exception):
    """Another writer changed the state document between this read and this write."""


def change_state(es: EngineClient, cfg: IndexSettings, what: str, mutate: Callable[[State], bool]) -> State:
    """Read the state document, let ``mutate`` change it (False: nothing to write) and write it back if nobody wrote
    meanwhile (else read again). Raises IndexNotFound (the state index is gone), IndexMismatch (no write alias)."""
    index, alias = cfg.ingest_state, write_alias_name(cfg, "ingest_state")

    def once() -> State:
        with engine_errors(f"read {index}"):
            got = es.send(request.get_doc(index, STATE_ID))
        state = State.of(got["_source"] if got else None)
        if not mutate(state):
            return state
        seq = {} if got is None else {"if_seq_no": got["_seq_no"], "if_primary_term": got["_primary_term"]}
        with engine_errors(f"{what} in {index}"):
            try:
                es.send(request.put_doc(alias, STATE_ID, state.doc(), op_type=None if seq else "create",
                                        require_alias=True, **seq))
                return state
            except API_ERRORS as exc:
                if status_of(exc) != 409:
                    raise
        raise _Conflict(what)

    tries = Retrying(stop=stop_after_attempt(CAS_TRIES), wait=wait_random_exponential(multiplier=0.01, max=0.5),
                     retry=retry_if_exception_type(_Conflict), reraise=True)
    try:
        return tries(once)
    except _Conflict:
        raise ClusterError(f"could not {what} in {index}: {CAS_TRIES} concurrent updates in a row") from None
    except IndexNotFound:
        with engine_errors(f"read {index}"):
            if not es.send(request.index_exists(index)):
                raise
        raise IndexMismatch(f"the ingest state index {index} has no write alias {alias}", index=index,
                            fix="Run `hsp ingest` (or `hsp index create`) for this prefix once: it adds the alias"
                            ) from None


class Lease:
    """One run's lease on a prefix and the documents it hides (thread-safe; :meth:`release` when done). ``on_beat``
    and ``on_lost`` run in the heartbeat thread; :meth:`acquire` fills ``dead_runs`` (taken over) and ``adopted``."""

    def __init__(self, es: EngineClient, cfg: IndexSettings, run_id: str, shard: Shard = None) -> None:
        self.es, self.cfg, self.index, self.run_id, self.shard = es, cfg, cfg.ingest_state, run_id, shard
        self.on_lost: Callable[[LeaseLost], None] | None = None
        self.on_beat: Callable[[], None] | None = None
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.started_at = now()
        self.dead_runs: list[str] = []
        self.adopted: set[str] = set()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.held = False
        self.lost: LeaseLost | None = None

    def _change(self, what: str, mutate: Callable[[State], bool]) -> State:
        try:
            return change_state(self.es, self.cfg, what, mutate)
        except IndexNotFound as exc:
            if not self.held:
                raise
            raise self._lose(f"the ingest state index {self.index} was deleted while run {self.run_id} held its "
                             "lease: its documents in flight can no longer be hidden") from exc

    def _lose(self, problem: str) -> LeaseLost:
        if self.lost is None:
            self.lost = LeaseLost(problem, fix="Run the same ingest again: it takes the lease anew and rewrites "
                                  "the documents this run left unfinished")
        return self.lost

    def _mine(self, state: State) -> dict[str, Any]:
        lease = state.leases.get(self.run_id)
        if lease is None:
            raise self._lose(f"run {self.run_id} no longer holds its ingest lease on {self.index} (another run "
                             "took it over after its heartbeat stopped, or the state document was deleted)")
        return lease

    def acquire(self, wait_s: float = 0.0) -> None:
        """Take the lease (waiting up to ``wait_s`` seconds for a colliding live run), taking over dead runs'
        leases and adopting their holds in this run's shard, and start the heartbeat. Raises IngestLocked."""
        deadline = time.monotonic() + wait_s
        blocker: list[tuple[str, dict[str, Any]]] = []

        def take(state: State) -> bool:
            self.dead_runs.clear()
            blocker.clear()
            at, host = datetime.now(UTC), socket.gethostname()
            for run, lease in list(state.leases.items()):
                if is_dead(lease, host, at) or (lease.get("host") == host and lease.get("pid") == self.pid
                                                and run not in _HELD_HERE):
                    del state.leases[run]
                    self.dead_runs.append(run)
                    state.holds.setdefault(UNFINISHED, []).extend(state.holds.pop(run, []))
                elif overlaps(self.shard, stored_shard(lease.get("shard"))):
                    blocker.append((run, lease))
                    return False
            unfinished = state.holds.get(UNFINISHED, [])
            self.adopted = {d for d in unfinished if owns(self.shard, d)}
            state.holds[UNFINISHED] = [d for d in unfinished if d not in self.adopted]
            state.holds[self.run_id] = sorted(self.adopted)
            state.leases[self.run_id] = {"shard": f"{self.shard[0]}/{self.shard[1]}" if self.shard else None,
                                         "host": self.host, "pid": self.pid, "started_at": self.started_at,
                                         "heartbeat_at": now()}
            return True

        while True:
            self._change("take the ingest lease", take)
            if not blocker:
                break
            if time.monotonic() + WAIT_POLL_S > deadline:
                raise _locked(self.index, *blocker[0])
            time.sleep(WAIT_POLL_S)
        self.held = True
        _HELD_HERE.add(self.run_id)
        for run in self.dead_runs:
            log.warning("took over the ingest lease of run %s, which stopped without finishing", run)
        self._beat = threading.Thread(target=self._heartbeat, name="hsp-heartbeat", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        def beat(state: State) -> bool:
            self._mine(state)["heartbeat_at"] = now()
            return True

        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._change("renew the ingest lease", beat)
            except LeaseLost as exc:
                log.error("%s", exc)
                if self.on_lost is not None:
                    self.on_lost(exc)
                return
            except ClusterError as exc:  # the next beat tries again; the lease lasts LEASE_S
                log.warning("could not renew the ingest lease: %s", exc)
            if self.on_beat is not None:
                self.on_beat()

    def check(self) -> None:
        """Raise LeaseLost unless this run still holds its lease (one real-time read of the state document)."""
        if self.lost is not None:
            raise self.lost
        self._change("check the ingest lease", lambda state: self._mine(state) is None)

    def release(self) -> list[str]:
        """Give the lease up; returns the documents still held (not whole), which move to the ``unfinished`` hold
        for the next run to adopt. A lease already lost is left as it is."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        _HELD_HERE.discard(self.run_id)  # released or not, no run of this process holds it any more
        left: list[str] = []
        if not self.held:
            return left

        def drop(state: State) -> bool:
            self._mine(state)
            left[:] = state.holds.pop(self.run_id, [])
            state.holds.setdefault(UNFINISHED, []).extend(left)
            state.leases.pop(self.run_id, None)
            return True

        try:
            self._change("release the ingest lease", drop)
        except LeaseLost:
            return []
        finally:
            self.held = False
        return sorted(set(left))

    def hide(self, doc_ids: Iterable[str], add: bool = True) -> None:
        """Hide ``doc_ids`` from every reader (before the first of their chunks is written), or show them again
        with ``add=False`` (every chunk written, the index refreshed). Raises LeaseLost."""
        ids = set(doc_ids)
        if ids:
            self._change("hide documents being written" if add else "show written documents",
                         lambda state: self._mine(state) is not None and state.rehold(self.run_id, ids, add))

    def show(self, doc_ids: Iterable[str]) -> None:
        """Make ``doc_ids`` visible again. Raises LeaseLost."""
        self.hide(doc_ids, add=False)


def hidden_documents(es: EngineClient, state_index: str) -> dict[str, list[str]]:
    """The holds of the prefix (``{run id or "unfinished": doc ids}``); ``{}`` without a state document."""
    with engine_errors(f"read {state_index}"):
        if not es.send(request.index_exists(state_index)):
            return {}
        got = es.send(request.get_doc(state_index, STATE_ID))
    return {k: v for k, v in State.of(got["_source"] if got else None).holds.items() if v}


def forget_documents(es: EngineClient, cfg: IndexSettings, doc_ids: Iterable[str]) -> None:
    """Drop ``doc_ids`` from the ``unfinished`` hold (their chunks were deleted: nothing is left to hide)."""
    ids = set(doc_ids)
    with engine_errors(f"read {cfg.ingest_state}"):
        if not ids or not es.send(request.index_exists(cfg.ingest_state)):
            return
    change_state(es, cfg, "forget deleted documents", lambda state: state.rehold(UNFINISHED, ids, False))


def _locked(index: str, run: str, lease: dict[str, Any]) -> IngestLocked:
    try:
        age = (datetime.now(UTC) - datetime.fromisoformat(str(lease.get("heartbeat_at")))).total_seconds()
    except ValueError:
        age = float("nan")
    shard = lease.get("shard")
    where = f"host {lease.get('host')}, pid {lease.get('pid')}" + (f", shard {shard}" if shard else "")
    return IngestLocked(
        f"prefix {index.removesuffix('-ingest-state')} is being ingested by run {run} ({where}, started "
        f"{lease.get('started_at')}, last heartbeat {age:.0f} s ago)",
        fix="Wait for it to finish (hsp ingest --wait SECONDS waits), or give each worker its own --shard i/N",
        holder=run, host=lease.get("host"), pid=lease.get("pid"), shard=shard, heartbeat_age_s=round(age, 1))


class RunRecord:
    """The ``<prefix>-ingest-runs`` document of one run, kept current by :meth:`beat`. Write failures are logged,
    never raised (``error`` holds the last); a final record not stored is kept in ``unrecorded_path``."""

    def __init__(self, es: EngineClient, settings: Settings, result: IngestResult, lock: threading.Lock) -> None:
        self.es, self.result, self.lock = es, result, lock
        self.index = settings.index.ingest_runs
        self.error: HybridSearchError | None = None
        self.unrecorded_path: Path | None = None
        self.unrecorded = Path(settings.ingest.dead_letter_dir) / "unrecorded-runs"  # final records not stored yet
        self._writer = LogWriter(es, settings, "ingest_runs")
        self._finished = threading.Event()

    def _store(self, run_id: str, doc: dict[str, Any], op_type: str = "index") -> None:
        done = self._writer.write([(run_id, doc)], op_type=op_type, refresh="wait_for")
        if done.error is not None:
            raise done.error

    def _store_unrecorded(self) -> None:
        """Store the final records kept in ``unrecorded`` (oldest first) and remove their files."""
        for path in sorted(self.unrecorded.glob("*.json"), key=lambda p: p.stat().st_mtime):
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                log.warning("unreadable unrecorded run record %s: %s", path, exc)
                continue
            run_id = str(doc.get("run_id") or path.stem)
            self._store(run_id, doc)
            path.unlink(missing_ok=True)
            log.info("stored the final record of ingest run %s (%s), kept in %s", run_id, doc.get("status"), path)

    def _mark_killed(self) -> None:
        """Rewrite the records of the dead runs this one took over that still say ``running`` as ``killed``."""
        run_ids = self.result.took_over
        with engine_errors(f"look for unfinished runs in {self.index}"):
            if not run_ids or not self.es.send(request.index_exists(self.index)):
                return
            self.es.send(request.refresh(self.index))
            hits = self.es.send(request.search(self.index, request.body(
                query={"bool": {"filter": [{"term": {"status": "running"}}, {"terms": {"run_id": run_ids}}]}},
                size=len(run_ids))))["hits"]["hits"]
        for h in hits:
            last = h["_source"].get("heartbeat_at") or h["_source"].get("started_at")
            self._store(str(h["_id"]), {"status": "killed", "ended_at": last, "@timestamp": last}, op_type="update")
            log.warning("ingest run %s (host %s, pid %s) stopped without finishing: recorded as killed",
                        h["_id"], h["_source"].get("host"), h["_source"].get("pid"))

    def start(self) -> None:
        """Store what earlier runs could not, record the runs taken over killed and write this one ``running``."""
        for what, step in (("store the final records of earlier ingest runs", self._store_unrecorded),
                           ("record the ingest runs taken over as killed", self._mark_killed)):
            try:
                step()
            except HybridSearchError as exc:
                log.warning("could not %s: %s", what, exc)
        self.result.host, self.result.pid = socket.gethostname(), os.getpid()
        self.beat()

    def beat(self) -> None:
        """Write the record with the counts so far and the time (nothing once it is finished)."""
        if not self._finished.is_set():
            self._write(refresh=False)

    def _write(self, refresh: bool) -> bool:
        with self.lock:
            self.result.heartbeat_at = now()
            doc = self.result.summary_doc()
        done = self._writer.write([(self.result.run_id, doc)], op_type="index", refresh="wait_for" if refresh else None)
        if done.error is None:
            self.error = None
            return True
        if self.error is None or str(self.error) != str(done.error):  # once per kind of failure, not every beat
            log.warning("could not record ingest run %s in %s: %s", self.result.run_id, self.index, done.error)
        self.error = done.error
        return False

    def finish(self) -> None:
        """Store the final record (searchable on return); one not stored is kept in a file for the next run."""
        self._finished.set()
        if self._write(refresh=True):
            return
        path = self.unrecorded / f"{self.result.run_id}.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with self.lock:
                path.write_text(json.dumps(self.result.summary_doc(), default=str), encoding="utf-8")
        except OSError as exc:
            log.warning("could not keep the final record of ingest run %s in %s either: %s", self.result.run_id,
                        path, exc)
            return
        self.unrecorded_path = path
        log.warning("ingest run %s ended %s but its record in %s still says running; the record is kept in %s and "
                    "stored by the next `hsp ingest` of this prefix on this machine", self.result.run_id,
                    self.result.status, self.index, path)
