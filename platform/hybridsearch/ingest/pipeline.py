"""The ingest pipeline under the prefix's lease (:mod:`.lease`): read, look up, chunk and hide in a prepare thread,
embed here (or in ``ingest.workers`` processes), bulk-write in a writer thread, then show each whole document
(:mod:`.commit`). Every document is indexed, unchanged (same ``content_hash``) or dead-lettered.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import numpy as np

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient
from hybridsearch.errors import ConfigError, HybridSearchError, IngestError, LeaseLost, ModelError
from hybridsearch.index.metadata import metadata_fields_of
from hybridsearch.index.spec import follow_index, section_words_of
from hybridsearch.index.versions import ensure_index, index_mapping, index_meta, read_alias
from hybridsearch.ingest.chunking import Tokenizer, document_chunks
from hybridsearch.ingest.commit import delete_documents, finish, lookup, refresh, show_whole, stored_chunks
from hybridsearch.ingest.lease import IngestResult, Lease, RunRecord, now, owns
from hybridsearch.ingest.sources import Document, RecordFields, SourceFailure, read_path
from hybridsearch.ingest.sync import owned_documents, plan_sync, refusal
from hybridsearch.ingest.writer import ChunkBatch, DeadLetter, ProcessPoolEncoder, WorkDoc, WriteReport, embed_and_write
from hybridsearch.progress import ProgressSink, Task
from hybridsearch.settings import Settings

log = logging.getLogger(__name__)

DONE = object()  # end marker on the queue between the prepare stage and the embedder
LOOKUP_BATCH = 64  # documents per change-detection search


class RunState:
    """State shared by the stages of one run (prepare thread, embedder, writer thread)."""

    def __init__(self, settings: Settings, es: EngineClient, index: str, result: IngestResult,
                 shard: tuple[int, int] | None, lease: Lease, embedder: Embedder) -> None:
        self.settings, self.es, self.index = settings, es, index
        self.result, self.shard, self.lease, self.embedder = result, shard, lease, embedder
        self.adopted = lease.adopted  # documents a stopped run left hidden, this run's to repair
        self.rewritten: set[str] = set()  # adopted documents this run wrote again from its input
        self.tenant = settings.index.tenant
        self.section_words: int | None = None  # the index's BM25 sections (its _meta), set by run_ingest
        self.metadata_fields: dict[str, str] = {}  # the index's typed metadata (its mapping), set by run_ingest
        self.dead = DeadLetter(settings.ingest.dead_letter_dir, result.run_id)
        self.stop = threading.Event()
        self.terminated = False  # SIGTERM
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.to_embed: queue.Queue[Any] = queue.Queue(maxsize=settings.ingest.queue_size)
        self.failed_docs: set[str] = set()
        self.written_docs: set[str] = set()  # documents with at least one chunk of their new version written
        self.yielded: set[str] = set()  # ids of the documents read that are this run's (its shard's)
        self.on_progress: Callable[[IngestResult], None] | None = None

    @cached_property
    def tokenizer(self) -> Tokenizer:
        """Loaded on first use: a run where nothing changed never loads the model."""
        return self.embedder.tokenizer()

    def put(self, item: ChunkBatch) -> bool:
        """Queue ``item`` for the embedder; False once the run is stopping."""
        while not self.stop.is_set():
            with suppress(queue.Full):
                self.to_embed.put(item, timeout=0.2)
                return True
        return False

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = exc
        self.stop.set()

    def doc_failed(self, doc_id: str | None, reason: str, stage: str, source: str | None = None) -> None:
        self.dead.write(doc_id=doc_id, reason=reason, stage=stage, source=source)
        with self.lock:
            self.result.documents_failed += 1

    def count(self, **deltas: int) -> None:
        with self.lock:
            for k, v in deltas.items():
                setattr(self.result, k, getattr(self.result, k) + v)
        if self.on_progress is not None:
            self.on_progress(self.result)


def _prepare(run: RunState, items: Iterator[Document | SourceFailure]) -> None:
    """Stage 1, in its own thread: keep this run's documents, skip the unchanged, chunk, hide and queue batches."""
    try:
        group: list[Document] = []
        for item in items:
            if run.stop.is_set():
                break
            if (doc := _admit(run, item)) is not None:
                group.append(doc)
            if len(group) >= LOOKUP_BATCH:
                _prepare_group(run, group)
                group = []
        if group and not run.stop.is_set():
            _prepare_group(run, group)
    except BaseException as exc:  # noqa: BLE001 - handed to the main thread
        run.fail(exc)
    finally:
        run.to_embed.put(DONE)  # blocks until there is room: the embedder drains to the marker


