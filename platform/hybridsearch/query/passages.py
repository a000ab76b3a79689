"""Pure: which chunk a hit shows (and the reranker scores), and where it matched the query. BM25 over sections hits
a section's first chunk; the passage list (``build.passage_body``) finds each document's best-matching chunk, shown
instead; a document both lists found shows kNN's chunk when kNN added more to its fused score. Highlights come back
between two private-use marks, read as data (:func:`read_highlights`). Ranking never changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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
BEST = PassageSource.BM25_BEST_CHUNK
_MARKED = re.compile(f"{MARK_OPEN}[^{MARK_OPEN}{MARK_CLOSE}]*{MARK_CLOSE}")


def highlight_body() -> dict[str, Any]:
    """The passage list's ``highlight``: the unified highlighter over the whole chunk text, matches between marks."""
    return {"type": "unified", "pre_tags": [MARK_OPEN], "post_tags": [MARK_CLOSE], "encoder": "default",
            "fields": {HIGHLIGHTED_FIELD: {"number_of_fragments": 0}}}


def read_highlights(marked: str) -> tuple[str, list[MatchOffsets]] | None:
    """The text of ``marked`` without its marks and the ``(start, end)`` offsets of the marked stretches in it;
    None when the marks are not well formed."""
    matches: list[MatchOffsets] = []
    count = 0
    for count, m in enumerate(_MARKED.finditer(marked), start=1):
        start = m.start() - 2 * (count - 1)  # each earlier match's two marks are gone from the text
        if m.end() - m.start() > 2:
            matches.append((start, start + m.end() - m.start() - 2))
    if marked.count(MARK_OPEN) != count or marked.count(MARK_CLOSE) != count:
        return None
    return marked.replace(MARK_OPEN, "").replace(MARK_CLOSE, ""), matches


class BestChunk(NamedTuple):
    """A document's best-matching chunk: its own fields (to lay over the BM25 hit's ``_source``), where it matched."""

    fields: dict[str, Any]
    chunk_id: str
    matches: tuple[MatchOffsets, ...]


def best_chunks(resp: Mapping[str, Any]) -> dict[str, BestChunk]:
    """``{doc_id: BestChunk}`` from the passage list's answer: each document's first hit, its text from the
    highlight (with offsets) or its ``_source``; a hit with neither, or with marks not well formed, gives none."""
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
    """The fields of the :class:`Highlight` s of ``matches`` in ``text`` (validated with the whole page)."""
    return [{"start": a, "end": b, "term": text[a:b]} for a, b in matches]


def _keeps_bm25(e: WindowEntry, knn_chunk: str) -> bool:
    """Whether a document kNN found too keeps BM25's best chunk: kNN found that very chunk, or kNN did not add more
    than BM25 to the fused score (a tie goes to the chunk whose matched words can be shown)."""
    shares = e.fusion_shares
    return e.passage is BEST and (e.chunk_id == knn_chunk or shares.get("bm25", 0.0) >= shares.get("knn", 0.0))


def show_passages(entries: Sequence[WindowEntry], sections: bool, answer: Mapping[str, Any] | None,
                  depth: int) -> None:
    """Set the chunk each entry shows; ``answer``: the passage list's (``depth`` documents; None when off, and a
    failed one leaves the sections' first chunks)."""
    failed = item_failure(answer) if answer is not None else None
    best = best_chunks(answer) if answer is not None and failed is None else {}
    first = ("the passage search is off (HSP_QUERY__BEST_PASSAGE=false)" if answer is None else
             f"the passage search failed: {failed}" if failed else
             f"no chunk's text matched among the passage search's top {depth} documents")
    for e in entries:  # each shows the chunk of the first list that found it, BM25's where both did
        bm25, knn = e.found.get("bm25"), e.found.get("knn")
        if bm25 is not None and sections:
            p = best.get(e.key)
            if p is not None:
                e.source, e.chunk_id, e.passage, e.matches = {**bm25[0], **p.fields}, p.chunk_id, BEST, p.matches
            else:
                e.passage, e.passage_reason = PassageSource.SECTION_FIRST_CHUNK, first
        if knn is None or _keeps_bm25(e, knn[1]):
            continue
        e.passage_reason = (None if bm25 is None or e.passage is PassageSource.BM25 else
                            f"kNN added more to the fused score than BM25, whose best chunk is {e.chunk_id}"
                            if e.passage is BEST else f"BM25 has no better chunk than its section's first: {first}")
        (e.source, e.chunk_id), e.passage, e.matches = knn, PassageSource.KNN, ()
