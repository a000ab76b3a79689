"""The prefix's ingest lease and the documents a run hides while it writes them: one state document.

``<prefix>-ingest-state`` holds one document (:data:`~hybridsearch.index.visibility.STATE_ID`)::

    {"leases":  {"<run id>": {"shard": "0/4" | null, "host": ..., "pid": ..., "started_at": ..., "heartbeat_at": ...}},
     "holds":   {"<run id>": [doc ids being written], "unfinished": [doc ids a stopped run left half written]},
     "hidden":  [every doc id of every hold]}        <- what readers exclude (:mod:`hybridsearch.index.visibility`)

Every change is a compare-and-set (``if_seq_no``/``if_primary_term``, retried on 409) through the write alias
``<prefix>-write-ingest-state`` with ``require_alias``, so no write creates a deleted index. Two live runs collide
when their shards overlap (:func:`overlaps`); the holder's one heartbeat thread renews ``heartbeat_at`` and
refreshes the run's record; :func:`is_dead` is the one dead-run rule, and the next run takes a dead lease over and
adopts its holds. A run checks its lease before each batch and stops with LeaseLost once it is gone.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from hybridsearch.engine import API_ERRORS, EngineClient, engine_errors, request, status_of
from hybridsearch.errors import ClusterError, IndexMismatch, IndexNotFound, IngestLocked, LeaseLost
from hybridsearch.index.spec import write_alias_name
from hybridsearch.index.visibility import HIDDEN_PATH, STATE_ID
from hybridsearch.ingest.runs import now
from hybridsearch.settings import IndexSettings

log = logging.getLogger(__name__)

HEARTBEAT_S = 15.0
LEASE_S = 120.0  # a heartbeat older than this means the run is dead, wherever it ran

UNFINISHED = "unfinished"  # the hold of documents whose run stopped before they were whole
WAIT_POLL_S = 2.0
CAS_TRIES = 100

Shard = tuple[int, int] | None
#: run ids whose lease this process holds: a lease of this host and pid that is not here was left by a run of
#: this process that could not release it (the cluster went away), and is dead although the process lives
_HELD_HERE: set[str] = set()


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
    return lease.get("host") == host and not pid_alive(int(lease.get("pid") or 0))


def shard_of(doc_id: str, n: int) -> int:
    """Which of ``n`` shards ``doc_id`` falls in: the same on every machine and every run."""
    if n <= 1:
        return 0
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


def shard_text(shard: Shard) -> str | None:
    return f"{shard[0]}/{shard[1]}" if shard else None


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


@dataclass
class Takeover:
    """The dead runs whose lease :meth:`Lease.acquire` took over, and the unfinished documents of this run's
    shard it adopted."""

    dead_runs: list[str] = field(default_factory=list)
    adopted: set[str] = field(default_factory=set)


class _Conflict(Exception):
    """Another writer changed the state document between this read and this write."""


def change_state(es: EngineClient, cfg: IndexSettings, what: str, mutate: Callable[[State], bool]) -> State:
    """Read the prefix's state document, let ``mutate`` change it (False: nothing to write) and write it back only
    if nobody wrote meanwhile (compare-and-set), read again and retried on 409. Raises IndexNotFound when the state
    index is gone (no write creates it), IndexMismatch when it has no write alias."""
    index, alias = cfg.ingest_state, str(write_alias_name(cfg, "ingest_state"))

    def once() -> State:
        with engine_errors(f"read {index}"):
            got = es.send(request.get_doc(index, STATE_ID))
        state = State.of(got["_source"] if got else None)
        if not mutate(state):
            return state
        with engine_errors(f"{what} in {index}"):
            try:
                if got is None:
                    es.send(request.put_doc(alias, STATE_ID, state.doc(), op_type="create", require_alias=True))
                else:
                    es.send(request.put_doc(alias, STATE_ID, state.doc(), if_seq_no=got["_seq_no"],
                                            if_primary_term=got["_primary_term"], require_alias=True))
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
    """One run's lease on a prefix and the documents it hides. Thread-safe; :meth:`release` when done.
    ``on_beat`` runs in the heartbeat thread after each renewal, ``on_lost`` there once the lease is found lost."""

    def __init__(self, es: EngineClient, cfg: IndexSettings, run_id: str, shard: Shard = None) -> None:
        self.es, self.cfg, self.index, self.run_id, self.shard = es, cfg, cfg.ingest_state, run_id, shard
        self.heartbeat_s = HEARTBEAT_S
        self.on_lost: Callable[[LeaseLost], None] | None = None
        self.on_beat: Callable[[], None] | None = None
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.started_at = now()
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

    def _entry(self) -> dict[str, Any]:
        return {"shard": shard_text(self.shard), "host": self.host, "pid": self.pid, "started_at": self.started_at,
                "heartbeat_at": now()}

    def acquire(self, wait_s: float = 0.0) -> Takeover:
        """Take the lease (waiting up to ``wait_s`` seconds for a colliding live run), taking over dead runs'
        leases and adopting their holds in this run's shard, and start the heartbeat. Raises IngestLocked."""
        deadline = time.monotonic() + wait_s
        taken = Takeover()
        blocker: list[tuple[str, dict[str, Any]]] = []

        def take(state: State) -> bool:
            taken.dead_runs.clear()
            taken.adopted.clear()
            blocker.clear()
            at, host = datetime.now(UTC), socket.gethostname()
            for run, lease in list(state.leases.items()):
                if is_dead(lease, host, at) or (lease.get("host") == host and lease.get("pid") == self.pid
                                                and run not in _HELD_HERE):
                    del state.leases[run]
                    taken.dead_runs.append(run)
                    state.holds.setdefault(UNFINISHED, []).extend(state.holds.pop(run, []))
                elif overlaps(self.shard, stored_shard(lease.get("shard"))):
                    blocker.append((run, lease))
                    return False
            left = [d for d in state.holds.get(UNFINISHED, []) if not owns(self.shard, d)]
            taken.adopted.update(d for d in state.holds.get(UNFINISHED, []) if owns(self.shard, d))
            state.holds[UNFINISHED] = left
            state.holds[self.run_id] = sorted(taken.adopted)
            state.leases[self.run_id] = self._entry()
            return True

        while True:
            self._change("take the ingest lease", take)
            if not blocker:
                break
            run, lease = blocker[0]
            if time.monotonic() + WAIT_POLL_S > deadline:
                raise _locked(self.index, run, lease)
            time.sleep(WAIT_POLL_S)
        self.held = True
        _HELD_HERE.add(self.run_id)
        for run in taken.dead_runs:
            log.warning("took over the ingest lease of run %s, which stopped without finishing", run)
        self._beat = threading.Thread(target=self._heartbeat, name="hsp-heartbeat", daemon=True)
        self._beat.start()
        return taken

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                def beat(state: State) -> bool:
                    self._mine(state)["heartbeat_at"] = now()
                    return True
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

        def read(state: State) -> bool:
            self._mine(state)
            return False

        self._change("check the ingest lease", read)

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

    def hide(self, doc_ids: Iterable[str]) -> None:
        """Hide ``doc_ids`` from every reader (before the first of their chunks is written). Raises LeaseLost."""
        self._hold(set(doc_ids), add=True)

    def show(self, doc_ids: Iterable[str]) -> None:
        """Make ``doc_ids`` visible again (every chunk written, the index refreshed). Raises LeaseLost."""
        self._hold(set(doc_ids), add=False)

    def _hold(self, ids: set[str], add: bool) -> None:
        def change(state: State) -> bool:
            self._mine(state)
            return _rehold(state, self.run_id, ids, add)

        if ids:
            self._change("hide documents being written" if add else "show written documents", change)


