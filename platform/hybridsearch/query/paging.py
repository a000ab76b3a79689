"""The page a search returns, pure: hits ``(page-1)*k+1 .. page*k`` of the window as the typed
:class:`~hybridsearch.query.results.SearchResult`."""

from __future__ import annotations

from typing import Any

from hybridsearch.query.build import Plan
from hybridsearch.query.explain import explain
from hybridsearch.query.passages import highlights
from hybridsearch.query.results import SearchResult, Timings
from hybridsearch.query.window import Rank, Window, WindowEntry


def _rank_fields(r: Rank | None) -> dict[str, Any] | None:
    return None if r is None else {"rank": r.rank, "score": r.score}


def _hit_fields(e: WindowEntry, rank: int, explanation: list[str] | None) -> dict[str, Any]:
    """The fields of ``e``'s :class:`Hit` at ``rank``: plain data, validated for the whole page at once
    (:func:`build_result`), which costs about half as much as building a hundred models one by one."""
    src = e.source
    meta = src.get("metadata")
    text = str(src.get("text") or "")
    position = src.get("position")
    return {
        "doc_id": str(src.get("doc_id") or e.key), "chunk_id": e.chunk_id, "title": src.get("title"), "text": text,
        "position": position if isinstance(position, int) else None, "passage": e.passage,
        "highlights": highlights(text, e.matches), "parent_id": src.get("parent_id"),
        "parent_text": src.get("parent_text"), "metadata": meta if isinstance(meta, dict) else {},
        "score": e.blended if e.blended is not None else e.rerank.score if e.rerank else e.base_score, "rank": rank,
        "bm25": _rank_fields(e.stages.get("bm25")), "knn": _rank_fields(e.stages.get("knn")),
        "fused": _rank_fields(e.fused), "rerank": _rank_fields(e.rerank), "explanation": explanation,
    }


def build_result(rerank_depth: int, p: Plan, index: str, window: Window, timings: Timings) -> SearchResult:
    """Page ``window`` (``p.k`` hits from ``(p.page-1)*p.k``) into a :class:`SearchResult`, each hit explained
    when ``p.explain``."""
    start = (p.page - 1) * p.k
    page = window.entries[start:start + p.k]
    hits = [_hit_fields(e, start + i + 1, explain(rerank_depth, window, e) if p.explain else None)
            for i, e in enumerate(page)]
    return SearchResult.model_validate({
        "query": p.query, "mode": p.mode, "index": index, "k": p.k, "page": p.page, "hits": hits,
        "candidates": len(window.entries), "reranked": window.reranked, "rerank_outcome": window.rerank_outcome,
        "rerank_reason": window.rerank_reason, "rerank_blend": window.blend, "truncated_query": p.truncated,
        "timings": timings, "fusion": window.fusion.describe() if window.fusion else None})
