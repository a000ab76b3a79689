"""The ingest pipeline: read, look up, chunk and hide in a prepare thread (:mod:`.prepare`), embed here (or in
``ingest.workers`` processes), bulk-write in a writer thread, then show each whole document (:mod:`.commit`), under
the prefix's lease and with the run recorded from its start (:mod:`.lease`). Every document is accounted for:
indexed, unchanged (same ``content_hash``) or dead-lettered.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient
from hybridsearch.errors import ConfigError, HybridSearchError, IngestError, LeaseLost, ModelError
from hybridsearch.index.metadata import metadata_fields_of
from hybridsearch.index.spec import follow_index, section_words_of
from hybridsearch.index.versions import ensure_index, index_mapping, index_meta, read_alias
from hybridsearch.ingest.commit import WorkDoc, delete_documents, existing_chunk_ids, finish, refresh, whole_documents
from hybridsearch.ingest.lease import IngestResult, Lease, RunRecord, now
from hybridsearch.ingest.prepare import DONE, Batch, Preparer, RunState
from hybridsearch.ingest.sources import Document, RecordFields, SourceFailure, read_path
from hybridsearch.ingest.sync import owned_documents, plan_sync, refusal
from hybridsearch.ingest.writer import EmbedWriter, ProcessPoolEncoder, WriteReport
from hybridsearch.progress import ProgressSink, Task
from hybridsearch.settings import Settings

log = logging.getLogger(__name__)

Input = str | Path | Iterable[Document | SourceFailure]


def _embed_failed(run: RunState, batch: Batch, exc: Exception) -> None:
    """Dead-letter every chunk of a batch the embedder refused; the run goes on."""
    for src in batch.sources:
        run.failed_docs.add(src["doc_id"])
        run.dead.write(doc_id=src["doc_id"], chunk_id=src["chunk_id"], stage="embed",
                       reason=f"embedding failed: {type(exc).__name__}: {exc}", source=src["source"])
    run.count(failed=len(batch.sources))


def _written(run: RunState, batch: Batch, report: WriteReport) -> None:
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
    deletes, broken = finish(run.es, run.index, run.lease, good, run.settings.ingest,
                             untouched=[f.doc.doc_id for f in failed if run.untouched(f)])
    run.written_docs.difference_update(f.doc.doc_id for f in finals)  # done with: the set holds those in flight
    for f in deletes.failures:
        run.dead.write(doc_id=f.doc_id, chunk_id=f.chunk_id, reason=f"old chunk not deleted (the document stays "
                       f"hidden): {f.reason}", stage="delete", status=f.status)
    run.count(deleted=deletes.deleted, documents_indexed=len(good) - len(broken), documents_failed=len(broken),
              repaired=sum(1 for g in good if g.doc.doc_id in run.adopted and g.doc.doc_id not in broken))


def _settle_model(es: EngineClient, settings: Settings, embedder: Embedder | None) -> tuple[Settings, Embedder]:
    """The run's settings and embedder: without one given, the live index's model where ``HSP_EMBEDDING__MODEL`` is
    unset (:func:`follow_index`). The model is found before anything is created or hidden, and loaded when this run
    would create the index, so a model that cannot load leaves no index behind. Raises ModelError."""
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


def run_ingest(documents: Input, settings: Settings, *, es: EngineClient | None = None,
               embedder: Embedder | None = None, progress: ProgressSink | None = None,
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
    run = RunState(settings, es, index, result, shard, lease)
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
        restore = _stop_on_sigterm(run)
        try:
            items = read_path(documents, fields) if isinstance(documents, str | Path) else iter(documents)
            _stages(run, embedder, items, progress)
        finally:
            restore()
        if run.error is None and not run.stop.is_set():
            if root is not None:
                _delete_stale(run, root, force)
            _repair_adopted(run)
    finally:
        try:
            result.still_hidden = len(lease.release())
        except HybridSearchError as exc:  # the lease runs out by itself; the next run takes it over
            log.warning("could not release the ingest lease: %s", exc)
    _close(run, started)
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
        empty = set(unread) - {d for _, d in existing_chunk_ids(run.es, run.index, unread, run.tenant)}
        run.lease.show(empty)  # nothing of them is left to show
    except HybridSearchError as exc:  # recorded, then raised by run_ingest; what was not deleted stays hidden
        run.fail(exc)
        return
    run.adopted -= set(gone) | empty
    run.count(deleted=chunks, documents_deleted=len(gone))


def _repair_adopted(run: RunState) -> None:
    """Show the adopted documents this run did not write again whose chunks are all there; the others stay
    hidden until their source is ingested."""
    rest = run.adopted - run.rewritten
    if not rest:
        return
    refresh(run.es, run.index)
    whole = whole_documents(run.es, run.index, rest, run.tenant)
    run.lease.show(whole)
    run.count(repaired=len(whole))
    if rest - whole:
        log.warning("%d documents a stopped run left half written stay hidden until their sources are ingested "
                    "again (e.g. %s)", len(rest - whole), ", ".join(sorted(rest - whole)[:3]))


def _close(run: RunState, started: float) -> None:
    """Fill in the result's totals and final status."""
    result = run.result
    result.seconds = round(time.perf_counter() - started, 3)
    written = result.indexed + result.updated
    result.chunks_per_second = round(written / result.seconds, 2) if result.seconds else 0.0
    result.embed_seconds = round(result.embed_seconds, 3)
    result.ended_at = now()
    result.dead_letter_path = str(run.dead.path) if run.dead.count else None
    if isinstance(run.error, LeaseLost):
        result.status = "lease_lost"
    elif run.error is not None:
        result.status = "failed"
    elif run.terminated:
        result.status = "interrupted"
    elif result.status == "running":
        result.status = "completed"


def _stop_on_sigterm(run: RunState) -> Callable[[], object]:
    """Make SIGTERM stop ``run`` like Ctrl-C while it runs (main thread only); returns what restores the handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(*_: Any) -> None:
        run.terminated = True
        run.stop.set()

    signal.signal(signal.SIGTERM, on_term)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _queued(run: RunState) -> Iterator[Batch]:
    """The prepared batches, until the end marker; once the run stops, the rest are taken unembedded."""
    while (batch := run.to_embed.get()) is not DONE:
        if not run.stop.is_set():
            yield batch


def _stages(run: RunState, embedder: Embedder, items: Iterator[Document | SourceFailure],
            progress: ProgressSink | None) -> None:
    """Run prepare in a thread, embed here and write in the writer thread until every stage is done."""
    settings = run.settings
    workers = settings.ingest.workers
    pool = ProcessPoolEncoder(embedder.cfg, embedder.models, workers) if workers > 1 else None
    stage: EmbedWriter[Batch] = EmbedWriter(run.es, run.index, settings.ingest,
                                            pool.encode if pool is not None else embedder.encode,
                                            after=partial(_written, run), on_embed_error=partial(_embed_failed, run),
                                            before=lambda _: run.lease.check(),
                                            depth=settings.ingest.queue_size)
    preparer = Preparer(run, embedder, batch_chunks=max(settings.embedding.batch_size * 4, 16))
    prep = threading.Thread(target=preparer, args=(items,), name="hsp-prepare", daemon=True)
    queued = _queued(run)
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
    try:
        prep.start()
        try:
            stage.run(queued)
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
            with run.lock:
                run.result.embed_seconds += stage.embed_seconds
    finally:
        task.finish()
