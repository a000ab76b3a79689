"""The one embed-and-write stage: embed batch N in the calling thread while batch N−1 is written.

Ingestion (:mod:`hybridsearch.ingest.pipeline`), migration (:func:`hybridsearch.migrate.copy_reembedded`)
and re-chunking (:func:`hybridsearch.rechunk.rechunk_copy`) all feed :class:`ChunkBatch` es to
:meth:`EmbedWriter.run`. Writes go through the bulk writer (:func:`.writer.write_actions`, failed items
alone retried with backoff) in one background thread, in order, with at most ``depth`` batches waiting,
so the embedder never waits on the network while there is room.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from hybridsearch.engine import EngineClient
from hybridsearch.ingest.chunking import HFTokenizer
from hybridsearch.ingest.writer import DeadLetter, WriteReport, write_actions
from hybridsearch.settings import IngestSettings

if TYPE_CHECKING:
    import numpy as np

    from hybridsearch.embedding.encoder import Embedder

log = logging.getLogger(__name__)

Encode = Callable[[list[str]], "np.ndarray"]  # one vector per text


def copy_tokenizer(embedder: Embedder) -> HFTokenizer:
    """The embedder's tokenizer for chunking in another thread than the embedder's: a copy, because a Rust
    tokenizer used from two threads at once fails with "Already borrowed"."""
    return HFTokenizer(copy.deepcopy(embedder.model.tokenizer))


@dataclass
class ChunkBatch:
    """Chunk documents on their way to an index: ``sources[i]`` is written with ``_id`` ``ids[i]``. The chunks
    at positions ``embed`` (all of them when None) get the vector of ``texts`` (same order); the others keep
    the ``embedding`` their source holds."""

    ids: list[str] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    embed: list[int] | None = None

    def add(self, chunk_id: str, source: dict[str, Any], text: str | None) -> None:
        """Append one chunk; ``text`` None keeps its stored vector."""
        if text is None and self.embed is None:
            self.embed = list(range(len(self.ids)))
        if text is not None:
            if self.embed is not None:
                self.embed.append(len(self.ids))
            self.texts.append(text)
        self.ids.append(chunk_id)
        self.sources.append(source)

    def __len__(self) -> int:
        return len(self.ids)


B = TypeVar("B", bound=ChunkBatch)


class EmbedWriter(Generic[B]):
    """Embeds batches here and writes them to ``index`` in a writer thread.

    ``after(batch, report)`` runs in the writer thread after each write (counting, dead letters, commits).
    ``on_embed_error(batch, exc)``, when given, takes an embedding failure: the batch's chunks are then not
    written (``after`` still runs, with an empty report); without it the failure is raised. A write that
    raises is raised here, from :meth:`run`. ``embed_seconds`` adds up the time spent embedding.
    """

    def __init__(self, es: EngineClient, index: str, cfg: IngestSettings, encode: Encode, *,
                 after: Callable[[B, WriteReport], None],
                 on_embed_error: Callable[[B, Exception], None] | None = None,
                 depth: int = 1, name: str = "hsp-writer") -> None:
        self.es, self.index, self.cfg, self.encode = es, index, cfg, encode
        self.after, self.on_embed_error = after, on_embed_error
        self.depth, self.name = max(1, depth), name
        self.embed_seconds = 0.0

    def run(self, batches: Iterable[B]) -> None:
        """Embed and write every batch; returns once all are written."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name) as pool:
            waiting: deque[Future[None]] = deque()
            for batch in batches:
                self._embed(batch)
                while len(waiting) >= self.depth:
                    waiting.popleft().result()
                waiting.append(pool.submit(self._write, batch))
            while waiting:
                waiting.popleft().result()

    def _embed(self, batch: B) -> None:
        if not batch.texts:
            return
        t0 = time.perf_counter()
        try:
            vectors = self.encode(batch.texts)
        except Exception as exc:
            if self.on_embed_error is None:
                raise
            self.on_embed_error(batch, exc)
            batch.ids, batch.sources, batch.texts, batch.embed = [], [], [], None
            return
        finally:
            self.embed_seconds += time.perf_counter() - t0
        positions = range(len(batch.sources)) if batch.embed is None else batch.embed
        for i, vec in zip(positions, vectors, strict=True):
            batch.sources[i]["embedding"] = [float(x) for x in vec]

    def _write(self, batch: B) -> None:
        actions = [{"_op_type": "index", "_index": self.index, "_id": cid, "_source": src}
                   for cid, src in zip(batch.ids, batch.sources, strict=True)]
        report = write_actions(self.es, actions, self.cfg) if actions else WriteReport()
        self.after(batch, report)


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

    def absorb(self, batch: ChunkBatch, report: WriteReport) -> None:
        self.written += len(report.ok_ids)
        self.failed += len(report.failures)
        for f in report.failures:
            log.warning("chunk %s not copied: %s", f.chunk_id, f.reason)
            if self.dead_letter is not None:
                self.dead_letter.write(doc_id=f.doc_id, chunk_id=f.chunk_id, reason=f.reason, stage=self.stage,
                                       status=f.status)
        if self.on_batch is not None:
            self.on_batch(len(batch))