def _admit(run: RunState, item: Document | SourceFailure) -> Document | None:
    """The document when it is this run's to write; counts and dead-letters the rest."""
    if isinstance(item, SourceFailure):
        if owns(run.shard, item.doc_id or item.source):
            run.count(documents=1)
            run.doc_failed(item.doc_id, item.reason, "read", item.source)
        return None
    if not owns(run.shard, item.doc_id):
        return None
    run.count(documents=1)
    if item.doc_id in run.yielded:
        run.doc_failed(item.doc_id, f"duplicate doc_id {item.doc_id!r} in this run; the first one was kept",
                       "read", item.source)
        return None
    run.yielded.add(item.doc_id)
    if not item.text.strip():
        run.doc_failed(item.doc_id, "document has no text", "read", item.source)
        return None
    return item


def _prepare_group(run: RunState, docs: list[Document]) -> None:
    work, same, unchanged = lookup(run.es, run.index, run.settings.index.ingest_state, docs, run.result.chunker,
                                    run.tenant)
    if same:
        run.count(documents_skipped=same, unchanged=unchanged)
    chunked = [(item, chunks) for item in work if (chunks := _chunks(run, item)) is not None]
    if not chunked:
        return
    try:
        run.lease.hide(item.doc.doc_id for item, _ in chunked)  # before any of their chunks is written
    except HybridSearchError as exc:
        run.fail(exc)
        return
    run.rewritten.update(item.doc.doc_id for item, _ in chunked if item.doc.doc_id in run.adopted)
    batch_chunks = max(run.settings.embedding.batch_size * 4, 16)
    batch = ChunkBatch()
    for item, chunks in chunked:
        for src, text in chunks:
            if item.stored.get(src["chunk_id"]):  # written by a stopped run: reuse, do not embed
                run.count(reused=1)
                continue
            batch.add(src["chunk_id"], src, text)
            if len(batch) >= batch_chunks:
                if not run.put(batch):
                    return
                batch = ChunkBatch()
        batch.finals.append(item)
    if batch.sources or batch.finals:
        run.put(batch)


def _chunks(run: RunState, item: WorkDoc) -> list[tuple[dict[str, Any], str]] | None:
    """``item``'s chunks and the text to embed for each; None (dead-lettered, counted failed) if it cannot be cut."""
    s = run.settings
    try:
        chunks = list(document_chunks(item.doc, s.chunking, s.embedding, run.tenant, run.tokenizer,
                                      run.embedder.max_seq_length, run.section_words, run.metadata_fields))
    except (ValueError, TypeError) as exc:
        run.doc_failed(item.doc.doc_id, f"cannot chunk: {exc}", "chunk", item.doc.source)
        return None
    item.ids = [src["chunk_id"] for src, _ in chunks]
    if chunks and "title_cut" in chunks[0][0]:
        run.count(titles_cut=1)
    return chunks


def _embed_failed(run: RunState, batch: ChunkBatch, exc: Exception) -> None:
    """Dead-letter every chunk of a batch the embedder refused; the run goes on."""
    for src in batch.sources:
        run.failed_docs.add(src["doc_id"])
        run.dead.write(doc_id=src["doc_id"], chunk_id=src["chunk_id"], stage="embed",
                       reason=f"embedding failed: {type(exc).__name__}: {exc}", source=src["source"])
    run.count(failed=len(batch.sources))


