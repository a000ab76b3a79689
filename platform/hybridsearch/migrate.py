"""Migration: a new chunk index version built from the live one, for a new embedding model, chunker or vector
layout, and the alias swapped to it.

The new version (:func:`hybridsearch.index.versions.create_version`) is built next to the live index: every visible
chunk is copied into it through ingestion's embed-and-write stage (re-embedding client-side, or keeping the stored
vectors where they would not change; re-cut by :mod:`hybridsearch.rechunk` for another chunker), the counts are
verified and only then the alias is swapped atomically, so searches keep answering from the old index throughout.
The old index stays until ``hsp index drop``; ``hsp index rollback`` points the alias back at it. Migration sits
above ingestion (it writes through it), so it is not part of :mod:`hybridsearch.index`, which ingestion uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from hybridsearch.embedding.encoder import Embedder, load_sentence_transformer
from hybridsearch.embedding.prompts import resolve_prompts
from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.errors import ConfigError, IngestError
from hybridsearch.index.access import INGEST, prefix_names, require_privileges
from hybridsearch.index.fit import check_mapping, check_source
from hybridsearch.index.logs import ensure_log_index
from hybridsearch.index.metadata import TYPED_METADATA, metadata_fields_of, typed_metadata
from hybridsearch.index.spec import chunk_meta, parse_version, section_words_of
from hybridsearch.index.versions import create_version, doc_count, index_mapping, live_index, swap_alias
from hybridsearch.index.visibility import count_visible, scan_visible
from hybridsearch.ingest.chunking import chunk_embed_text
from hybridsearch.ingest.lease import Lease
from hybridsearch.ingest.writer import ChunkBatch, CopyTally, DeadLetter, EmbedWriter
from hybridsearch.progress import ProgressSink, Task
from hybridsearch.settings import EmbeddingSettings, IngestSettings, Settings

# Fields read from the old index; everything but the vector, which is recomputed.
SOURCE_EXCLUDES = ["embedding"]


@dataclass
class MigrationResult:
    """What a migration did."""

    source: str
    target: str
    chunks: int
    documents: int
    failed: int
    seconds: float
    swapped: bool
    reembedded: bool
    rechunked: bool
    source_meta: dict[str, Any]
    target_meta: dict[str, Any]

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.seconds if self.seconds else 0.0


def embedding_settings_for(model: str, base: EmbeddingSettings, dims: int | None = None) -> EmbeddingSettings:
    """``base`` with another model; dims are read from the model itself unless given. Raises ModelError."""
    if dims is None:
        st = load_sentence_transformer(model, "cpu")
        dims = int(st.get_embedding_dimension() or 0)
    return base.model_copy(update={"model": model, "dims": dims})


def migration_settings(settings: Settings, *, model: str | None = None, dims: int | None = None,
                       prepend_title: bool | None = None, index_options: str | None = None,
                       chunker: str | None = None, max_tokens: int | None = None,
                       overlap: float | None = None) -> Settings:
    """The settings a migration of ``settings``' live index builds for: another model (``dims`` read from it
    unless given), title handling, vector ``index_options`` or chunker (strategy, tokens, overlap); None keeps
    the current value. Raises ConfigError (invalid chunker options), ModelError."""
    from pydantic import ValidationError

    from hybridsearch.settings import ChunkingSettings

    embedding = settings.embedding
    if model or dims:
        embedding = embedding_settings_for(model or embedding.model, embedding, dims)
    if prepend_title is not None:
        embedding = embedding.model_copy(update={"prepend_title": prepend_title})
    index = settings.index
    if index_options:
        index = index.model_copy(update={"index_options": index_options})
    chunking = settings.chunking
    changes = {k: v for k, v in (("strategy", chunker), ("max_tokens", max_tokens), ("overlap", overlap))
               if v is not None}
    if changes:
        try:
            chunking = ChunkingSettings.model_validate({**chunking.model_dump(), **changes})
        except ValidationError as exc:
            raise ConfigError(f"invalid chunker options: {exc.errors()[0]['msg']}") from None
    return settings.model_copy(update={"embedding": embedding, "index": index, "chunking": chunking})


def _scan(es: EngineClient, index: str, batch: int, vectors: bool = False) -> Iterator[dict[str, Any]]:
    source: Any = es.engine.source_with_vectors if vectors else {"excludes": SOURCE_EXCLUDES}
    yield from scan_visible(es, index, source=source, size=batch, scroll="5m")


def _batched(hits: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for h in hits:
        batch.append(h)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def copy_reembedded(es: EngineClient, source: str, target: str, embedder: Embedder, *, prepend_title: bool,
                    cfg: IngestSettings, batch_size: int = 256, on_batch: Callable[[int], None] | None = None,
                    dead_letter: DeadLetter | None = None, reuse_vectors: bool = False) -> tuple[int, int]:
    """Copy every chunk of ``source`` into ``target`` with vectors from ``embedder``, and the typed metadata
    ``target`` declares (a value its type cannot hold fails that chunk).

    With ``reuse_vectors`` (same model, dims and embedded text) the stored vectors are copied and only
    chunks without one are embedded, so a change of vector index options costs no embedding.
    Keeps each chunk's ``_id`` and fields. Goes through the embed-and-write stage of ingestion
    (:class:`hybridsearch.ingest.writer.EmbedWriter`): batch N is written while batch N+1 is embedded.
    Items that still fail go to ``dead_letter``. Returns ``(written, failed)``.
    """
    tally = CopyTally(dead_letter, "migrate", on_batch)
    stage: EmbedWriter[ChunkBatch] = EmbedWriter(es, target, cfg, embedder.encode, after=tally.absorb,
                                                 name="hsp-migrate-writer")

    fields = metadata_fields_of(index_mapping(es, target))

    def batches() -> Iterator[ChunkBatch]:
        for hits in _batched(_scan(es, source, batch_size, vectors=reuse_vectors), batch_size):
            batch = ChunkBatch()
            for h in hits:
                src = h["_source"]
                src.pop(TYPED_METADATA, None)
                try:
                    if typed := typed_metadata(src.get("metadata"), fields):
                        src[TYPED_METADATA] = typed
                except ValueError as exc:
                    tally.refuse(str(src.get("doc_id")), h["_id"], f"cannot copy: {exc}")
                    continue
                keep = reuse_vectors and src.get("embedding")
                batch.add(h["_id"], src, None if keep else chunk_embed_text(src, prepend_title))
            yield batch

    stage.run(batches())
    return tally.written, tally.failed


def same_vectors(meta: dict[str, Any], cfg: EmbeddingSettings) -> bool:
    """True when an index with ``_meta`` ``meta`` holds exactly the vectors ``settings`` would compute (same model,
    dims, title handling and passage prompt)."""
    return (meta.get("embedding_model") == cfg.model
            and meta.get("embedding_dims") == cfg.dims
            and meta.get("prepend_title") == cfg.prepend_title
            and (meta.get("passage_prompt") or "") == (resolve_prompts(cfg).passage or ""))


def migrate(es: EngineClient, old: Settings, new: Settings, *, version: int | None = None,
            embedder: Embedder | None = None, swap: bool = True, batch_size: int = 256,
            reembed: bool | None = None, progress: ProgressSink | None = None) -> MigrationResult:
    """Build a new chunk index for ``new`` from the live index of ``old`` and swap the alias to it.

    Every chunk of the live index is read with a scroll, re-embedded with ``new.embedding`` (or, when
    ``reembed`` is None and model, dims and title handling are unchanged, its stored vector is kept)
    and written to ``<prefix>-chunks-v<N>`` (``version`` defaults to the next free one). When ``new``
    names another chunker, each document is rebuilt from its chunks' offsets and cut again
    (:mod:`hybridsearch.rechunk`). The alias moves only when the new index holds every chunk (or, after
    re-chunking, every document) of the source; until then, and on any failure, searches keep using
    the old index, which is never modified. ``progress`` receives the chunks (or documents) done of all
    (task ``copying chunks`` or ``copying documents``). Raises IndexNotFound when there is no live index,
    IndexMismatch when it was not built with ``old``'s model, and IngestError when anything fails to copy or the
    counts disagree (the new index is left for inspection, failures in a dead-letter file).
    """
    if old.index.prefix != new.index.prefix:
        raise ConfigError("a migration stays within one prefix")
    require_privileges(es, prefix_names(new.index), INGEST, f"migrate indices of prefix {new.index.prefix}")
    source = live_index(es, old.index)
    source_mapping = index_mapping(es, source)
    source_meta = source_mapping.get("_meta", {})
    check_source(source, source_mapping, old, es.dialect)
    expected = chunk_meta(new)
    rechunk = (source_meta.get("chunker_version") not in (None, expected["chunker_version"])
               or section_words_of(source_meta) != new.index.bm25_section_words)  # documents are cut anew
    first_chunks = [{"term": {"position": 0}}] if rechunk else []  # one per document (and tenant)
    # No ingest may write while the copy reads: the migration holds the prefix's ingest lease throughout.
    ensure_log_index(es, new, "ingest_state")
    lease = Lease(es, new.index.ingest_state, f"migrate-{time.strftime('%Y%m%dT%H%M%S')}")
    lease.acquire(new.ingest.lease_wait_s)
    try:
        return _migrate_locked(es, new, source, source_mapping, rechunk, first_chunks, version=version,
                               embedder=embedder, swap=swap, batch_size=batch_size, reembed=reembed,
                               progress=progress)
    finally:
        lease.release()


def _migrate_locked(es: EngineClient, new: Settings, source: str, source_mapping: dict[str, Any],
                    rechunk: bool, first_chunks: list[dict[str, Any]], *, version: int | None,
                    embedder: Embedder | None, swap: bool, batch_size: int, reembed: bool | None,
                    progress: ProgressSink | None) -> MigrationResult:
    """:func:`migrate`'s copy, check and swap, while it holds the lease. Counts what readers see (documents a
    stopped run left half written are neither copied nor counted: they stay hidden in the new version too)."""
    source_meta = source_mapping.get("_meta", {})
    with engine_errors(f"refresh {source}"):
        es.send(request.refresh(source))
        total = count_visible(es, source, first_chunks)
    embedder = embedder or Embedder(new.embedding)  # loads its model only when something must be embedded
    if embedder.cfg.model != new.embedding.model or embedder.cfg.dims != new.embedding.dims:
        raise ConfigError("the embedder given to migrate() does not match the new settings' model and dims")
    keep_vectors = same_vectors(source_meta, new.embedding) and reembed is not True
    reembed = not keep_vectors if reembed is None else reembed  # after re-cutting: whether any chunk was embedded
    target = create_version(es, new, version)
    done = 0
    task = Task(progress, f"copying {'documents' if rechunk else 'chunks'}", total)

    def advance(n: int) -> None:
        nonlocal done
        done += n
        task.update(done)

    t0 = time.perf_counter()
    dead_letter = DeadLetter(new.ingest.dead_letter_dir, f"migrate-{target}-{time.strftime('%Y%m%dT%H%M%S')}")
    if rechunk:
        from hybridsearch.rechunk import rechunk_copy

        _, written, failed, embedded = rechunk_copy(
            es, source, target, new, embedder, batch_size=batch_size, on_document=lambda n: advance(n - done),
            dead_letter=dead_letter, reuse_vectors=keep_vectors)
        reembed = embedded > 0
    else:
        written, failed = copy_reembedded(es, source, target, embedder, prepend_title=new.embedding.prepend_title,
                                          cfg=new.ingest, batch_size=batch_size, on_batch=advance,
                                          dead_letter=dead_letter, reuse_vectors=not reembed)
    task.finish()
    unit = "documents" if rechunk else "chunks"
    with engine_errors(f"refresh {target}"):
        es.send(request.refresh(target))
        copied = count_visible(es, target, first_chunks)
        now = count_visible(es, source, first_chunks)
    seconds = time.perf_counter() - t0
    if failed or copied != total or now != total:
        raise IngestError(
            f"migration {source} -> {target} incomplete: source had {total} {unit} (now {now}), target holds "
            f"{copied}, {failed} failed to copy"
            + (f" (reasons in {dead_letter.path})" if dead_letter.used else "")
            + f". The alias still points at {source}; drop {target} with "
            f"`hsp index drop --version {parse_version(target)}` and retry (pause ingestion during migrations)."
        )
    target_mapping = index_mapping(es, target)
    check_mapping(target, target_mapping, new, es.dialect)
    target_meta = target_mapping.get("_meta", {})
    if swap:
        swap_alias(es, new.index, target)
    docs = doc_count(es, target) or 0
    return MigrationResult(source=source, target=target, chunks=written, documents=docs, failed=failed,
                           reembedded=reembed, rechunked=rechunk, seconds=seconds, swapped=swap,
                           source_meta=source_meta, target_meta=target_meta)