def _rehold(state: State, hold: str, ids: set[str], add: bool) -> bool:
    """Add ``ids`` to ``hold`` (or drop them from it); False when that changes nothing."""
    have = set(state.holds.get(hold, []))
    new = have | ids if add else have - ids
    if new == have:
        return False
    state.holds[hold] = sorted(new)
    return True


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
    change_state(es, cfg, "forget deleted documents", lambda state: _rehold(state, UNFINISHED, ids, False))


def _locked(index: str, run: str, lease: dict[str, Any]) -> IngestLocked:
    try:
        age = (datetime.now(UTC) - datetime.fromisoformat(str(lease.get("heartbeat_at")))).total_seconds()
    except ValueError:
        age = float("nan")
    shard = lease.get("shard")
    where = f"host {lease.get('host')}, pid {lease.get('pid')}" + (f", shard {shard}" if shard else "")
    prefix = index.removesuffix("-ingest-state")
    return IngestLocked(
        f"prefix {prefix} is being ingested by run {run} ({where}, started {lease.get('started_at')}, "
        f"last heartbeat {age:.0f} s ago)",
        fix="Wait for it to finish (hsp ingest --wait SECONDS waits), or give each worker its own --shard i/N",
        holder=run, host=lease.get("host"), pid=lease.get("pid"), shard=shard, heartbeat_age_s=round(age, 1))