def _written(run: RunState, batch: ChunkBatch, report: WriteReport) -> None:
    """Ingest stage 3, in the writer thread after each batch is written: count, dead-letter, finish."""
    by_id = dict(zip(batch.ids, batch.sources, strict=True))
    run.written_docs.update(by_id[i]["doc_id"] for i in report.ok_ids if i in by_id)
    for f in report.failures:
        run.failed_docs.add(f.doc_id)
        run.dead.write(doc_id=f.doc_id, chunk_id=f.chunk_id, reason=f.reason, stage="write",
                       status=f.status, source=by_id.get(f.chunk_id, {}).get("source"))
    run.count(chunks=len(batch.ids), indexed=report.created, updated=report.updated,
              failed=len(report.failures), retried=report.retried)
    _finalize(run, batch.finals)


def _finalize(run: RunState, finals: list[WorkDoc]) -> None:
    """Finish the documents whose chunks are all written; a failed one is shown again as it was when none of
    its new chunks reached the index, else it stays hidden for a re-run."""
    if not finals:
        return
    failed = [f for f in finals if f.doc.doc_id in run.failed_docs]
    if failed:
        run.count(documents_failed=len(failed))
    good = [f for f in finals if f.doc.doc_id not in run.failed_docs]
    # a failed document of which the index holds nothing new (no chunk written or reused), nor left half written by
    # a stopped run, holds its old version whole, or nothing: it is shown again
    untouched = [d for f in failed if (d := f.doc.doc_id) not in run.written_docs and d not in run.adopted
                 and not any(f.stored.values())]
    deletes, broken = finish(run.es, run.index, run.lease, good, run.settings.ingest, untouched=untouched)
    run.written_docs.difference_update(f.doc.doc_id for f in finals)  # done with: the set holds those in flight
    for f in deletes.failures:
        run.dead.write(doc_id=f.doc_id, chunk_id=f.chunk_id, reason=f"old chunk not deleted (the document stays "
                       f"hidden): {f.reason}", stage="delete", status=f.status)
    run.count(deleted=deletes.deleted, documents_indexed=len(good) - len(broken), documents_failed=len(broken),
              repaired=sum(1 for g in good if g.doc.doc_id in run.adopted and g.doc.doc_id not in broken))


def _settle_model(es: EngineClient, settings: Settings, embedder: Embedder | None) -> tuple[Settings, Embedder]:
    """The run's settings and embedder (without one given, the live index's model unless ``HSP_EMBEDDING__MODEL`` is
    set), found before anything is written and loaded before an index is created. Raises ModelError."""
    from hybridsearch.embedding.models import locate_model, resolve_model

    targets = read_alias(es, settings.index.alias)
    if embedder is None:
        if len(targets) == 1:
            embedding = follow_index(settings.embedding, index_meta(es, next(iter(targets))))
            settings = settings.model_copy(update={"embedding": embedding})
        embedder = Embedder(settings.embedding, settings.models)
    have, want, models = embedder.cfg, settings.embedding, settings.models
    if resolve_model(want.model, models) != resolve_model(have.model, models) or want.dims != have.dims:
        raise ModelError(f"the embedder ({have.model}, {have.dims} dims) is not the model the settings name "
                         f"({want.model}, {want.dims} dims)")
    locate_model(want.model, models)
    if not targets:
        _ = embedder.max_seq_length
    return settings, embedder


