"""Migration: a new chunk index version built from the live one (new embedding model, chunker or vector layout)
through ingestion's embed-and-write stage, and the alias swapped to it once the counts agree. For another chunker
each document is rebuilt from its chunks' offsets (:func:`rebuild_text`) and cut again, keeping its ``content_hash``."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hybridsearch.embedding.encoder import Embedder, load_sentence_transformer
from hybridsearch.embedding.models import resolve_prompts
from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.errors import ConfigError, IngestError
from hybridsearch.index.access import INGEST, prefix_names, require_privileges
from hybridsearch.index.logs import ensure_log_indices
from hybridsearch.index.metadata import TYPED_METADATA, metadata_fields_of, typed_metadata
from hybridsearch.index.spec import check_mapping, check_source, chunk_meta, parse_version, section_words_of
from hybridsearch.index.versions import create_version, doc_count, index_mapping, live_index, swap_alias
from hybridsearch.index.visibility import count_visible, scan_visible
from hybridsearch.ingest.chunking import chunk_embed_text, document_chunks
from hybridsearch.ingest.lease import Lease
from hybridsearch.ingest.sources import Document
from hybridsearch.ingest.writer import ChunkBatch, DeadLetter, WriteReport, embed_and_write
from hybridsearch.progress import ProgressSink, Task
from hybridsearch.settings import ChunkingSettings, Settings

log = logging.getLogger(__name__)


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
    target_meta: dict[str, Any]

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.seconds if self.seconds else 0.0


def migration_settings(settings: Settings, *, model: str | None = None, dims: int | None = None,
                       prepend_title: bool | None = None, index_options: str | None = None,
                       chunker: str | None = None, max_tokens: int | None = None,
                       overlap: float | None = None) -> Settings:
    """The settings a migration builds for (None keeps a value; ``dims`` read from a new ``model`` unless given).
    Raises ConfigError (invalid chunker options), ModelError."""
    embedding = settings.embedding
    if model or dims:
        model = model or embedding.model
        if dims is None:
            dims = int(load_sentence_transformer(model, settings.models, "cpu").get_embedding_dimension() or 0)
        embedding = embedding.model_copy(update={"model": model, "dims": dims})
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


def _source(es: EngineClient, vectors: bool) -> Any:
    """The ``_source`` to read: with the vectors, or without (they are recomputed)."""
    return es.engine.source_with_vectors if vectors else {"excludes": ["embedding"]}


def migrate(es: EngineClient, old: Settings, new: Settings, *, version: int | None = None,
            embedder: Embedder | None = None, swap: bool = True, batch_size: int = 256,
            reembed: bool | None = None, progress: ProgressSink | None = None) -> MigrationResult:
    """Build ``<prefix>-chunks-v<N>`` (default: the next N) for ``new`` from the live index of ``old`` under the ingest
    lease, re-embedding unless ``reembed`` is None and the vectors would not change, and swap the alias once it holds
    all of the source. Raises IndexNotFound, IndexMismatch, IngestError (copy incomplete: the new index is left)."""
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
    ensure_log_indices(es, new, ("ingest_state",))
    lease = Lease(es, new.index, f"migrate-{time.strftime('%Y%m%dT%H%M%S')}")
    lease.acquire(new.ingest.lease_wait_s)
    try:
        with engine_errors(f"refresh {source}"):
            es.send(request.refresh(source))
            total = count_visible(es, source, first_chunks)
        # the embedder loads its model only when something must be embedded
        embedder = embedder or Embedder(new.embedding, new.models)
        if embedder.cfg.model != new.embedding.model or embedder.cfg.dims != new.embedding.dims:
            raise ConfigError("the embedder given to migrate() does not match the new settings' model and dims")
        cfg = new.embedding
        keep_vectors = reembed is not True and (
            source_meta.get("embedding_model") == cfg.model and source_meta.get("embedding_dims") == cfg.dims
            and source_meta.get("prepend_title") == cfg.prepend_title
            and (source_meta.get("passage_prompt") or "") == (resolve_prompts(cfg, new.models).passage or ""))
        reembed = not keep_vectors if reembed is None else reembed  # after re-cutting: whether any chunk was embedded
        target = create_version(es, new, version)
        task = Task(progress, f"copying {'documents' if rechunk else 'chunks'}", total)
        t0 = time.perf_counter()
        dead_letter = DeadLetter(new.ingest.dead_letter_dir, f"migrate-{target}-{time.strftime('%Y%m%dT%H%M%S')}")
        written, failed, embedded = copy_chunks(es, source, target, new, embedder, rechunk=rechunk,
                                                reuse_vectors=keep_vectors if rechunk else not reembed,
                                                batch_size=batch_size, dead_letter=dead_letter, task=task)
        reembed = embedded > 0 if rechunk else reembed
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
                + (f" (reasons in {dead_letter.path})" if dead_letter.count else "")
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
                               target_meta=target_meta)
    finally:
        lease.release()


def rebuild_text(chunks: list[dict[str, Any]]) -> str:
    """A document's text from its chunks' sources (any order). Raises ValueError when offsets are unusable."""
    spans: list[tuple[int, str]] = []
    for c in chunks:
        start, end, text = c.get("char_start"), c.get("char_end"), c.get("text")
        if not (isinstance(start, int) and isinstance(end, int) and isinstance(text, str) and end - start == len(text)):
            raise ValueError(f"chunk {c.get('chunk_id')} has no usable character offsets")
        spans.append((start, text))
        p_start, p_text = c.get("parent_start"), c.get("parent_text")
        if isinstance(p_start, int) and isinstance(p_text, str):
            spans.append((p_start, p_text))
    if not spans:
        raise ValueError("no chunks")
    buf: list[str | None] = [None] * max(s + len(t) for s, t in spans)
    for start, text in spans:
        buf[start:start + len(text)] = list(text)
    out: list[str] = []
    for gap, run in itertools.groupby(buf, key=lambda ch: ch is None):
        chars = [ch or "" for ch in run]  # characters no chunk covers: one space, or newlines for longer gaps
        out.append((" " if len(chars) == 1 else "\n" * len(chars)) if gap else "".join(chars))
    return "".join(out)


def scan_sorted(es: EngineClient, index: str, batch: int = 500, vectors: bool = False) -> Iterator[dict[str, Any]]:
    """Visible chunk sources of ``index`` ordered by tenant, document and position (vectors when ``vectors``)."""
    yield from scan_visible(es, index, source=_source(es, vectors), size=batch, scroll="10m", preserve_order=True,
                            sort=[{"tenant": {"order": "asc", "missing": "_first"}}, {"doc_id": "asc"},
                                  {"position": "asc"}])


def stored_vectors(chunks: Iterable[dict[str, Any]], prepend_title: bool) -> dict[str, Any]:
    """``{text embedded: stored vector}`` of one document's chunks (those that have a vector)."""
    return {chunk_embed_text(c, prepend_title): c["embedding"] for c in chunks if c.get("embedding")}


