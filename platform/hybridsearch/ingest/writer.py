"""Bulk writing with item-level handling, the dead-letter file, and the tally of copies between indices.

:func:`write_actions` sends ``index``/``delete`` actions through the engine's streaming bulk
(:meth:`~hybridsearch.engine.EngineClient.streaming_bulk`, which gives every engine's results one shape) and
looks at every item: items answered with a retried status (:data:`hybridsearch.retry.RETRIED_STATUSES`) and,
when the connection drops, every unanswered item are sent again alone with capped exponential backoff
(``tenacity``); items that still fail are returned for the dead-letter file with the reason the engine gave.
Nothing is raised for item failures; only a cluster that stays unreachable through every retry raises
:class:`~hybridsearch.errors.ClusterUnavailable`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, stop_when_event_set

from hybridsearch.engine import UNREACHABLE, EngineClient
from hybridsearch.errors import ClusterUnavailable
from hybridsearch.jsonl import BadLine, parse_lines
from hybridsearch.retry import RETRIED_STATUSES, backoff_s
from hybridsearch.settings import IngestSettings

log = logging.getLogger(__name__)


@dataclass
class ItemFailure:
    """An action that failed for good: which chunk, and why."""

    doc_id: str
    chunk_id: str
    reason: str
    status: int | None = None
    stage: str = "write"


@dataclass
class WriteReport:
    """Outcome of one :func:`write_actions` call, by item."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    not_found: int = 0
    retried: int = 0
    failures: list[ItemFailure] = field(default_factory=list)
    ok_ids: set[str] = field(default_factory=set)

    def merge(self, other: WriteReport) -> None:
        self.created += other.created
        self.updated += other.updated
        self.deleted += other.deleted
        self.not_found += other.not_found
        self.retried += other.retried
        self.failures.extend(other.failures)
        self.ok_ids |= other.ok_ids


def _reason(item: dict[str, Any]) -> str:
    err = item.get("error")
    if isinstance(err, dict):
        reason = f"{err.get('type')}: {err.get('reason')}"
        cause = err.get("caused_by")
        if isinstance(cause, dict):
            reason += f" (caused by {cause.get('type')}: {cause.get('reason')})"
        return reason
    return str(err) if err else f"HTTP {item.get('status')}"


class _Unfinished(Exception):
    """Items of one bulk try worth sending again (a retried status, or no answer because the connection dropped)."""

    def __init__(self, items: list[tuple[dict[str, Any], str, int | None]], unreachable: Exception | None) -> None:
        super().__init__(f"{len(items)} bulk items to send again")
        self.items, self.unreachable = items, unreachable


def _send(es: EngineClient, pending: Sequence[dict[str, Any]], chunk_size: int, report: WriteReport) -> None:
    """One bulk try of ``pending``: counts into ``report`` what succeeded and what failed for good; raises
    :class:`_Unfinished` with the items worth another try."""
    by_id = {a["_id"]: a for a in pending}
    retry: list[tuple[dict[str, Any], str, int | None]] = []
    answered: set[str] = set()
    unreachable: Exception | None = None
    try:
        for ok, result in es.streaming_bulk(
            [_strip(a) for a in pending], chunk_size=chunk_size, max_retries=0,
            raise_on_error=False, raise_on_exception=False,
        ):
            op, item = next(iter(result.items()))
            _id = str(item.get("_id"))
            status = item.get("status")
            answered.add(_id)
            action = by_id[_id]
            if ok:
                report.ok_ids.add(_id)
                res = item.get("result")
                if op == "delete":
                    report.deleted += res == "deleted"
                elif res == "updated":
                    report.updated += 1
                else:
                    report.created += 1
            elif op == "delete" and status == 404:
                report.not_found += 1
                report.ok_ids.add(_id)
            elif status in RETRIED_STATUSES:
                retry.append((action, _reason(item), status))
            else:
                report.failures.append(_failure(action, _reason(item), status))
    except UNREACHABLE as exc:
        unreachable = exc
        retry.extend((a, f"cluster unreachable: {exc}", None) for a in pending if a["_id"] not in answered)
    if retry:
        raise _Unfinished(retry, unreachable)


