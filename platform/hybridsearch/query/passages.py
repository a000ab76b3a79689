"""Pure: which chunk a hit shows, and where it matched the query.

BM25 over sections (``build.Bm25Scope``) scores a section as a whole, and its hit is the section's first chunk,
which need not hold the words that matched. So over sections the BM25 ``_msearch`` also carries the *passage
list* (``build.passage_body``): BM25 over the chunks' text, with the same filters and visibility, collapsed per
document, and, when the search asks for highlights, the engine's highlighter on the chunk text. A BM25 hit whose
document is in that list shows that chunk (:attr:`PassageSource.BM25_BEST_CHUNK`, with its highlights when asked);
one whose document is not keeps the section's first chunk (:attr:`PassageSource.SECTION_FIRST_CHUNK`). Ranking
never changes: only the chunk shown, and scored by the reranker.

A document that both lists found (hybrid) shows BM25's best chunk unless kNN added more to its fused score
(:func:`prefer_bm25`; a tie keeps BM25's, whose matched words can be shown); then, or when BM25 kept its
section's first chunk, it shows kNN's nearest chunk.

Highlights are read as data: the highlighter marks matches with two private-use characters
(:data:`MARK_OPEN`, :data:`MARK_CLOSE`) in the whole chunk text, which :func:`read_highlights` turns into the text
and offsets in it (so the text is not fetched twice); marks that are not well formed (the text itself holding one)
give no passage.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybridsearch.query.results import PassageSource

#: what the highlighter puts before and after each match: private-use characters, which text rarely holds
MARK_OPEN, MARK_CLOSE = "\ue000", "\ue001"
#: the field the passage list highlights
HIGHLIGHTED_FIELD = "text"
#: what the passage list fetches of each chunk: what differs between a document's chunks, and the text unless it
#: comes whole inside the highlight (title, metadata and the rest are the document's, on the BM25 hit)
PASSAGE_FIELDS = ["doc_id", "chunk_id", "position", "parent_id", "parent_text"]
Span = tuple[int, int]
_MARKED = re.compile(f"{MARK_OPEN}[^{MARK_OPEN}{MARK_CLOSE}]*{MARK_CLOSE}")


def highlight_body() -> dict[str, Any]:
    """The ``highlight`` of the passage list: the unified highlighter (the same syntax on Elasticsearch and
    OpenSearch) over the whole chunk text (``number_of_fragments: 0``), matches between the marks."""
    return {"type": "unified", "pre_tags": [MARK_OPEN], "post_tags": [MARK_CLOSE], "encoder": "default",
            "fields": {HIGHLIGHTED_FIELD: {"number_of_fragments": 0}}}


def read_highlights(marked: str) -> tuple[str, list[Span]] | None:
    """The text of ``marked`` (the highlighter's whole-field answer) without its marks, and the ``(start, end)``
    offsets in it of the stretches marked, in order; None when the marks are not well formed."""
    spans: list[Span] = []
    count = 0
    for count, m in enumerate(_MARKED.finditer(marked), start=1):
        start = m.start() - 2 * (count - 1)  # each earlier match's two marks are gone from the text
        if m.end() - m.start() > 2:
            spans.append((start, start + m.end() - m.start() - 2))
    if marked.count(MARK_OPEN) != count or marked.count(MARK_CLOSE) != count:
        return None
    return marked.replace(MARK_OPEN, "").replace(MARK_CLOSE, ""), spans


@dataclass(frozen=True)
class Passage:
    """A document's best-matching chunk from the passage list: its own fields (:data:`PASSAGE_FIELDS` and the
    text), to lay over the BM25 hit's ``_source``."""

    fields: dict[str, Any]
    chunk_id: str
    spans: tuple[Span, ...]


def best_chunks(resp: Mapping[str, Any]) -> dict[str, Passage]:
    """``{doc_id: Passage}`` from the passage list's answer: each document's first hit, its text from the
    highlight (with the offsets of the matches) or, not highlighted, from its ``_source`` (no offsets). A hit with
    neither (highlights asked for, none given) or whose marks are not well formed gives no passage."""
    out: dict[str, Passage] = {}
    for hit in resp.get("hits", {}).get("hits", []):
        src = hit.get("_source") or {}
        doc = str(src.get("doc_id") or "")
        if not doc or doc in out:
            continue
        marked = (hit.get("highlight") or {}).get(HIGHLIGHTED_FIELD) or []
        text = src.get(HIGHLIGHTED_FIELD)
        read = read_highlights(str(marked[0])) if marked else (str(text), []) if text is not None else None
        if read is not None:
            fields = {name: src.get(name) for name in PASSAGE_FIELDS}
            out[doc] = Passage({**fields, "text": read[0]}, str(src.get("chunk_id") or hit["_id"]), tuple(read[1]))
    return out


def highlights(text: str, spans: Sequence[Span]) -> list[dict[str, Any]]:
    """The public :class:`Highlight` s of ``spans`` in ``text``, as the fields the model validates (a hundred hits of
    a dozen matches each are built in the model's core at once, not one Python object at a time)."""
    return [{"start": a, "end": b, "term": text[a:b]} for a, b in spans]


def prefer_bm25(terms: Mapping[str, float], bm25: PassageSource) -> bool:
    """Whether a document both lists found shows BM25's passage: only its best-matching chunk, and only when kNN
    did not add more than BM25 to the fused score (``terms``: each list's share; a tie goes to the chunk whose
    matched words can be shown); otherwise kNN's nearest chunk."""
    return bm25 is PassageSource.BM25_BEST_CHUNK and terms.get("bm25", 0.0) >= terms.get("knn", 0.0)


def describe(passage: PassageSource, chunk_id: str, position: int | None, terms: Sequence[str],
             reason: str | None = None) -> str:
    """One line for people: which chunk a hit shows and why (``--explain``, ``--why``)."""
    where = f"chunk {position} ({chunk_id})" if position is not None else f"chunk {chunk_id}"
    if passage is PassageSource.BM25_BEST_CHUNK:
        matched = ", ".join(dict.fromkeys(t.lower() for t in terms))
        return f"passage: {where}, the document's chunk that best matches the query" + (
            f" (matched: {matched})" if matched else "")
    if passage is PassageSource.SECTION_FIRST_CHUNK:
        return f"passage: {where}, the first chunk of the BM25 section ({reason or 'no better chunk found'})"
    if passage is PassageSource.KNN:
        return f"passage: {where}, the chunk nearest to the query (kNN)" + (f"; {reason}" if reason else "")
    return f"passage: {where}, the chunk BM25 scored"
