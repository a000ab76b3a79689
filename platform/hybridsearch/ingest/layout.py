"""A document's chunk layout: the chunk documents (without vectors) and the text embedded for each.

Shared by ingestion (:mod:`.prepare`) and re-chunking (:mod:`hybridsearch.rechunk`), so a re-chunked
index holds exactly what ingesting the original sources would have written.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.ingest.chunking import Tokenizer, chunk_text, embed_text, text_budget
from hybridsearch.ingest.ids import chunk_id, parent_id
from hybridsearch.ingest.sources import Document
from hybridsearch.settings import ChunkingSettings, EmbeddingSettings


def now() -> str:
    """The current time, ISO 8601 in UTC."""
    return datetime.now(UTC).isoformat()


def document_chunks(d: Document, chunking: ChunkingSettings, embedding: EmbeddingSettings, tenant: str | None,
                    tokenizer: Tokenizer, max_seq_length: int) -> Iterator[tuple[dict[str, Any], str]]:
    """``(chunk document without its vector, text to embed)`` for each chunk of ``d``, lazily."""
    signature = chunker_signature(chunking)
    limit = text_budget(tokenizer, d.title, embedding.prepend_title, max_seq_length)
    stamp = now()
    for c in chunk_text(d.text, chunking, tokenizer, limit):
        cid = chunk_id(d.doc_id, c.position, signature, tenant)
        src: dict[str, Any] = {
            "doc_id": d.doc_id, "chunk_id": cid, "position": c.position,
            "char_start": c.char_start, "char_end": c.char_end, "title": d.title, "text": c.text,
            "source": d.source, "content_hash": d.content_hash, "tenant": tenant,
            "ingested_at": stamp, "metadata": d.metadata,
        }
        if c.parent_start is not None and c.parent_end is not None:
            src.update(parent_id=parent_id(d.doc_id, c.parent_start, c.parent_end, signature),
                       parent_text=d.text[c.parent_start:c.parent_end],
                       parent_start=c.parent_start, parent_end=c.parent_end)
        yield src, embed_text(d.title, c.text, embedding.prepend_title)
