"""The ingest pipeline: read → look up → chunk → embed → bulk-write, with bounded queues between stages.

Reading, change detection (one search per batch of documents) and chunking run in a *prepare* thread,
bulk writes in a *writer* thread, and the embedder in the calling thread (or in ``workers`` processes),
so the embedder never waits on the network while the queues (``ingest.queue_size`` batches) hold work.
Every document is accounted for: indexed, unchanged (same ``content_hash``, skipped without
re-embedding) or failed with a dead-letter record. Chunk ``_id`` = ``doc_id#position@chunker``,
so a re-run rewrites nothing and resumes where an interrupted run stopped.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch

from hybridsearch.access import chunk_names, require_privileges
from hybridsearch.cluster import es_errors, make_client
from hybridsearch.embedding import Embedder
from hybridsearch.errors import ClusterError, ConfigError, HybridSearchError, ModelError
from hybridsearch.indices import alias_targets, ensure_index
from hybridsearch.ingest.chunking import HFTokenizer, Tokenizer, chunk_text, chunker_signature, embed_text, text_budget
from hybridsearch.ingest.ids import chunk_id, parent_id, shard_of
from hybridsearch.ingest.sources import Document, RecordFields, SourceFailure, read_path
from hybridsearch.ingest.writer import DeadLetter, WriteReport, write_actions
from hybridsearch.settings import Settings

log = logging.getLogger(__name__)

LOOKUP_BATCH = 64  # documents per change-detection search


@dataclass
class IngestResult:
    """What one run did. Document counts are documents; the rest count chunks."""

    run_id: str
    index: str
    source: str
    status: str = "running"  # completed | interrupted | failed
    shard: str | None = None
    documents: int = 0
    documents_skipped: int = 0
    documents_failed: int = 0
    documents_indexed: int = 0
    chunks: int = 0
    indexed: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: int = 0
    retried: int = 0
    seconds: float = 0.0
    chunks_per_second: float = 0.0
    embed_seconds: float = 0.0
    dead_letter_path: str | None = None
    started_at: str = ""
    ended_at: str = ""
    model: str = ""
    chunker: str = ""

    @property
    def changed_nothing(self) -> bool:
        return self.indexed == self.updated == self.deleted == self.failed == self.documents_failed == 0

    def summary_doc(self) -> dict[str, Any]:
        """The document stored in ``<prefix>-ingest-runs``."""
        doc = asdict(self)
        doc["@timestamp"] = self.ended_at or self.started_at
        doc["chunker_version"] = doc.pop("chunker")
        doc["chunker"] = self.chunker.split("-", 1)[0]
        return doc


@dataclass
class _Doc:
    doc: Document
    changed: bool
    n_chunks: int = 0


@dataclass
class _Batch:
    """Chunks on their way to the index; ``finals`` are documents whose last chunk is in this batch."""

    sources: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    finals: list[_Doc] = field(default_factory=list)
    vectors: Any = None


_DONE = object()


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _iter_input(documents: str | Path | Iterable[Document | SourceFailure], fields: RecordFields | None
                ) -> Iterator[Document | SourceFailure]:
    if isinstance(documents, str | Path):
        return read_path(documents, fields)
    return iter(documents)


class _Run:
    """State shared by the stages of one run."""

    def __init__(self, settings: Settings, es: Elasticsearch, embedder: Embedder, index: str, result: IngestResult,
                 shard: tuple[int, int] | None) -> None:
        self.settings, self.es, self.embedder, self.index = settings, es, embedder, index
        self.result, self.shard = result, shard
        self.signature = chunker_signature(settings.chunking)
        self.tenant = settings.index.tenant
        self.dead = DeadLetter(settings.ingest.dead_letter_dir, result.run_id)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        size = settings.ingest.queue_size
        self.to_embed: queue.Queue[Any] = queue.Queue(maxsize=size)
        self.to_write: queue.Queue[Any] = queue.Queue(maxsize=size)
        self.seen: set[str] = set()
        self.failed_docs: set[str] = set()
        self._tokenizer: Tokenizer | None = None
        self.batch_chunks = max(settings.embedding.batch_size * 4, 16)
        self.progress: Any = None
        self.on_progress: Any = None

    # ---- helpers -------------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer, loaded on first use (a run where nothing changed never loads the model)."""
        if self._tokenizer is None:
            # a copy: a Rust tokenizer used from two threads at once fails with "Already borrowed"
            self._tokenizer = HFTokenizer(copy.deepcopy(self.embedder.model.tokenizer))
        return self._tokenizer

    @property
    def max_seq(self) -> int:
        return self.embedder.max_seq_length

    def put(self, q: queue.Queue[Any], item: Any) -> bool:
        while not self.stop.is_set():
            try:
                q.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
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

    # ---- stage 1: read, filter, look up, chunk -----------------------------------------------------
    def prepare(self, items: Iterator[Document | SourceFailure]) -> None:
        try:
            group: list[Document] = []
            for item in items:
                if self.stop.is_set():
                    break
                if isinstance(item, SourceFailure):
                    key = item.doc_id or item.source
                    if self.shard is None or shard_of(key, self.shard[1]) == self.shard[0]:
                        self.count(documents=1)
                        self.doc_failed(item.doc_id, item.reason, "read", item.source)
                    continue
                if self.shard is not None and shard_of(item.doc_id, self.shard[1]) != self.shard[0]:
                    continue
                self.count(documents=1)
                if item.doc_id in self.seen:
                    self.doc_failed(item.doc_id, f"duplicate doc_id {item.doc_id!r} in this run; the first one "
                                    "was kept", "read", item.source)
                    continue
                self.seen.add(item.doc_id)
                if not item.text.strip():
                    self.doc_failed(item.doc_id, "document has no text", "read", item.source)
                    continue
                group.append(item)
                if len(group) >= LOOKUP_BATCH:
                    self._prepare_group(group)
                    group = []
            if group and not self.stop.is_set():
                self._prepare_group(group)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.fail(exc)
        finally:
            self.put_final(self.to_embed)

    @staticmethod
    def put_final(q: queue.Queue[Any]) -> None:
        """End marker; blocks until there is room (every consumer drains to the marker, even on errors)."""
        q.put(_DONE)

    def lookup(self, docs: list[Document]) -> tuple[list[_Doc], list[Document]]:
        """Split ``docs`` into work (new or changed) and unchanged, by chunk 0 of each in the index."""
        ids = [d.doc_id for d in docs]
        flt: list[dict[str, Any]] = [{"terms": {"doc_id": ids}}, {"term": {"position": 0}}]
        if self.tenant:
            flt.append({"term": {"tenant": self.tenant}})
        with es_errors("look up existing chunks"):
            hits = self.es.search(index=self.index, query={"bool": {"filter": flt}}, size=len(ids) * 4,
                                  source_includes=["doc_id", "content_hash"]).body["hits"]["hits"]
        existing: dict[str, list[tuple[str, str]]] = {}
        for h in hits:
            existing.setdefault(h["_source"]["doc_id"], []).append((h["_id"], h["_source"].get("content_hash")))
        work, same = [], []
        for d in docs:
            found = existing.get(d.doc_id, [])
            current = chunk_id(d.doc_id, 0, self.signature, self.tenant)
            if (current, d.content_hash) in found:
                same.append(d)
            else:
                work.append(_Doc(d, changed=bool(found)))
        return work, same

    def _prepare_group(self, docs: list[Document]) -> None:
        work, same = self.lookup(docs)
        if same:
            flt: list[dict[str, Any]] = [{"terms": {"doc_id": [d.doc_id for d in same]}}]
            if self.tenant:
                flt.append({"term": {"tenant": self.tenant}})
            with es_errors("count unchanged chunks"):
                n = int(self.es.count(index=self.index, query={"bool": {"filter": flt}}).body["count"])
            self.count(documents_skipped=len(same), unchanged=n)
        batch = _Batch()
        for item in work:
            first: tuple[dict[str, Any], str] | None = None
            for part in self._chunks(item):
                if first is None:  # chunk 0 marks the document done: it travels in the document's last batch
                    first = part
                    continue
                batch.sources.append(part[0])
                batch.texts.append(part[1])
                if len(batch.sources) >= self.batch_chunks:
                    if not self.put(self.to_embed, batch):
                        return
                    batch = _Batch()
            if first is not None:
                batch.sources.append(first[0])
                batch.texts.append(first[1])
            batch.finals.append(item)
        if (batch.sources or batch.finals) and not self.put(self.to_embed, batch):
            return

    def _chunks(self, item: _Doc) -> Iterator[tuple[dict[str, Any], str]]:
        try:
            for src, text in document_chunks(item.doc, self.settings, self.tokenizer, self.max_seq):
                item.n_chunks += 1
                yield src, text
        except (ValueError, TypeError) as exc:
            self.failed_docs.add(item.doc.doc_id)
            self.dead.write(doc_id=item.doc.doc_id, reason=f"cannot chunk: {exc}", stage="chunk",
                            source=item.doc.source)

    # ---- stage 2: embed (calling thread) -----------------------------------------------------------
    def embed_loop(self, encode: Any) -> None:
        while True:
            batch = self.to_embed.get()
            if batch is _DONE:
                break
            if self.stop.is_set():
                continue
            if batch.texts:
                t0 = time.perf_counter()
                try:
                    batch.vectors = encode(batch.texts)
                except Exception as exc:  # noqa: BLE001 - recorded per chunk, the run goes on
                    for src in batch.sources:
                        self.failed_docs.add(src["doc_id"])
                        self.dead.write(doc_id=src["doc_id"], chunk_id=src["chunk_id"], stage="embed",
                                        reason=f"embedding failed: {type(exc).__name__}: {exc}", source=src["source"])
                    self.count(failed=len(batch.sources))
                    batch.sources, batch.texts = [], []
                with self.lock:
                    self.result.embed_seconds += time.perf_counter() - t0
            if not self.put(self.to_write, batch):
                break

    # ---- stage 3: write ----------------------------------------------------------------------------
    def write_loop(self) -> None:
        try:
            while True:
                batch = self.to_write.get()
                if batch is _DONE:
                    return
                self._write(batch)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.fail(exc)
            while self.to_write.get() is not _DONE:  # drain so the embedder can finish
                pass

    def _write(self, batch: _Batch) -> None:
        actions: list[dict[str, Any]] = []
        for src, vec in zip(batch.sources, batch.vectors if batch.vectors is not None else [], strict=True):
            src["embedding"] = [float(x) for x in vec]
            actions.append({"_op_type": "index", "_index": self.index, "_id": src["chunk_id"], "_source": src})
        # chunk 0 carries the content_hash that marks a document done: write it last
        actions.sort(key=lambda a: a["_source"]["position"] == 0)
        report = write_actions(self.es, actions, self.settings.ingest, stop=None)
        for f in report.failures:
            self.failed_docs.add(f.doc_id)
            src = next((a["_source"] for a in actions if a["_id"] == f.chunk_id), {})
            self.dead.write(doc_id=f.doc_id, chunk_id=f.chunk_id, reason=f.reason, stage="write",
                            status=f.status, source=src.get("source"))
        self.count(chunks=len(actions), indexed=report.created, updated=report.updated,
                   failed=len(report.failures), retried=report.retried)
        self._finalize(batch.finals, report)

    def _finalize(self, finals: list[_Doc], report: WriteReport) -> None:
        if not finals:
            return
        failed = [f for f in finals if f.doc.doc_id in self.failed_docs]
        good = [f for f in finals if f.doc.doc_id not in self.failed_docs]
        if failed:
            # un-mark them: without chunk 0 a re-run sees them as not done and tries again
            undo = [{"_op_type": "delete", "_index": self.index, "_doc_id": f.doc.doc_id,
                     "_id": chunk_id(f.doc.doc_id, 0, self.signature, self.tenant)} for f in failed]
            write_actions(self.es, undo, self.settings.ingest)
            self.count(documents_failed=len(failed))
        self.count(documents_indexed=len(good))
        # every written document, not only the changed ones: a document whose earlier run failed half-way
        # has no chunk 0 (so it looks new) but may still have surplus chunks from its older version
        stale = self._stale_ids(good)
        if stale:
            rep = write_actions(self.es, [{"_op_type": "delete", "_index": self.index, "_id": i, "_doc_id": d}
                                          for i, d in stale], self.settings.ingest)
            for f in rep.failures:
                self.dead.write(doc_id=f.doc_id, chunk_id=f.chunk_id, reason=f"stale chunk not deleted: {f.reason}",
                                stage="delete", status=f.status)
            self.count(deleted=rep.deleted)

    def _stale_ids(self, docs: list[_Doc]) -> list[tuple[str, str]]:
        if not docs:
            return []
        keep = {chunk_id(f.doc.doc_id, i, self.signature, self.tenant) for f in docs for i in range(f.n_chunks)}
        return [(i, d) for i, d in existing_chunk_ids(self.es, self.index, [f.doc.doc_id for f in docs],
                                                       self.tenant) if i not in keep]


