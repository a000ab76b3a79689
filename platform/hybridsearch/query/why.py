"""``why``: where one document fell in BM25, kNN, fusion and rerank for one query.

For a stage whose list missed the document, a probe says why: BM25 — whether any chunk matches the
query terms, its best score and roughly how many chunks outrank it; kNN — the best cosine
similarity of its chunks against the lowest score the list kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.query.assemble import Rank, Window, passage_line, stage_score
from hybridsearch.query.build import CHUNKS, Bm25Scope, Plan, bm25_body, search_filters
from hybridsearch.query.passages import highlights
from hybridsearch.query.results import Highlight, WhyReport
from hybridsearch.settings import QuerySettings


@dataclass(frozen=True)
class Probes:
    """What the probes need from the search client: the cluster, the alias searched, its query knobs, the
    rerank depth and the query encoder."""

    es: EngineClient
    alias: str
    query: QuerySettings
    rerank_depth: int
    encode: Callable[[str], np.ndarray]
    scope: Bm25Scope = CHUNKS  # what BM25 scores (``build.bm25_scope``)
    oversample: float | None = None  # the search's rescoring of quantized vectors (``candidates.KnnWidth``)


def _doc_filter(p: Plan, doc_id: str, with_filters: bool) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{"term": {"doc_id": doc_id}}]
    if with_filters:
        clauses += search_filters(p)
    return {"bool": {"filter": clauses}}


def why_report(probes: Probes, p: Plan, index: str, window: Window, doc_id: str) -> WhyReport:
    """Build the :class:`WhyReport` for ``doc_id`` from a search's fused ``window``. Raises ClusterError."""
    es, alias = probes.es, probes.alias
    with engine_errors(f"count chunks of {doc_id}"):
        total = int(es.send(request.count(alias, _doc_filter(p, doc_id, False)))["count"])
        allowed = int(es.send(request.count(alias, _doc_filter(p, doc_id, True)))["count"])
    pos = next((i for i, c in enumerate(window.candidates) if str(c.source.get("doc_id") or c.key) == doc_id), None)
    cand = window.candidates[pos] if pos is not None else None
    rep = WhyReport(query=p.query, doc_id=doc_id, mode=p.mode, index=index, chunks_in_index=total,
                    chunks_matching_filters=allowed, candidates=len(window.candidates),
                    reranked=window.reranked, rerank_outcome=window.rerank_outcome,
                    rerank_reason=window.rerank_reason)
    notes = rep.notes
    if total == 0:
        notes.append(f"{doc_id} is not in {index}: no chunk has this doc_id")
    elif allowed == 0:
        notes.append(f"all {total} chunks of {doc_id} are excluded by the filters (or tenant), or still being written")
    if cand is not None:
        rep.bm25, rep.knn = stage_score(cand.stages.get("bm25")), stage_score(cand.stages.get("knn"))
        rep.fused, rep.rerank = stage_score(cand.fused), stage_score(cand.rerank)
        rep.final_rank = (pos or 0) + 1
        rep.chunk_id, rep.passage = cand.chunk_id, cand.passage
        rep.highlights = [Highlight(**h) for h in highlights(str(cand.source.get("text") or ""), cand.spans)]
    for name, depth in window.depths.items():
        stage: Rank | None = cand.stages.get(name) if cand else None
        if stage is not None:
            label = "BM25" if name == "bm25" else "kNN"
            notes.append(f"{label}: rank {stage.rank} of {depth}, score {stage.score:.4f}")
        elif allowed:
            notes.append(_probe_bm25(probes, p, doc_id, depth) if name == "bm25" else
                         _probe_knn(probes, p, doc_id, window, depth))
    if rep.fused:
        notes.append(f"fused: rank {rep.fused.rank} of {len(window.candidates)}, score {rep.fused.score:.6f}")
    elif cand is None and allowed:
        notes.append(f"fusion: not among the {len(window.candidates)} fused candidates")
    if rep.rerank:
        notes.append(f"rerank: rank {rep.rerank.rank}, score {rep.rerank.score:.4f}")
    elif cand is not None and window.reranked:
        notes.append(f"rerank: not seen (fused rank {rep.final_rank} is below the depth {probes.rerank_depth})")
    elif window.rerank_reason:
        notes.append(f"rerank: not applied ({window.rerank_reason})")
    if cand is not None:
        notes.append(passage_line(cand))  # the chunk shown and reranked
    if rep.final_rank is not None:
        notes.append(f"final: rank {rep.final_rank}")
    return rep


def _probe_bm25(probes: Probes, p: Plan, doc_id: str, depth: int) -> str:
    body = bm25_body(probes.query, p, probes.scope)
    match = body["query"]["bool"]["must"][0] if "bool" in body["query"] else body["query"]
    alias = probes.alias
    with engine_errors("BM25 probe"):
        only_doc = _doc_filter(p, doc_id, True)["bool"]["filter"]
        res = probes.es.send(request.search(alias, request.body(
            size=1, source=False, query={"bool": {"must": [match], "filter": only_doc}})))
        hits = res["hits"]["hits"]
        if not hits:
            what = probes.scope.unit
            return f"BM25: no {what} of {doc_id} matches the query terms (operator {probes.query.operator})"
        score = float(hits[0]["_score"])
        query = {"bool": {"must": [match], "filter": search_filters(p)}}
        above = int(probes.es.send(request.count(alias, query, min_score=score))["count"])
    what = probes.scope.unit
    return (f"BM25: best {what} score {score:.4f}, about {above} {what}s score as high or higher; "
            f"the list keeps {depth}")


def _probe_knn(probes: Probes, p: Plan, doc_id: str, window: Window, depth: int) -> str:
    qv = probes.encode(p.query)
    # rescored as the search was, so that its score compares with the window's
    knn = probes.es.dialect.knn_search("embedding", [float(x) for x in qv], 1, 100,
                                       _doc_filter(p, doc_id, True)["bool"]["filter"], probes.oversample)
    with engine_errors("kNN probe"):
        hits = probes.es.send(request.search(probes.alias, request.body(size=1, source=False, **knn)))["hits"]["hits"]
    if not hits:
        return f"kNN: no chunk of {doc_id} has a vector"
    kept = [c.stages["knn"].score for c in window.candidates if "knn" in c.stages]
    cutoff = f"; the lowest score kept in the top {depth} is {min(kept):.4f}" if kept else ""
    return f"kNN: best chunk score {float(hits[0]['_score']):.4f}{cutoff}"
