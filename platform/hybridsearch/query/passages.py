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
from typing import Any, NamedTuple

from hybridsearch.query.results import PassageSource
from hybridsearch.query.window import MatchOffsets, WindowEntry, item_failure

#: what the highlighter puts before and after each match: private-use characters, which text rarely holds
MARK_OPEN, MARK_CLOSE = "\ue000", "\ue001"
#: the field the passage list highlights
HIGHLIGHTED_FIELD = "text"
#: what the passage list fetches of each chunk: what differs between a document's chunks, and the text unless it
#: comes whole inside the highlight (title, metadata and the rest are the document's, on the BM25 hit)
PASSAGE_FIELDS = ["doc_id", "chunk_id", "position", "parent_id", "parent_text"]
_MARKED = re.compile(f"{MARK_OPEN}[^{MARK_OPEN}{MARK_CLOSE}]*{MARK_CLOSE}")


def highlight_body() -> dict[str, Any]:
    """The ``highlight`` of the passage list: the unified highlighter (the same syntax on Elasticsearch and
    OpenSearch) over the whole chunk text (``number_of_fragments: 0``), matches between the marks."""
    return {"type": "unified", "pre_tags": [MARK_OPEN], "post_tags": [MARK_CLOSE], "encoder": "default",
            "fields": {HIGHLIGHTED_FIELD: {"number_of_fragments": 0}}}


def read_highlights(marked: str) -> tuple[str, list[MatchOffsets]] | None:
    """The text of ``marked`` (the highlighter's whole-field answer) without its marks, and the ``(start, end)``
    offsets in it of the stretches marked, in order; None when the marks are not well formed."""
    matches: list[MatchOffsets] = []
    count = 0
    for count, m in enumerate(_MARKED.finditer(marked), start=1):
        start = m.start() - 2 * (count - 1)  # each earlier match's two marks are gone from the text
        if m.end() - m.start() > 2:
            matches.append((start, start + m.end() - m.start() - 2))
    if marked.count(MARK_OPEN) != count or marked.count(MARK_CLOSE) != count:
        return None
    return marked.replace(MARK_OPEN, "").replace(MARK_CLOSE, ""), matches


@dataclass(frozen=True)
class BestChunk:
    """A document's best-matching chunk from the passage list: its own fields (:data:`PASSAGE_FIELDS` and the
    text), to lay over the BM25 hit's ``_source``, and where its text matched."""

    fields: dict[str, Any]
    chunk_id: str
    matches: tuple[MatchOffsets, ...]


def best_chunks(resp: Mapping[str, Any]) -> dict[str, BestChunk]:
    """``{doc_id: BestChunk}`` from the passage list's answer: each document's first hit, its text from the
    highlight (with the offsets of the matches) or, not highlighted, from its ``_source`` (no offsets). A hit with
    neither (highlights asked for, none given) or whose marks are not well formed gives no passage."""
    out: dict[str, BestChunk] = {}
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
            out[doc] = BestChunk({**fields, "text": read[0]}, str(src.get("chunk_id") or hit["_id"]), tuple(read[1]))
    return out


def highlights(text: str, matches: Sequence[MatchOffsets]) -> list[dict[str, Any]]:
    """The public :class:`Highlight` s of ``matches`` in ``text``, as the fields the model validates (a hundred hits
    of a dozen matches each are built in the model's core at once, not one Python object at a time)."""
    return [{"start": a, "end": b, "term": text[a:b]} for a, b in matches]


def prefer_bm25(shares: Mapping[str, float], bm25: PassageSource) -> bool:
    """Whether a document both lists found shows BM25's passage: only its best-matching chunk, and only when kNN
    did not add more than BM25 to the fused score (``shares``: each list's share of it; a tie goes to the chunk
    whose matched words can be shown); otherwise kNN's nearest chunk."""
    return bm25 is PassageSource.BM25_BEST_CHUNK and shares.get("bm25", 0.0) >= shares.get("knn", 0.0)


class ShownChunk(NamedTuple):
    """The chunk an entry shows: its ``_source`` and id, why (:class:`PassageSource`), where it matched."""

    source: dict[str, Any]
    chunk_id: str
    passage: PassageSource
    matches: tuple[MatchOffsets, ...] = ()
    reason: str | None = None


def _keeps_bm25(shown: ShownChunk | None, knn_chunk: str, shares: Mapping[str, float]) -> bool:
    """Whether a document kNN found too keeps BM25's chunk ``shown``: its best chunk, when kNN found that very
    chunk (shown with its highlights) or :func:`prefer_bm25` says so."""
    if shown is None:
        return False
    same = shown.passage is PassageSource.BM25_BEST_CHUNK and shown.chunk_id == knn_chunk
    return same or prefer_bm25(shares, shown.passage)


def show_passages(entries: Sequence[WindowEntry], sections: bool, answer: Mapping[str, Any] | None,
                  depth: int) -> None:
    """Set the chunk each window entry shows and the reranker scores. Over ``sections`` a BM25 hit shows its
    document's best chunk from the passage list ``answer`` (``depth`` documents; the chunk's own fields over the
    BM25 hit's, which are the document's), else its section's first chunk; a document kNN found too shows kNN's
    chunk unless :func:`prefer_bm25` (or both found the same chunk); over chunks, BM25's chunk unless kNN found
    the document. A failed passage list leaves the first chunks, never fails the search."""
    failed = item_failure(answer) if answer is not None else None
    best = best_chunks(answer) if answer is not None and failed is None else {}
    first = ("the passage search is off (HSP_QUERY__BEST_PASSAGE=false)" if answer is None else
             f"the passage search failed: {failed}" if failed else
             f"no chunk's text matched among the passage search's top {depth} documents")
    for e in entries:
        bm25, knn = e.found.get("bm25"), e.found.get("knn")
        shown: ShownChunk | None = None
        if bm25 is not None:
            p = best.get(e.key) if sections else None
            shown = (ShownChunk({**bm25[0], **p.fields}, p.chunk_id, PassageSource.BM25_BEST_CHUNK, p.matches)
                     if p is not None else
                     ShownChunk(*bm25, PassageSource.SECTION_FIRST_CHUNK, reason=first) if sections else
                     ShownChunk(*bm25, PassageSource.BM25))
        if knn is not None and not _keeps_bm25(shown, knn[1], e.fusion_shares):
            reason = (None if shown is None or shown.passage is PassageSource.BM25 else
                      f"kNN added more to the fused score than BM25, whose best chunk is {shown.chunk_id}"
                      if shown.passage is PassageSource.BM25_BEST_CHUNK else
                      f"BM25 has no better chunk than its section's first: {first}")
            shown = ShownChunk(*knn, PassageSource.KNN, reason=reason)
        assert shown is not None  # every entry comes from a list
        e.source, e.chunk_id, e.passage, e.matches, e.passage_reason = shown