def document_chunks(d: Document, settings: Settings, tokenizer: Tokenizer, max_seq_length: int
                    ) -> Iterator[tuple[dict[str, Any], str]]:
    """``(chunk document without its vector, text to embed)`` for each chunk of ``d``, lazily."""
    signature, tenant = chunker_signature(settings.chunking), settings.index.tenant
    limit = text_budget(tokenizer, d.title, settings.embedding.prepend_title, max_seq_length)
    now = _now()
    for c in chunk_text(d.text, settings.chunking, tokenizer, limit):
        cid = chunk_id(d.doc_id, c.position, signature, tenant)
        src: dict[str, Any] = {
            "doc_id": d.doc_id, "chunk_id": cid, "position": c.position,
            "char_start": c.char_start, "char_end": c.char_end, "title": d.title, "text": c.text,
            "source": d.source, "content_hash": d.content_hash, "tenant": tenant,
            "ingested_at": now, "metadata": d.metadata,
        }
        if c.parent_start is not None and c.parent_end is not None:
            src.update(parent_id=parent_id(d.doc_id, c.parent_start, c.parent_end, signature),
                       parent_text=d.text[c.parent_start:c.parent_end],
                       parent_start=c.parent_start, parent_end=c.parent_end)
        yield src, embed_text(d.title, c.text, settings.embedding.prepend_title)


