"""Ingest stage 1, in its own thread (:class:`Preparer`): read, keep this run's documents, skip the unchanged (chunk 0
visible with their ``content_hash``), chunk, hide and queue batches to embed, reusing chunks a stopped run already
wrote; and :class:`RunState`, what the stages of one run share.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.errors import HybridSearchError
from hybridsearch.index.visibility import visible_query
from hybridsearch.ingest.chunking import Tokenizer, chunk_id, document_chunks
from hybridsearch.ingest.commit import Stored, WorkDoc, doc_filter, stored_chunks
from hybridsearch.ingest.lease import IngestResult, Lease, owns
from hybridsearch.ingest.sources import Document, SourceFailure
from hybridsearch.ingest.writer import ChunkBatch, DeadLetter
from hybridsearch.settings import Settings

DONE = object()  # end marker on the queue between the prepare stage and the embedder


@dataclass
class Batch(ChunkBatch):
    """Chunks of one ingest batch; ``finals`` are documents whose last chunk is in this batch."""

    finals: list[WorkDoc] = field(default_factory=list)


class RunState:
    """State shared by the stages of one run (prepare thread, embedder, writer thread)."""

    def __init__(self, settings: Settings, es: EngineClient, index: str, result: IngestResult,
                 shard: tuple[int, int] | None, lease: Lease) -> None:
        self.settings, self.es, self.index = settings, es, index
        self.result, self.shard, self.lease = result, shard, lease
        self.adopted = lease.adopted  # documents a stopped run left hidden, this run's to repair
        self.rewritten: set[str] = set()  # adopted documents this run wrote again from its input
        self.signature = chunker_signature(settings.chunking)
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

    def put(self, item: Batch) -> bool:
        """Queue ``item`` for the embedder; False once the run is stopping."""
        while not self.stop.is_set():
            try:
                self.to_embed.put(item, timeout=0.2)
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

    def untouched(self, item: WorkDoc) -> bool:
        """Whether the index holds nothing of ``item``'s new version (no chunk written or reused) and it was not
        left half written by a stopped run: it holds the old version whole, or nothing."""
        return (item.doc.doc_id not in self.written_docs and not item.stored.same
                and item.doc.doc_id not in self.adopted)

    def count(self, **deltas: int) -> None:
        with self.lock:
            for k, v in deltas.items():
                setattr(self.result, k, getattr(self.result, k) + v)
        if self.on_progress is not None:
            self.on_progress(self.result)


LOOKUP_BATCH = 64  # documents per change-detection search


class Preparer:
    """Turns the input into queued :class:`Batch` es of ``batch_chunks`` chunks."""

    def __init__(self, run: RunState, embedder: Embedder, batch_chunks: int) -> None:
        self.run, self.embedder, self.batch_chunks = run, embedder, batch_chunks

    @cached_property
    def tokenizer(self) -> Tokenizer:
        """Loaded on first use: a run where nothing changed never loads the model."""
        return self.embedder.tokenizer()

    def __call__(self, items: Iterator[Document | SourceFailure]) -> None:
        run = self.run
        try:
            group: list[Document] = []
            for item in items:
                if run.stop.is_set():
                    break
                doc = self._admit(item)
                if doc is not None:
                    group.append(doc)
                if len(group) >= LOOKUP_BATCH:
                    self._prepare_group(group)
                    group = []
            if group and not run.stop.is_set():
                self._prepare_group(group)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            run.fail(exc)
        finally:
            run.to_embed.put(DONE)  # blocks until there is room: the embedder drains to the marker

    def _admit(self, item: Document | SourceFailure) -> Document | None:
        """The document when it is this run's to write; counts and dead-letters the rest."""
        run = self.run
        if isinstance(item, SourceFailure):
            if owns(self.run.shard, item.doc_id or item.source):
                run.count(documents=1)
                run.doc_failed(item.doc_id, item.reason, "read", item.source)
            return None
        if not owns(self.run.shard, item.doc_id):
            return None
        run.count(documents=1)
        if item.doc_id in self.run.yielded:
            run.doc_failed(item.doc_id, f"duplicate doc_id {item.doc_id!r} in this run; the first one was kept",
                           "read", item.source)
            return None
        self.run.yielded.add(item.doc_id)
        if not item.text.strip():
            run.doc_failed(item.doc_id, "document has no text", "read", item.source)
            return None
        return item

    def _filter(self, doc_ids: list[str], *extra: dict[str, Any]) -> dict[str, Any]:
        """Visible chunks of ``doc_ids`` (and ``extra``) in this run's tenant."""
        return visible_query(self.run.settings.index.ingest_state, [*doc_filter(doc_ids, self.run.tenant), *extra])

    def lookup(self, docs: list[Document]) -> tuple[list[WorkDoc], list[Document]]:
        """Split ``docs`` into work (new, changed, or hidden: left unfinished by a stopped run) and unchanged."""
        run = self.run
        query = self._filter([d.doc_id for d in docs], {"term": {"position": 0}})
        with engine_errors("look up existing chunks"):
            hits = run.es.send(request.search(run.index, request.body(
                query=query, size=len(docs) * 4, source=["doc_id", "content_hash"])))["hits"]["hits"]
        done = {(h["_id"], h["_source"].get("content_hash")) for h in hits}
        same = [d for d in docs if (chunk_id(d.doc_id, 0, run.signature, run.tenant), d.content_hash) in done]
        rest = [d for d in docs if d not in same]
        stored = stored_chunks(run.es, run.index, {d.doc_id: d.content_hash for d in rest}, run.tenant)
        return [WorkDoc(d, stored.get(d.doc_id, Stored())) for d in rest], same

    def _prepare_group(self, docs: list[Document]) -> None:
        run = self.run
        work, same = self.lookup(docs)
        if same:
            with engine_errors("count unchanged chunks"):
                n = int(run.es.send(request.count(run.index, self._filter([d.doc_id for d in same])))["count"])
            run.count(documents_skipped=len(same), unchanged=n)
        chunked = [(item, chunks) for item in work if (chunks := self._chunks(item)) is not None]
        if not chunked:
            return
        try:
            run.lease.hide(item.doc.doc_id for item, _ in chunked)  # before any of their chunks is written
        except HybridSearchError as exc:
            run.fail(exc)
            return
        run.rewritten.update(item.doc.doc_id for item, _ in chunked if item.doc.doc_id in run.adopted)
        batch = Batch()
        for item, chunks in chunked:
            for src, text in chunks:
                if src["chunk_id"] in item.stored.same:  # written by a stopped run: reuse, do not embed
                    run.count(reused=1)
                    continue
                batch.add(src["chunk_id"], src, text)
                if len(batch) >= self.batch_chunks:
                    if not run.put(batch):
                        return
                    batch = Batch()
            batch.finals.append(item)
        if (batch.sources or batch.finals) and not run.put(batch):
            return

    def _chunks(self, item: WorkDoc) -> list[tuple[dict[str, Any], str]] | None:
        """``item``'s chunks and the text to embed for each; None (dead-lettered and counted as failed) when it
        cannot be chunked, before anything of it is hidden or written."""
        run = self.run
        s = run.settings
        try:
            chunks = list(document_chunks(item.doc, s.chunking, s.embedding, run.tenant, self.tokenizer,
                                          self.embedder.max_seq_length, run.section_words, run.metadata_fields))
        except (ValueError, TypeError) as exc:
            run.doc_failed(item.doc.doc_id, f"cannot chunk: {exc}", "chunk", item.doc.source)
            return None
        item.ids = [src["chunk_id"] for src, _ in chunks]
        if chunks and "title_cut" in chunks[0][0]:
            run.count(titles_cut=1)
        return chunks
