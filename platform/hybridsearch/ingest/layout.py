"""A document's chunk layout: the chunk documents (without vectors) and the text embedded for each.

Shared by ingestion (:mod:`.prepare`) and re-chunking (:mod:`hybridsearch.rechunk`), so a re-chunked
index holds exactly what ingesting the original sources would have written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.index.metadata import typed_metadata
from hybridsearch.ingest.chunking import Chunk, Tokenizer, chunk_text, cut_title, embed_text, text_budget, title_cut
from hybridsearch.ingest.ids import chunk_id, parent_id
from hybridsearch.ingest.sources import Document
from hybridsearch.settings import ChunkingSettings, EmbeddingSettings


def now() -> str:
    """The current time, ISO 8601 in UTC."""
    return datetime.now(UTC).isoformat()


def section_leaders(chunks: Sequence[Chunk], max_words: int) -> dict[int, tuple[int, int]]:
    """BM25 sections of one document: runs of consecutive chunks of about ``max_words`` words (a chunk's words
    count whole; a chunk longer than the limit is a section of its own). Maps the index of each section's first
    chunk to the section's ``(char_start, char_end)``; a document within the limit is one section."""
    leaders: dict[int, tuple[int, int]] = {}
    first, words = 0, 0
    for i, c in enumerate(chunks):
        n = len(c.text.split())
        if i > first and words + n > max_words:
            leaders[first] = (chunks[first].char_start, chunks[i - 1].char_end)
            first, words = i, 0
        words += n
    if chunks:
        leaders[first] = (chunks[first].char_start, chunks[-1].char_end)
    return leaders


def document_chunks(d: Document, chunking: ChunkingSettings, embedding: EmbeddingSettings, tenant: str | None,
                    tokenizer: Tokenizer, max_seq_length: int, section_words: int | None = None,
                    metadata_fields: Mapping[str, str] | None = None,
                    ) -> Iterator[tuple[dict[str, Any], str]]:
    """``(chunk document without its vector, text to embed)`` for each chunk of ``d``.

    With ``section_words`` the first chunk of each BM25 section (:func:`section_leaders`) also carries the
    section's text and the document's title (``section_text``, ``section_title``), which BM25 scores instead of
    the chunks' own text: one section per document unless it is longer than ``section_words`` words. Every chunk
    records ``doc_chunks``, the document's number of chunks, so a reader can tell a whole version from part of one
    (:func:`hybridsearch.ingest.commit.whole_documents`). A title longer than its share of the model's window is
    cut for embedding (:func:`hybridsearch.ingest.chunking.title_cut`) and the cut recorded as ``title_cut``
    (characters of the title embedded), so re-embedding a stored chunk embeds the same text.

    ``metadata_fields``: the index's typed metadata (``{key: type}``, :func:`~hybridsearch.index.metadata.
    metadata_fields_of` of its mapping, which the settings' ``index.metadata_fields`` built): every chunk also
    carries ``meta``, those keys of ``d.metadata`` converted to their types
    (:func:`hybridsearch.index.metadata.typed_metadata`). A value that does not convert fails the whole document
    with one reason (ValueError, before any chunk is made: the caller dead-letters it), rather than leaving it out of
    ranges unseen; keys the index does not type stay free-form only.
    """
    typed = typed_metadata(d.metadata, metadata_fields) if metadata_fields else {}
    signature = chunker_signature(chunking)
    cut = title_cut(tokenizer, d.title, embedding.prepend_title, max_seq_length)  # the body always gets its share
    title = cut_title(d.title, cut)
    limit = text_budget(tokenizer, title, embedding.prepend_title, max_seq_length)
    stamp = now()
    chunks = list(chunk_text(d.text, chunking, tokenizer, limit))
    leaders = section_leaders(chunks, section_words) if section_words is not None else {}
    for i, c in enumerate(chunks):
        cid = chunk_id(d.doc_id, c.position, signature, tenant)
        src: dict[str, Any] = {
            "doc_id": d.doc_id, "chunk_id": cid, "position": c.position, "doc_chunks": len(chunks),
            "char_start": c.char_start, "char_end": c.char_end, "title": d.title, "text": c.text,
            "source": d.source, "content_hash": d.content_hash, "tenant": tenant,
            "ingested_at": stamp, "metadata": d.metadata,
        }
        if typed:
            src["meta"] = typed
        if cut is not None:
            src["title_cut"] = cut
        if c.parent_start is not None and c.parent_end is not None:
            src.update(parent_id=parent_id(d.doc_id, c.parent_start, c.parent_end, signature),
                       parent_text=d.text[c.parent_start:c.parent_end],
                       parent_start=c.parent_start, parent_end=c.parent_end)
        if i in leaders:
            start, end = leaders[i]
            src.update(section_title=d.title, section_text=d.text[start:end])
        yield src, embed_text(title, c.text, embedding.prepend_title)