def existing_chunk_ids(es: Elasticsearch, index: str, doc_ids: list[str], tenant: str | None = None
                       ) -> list[tuple[str, str]]:
    """``(_id, doc_id)`` of every chunk of ``doc_ids`` in ``index`` (searchable ones; refresh first)."""
    from elasticsearch import helpers

    flt: list[dict[str, Any]] = [{"terms": {"doc_id": doc_ids}}]
    if tenant:
        flt.append({"term": {"tenant": tenant}})
    with es_errors("list chunks"):
        return [(h["_id"], h["_source"]["doc_id"]) for h in helpers.scan(
            es, index=index, query={"query": {"bool": {"filter": flt}}, "_source": ["doc_id"]}, size=1000)]


def _check_embedder(embedder: Embedder, settings: Settings) -> None:
    from hybridsearch.embedding import resolve_model

    want, have = settings.embedding, embedder.cfg
    if resolve_model(want.model) != resolve_model(have.model) or want.dims != have.dims:
        raise ModelError(f"the embedder ({have.model}, {have.dims} dims) is not the model the settings name "
                         f"({want.model}, {want.dims} dims)")


def run_ingest(documents: str | Path | Iterable[Document | SourceFailure], settings: Settings, *,
               es: Elasticsearch | None = None, embedder: Embedder | None = None, progress: bool = False,
               shard: tuple[int, int] | None = None, fields: RecordFields | None = None) -> IngestResult:
    """Ingest ``documents`` (a path, or Documents) into the chunk index; returns the run's counts.

    Ensures the index (checking its ``_meta`` against the model: IndexMismatch), skips unchanged documents,
    replaces changed ones, dead-letters what fails and records the run in ``<prefix>-ingest-runs``.
    ``shard=(i, n)`` keeps only documents whose id hashes to ``i`` of ``n``. On Ctrl-C the run stops after
    the batches in flight and returns with ``status="interrupted"``. Raises ClusterUnavailable when the
    cluster stays unreachable, ConfigError for a bad shard.
    """
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise ConfigError(f"shard {shard[0]}/{shard[1]} is not i/N with 0 <= i < N")
    es = es or make_client(settings.es)
    embedder = embedder or Embedder(settings.embedding)
    _check_embedder(embedder, settings)
    index = ensure_index(es, settings)
    with es_errors(f"refresh {index}"):
        es.indices.refresh(index=index)
    started = time.perf_counter()
    result = IngestResult(run_id=f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}", index=index,
                          source=str(documents) if isinstance(documents, str | Path) else "<documents>",
                          shard=f"{shard[0]}/{shard[1]}" if shard else None, started_at=_now(),
                          model=settings.embedding.model, chunker=chunker_signature(settings.chunking))
    run = _Run(settings, es, embedder, index, result, shard)
    from hybridsearch.ingest.progress import IngestProgress
    from hybridsearch.ingest.workers import make_encoder

    encoder = make_encoder(embedder, settings)
    prep = threading.Thread(target=run.prepare, args=(_iter_input(documents, fields),), name="hsp-prepare",
                            daemon=True)
    writer = threading.Thread(target=run.write_loop, name="hsp-writer", daemon=True)
    with IngestProgress(enabled=progress) as bar:
        run.on_progress = bar.update
        prep.start()
        writer.start()
        try:
            run.embed_loop(encoder.encode)
        except KeyboardInterrupt:
            result.status = "interrupted"
            run.stop.set()
            run.embed_loop(lambda texts: None)  # drain to the end marker without embedding
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the other stages stop
            run.fail(exc)
            while run.to_embed.get() is not _DONE:
                pass
        finally:
            run.put_final(run.to_write)
            writer.join()
            prep.join(timeout=30)
            encoder.close()
    result.seconds = round(time.perf_counter() - started, 3)
    written = result.indexed + result.updated
    result.chunks_per_second = round(written / result.seconds, 2) if result.seconds else 0.0
    result.embed_seconds = round(result.embed_seconds, 3)
    result.ended_at = _now()
    result.dead_letter_path = str(run.dead.path) if run.dead.used else None
    if run.error is not None:
        result.status = "failed"
    elif result.status == "running":
        result.status = "completed"
    _finish(es, settings, index, result)
    if run.error is not None:
        if isinstance(run.error, HybridSearchError):
            raise run.error
        raise ClusterError(f"ingest failed: {run.error!r}") from run.error
    return result