def documents_from_chunks(hits: Iterable[dict[str, Any]]) -> Iterator[tuple[str | None, list[dict[str, Any]]]]:
    """``(tenant, chunk sources of one document)`` for hits sorted by tenant and doc_id."""
    sources = (hit["_source"] for hit in hits)
    for (tenant, _), chunks in itertools.groupby(sources, key=lambda s: (s.get("tenant"), str(s.get("doc_id")))):
        yield tenant, list(chunks)


def to_document(chunks: list[dict[str, Any]]) -> Document:
    """The document the chunks were cut from. Raises ValueError."""
    first = chunks[0]
    return Document(doc_id=str(first["doc_id"]), title=first.get("title"), text=rebuild_text(chunks),
                    metadata=dict(first.get("metadata") or {}), source=first.get("source") or "",
                    content_hash=first.get("content_hash") or "")


def copy_chunks(es: EngineClient, source: str, target: str, new: Settings, embedder: Embedder, *, rechunk: bool,
                reuse_vectors: bool, batch_size: int, dead_letter: DeadLetter, task: Task) -> tuple[int, int, int]:
    """Copy every visible chunk of ``source`` into ``target`` through ingestion's embed-and-write stage: with
    ``rechunk`` each document cut again for ``new``, else each chunk keeping its ``_id``; with ``reuse_vectors`` a chunk
    of the same embedded text keeps its vector. Failures are dead-lettered. Returns ``(written, failed, embedded)``."""
    fields = metadata_fields_of(index_mapping(es, target))
    prepend_title = new.embedding.prepend_title
    counts = {"written": 0, "failed": 0, "embedded": 0}

    def refuse(doc_id: str, chunk_id: str | None, reason: str, status: int | None = None) -> None:
        counts["failed"] += 1
        log.warning("%s not copied: %s", f"chunk {chunk_id}" if chunk_id else f"document {doc_id}", reason)
        dead_letter.write(doc_id=doc_id, chunk_id=chunk_id, reason=reason, stage="migrate", status=status)

    def written(batch: ChunkBatch, report: WriteReport) -> None:
        counts["written"] += len(report.ok_ids)
        for f in report.failures:
            refuse(f.doc_id, f.chunk_id, f.reason, f.status)
        if not rechunk:
            task.advance(len(batch))

    def copied() -> Iterator[tuple[str, dict[str, Any], str | None]]:
        for h in scan_visible(es, source, source=_source(es, reuse_vectors), size=batch_size, scroll="5m"):
            src = h["_source"]
            src.pop(TYPED_METADATA, None)
            try:
                if typed := typed_metadata(src.get("metadata"), fields):
                    src[TYPED_METADATA] = typed
            except ValueError as exc:
                refuse(str(src.get("doc_id")), h["_id"], f"cannot copy: {exc}")
                continue
            keep = reuse_vectors and src.get("embedding")
            yield h["_id"], src, None if keep else chunk_embed_text(src, prepend_title)

    def recut() -> Iterator[tuple[str, dict[str, Any], str | None]]:
        tokenizer = embedder.tokenizer()
        for n, (tenant, chunks) in enumerate(documents_from_chunks(scan_sorted(es, source, vectors=reuse_vectors)), 1):
            known = stored_vectors(chunks, prepend_title) if reuse_vectors else {}
            try:
                made = list(document_chunks(to_document(chunks), new.chunking, new.embedding, tenant, tokenizer,
                                            embedder.max_seq_length, new.index.bm25_section_words, fields))
            except (ValueError, TypeError) as exc:
                refuse(str(chunks[0].get("doc_id")), None, f"cannot re-chunk: {exc}")
                made = []
            for src, text in made:
                if text in known:  # the same text, the same model: keep the vector
                    src["embedding"] = known[text]
                yield src["chunk_id"], src, None if text in known else text
            task.update(n)

    def batches() -> Iterator[ChunkBatch]:
        batch = ChunkBatch()
        for chunk_id, src, text in recut() if rechunk else copied():
            counts["embedded"] += text is not None
            batch.add(chunk_id, src, text)
            if len(batch) >= batch_size:
                yield batch
                batch = ChunkBatch()
        if batch:
            yield batch

    with engine_errors(f"{'re-chunk' if rechunk else 'copy'} {source} into {target}"):
        embed_and_write(es, target, new.ingest, embedder.encode, batches(), after=written)
    return counts["written"], counts["failed"], counts["embedded"]
