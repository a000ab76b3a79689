"""Explanations for people: why a hit stands where it does (``explain=True``) and where one document fell at each
stage of one query (``why``: the search's window, then probes of the lists that missed it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hybridsearch.engine.dialect import Dialect
from hybridsearch.query.build import CHUNKS, Bm25Scope, Plan, bm25_body, search_filters
from hybridsearch.query.results import PassageSource, RerankOutcome, WhyReport
from hybridsearch.query.steps import Embed, Json, Steps, msearch
from hybridsearch.query.window import Window, WindowEntry, check_response, highlights
from hybridsearch.settings import QuerySettings

STAGE_LABEL = {"bm25": "BM25", "knn": "kNN"}


def passage_line(e: WindowEntry) -> str:
    """One line for people: which chunk ``e`` shows and why (``--explain``, ``--why``)."""
    position = e.source.get("position")
    where = f"chunk {position} ({e.chunk_id})" if isinstance(position, int) else f"chunk {e.chunk_id}"
    reason = e.passage_reason
    if e.passage is PassageSource.BM25_BEST_CHUNK:
        text = str(e.source.get("text") or "")
        matched = ", ".join(dict.fromkeys(text[a:b].lower() for a, b in e.matches))
        return f"passage: {where}, the document's chunk that best matches the query" + (
            f" (matched: {matched})" if matched else "")
    if e.passage is PassageSource.SECTION_FIRST_CHUNK:
        return f"passage: {where}, the first chunk of the BM25 section ({reason or 'no better chunk found'})"
    if e.passage is PassageSource.KNN:
        return f"passage: {where}, the chunk nearest to the query (kNN)" + (f"; {reason}" if reason else "")
    return f"passage: {where}, the chunk BM25 scored"


def explain(rerank_depth: int, window: Window, e: WindowEntry) -> list[str]:
    """Reasons for ``e``'s place, for people: each list's rank and share of the fused score, fusion, passage, rerank."""
    lines: list[str] = []
    for name, depth in window.depths.items():
        label, s = STAGE_LABEL[name], e.stages.get(name)
        if s is None:
            lines.append(f"{label}: not in the top {depth} (adds 0)" if e.fused else f"{label}: not in the top {depth}")
            continue
        line = f"{label}: rank {s.rank}, score {s.score:.4f}"
        f = window.fusion
        if e.fused and f is not None and f.method == "rrf":
            w = f.weight(name)
            line += f" → RRF term {'' if w == 1 else f'{w:g} × '}1/({f.k}+{s.rank}) = {e.fusion_shares[name]:.6f}"
        elif e.fused and f is not None:
            line += f" → {f.method}-normalised × weight {f.weight(name):g} = {e.fusion_shares[name]:.4f}"
        lines.append(line)
    if e.fused and window.fusion is not None:
        lines.append(f"fused: rank {e.fused.rank}, score {e.fused.score:.6f} ({window.fusion.describe()})")
    lines.append(passage_line(e))
    if e.rerank:
        before = e.fused.rank if e.fused else next(iter(e.stages.values())).rank
        lines.append(f"rerank: rank {e.rerank.rank}, score {e.rerank.score:.4f} (was rank {before} before rerank)")
        if e.blended is not None and window.blend is not None:
            lines.append(f"blend: {window.blend:g} × min-max(rerank score) + {1 - window.blend:g} × min-max(fused "
                         f"score) = {e.blended:.4f} over the reranked top")
    elif window.reranked:
        lines.append(f"rerank: below the rerank depth {rerank_depth}, keeps its fused order")
    elif window.rerank_outcome is not RerankOutcome.APPLIED:
        detail = window.rerank_reason or window.rerank_outcome.value.replace("_", " ")
        lines.append(f"rerank: not applied ({detail})")
    return lines


@dataclass(frozen=True)
class Probes:
    """What the probes of ``why`` search with (``oversample``: the search's rescoring of quantized vectors)."""

    alias: str
    query: QuerySettings
    rerank_depth: int
    dialect: Dialect
    scope: Bm25Scope = CHUNKS
    oversample: float | None = None


def _doc_filters(p: Plan, doc_id: str, with_filters: bool) -> list[dict[str, Any]]:
    """The document's chunks, and with ``with_filters`` only those the search's filters let through."""
    return [{"term": {"doc_id": doc_id}}, *(search_filters(p) if with_filters else [])]


def _count_body(query: Json, min_score: float | None = None) -> Json:
    """A search that counts, exactly, the chunks ``query`` matches (with ``min_score``: those scoring as high)."""
    body: Json = {"size": 0, "track_total_hits": True, "query": query}
    if min_score is not None:
        body["min_score"] = min_score
    return body


def _probe(probes: Probes, bodies: list[Json], what: str) -> Steps[list[Json]]:
    """The answers of one ``_msearch`` of ``bodies`` on the alias; a failed item raises."""
    lines = [line for body in bodies for line in ({"index": probes.alias}, body)]
    answer: Json = yield msearch(lines, what)
    items: list[Json] = answer["responses"]
    for item in items:
        check_response(item, probes.alias)
    return items


def _total(item: Json) -> int:
    return int(item["hits"]["total"]["value"])


def why_steps(probes: Probes, p: Plan, index: str, window: Window, doc_id: str) -> Steps[WhyReport]:
    """The :class:`WhyReport` for ``doc_id`` from a search's ``window``, probing lists that missed it."""
    counted = yield from _probe(probes, [_count_body({"bool": {"filter": _doc_filters(p, doc_id, False)}}),
                                         _count_body({"bool": {"filter": _doc_filters(p, doc_id, True)}})],
                                f"count chunks of {doc_id}")
    total, allowed = _total(counted[0]), _total(counted[1])
    rank, entry = next(((i, e) for i, e in enumerate(window.entries, start=1)
                        if str(e.source.get("doc_id") or e.key) == doc_id), (None, None))
    shown = {} if entry is None else {**entry.stage_scores(), "chunk_id": entry.chunk_id, "passage": entry.passage,
                                      "highlights": highlights(str(entry.source.get("text") or ""), entry.matches)}
    rep = WhyReport.model_validate({
        "query": p.query, "doc_id": doc_id, "mode": p.mode, "index": index, "chunks_in_index": total,
        "chunks_matching_filters": allowed, "candidates": len(window.entries), "final_rank": rank, **shown,
        "reranked": window.reranked, "rerank_outcome": window.rerank_outcome, "rerank_reason": window.rerank_reason})
    notes = rep.notes
    if total == 0:
        notes.append(f"{doc_id} is not in {index}: no chunk has this doc_id")
    elif allowed == 0:
        notes.append(f"all {total} chunks of {doc_id} are excluded by the filters (or tenant), or still being written")
    for name, depth in window.depths.items():
        stage = entry.stages.get(name) if entry else None
        if stage is not None:
            notes.append(f"{STAGE_LABEL[name]}: rank {stage.rank} of {depth}, score {stage.score:.4f}")
        elif allowed:
            notes.append((yield from _probe_bm25(probes, p, doc_id, depth)) if name == "bm25" else
                         (yield from _probe_knn(probes, p, doc_id, window, depth)))
    if rep.fused:
        notes.append(f"fused: rank {rep.fused.rank} of {len(window.entries)}, score {rep.fused.score:.6f}")
    elif entry is None and allowed:
        notes.append(f"fusion: not among the {len(window.entries)} fused candidates")
    if rep.rerank:
        notes.append(f"rerank: rank {rep.rerank.rank}, score {rep.rerank.score:.4f}")
    elif entry is not None and window.reranked:
        notes.append(f"rerank: not seen (fused rank {rep.final_rank} is below the depth {probes.rerank_depth})")
    elif window.rerank_reason:
        notes.append(f"rerank: not applied ({window.rerank_reason})")
    if entry is not None:
        notes.append(passage_line(entry))  # the chunk shown and reranked
    if rep.final_rank is not None:
        notes.append(f"final: rank {rep.final_rank}")
    return rep


def _probe_bm25(probes: Probes, p: Plan, doc_id: str, depth: int) -> Steps[str]:
    body = bm25_body(probes.query, p, probes.scope)
    match = body["query"]["bool"]["must"][0] if "bool" in body["query"] else body["query"]
    what = probes.scope.unit
    best, = yield from _probe(probes, [{"size": 1, "_source": False, "query": {
        "bool": {"must": [match], "filter": _doc_filters(p, doc_id, True)}}}], "BM25 probe")
    hits = best["hits"]["hits"]
    if not hits:
        return f"BM25: no {what} of {doc_id} matches the query terms (operator {probes.query.operator})"
    score = float(hits[0]["_score"])
    counted, = yield from _probe(probes, [_count_body({"bool": {"must": [match], "filter": search_filters(p)}},
                                                      min_score=score)], "BM25 probe")
    return (f"BM25: best {what} score {score:.4f}, about {_total(counted)} {what}s score as high or higher; "
            f"the list keeps {depth}")


def _probe_knn(probes: Probes, p: Plan, doc_id: str, window: Window, depth: int) -> Steps[str]:
    vector = yield Embed(p.query)
    # rescored as the search was, so that its score compares with the window's
    knn = probes.dialect.knn_search("embedding", [float(x) for x in vector], 1, 100,
                                    _doc_filters(p, doc_id, True), probes.oversample)
    nearest, = yield from _probe(probes, [{"size": 1, "_source": False, **knn}], "kNN probe")
    hits = nearest["hits"]["hits"]
    if not hits:
        return f"kNN: no chunk of {doc_id} has a vector"
    kept = [e.stages["knn"].score for e in window.entries if "knn" in e.stages]
    cutoff = f"; the lowest score kept in the top {depth} is {min(kept):.4f}" if kept else ""
    return f"kNN: best chunk score {float(hits[0]['_score']):.4f}{cutoff}"
