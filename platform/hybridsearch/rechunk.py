"""Re-cut an index's documents with another chunker, without the original sources.

Every chunk keeps its character offsets in its document (``text == source[char_start:char_end]``,
and the parent span for parent-child chunks), so the documents can be put back together from the
chunks of the live index: overlapping spans agree, and the few characters no chunk covers (the
whitespace between paragraphs) come back as whitespace of the same length. The rebuilt documents
then go through ingestion's own chunk layout (:func:`hybridsearch.ingest.chunking.document_chunks`),
keeping their ``content_hash``, so a later ingest of the original sources finds them unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, engine_errors
from hybridsearch.index.metadata import metadata_fields_of
from hybridsearch.index.versions import index_mapping
from hybridsearch.index.visibility import scan_visible
from hybridsearch.ingest.chunking import chunk_embed_text, document_chunks
from hybridsearch.ingest.sources import Document
from hybridsearch.ingest.writer import ChunkBatch, CopyTally, DeadLetter, EmbedWriter
from hybridsearch.settings import Settings

log = logging.getLogger(__name__)


def rebuild_text(chunks: list[dict[str, Any]]) -> str:
    """A document's text from its chunks' sources (any order). Raises ValueError when offsets are unusable."""
    spans: list[tuple[int, str]] = []
    for c in chunks:
        start, end, text = c.get("char_start"), c.get("char_end"), c.get("text")
        if isinstance(start, int) and isinstance(end, int) and isinstance(text, str) and end - start == len(text):
            spans.append((start, text))
        else:
            raise ValueError(f"chunk {c.get('chunk_id')} has no usable character offsets")
        p_start, p_text = c.get("parent_start"), c.get("parent_text")
        if isinstance(p_start, int) and isinstance(p_text, str):
            spans.append((p_start, p_text))
    if not spans:
        raise ValueError("no chunks")
    end = max(s + len(t) for s, t in spans)
    buf: list[str | None] = [None] * end
    for start, text in spans:
        buf[start:start + len(text)] = list(text)
    out: list[str] = []
    i = 0
    while i < end:  # characters no chunk covers: one space, or newlines for longer gaps (paragraph breaks)
        if buf[i] is not None:
            out.append(buf[i])  # type: ignore[arg-type]
            i += 1
            continue
        j = i
        while j < end and buf[j] is None:
            j += 1
        out.append(" " if j - i == 1 else "\n" * (j - i))
        i = j
    return "".join(out)


def scan_sorted(es: EngineClient, index: str, batch: int = 500, vectors: bool = False) -> Iterator[dict[str, Any]]:
    """Chunk sources of ``index`` ordered by tenant, document and position (vectors left out unless ``vectors``):
    whole documents only (:func:`~hybridsearch.index.visibility.scan_visible`), never one that is being written."""
    source: Any = es.engine.source_with_vectors if vectors else {"excludes": ["embedding"]}
    yield from scan_visible(es, index, source=source, size=batch, scroll="10m", preserve_order=True,
                            sort=[{"tenant": {"order": "asc", "missing": "_first"}}, {"doc_id": "asc"},
                                  {"position": "asc"}])


def stored_vectors(chunks: Iterable[dict[str, Any]], prepend_title: bool) -> dict[str, Any]:
    """``{text embedded: stored vector}`` of one document's chunks (those that have a vector)."""
    return {chunk_embed_text(c, prepend_title): c["embedding"] for c in chunks if c.get("embedding")}


def documents_from_chunks(hits: Iterable[dict[str, Any]]) -> Iterator[tuple[str | None, list[dict[str, Any]]]]:
    """``(tenant, chunk sources of one document)`` for hits sorted by tenant and doc_id."""
    key: tuple[str | None, str] | None = None
    group: list[dict[str, Any]] = []
    for hit in hits:
        src = hit["_source"]
        k = (src.get("tenant"), str(src.get("doc_id")))
        if key is not None and k != key:
            yield key[0], group
            group = []
        key = k
        group.append(src)
    if key is not None:
        yield key[0], group


def to_document(chunks: list[dict[str, Any]]) -> Document:
    """The document the chunks were cut from. Raises ValueError."""
    first = chunks[0]
    return Document(doc_id=str(first["doc_id"]), title=first.get("title"), text=rebuild_text(chunks),
                    metadata=dict(first.get("metadata") or {}), source=first.get("source") or "",
                    content_hash=first.get("content_hash") or "")


def rechunk_copy(es: EngineClient, source: str, target: str, new: Settings, embedder: Embedder, *,
                 batch_size: int = 256, on_document: Callable[[int], None] | None = None,
                 dead_letter: DeadLetter | None = None, reuse_vectors: bool = False) -> tuple[int, int, int, int]:
    """Cut every document of ``source`` again with ``new.chunking`` (and ``new.index``'s BM25 sections), embed
    and write it to ``target`` through ingestion's embed-and-write stage
    (:class:`hybridsearch.ingest.writer.EmbedWriter`).

    With ``reuse_vectors`` (the source was embedded by ``new``'s model, the same way) a new chunk whose embedded
    text equals an old chunk's keeps that chunk's vector: a change of BM25 sections alone embeds nothing.
    Returns ``(documents, chunks written, chunks or documents failed, chunks embedded)``; failures go to
    ``dead_letter``.
    """
    tokenizer = embedder.tokenizer()
    tally = CopyTally(dead_letter, "migrate")
    stage: EmbedWriter[ChunkBatch] = EmbedWriter(es, target, new.ingest, embedder.encode, after=tally.absorb,
                                                 name="hsp-rechunk-writer")
    documents = unchunked = embedded = 0
    fields = metadata_fields_of(index_mapping(es, target))  # the typed metadata the new version declares

    def batches() -> Iterator[ChunkBatch]:
        nonlocal documents, unchunked, embedded
        batch = ChunkBatch()
        for tenant, chunks in documents_from_chunks(scan_sorted(es, source, vectors=reuse_vectors)):
            documents += 1
            known = stored_vectors(chunks, new.embedding.prepend_title) if reuse_vectors else {}
            try:
                for src, text in document_chunks(to_document(chunks), new.chunking, new.embedding, tenant,
                                                  tokenizer, embedder.max_seq_length,
                                                  new.index.bm25_section_words, fields):
                    if text in known:  # the same text, the same model: keep the vector
                        src["embedding"] = known[text]
                    else:
                        embedded += 1
                    batch.add(src["chunk_id"], src, None if text in known else text)
            except (ValueError, TypeError) as exc:
                unchunked += 1
                log.warning("document %s not re-chunked: %s", chunks[0].get("doc_id"), exc)
                if dead_letter is not None:
                    dead_letter.write(doc_id=str(chunks[0].get("doc_id")), reason=f"cannot re-chunk: {exc}",
                                      stage="migrate")
            if len(batch) >= batch_size:
                yield batch
                batch = ChunkBatch()
            if on_document:
                on_document(documents)
        if batch:
            yield batch

    with engine_errors(f"re-chunk {source} into {target}"):
        stage.run(batches())
    return documents, tally.written, tally.failed + unchunked, embedded
