"""What the stages of one ingest run share: settings, counts, dead letters, the stop flag, the first error."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.engine import EngineClient
from hybridsearch.ingest.commit import Stored
from hybridsearch.ingest.lease import Lease
from hybridsearch.ingest.runs import IngestResult
from hybridsearch.ingest.sources import Document
from hybridsearch.ingest.stage import ChunkBatch
from hybridsearch.ingest.writer import DeadLetter
from hybridsearch.settings import Settings

DONE = object()  # end marker on the queue between the prepare stage and the embedder


@dataclass
class WorkDoc:
    """A document to (re)write: its stored chunks and the chunk ids of the version being written, in order."""

    doc: Document
    changed: bool
    stored: Stored = field(default_factory=Stored)
    ids: list[str] = field(default_factory=list)


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
        self.adopted: set[str] = set()  # documents a stopped run left hidden, this run's to repair
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