def run_ingest(documents: str | Path | Iterable[Document | SourceFailure], settings: Settings, *,
               es: EngineClient | None = None, embedder: Embedder | None = None, progress: ProgressSink | None = None,
               shard: tuple[int, int] | None = None, fields: RecordFields | None = None,
               wait_s: float | None = None, sync: bool = False, force: bool = False) -> IngestResult:
    """Ingest ``documents`` (a path, or Documents) into the chunk index under the prefix's lease (waiting up to
    ``wait_s``, default ``ingest.lease_wait_s``); returns the run's counts. ``shard=(i, n)`` keeps the documents whose
    id hashes to ``i`` of ``n``; Ctrl-C or SIGTERM stops after the batches in flight. ``sync`` (a path) also deletes
    the documents read from it before that it no longer yields, when it was read whole (more than
    ``ingest.sync_max_delete`` of them raises ConfigError before writing, unless ``force``). Raises IndexMismatch,
    AliasConflict, IngestLocked, ClusterUnavailable, ConfigError, IngestError (the cause chained)."""
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise ConfigError(f"shard {shard[0]}/{shard[1]} is not i/N with 0 <= i < N")
    root = Path(documents).resolve() if sync and isinstance(documents, str | Path) else None
    if sync and root is None:
        raise ConfigError("a sync needs a file or folder to mirror, not a list of documents")
    es = es or EngineClient(settings.es)
    if root is not None and not force:
        plan = plan_sync(root, settings.index, es, fields, shard)
        if too_much := refusal(root, len(plan.deleted), plan.owned, settings.ingest):
            raise too_much
    settings, embedder = _settle_model(es, settings, embedder)
    index = ensure_index(es, settings)
    result = IngestResult(run_id=f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}", index=index,
                          source=str(documents) if isinstance(documents, str | Path) else "<documents>",
                          shard=f"{shard[0]}/{shard[1]}" if shard else None, started_at=now(),
                          model=settings.embedding.model, chunker=chunker_signature(settings.chunking))
    lease = Lease(es, settings.index, result.run_id, shard)
    lease.acquire(settings.ingest.lease_wait_s if wait_s is None else wait_s)
    run = RunState(settings, es, index, result, shard, lease, embedder)
    lease.on_lost = run.fail
    result.took_over = lease.dead_runs
    started = time.perf_counter()
    record = RunRecord(es, settings, result, run.lock)
    try:
        refresh(es, index)
        mapping = index_mapping(es, index)  # the index decides, not the settings
        run.section_words = section_words_of(mapping.get("_meta") or {})
        run.metadata_fields = metadata_fields_of(mapping)
        record.start()
        lease.on_beat = record.beat  # one heartbeat: the lease's thread keeps the record current too
        with _stop_on_sigterm(run):
            _stages(run, read_path(documents, fields) if isinstance(documents, str | Path) else iter(documents),
                    progress)
        if run.error is None and not run.stop.is_set():
            if root is not None:
                _delete_stale(run, root, force)
            _repair_adopted(run)
    finally:
        try:
            result.still_hidden = len(lease.release())
        except HybridSearchError as exc:  # the lease runs out by itself; the next run takes it over
            log.warning("could not release the ingest lease: %s", exc)
    result.seconds = round(time.perf_counter() - started, 3)
    result.chunks_per_second = round((result.indexed + result.updated) / result.seconds, 2) if result.seconds else 0.0
    result.embed_seconds = round(result.embed_seconds, 3)
    result.ended_at = now()
    result.dead_letter_path = str(run.dead.path) if run.dead.count else None
    if run.error is not None:
        result.status = "lease_lost" if isinstance(run.error, LeaseLost) else "failed"
    elif run.terminated:
        result.status = "interrupted"
    elif result.status == "running":
        result.status = "completed"
    record.finish()
    if run.error is not None:
        if isinstance(run.error, HybridSearchError):
            raise run.error
        cause = run.error
        raise IngestError(f"ingest run {result.run_id} failed unexpectedly: {type(cause).__name__}: {cause}",
                          fix="The run is recorded as failed and its unfinished documents stay hidden; `hsp -v "
                              "ingest` shows the cause, and the same command resumes once it is fixed") from cause
    return result


