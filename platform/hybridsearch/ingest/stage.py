"""The one embed-and-write loop: embed batch N in the calling thread while batch N−1 is written.

Ingestion (:mod:`hybridsearch.ingest.pipeline`), migration (:func:`hybridsearch.migrate.copy_reembedded`)
and re-chunking (:func:`hybridsearch.rechunk.rechunk_copy`) all feed :class:`ChunkBatch` es to
:meth:`EmbedWriter.run`. Writes go through the bulk writer (:func:`.writer.write_actions`, failed items
alone retried with backoff) in one background thread, in order, with at most ``depth`` batches waiting,
so the embedder never waits on the network while there is room.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from hybridsearch.engine import EngineClient
from hybridsearch.ingest.chunking import Tokenizer
from hybridsearch.ingest.writer import WriteReport, write_actions
from hybridsearch.settings import IngestSettings

if TYPE_CHECKING:
    import numpy as np

    from hybridsearch.embedding.encoder import Embedder

Encode = Callable[[list[str]], "np.ndarray"]  # one vector per text


def copy_tokenizer(embedder: Embedder) -> Tokenizer:
    """The embedder's tokenizer for chunking in another thread than the embedder's: a copy, because a Rust
    tokenizer used from two threads at once fails with "Already borrowed"."""
    return embedder.tokenizer()


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

    ``before(batch)`` runs in the writer thread before each batch with chunks is written (an exception raised
    there stops the run before the batch is written); ``after(batch, report)`` after each write (counting,
    dead letters, commits).
    ``on_embed_error(batch, exc)``, when given, takes an embedding failure: the batch's chunks are then not
    written (``after`` still runs, with an empty report); without it the failure is raised. A write that
    raises is raised here, from :meth:`run`. ``embed_seconds`` adds up the time spent embedding.
    """

    def __init__(self, es: EngineClient, index: str, cfg: IngestSettings, encode: Encode, *,
                 after: Callable[[B, WriteReport], None],
                 on_embed_error: Callable[[B, Exception], None] | None = None,
                 before: Callable[[B], None] | None = None,
                 depth: int = 1, name: str = "hsp-writer") -> None:
        self.es, self.index, self.cfg, self.encode = es, index, cfg, encode
        self.after, self.on_embed_error, self.before = after, on_embed_error, before
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
        if actions and self.before is not None:
            self.before(batch)
        report = write_actions(self.es, actions, self.cfg) if actions else WriteReport()
        self.after(batch, report)