def _finish(es: Elasticsearch, settings: Settings, index: str, result: IngestResult) -> None:
    """Refresh the chunk index and store the run summary; a failure here is logged, not raised."""
    try:
        with es_errors("store ingest run"):
            es.indices.refresh(index=index)
            es.index(index=settings.index.ingest_runs, id=result.run_id, document=result.summary_doc(),
                     refresh="wait_for")
    except HybridSearchError as exc:
        log.warning("could not record ingest run %s: %s", result.run_id, exc)


def delete_documents(doc_ids: Iterable[str], settings: Settings, es: Elasticsearch | None = None) -> int:
    """Delete every chunk of ``doc_ids`` from the index behind the read alias; returns chunks deleted.

    Unknown ids delete nothing. Raises PermissionDenied before deleting anything when the credentials may
    not, ClusterError (IndexNotFound when there is no index)."""
    es = es or make_client(settings.es)
    require_privileges(es, chunk_names(settings), ("read", "delete"),
                       f"delete documents of prefix {settings.index.prefix}")
    ids = list(dict.fromkeys(doc_ids))
    targets = alias_targets(es, settings.index.alias)
    if not ids or not targets:
        return 0
    deleted = 0
    for index in targets:
        with es_errors(f"refresh {index}"):
            es.indices.refresh(index=index)
        for start in range(0, len(ids), 500):
            found = existing_chunk_ids(es, index, ids[start:start + 500], settings.index.tenant)
            rep = write_actions(es, [{"_op_type": "delete", "_index": index, "_id": i, "_doc_id": d}
                                     for i, d in found], settings.ingest)
            if rep.failures:
                raise ClusterError(f"{len(rep.failures)} chunks could not be deleted: {rep.failures[0].reason}")
            deleted += rep.deleted
        with es_errors(f"refresh {index}"):
            es.indices.refresh(index=index)
    return deleted