def _delete_stale(run: RunState, root: Path, force: bool) -> None:
    """Delete the documents from ``root`` this run did not read, when it read the source whole (before adopted
    documents are repaired); adopted documents of which nothing is left leave the hidden list."""
    result = run.result
    if result.documents_failed:
        result.sync_withheld = (f"the source was not read whole ({result.documents_failed:,} failed, listed in the "
                                "dead-letter file); a sync deletes only what a whole source no longer holds")
        return
    try:
        owned = owned_documents(run.es, run.index, root, run.tenant, run.shard)
        gone = sorted(set(owned) - run.yielded)
        if (too_much := refusal(root, len(gone), len(owned), run.settings.ingest)) and not force:
            result.sync_withheld = str(too_much)
            return
        chunks = delete_documents(gone, run.settings, run.es, lease=run.lease) if gone else 0
        unread = sorted(run.adopted - run.yielded - set(gone))
        empty = set(unread) - set(stored_chunks(run.es, run.index, dict.fromkeys(unread, ""), run.tenant))
        run.lease.show(empty)  # nothing of them is left to show
    except HybridSearchError as exc:  # recorded, then raised by run_ingest; what was not deleted stays hidden
        run.fail(exc)
        return
    run.adopted -= set(gone) | empty
    run.count(deleted=chunks, documents_deleted=len(gone))


def _repair_adopted(run: RunState) -> None:
    """Show the adopted documents this run did not write again whose chunks are all there."""
    rest = run.adopted - run.rewritten
    if not rest:
        return
    whole = show_whole(run.es, run.index, run.lease, rest, run.tenant)
    run.count(repaired=len(whole))
    if rest - whole:
        log.warning("%d documents a stopped run left half written stay hidden until their sources are ingested "
                    "again (e.g. %s)", len(rest - whole), ", ".join(sorted(rest - whole)[:3]))


@contextmanager
def _stop_on_sigterm(run: RunState) -> Iterator[None]:
    """Make SIGTERM stop ``run`` like Ctrl-C while it runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(*_: Any) -> None:
        run.terminated = True
        run.stop.set()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stages(run: RunState, items: Iterator[Document | SourceFailure], progress: ProgressSink | None) -> None:
    """Run prepare in a thread, embed here and write in the writer thread until every stage is done."""
    cfg, embedder = run.settings.ingest, run.embedder
    pool = ProcessPoolEncoder(embedder.cfg, embedder.models, cfg.workers) if cfg.workers > 1 else None
    encode = pool.encode if pool is not None else embedder.encode

    def timed(texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return encode(texts)
        finally:
            with run.lock:
                run.result.embed_seconds += time.perf_counter() - t0

    prep = threading.Thread(target=_prepare, args=(run, items), name="hsp-prepare", daemon=True)
    # the prepared batches, up to the end marker; once the run stops, the rest are taken unembedded
    queued = (batch for batch in iter(run.to_embed.get, DONE) if not run.stop.is_set())
    task = Task(progress, "ingest")
    started = time.perf_counter()

    def report(result: IngestResult) -> None:
        """The run's counts as a progress event: documents done, and a detail line."""
        written = result.indexed + result.updated
        rate = written / max(time.perf_counter() - started, 1e-6)
        task.update(result.documents, detail=(
            f"{result.documents:,} docs ({result.documents_skipped:,} unchanged, {result.documents_failed:,} "
            f"failed) · {written:,} chunks written · {rate:,.1f} chunks/s"))

    run.on_progress = report if progress is not None else None
    prep.start()
    try:
        embed_and_write(run.es, run.index, cfg, timed, queued, after=partial(_written, run),
                        on_embed_error=partial(_embed_failed, run), before=lambda _: run.lease.check(),
                        depth=cfg.queue_size)
    except KeyboardInterrupt:
        run.result.status = "interrupted"
        run.stop.set()
    except Exception as exc:  # noqa: BLE001 - re-raised by run_ingest, after the other stages stop
        run.fail(exc)
    finally:
        for _ in queued:  # the rest, unembedded, up to the end marker
            pass
        prep.join(timeout=30)
        if pool is not None:
            pool.close()
        task.finish()
