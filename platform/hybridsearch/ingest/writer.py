"""Bulk writing (:func:`write_actions`: items answered with a retried status or left unanswered are sent again
alone with capped backoff), the one embed-and-write loop (:func:`embed_and_write`: batch N is embedded here while
batch N-1 is written in a writer thread), the embedding worker processes and the dead-letter file.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import API_ERRORS, UNREACHABLE, EngineClient, request, status_of
from hybridsearch.errors import ClusterUnavailable
from hybridsearch.ingest.sources import Document
from hybridsearch.retry import RETRIED_STATUSES
from hybridsearch.settings import EmbeddingSettings, IngestSettings, ModelsSettings


@dataclass
class ItemFailure:
    """An action that failed for good: which chunk, and why."""

    doc_id: str
    chunk_id: str
    reason: str
    status: int | None = None


@dataclass
class WriteReport:
    """Outcome of one :func:`write_actions` call, by item."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    retried: int = 0
    failures: list[ItemFailure] = field(default_factory=list)
    ok_ids: set[str] = field(default_factory=set)


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
        for batch in (pending[start:start + chunk_size] for start in range(0, len(pending), chunk_size)):
            try:
                answer = es.send(request.bulk([{k: v for k, v in a.items() if k != "_doc_id"} for a in batch]))
                results = [next(iter(entry.items())) for entry in answer["items"]]
            except API_ERRORS as exc:  # the whole request refused (a 429 the client's retries outlasted): each item
                if (refused := status_of(exc)) is None:
                    raise
                results = [(a.get("_op_type", "index"), {"_id": a["_id"], "status": refused, "error": str(exc)})
                           for a in batch]
            for op, item in results:
                _id = str(item.get("_id"))
                status = item.get("status", 500)
                answered.add(_id)
                action = by_id[_id]
                if 200 <= status < 300:
                    report.ok_ids.add(_id)
                    res = item.get("result")
                    if op == "delete":
                        report.deleted += res == "deleted"
                    elif res == "updated":
                        report.updated += 1
                    else:
                        report.created += 1
                elif op == "delete" and status == 404:
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
                  sleep: Callable[[float], None] = time.sleep) -> WriteReport:
    """Bulk-apply ``actions`` (``_op_type``, ``_index``, ``_id``, ``_source`` for index ops; the doc id in the source
    or ``_doc_id``), retrying items that failed with a retried status or got no answer up to ``cfg.bulk_max_retries``
    times. Raises ClusterUnavailable when the cluster never answers."""
    report = WriteReport()
    pending: list[dict[str, Any]] = list(actions)

    def again(state: RetryCallState) -> None:
        left = state.outcome.exception() if state.outcome is not None else None
        if isinstance(left, _Unfinished):
            pending[:] = [a for a, _, _ in left.items]
            report.retried += len(left.items)

    tries = Retrying(stop=stop_after_attempt(cfg.bulk_max_retries + 1),
                     wait=wait_exponential(multiplier=cfg.bulk_initial_backoff, max=cfg.bulk_max_backoff),
                     retry=retry_if_exception_type(_Unfinished), before_sleep=again, sleep=sleep, reraise=True)
    try:
        for attempt in tries:
            with attempt:
                if pending:
                    _send(es, pending, cfg.bulk_chunk_size, report)
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


Encode = Callable[[list[str]], np.ndarray]  # one vector per text


@dataclass
class WorkDoc:
    """A document to (re)write: its stored chunks (hidden or not; ``_id`` → whether it holds the version being
    written) and the chunk ids of that version, in order."""

    doc: Document
    stored: dict[str, bool] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)


@dataclass
class ChunkBatch:
    """Chunk documents on their way to an index: ``sources[i]`` is written with ``_id`` ``ids[i]`` and the vector of
    ``texts[i]`` (None: it keeps its ``embedding``); ``finals`` are the documents whose last chunk is in it."""

    ids: list[str] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str | None] = field(default_factory=list)
    finals: list[WorkDoc] = field(default_factory=list)

    def add(self, chunk_id: str, source: dict[str, Any], text: str | None) -> None:
        self.ids.append(chunk_id)
        self.sources.append(source)
        self.texts.append(text)

    def __len__(self) -> int:
        return len(self.ids)


def embed_and_write(es: EngineClient, index: str, cfg: IngestSettings, encode: Encode, batches: Iterable[ChunkBatch],
                    *, after: Callable[[ChunkBatch, WriteReport], None],
                    on_embed_error: Callable[[ChunkBatch, Exception], None] | None = None,
                    before: Callable[[ChunkBatch], None] | None = None, depth: int = 1) -> None:
    """Embed each batch here and write it to ``index`` in a writer thread, at most ``depth`` waiting; returns once
    all are written. ``before`` runs there before a batch with chunks is written, ``after`` once it is;
    ``on_embed_error`` takes an embedding failure (the batch is then written empty), else it is raised."""

    def write(batch: ChunkBatch) -> None:
        actions = [{"_op_type": "index", "_index": index, "_id": cid, "_source": src}
                   for cid, src in zip(batch.ids, batch.sources, strict=True)]
        if actions and before is not None:
            before(batch)
        after(batch, write_actions(es, actions, cfg) if actions else WriteReport())

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hsp-writer") as pool:
        waiting: deque[Future[None]] = deque()
        for batch in batches:
            _embed(batch, encode, on_embed_error)
            while len(waiting) >= max(1, depth):
                waiting.popleft().result()
            waiting.append(pool.submit(write, batch))
        while waiting:
            waiting.popleft().result()


def _embed(batch: ChunkBatch, encode: Encode, on_error: Callable[[ChunkBatch, Exception], None] | None) -> None:
    todo = [(i, t) for i, t in enumerate(batch.texts) if t is not None]
    if not todo:
        return
    try:
        vectors = encode([t for _, t in todo])
    except Exception as exc:
        if on_error is None:
            raise
        on_error(batch, exc)
        batch.ids, batch.sources, batch.texts = [], [], []
        return
    for (i, _), vec in zip(todo, vectors, strict=True):
        batch.sources[i]["embedding"] = [float(x) for x in vec]


_worker_embedder: Embedder | None = None


def _init_worker(cfg_json: str, models_json: str, threads: int) -> None:
    global _worker_embedder
    _worker_embedder = Embedder(EmbeddingSettings.model_validate_json(cfg_json),
                                ModelsSettings.model_validate_json(models_json), threads=threads)
    _worker_embedder.encode(["warm up"])


def _encode_in_worker(texts: list[str]) -> np.ndarray:
    assert _worker_embedder is not None
    return _worker_embedder.encode(texts)


class ProcessPoolEncoder:
    """Splits each batch across ``workers`` spawned processes (``ingest.workers``), each loading the model once
    and using ``cpu_count // workers`` threads; the pool starts on the first batch."""

    def __init__(self, cfg: EmbeddingSettings, models: ModelsSettings, workers: int) -> None:
        self.cfg, self.models, self.workers = cfg, models, workers
        self._pool: ProcessPoolExecutor | None = None

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.cfg.dims), dtype=np.float32)
        if self._pool is None:
            threads = max(1, (os.cpu_count() or 1) // self.workers)
            init = (self.cfg.model_dump_json(), self.models.model_dump_json(), threads)
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn"),
                                             initializer=_init_worker, initargs=init)
        size = -(-len(texts) // self.workers)
        parts = [texts[i:i + size] for i in range(0, len(texts), size)]
        return np.concatenate(list(self._pool.map(_encode_in_worker, parts)))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