def write_actions(es: EngineClient, actions: Sequence[dict[str, Any]], cfg: IngestSettings, *,
                  stop: threading.Event | None = None, sleep: Callable[[float], None] = time.sleep,
                  chunk_size: int | None = None) -> WriteReport:
    """Bulk-apply ``actions`` (each with ``_op_type``, ``_index``, ``_id`` and, for index ops, ``_source``
    plus a ``doc_id`` in its source or a ``_doc_id`` key). Retries the items that failed with a retried status
    (:data:`~hybridsearch.retry.RETRIED_STATUSES`) or got no answer, alone, up to ``cfg.bulk_max_retries`` times
    (none once ``stop`` is set); ``chunk_size`` (default ``cfg.bulk_chunk_size``) actions per request.
    Raises ClusterUnavailable when the cluster never answers."""
    report = WriteReport()
    pending: list[dict[str, Any]] = list(actions)

    def again(state: RetryCallState) -> None:
        left = state.outcome.exception() if state.outcome is not None else None
        if isinstance(left, _Unfinished):
            pending[:] = [a for a, _, _ in left.items]
            report.retried += len(left.items)

    stops = stop_after_attempt(cfg.bulk_max_retries + 1)
    tries = Retrying(stop=stops | stop_when_event_set(stop) if stop is not None else stops,
                     wait=lambda state: backoff_s(state.attempt_number, cfg.bulk_initial_backoff,
                                                  cfg.bulk_max_backoff),
                     retry=retry_if_exception_type(_Unfinished), before_sleep=again, sleep=sleep, reraise=True)
    try:
        for attempt in tries:
            with attempt:
                if pending:
                    _send(es, pending, chunk_size or cfg.bulk_chunk_size, report)
    except _Unfinished as left:
        retries = (tries.statistics.get("attempt_number") or 1) - 1
        if left.unreachable is not None:
            raise ClusterUnavailable(
                f"the cluster stayed unreachable through {retries} bulk retries ({left.unreachable}); "
                f"{len(left.items)} chunks were not written", fix="Re-run the ingest to resume once it answers"
            ) from left.unreachable
        report.failures.extend(
            _failure(a, f"{why} (still failing after {retries} retries)", st) for a, why, st in left.items
        )
    return report


def _strip(action: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in action.items() if k != "_doc_id"}


def _failure(action: dict[str, Any], reason: str, status: int | None) -> ItemFailure:
    doc_id = action.get("_doc_id") or (action.get("_source") or {}).get("doc_id") or ""
    return ItemFailure(doc_id=str(doc_id), chunk_id=str(action["_id"]), reason=reason, status=status)


class DeadLetter:
    """Append-only JSONL file of failed documents and chunks, created on the first record."""

    def __init__(self, directory: Path, run_id: str) -> None:
        self.path = Path(directory) / f"{run_id}.jsonl"
        self.run_id = run_id
        self.count = 0
        self._lock = threading.Lock()

    def write(self, *, doc_id: str | None, reason: str, stage: str, chunk_id: str | None = None,
              source: str | None = None, status: int | None = None) -> None:
        record = {"run_id": self.run_id, "time": datetime.now(UTC).isoformat(), "stage": stage,
                  "doc_id": doc_id, "chunk_id": chunk_id, "source": source, "status": status, "reason": reason}
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.count += 1

    @property
    def used(self) -> bool:
        return self.count > 0


class CopyTally:
    """``after`` for copies between indices (migration, re-chunking): counts what was written and what failed
    for good, dead-letters the failures under ``stage`` and reports each written batch's size to ``on_batch``.
    Runs in the writer thread; read the counts once :meth:`EmbedWriter.run` has returned."""

    def __init__(self, dead_letter: DeadLetter | None, stage: str,
                 on_batch: Callable[[int], None] | None = None) -> None:
        self.dead_letter, self.stage, self.on_batch = dead_letter, stage, on_batch
        self.written = self.failed = 0

    def refuse(self, doc_id: str, chunk_id: str, reason: str) -> None:
        """Count one chunk that cannot be copied at all (it is not written) and dead-letter it."""
        self.failed += 1
        log.warning("chunk %s not copied: %s", chunk_id, reason)
        if self.dead_letter is not None:
            self.dead_letter.write(doc_id=doc_id, chunk_id=chunk_id, reason=reason, stage=self.stage)

    def absorb(self, batch: Sized, report: WriteReport) -> None:
        self.written += len(report.ok_ids)
        self.failed += len(report.failures)
        for f in report.failures:
            log.warning("chunk %s not copied: %s", f.chunk_id, f.reason)
            if self.dead_letter is not None:
                self.dead_letter.write(doc_id=f.doc_id, chunk_id=f.chunk_id, reason=f.reason, stage=self.stage,
                                       status=f.status)
        if self.on_batch is not None:
            self.on_batch(len(batch))


def read_dead_letter(path: Path) -> list[dict[str, Any]]:
    """Records of a dead-letter file (``[]`` when it does not exist)."""
    if not Path(path).exists():
        return []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [item[1] for item in parse_lines(lines) if not isinstance(item, BadLine)]
