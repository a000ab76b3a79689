"""The ingest pipeline: read → look up → chunk → embed → bulk-write, with bounded queues between stages.

Reading, change detection (one search per batch of documents) and chunking run in a *prepare* thread
(:mod:`.prepare`); the embedder runs in the calling thread (or in ``workers`` processes) and bulk writes in
a *writer* thread (:mod:`.stage`, the embed-and-write stage migrations use too), so the embedder never
waits on the network while the queues (``ingest.queue_size`` batches) hold work. Every document is
accounted for: indexed, unchanged (same ``content_hash``, skipped without re-embedding) or failed with a
dead-letter record. Chunk ``_id`` = ``doc_id#position@chunker``, so a re-run rewrites nothing and resumes
where an interrupted run stopped. A document is staged and committed (:mod:`.commit`): it becomes
searchable only when all of it is written, and the chunks a stopped run wrote are reused, not embedded
again. The run is recorded from its start (:mod:`.runs`), so a run killed outright is recorded as
``killed`` by the next one.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.embedding import Embedder
from hybridsearch.engine import EngineClient, connect, engine_errors
from hybridsearch.errors import ClusterError, ConfigError, HybridSearchError, ModelError
from hybridsearch.indices import ensure_index, index_meta, section_words_of
from hybridsearch.ingest.commit import Staged, commit
from hybridsearch.ingest.commit import delete_documents as delete_documents
from hybridsearch.ingest.commit import existing_chunk_ids as existing_chunk_ids
from hybridsearch.ingest.layout import now
from hybridsearch.ingest.prepare import Preparer
from hybridsearch.ingest.runs import IngestResult, RunRecord
from hybridsearch.ingest.sources import Document, RecordFields, SourceFailure, read_path
from hybridsearch.ingest.stage import EmbedWriter
from hybridsearch.ingest.state import DONE, Batch, RunState, WorkDoc
from hybridsearch.ingest.writer import WriteReport
from hybridsearch.settings import EmbeddingSettings, IngestSettings, Settings

log = logging.getLogger(__name__)
#: seconds between merge attempts while the engine still keeps deleted copies (:func:`merge_deleted`)
MERGE_POLL_S = 5.0
#: longest wait for one merge request (a big index's merge goes on in the engine after it)
MERGE_REQUEST_S = 600.0

Input = str | Path | Iterable[Document | SourceFailure]


def _iter_input(documents: Input, fields: RecordFields | None) -> Iterator[Document | SourceFailure]:
    if isinstance(documents, str | Path):
        return read_path(documents, fields)
    return iter(documents)


class _Committer:
    """Ingest stage 3, in the writer thread after each batch is written: count, dead-letter, commit."""

    def __init__(self, run: RunState) -> None:
        self.run = run

    def embed_failed(self, batch: Batch, exc: Exception) -> None:
        """Dead-letter every chunk of a batch the embedder refused; the run goes on."""
        run = self.run
        for src in batch.sources:
            run.failed_docs.add(src["doc_id"])
            run.dead.write(doc_id=src["doc_id"], chunk_id=src["chunk_id"], stage="embed",
                           reason=f"embedding failed: {type(exc).__name__}: {exc}", source=src["source"])
        run.count(failed=len(batch.sources))

    def written(self, batch: Batch, report: WriteReport) -> None:
        run = self.run
        by_id = dict(zip(batch.ids, batch.sources, strict=True))
        for f in report.failures:
            run.failed_docs.add(f.doc_id)
            run.dead.write(doc_id=f.doc_id, chunk_id=f.chunk_id, reason=f.reason, stage="write",
                           status=f.status, source=by_id.get(f.chunk_id, {}).get("source"))
        run.count(chunks=len(batch.ids), indexed=report.created, updated=report.updated,
                  failed=len(report.failures), retried=report.retried)
        self._finalize(batch.finals)

    def _finalize(self, finals: list[WorkDoc]) -> None:
        """Commit the documents whose chunks are all written; ones with a failed chunk stay hidden (a re-run
        writes what is missing and commits them)."""
        run = self.run
        if not finals:
            return
        failed = [f for f in finals if f.doc.doc_id in run.failed_docs]
        if failed:
            run.count(documents_failed=len(failed))
        good = [Staged(f.doc.doc_id, f.ids, f.stored) for f in finals if f.doc.doc_id not in run.failed_docs]
        deletes, flips = commit(run.es, run.index, run.result.run_id, good, run.settings.ingest)
        for f in deletes.failures:
            run.dead.write(doc_id=f.doc_id, chunk_id=f.chunk_id, reason=f"stale chunk not deleted (hidden): "
                           f"{f.reason}", stage="delete", status=f.status)
        broken = {f.doc_id for f in flips.failures}
        for f in flips.failures:
            run.dead.write(doc_id=f.doc_id, chunk_id=f.chunk_id, reason=f"not made visible: {f.reason}",
                           stage="commit", status=f.status)
        run.count(deleted=deletes.deleted, documents_indexed=len(good) - len(broken), documents_failed=len(broken))


def _check_embedder(embedder: Embedder, want: EmbeddingSettings) -> None:
    from hybridsearch.embedding import resolve_model

    have = embedder.cfg
    if resolve_model(want.model) != resolve_model(have.model) or want.dims != have.dims:
        raise ModelError(f"the embedder ({have.model}, {have.dims} dims) is not the model the settings name "
                         f"({want.model}, {want.dims} dims)")


def run_ingest(documents: Input, settings: Settings, *, es: EngineClient | None = None,
               embedder: Embedder | None = None, progress: bool = False, shard: tuple[int, int] | None = None,
               fields: RecordFields | None = None) -> IngestResult:
    """Ingest ``documents`` (a path, or Documents) into the chunk index; returns the run's counts.

    Ensures the index (checking its mapping against the settings: IndexMismatch; an alias over several
    indices: AliasConflict), skips unchanged documents, replaces changed ones (each visible only once all of
    it is written), dead-letters what fails and records the run in ``<prefix>-ingest-runs`` from its start
    (marking runs that died unrecorded as ``killed``). ``shard=(i, n)`` keeps only documents whose id hashes
    to ``i`` of ``n``. On Ctrl-C or SIGTERM the run stops after the batches in flight and returns with
    ``status="interrupted"``. Raises ClusterUnavailable when the cluster stays unreachable, ConfigError for
    a bad shard.
    """
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise ConfigError(f"shard {shard[0]}/{shard[1]} is not i/N with 0 <= i < N")
    es = es or connect(settings.es)
    embedder = embedder or Embedder(settings.embedding)
    _check_embedder(embedder, settings.embedding)
    index = ensure_index(es, settings)
    _refresh(es, index)
    started = time.perf_counter()
    result = IngestResult(run_id=f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}", index=index,
                          source=str(documents) if isinstance(documents, str | Path) else "<documents>",
                          shard=f"{shard[0]}/{shard[1]}" if shard else None, started_at=now(),
                          model=settings.embedding.model, chunker=chunker_signature(settings.chunking))
    run = RunState(settings, es, index, result, shard)
    run.section_words = section_words_of(index_meta(es, index))  # the index decides, not the settings
    record = RunRecord(es, settings, result, run.lock)
    record.start()
    restore = _stop_on_sigterm(run)
    try:
        _stages(run, embedder, _iter_input(documents, fields), progress)
    finally:
        restore()
    _close(run, started)
    try:
        _refresh(es, index)
    except HybridSearchError as exc:
        log.warning("could not refresh %s: %s", index, exc)
    if run.error is None and settings.ingest.merge_deleted and result.indexed + result.updated + result.deleted:
        result.merge_seconds = merge_deleted(es, index, settings.ingest)
    record.finish()
    if run.error is not None:
        if isinstance(run.error, HybridSearchError):
            raise run.error
        raise ClusterError(f"ingest failed: {run.error!r}") from run.error
    return result


def merge_deleted(es: EngineClient, index: str, cfg: IngestSettings) -> float | None:
    """Merge the deleted chunk copies out of ``index`` when there are at least ``cfg.merge_min_deleted``; the
    seconds it took, or None when not needed, interrupted, failed or still unfinished after ``cfg.merge_wait_s``
    (logged; the engine's own merges drop them some day).

    Every chunk a run writes leaves a deleted copy (written staged, then again visible: :mod:`.commit`), so a
    freshly built index is half deleted documents, and the engine does not merge them away by itself while the
    index is idle. They cost disk (a SciFact index: 76 MB, 38 MB merged) and search time (same queries: BM25 p50
    9.1 → 6.3 ms, dense 16.3 → 14.1 ms), and sent Elasticsearch's ACORN filtered kNN astray
    (``EngineInfo.chunk_index_settings``). The engine keeps soft-deleted copies for about 30 s after they were
    written (its retention leases renew on that schedule), so this flushes and merges until they are gone."""
    t0 = time.perf_counter()
    try:
        with engine_errors(f"merge deleted chunk copies out of {index}"):
            if _deleted_docs(es, index) < cfg.merge_min_deleted:
                return None
            while True:
                es.indices.flush(index=index)
                es.indices.forcemerge(index=index, only_expunge_deletes=True, wait_s=MERGE_REQUEST_S)
                left = _deleted_docs(es, index)
                if left < cfg.merge_min_deleted:
                    return round(time.perf_counter() - t0, 3)
                if time.perf_counter() - t0 + MERGE_POLL_S > cfg.merge_wait_s:
                    log.warning("%d deleted chunk copies stay in %s after %.0f s (the engine still keeps them); "
                                "its merges drop them later", left, index, cfg.merge_wait_s)
                    return None
                time.sleep(MERGE_POLL_S)
    except KeyboardInterrupt:
        log.warning("merging deleted chunk copies out of %s was interrupted; the engine's merges drop them later",
                    index)
    except HybridSearchError as exc:
        log.warning("deleted chunk copies stay in %s until the engine merges them: %s", index, exc)
    return None


def _deleted_docs(es: EngineClient, index: str) -> int:
    es.indices.refresh(index=index)
    return int(es.indices.stats(index=index, metric="docs")["_all"]["primaries"]["docs"].get("deleted", 0))


def _refresh(es: EngineClient, index: str) -> None:
    with engine_errors(f"refresh {index}"):
        es.indices.refresh(index=index)


def _close(run: RunState, started: float) -> None:
    """Fill in the result's totals and final status."""
    result = run.result
    result.seconds = round(time.perf_counter() - started, 3)
    written = result.indexed + result.updated
    result.chunks_per_second = round(written / result.seconds, 2) if result.seconds else 0.0
    result.embed_seconds = round(result.embed_seconds, 3)
    result.ended_at = now()
    result.dead_letter_path = str(run.dead.path) if run.dead.used else None
    if run.error is not None:
        result.status = "failed"
    elif run.terminated:
        result.status = "interrupted"
    elif result.status == "running":
        result.status = "completed"


def _stop_on_sigterm(run: RunState) -> Callable[[], object]:
    """Make SIGTERM stop ``run`` like Ctrl-C (after the batches in flight, recorded as interrupted) while it
    runs; returns the function that puts the previous handler back. Only the main thread can do this."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        run.terminated = True
        run.stop.set()

    signal.signal(signal.SIGTERM, on_term)
    return lambda: signal.signal(signal.SIGTERM, previous)


class _Queued:
    """The prepared batches, until the end marker; once the run stops, the rest are drained unembedded."""

    def __init__(self, run: RunState) -> None:
        self.run, self.ended = run, False

    def __iter__(self) -> Iterator[Batch]:
        while not self.ended:
            batch = self.run.to_embed.get()
            if batch is DONE:
                self.ended = True
            elif not self.run.stop.is_set():
                yield batch

    def drain(self) -> None:
        for _ in self:
            pass


def _stages(run: RunState, embedder: Embedder, items: Iterator[Document | SourceFailure], progress: bool) -> None:
    """Run prepare in a thread, embed here and write in the writer thread until every stage is done."""
    from hybridsearch.ingest.progress import IngestProgress
    from hybridsearch.ingest.workers import make_encoder

    settings = run.settings
    encoder = make_encoder(embedder, settings)
    committer = _Committer(run)
    stage: EmbedWriter[Batch] = EmbedWriter(run.es, run.index, settings.ingest, encoder.encode,
                                            after=committer.written, on_embed_error=committer.embed_failed,
                                            depth=settings.ingest.queue_size, name="hsp-writer")
    preparer = Preparer(run, embedder, batch_chunks=max(settings.embedding.batch_size * 4, 16))
    prep = threading.Thread(target=preparer, args=(items,), name="hsp-prepare", daemon=True)
    queued = _Queued(run)
    with IngestProgress(enabled=progress) as bar:
        run.on_progress = bar.update
        prep.start()
        try:
            stage.run(queued)
        except KeyboardInterrupt:
            run.result.status = "interrupted"
            run.stop.set()
        except Exception as exc:  # noqa: BLE001 - re-raised by run_ingest, after the other stages stop
            run.fail(exc)
        finally:
            queued.drain()
            prep.join(timeout=30)
            encoder.close()
            with run.lock:
                run.result.embed_seconds += stage.embed_seconds
