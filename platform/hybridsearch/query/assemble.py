"""Pure result assembly: ``_msearch`` responses → collapsed stage lists → fused window (each entry showing the
chunk :mod:`.passages` picks) → reranked, paged :class:`~hybridsearch.query.results.SearchResult`. Shared by the
sync and async clients.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from hybridsearch.errors import ClusterError, IndexNotFound, RerankerError
from hybridsearch.query.build import CHUNKS, PASSAGES, Bm25Scope, Plan
from hybridsearch.query.fusion import Fusion, interpolate, normalise, rrf_term
from hybridsearch.query.passages import Span, best_chunks, describe, highlights, prefer_bm25
from hybridsearch.query.results import PassageSource, RerankOutcome, SearchResult, StageScore, Timings
from hybridsearch.settings import QuerySettings

STAGE_LABEL = {"bm25": "BM25", "knn": "kNN"}


@dataclass
class Candidate:
    """One entry of the fused window (a document when collapsing, else a chunk); ``source`` and ``chunk_id``:
    the chunk it shows and the reranker scores (``passage`` says why, ``spans`` where it matched)."""

    key: str
    source: dict[str, Any]
    chunk_id: str
    passage: PassageSource = PassageSource.BM25
    spans: tuple[Span, ...] = ()
    passage_reason: str | None = None  # for people: why the section's first chunk, or kNN's over BM25's
    found: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)  # each list's chunk (source, id)
    stages: dict[str, Rank] = field(default_factory=dict)
    terms: dict[str, float] = field(default_factory=dict)
    fused: Rank | None = None
    base_score: float = 0.0
    rerank: Rank | None = None
    blended: float | None = None  # final score when the rerank blend weight is below 1


@dataclass
class Window:
    """The fused window of one query, before paging."""

    candidates: list[Candidate]
    depths: dict[str, int]
    reranked: bool = False
    rerank_outcome: RerankOutcome = RerankOutcome.SKIPPED
    rerank_reason: str | None = None  # detail for people when not applied
    blend: float | None = None  # reranker share in the final order of the reranked top (1 = reranker only)
    fusion: Fusion | None = None  # how the lists were fused; None for a single list


class Rank(NamedTuple):
    """A stage rank and score while assembling (cheap); becomes a StageScore only for returned hits."""

    rank: int
    score: float


def stage_score(r: Rank | None) -> StageScore | None:
    """The public :class:`StageScore` for ``r``."""
    return None if r is None else StageScore(rank=r.rank, score=r.score)


def _failure(resp: Mapping[str, Any]) -> str | None:
    """The engine's reason for one failed ``_msearch`` item (``type: reason``), or None."""
    err = resp.get("error")
    if not err:
        return None
    root = (err.get("root_cause") or [err])[0] if isinstance(err, dict) else {"reason": str(err)}
    return f"{root.get('type', 'error')}: {root.get('reason')}"


def _missing_index(resp: Mapping[str, Any]) -> str | None:
    """The index a failed ``_msearch`` item names as missing (its root cause's ``index``), or None."""
    err = resp.get("error")
    root = (err.get("root_cause") or [err])[0] if isinstance(err, dict) else {}
    name = root.get("index") if isinstance(root, dict) else None
    return str(name) if name else None


def check_response(resp: Mapping[str, Any], index: str) -> None:
    """Raise our error type for one failed ``_msearch`` item."""
    reason = _failure(resp)
    if reason is None:
        return
    status = int(resp.get("status", 500))
    missing = _missing_index(resp)
    if status == 404 and missing is not None and missing.endswith("-ingest-state"):
        raise IndexNotFound(f"the ingest state index {missing} of {index} was deleted: searches cannot tell "
                            "documents being written apart",
                            fix=f"Run `hsp ingest` of this prefix again (it recreates {missing}); within a minute "
                            "searches go on without it, as for a prefix never ingested")
    if status == 404:
        raise IndexNotFound(f"index or alias {index} does not exist ({reason}): run `hsp ingest` first")
    raise ClusterError(f"search on {index} failed with HTTP {status}: {reason}")


def answered_by(responses: Sequence[Mapping[str, Any]]) -> set[str]:
    """The concrete indices whose chunks the ``_msearch`` answers hold (each hit's ``_index``)."""
    return {hit["_index"] for r in responses for hit in r.get("hits", {}).get("hits", []) if "_index" in hit}


def stage_list(resp: Mapping[str, Any], collapse: bool) -> list[tuple[str, float, dict[str, Any]]]:
    """``(key, score, hit)`` best first; with ``collapse`` only a document's best chunk is kept."""
    out: list[tuple[str, float, dict[str, Any]]] = []
    seen: set[str] = set()
    for hit in resp.get("hits", {}).get("hits", []):
        src = hit.get("_source") or {}
        key = str(src.get("doc_id") or hit["_id"]) if collapse else str(src.get("chunk_id") or hit["_id"])
        if key in seen:
            continue
        seen.add(key)
        out.append((key, float(hit.get("_score") or 0.0), hit))
    return out


def fuse_window(q: QuerySettings, names: Sequence[str], responses: Sequence[Mapping[str, Any]],
                fusion: Fusion | None = None, scope: Bm25Scope = CHUNKS) -> Window:
    """Collapse each list, fuse them with ``fusion`` (default: RRF k=60, equal weights) into the window; then
    pick the chunk each entry shows (:func:`show_passages`; ``scope``: what BM25 scored, and the ``passages``
    answer among ``responses``, which ranks nothing)."""
    answers = dict(zip(names, responses, strict=True))
    passage_answer = answers.pop(PASSAGES, None)
    lists = {name: stage_list(resp, q.collapse) for name, resp in answers.items()}
    cands: dict[str, Candidate] = {}
    for name, lst in lists.items():
        for rank, (key, score, hit) in enumerate(lst, start=1):
            src = hit.get("_source") or {}
            chunk_id = str(src.get("chunk_id") or hit["_id"])
            c = cands.get(key)
            if c is None:
                c = cands[key] = Candidate(key=key, source=src, chunk_id=chunk_id)
            c.found[name] = (src, chunk_id)
            c.stages[name] = Rank(rank, score)
    depths = {n: len(v) for n, v in lists.items()}
    if len(lists) == 1:
        (name, lst), = lists.items()
        order = [(key, score) for key, score, _ in lst]
        for key, score in order:
            cands[key].base_score = score
        window = Window(candidates=[cands[key] for key, _ in order], depths=depths)
    else:
        fusion = fusion or Fusion()
        order = _fuse(fusion, lists, cands)
        for rank, (key, score) in enumerate(order, start=1):
            cands[key].fused = Rank(rank, score)
            cands[key].base_score = score
        window = Window(candidates=[cands[key] for key, _ in order], depths=depths, fusion=fusion)
    show_passages(window.candidates, scope, passage_answer, q.passage_k)
    return window


class _Shown(NamedTuple):
    """The chunk a candidate shows: its ``_source`` and id, why (:class:`PassageSource`), where it matched."""

    source: dict[str, Any]
    chunk_id: str
    passage: PassageSource
    spans: tuple[Span, ...] = ()
    reason: str | None = None


def _keeps_bm25(shown: _Shown | None, knn_chunk: str, terms: Mapping[str, float]) -> bool:
    """Whether a document kNN found too keeps BM25's chunk ``shown``: its best chunk, when kNN found that very
    chunk (shown with its highlights) or :func:`~.passages.prefer_bm25` says so."""
    if shown is None:
        return False
    same = shown.passage is PassageSource.BM25_BEST_CHUNK and shown.chunk_id == knn_chunk
    return same or prefer_bm25(terms, shown.passage)


def show_passages(cands: Sequence[Candidate], scope: Bm25Scope, answer: Mapping[str, Any] | None,
                  depth: int) -> None:
    """Set the chunk each candidate shows and the reranker scores (:mod:`.passages`). Over sections a BM25 hit
    shows its document's best chunk from the passage list ``answer`` (``depth`` documents; the chunk's own fields
    over the BM25 hit's, which are the document's), else its section's
    first chunk; a document kNN found too shows kNN's chunk unless :func:`~.passages.prefer_bm25` (or both
    found the same chunk); over chunks, BM25's chunk unless kNN found the document. A failed passage list leaves
    the first chunks, never fails the search."""
    failed = _failure(answer) if answer is not None else None
    best = best_chunks(answer) if answer is not None and failed is None else {}
    first = ("the passage search is off (HSP_QUERY__BEST_PASSAGE=false)" if answer is None else
             f"the passage search failed: {failed}" if failed else
             f"no chunk's text matched among the passage search's top {depth} documents")
    for c in cands:
        bm25, knn = c.found.get("bm25"), c.found.get("knn")
        shown: _Shown | None = None
        if bm25 is not None:
            p = best.get(c.key) if scope.sections else None
            shown = (_Shown({**bm25[0], **p.fields}, p.chunk_id, PassageSource.BM25_BEST_CHUNK, p.spans)
                     if p is not None else
                     _Shown(*bm25, PassageSource.SECTION_FIRST_CHUNK, reason=first) if scope.sections else
                     _Shown(*bm25, PassageSource.BM25))
        if knn is not None and not _keeps_bm25(shown, knn[1], c.terms):
            reason = (None if shown is None or shown.passage is PassageSource.BM25 else
                      f"kNN added more to the fused score than BM25, whose best chunk is {shown.chunk_id}"
                      if shown.passage is PassageSource.BM25_BEST_CHUNK else
                      f"BM25 has no better chunk than its section's first: {first}")
            shown = _Shown(*knn, PassageSource.KNN, reason=reason)
        assert shown is not None  # every candidate comes from a list
        c.source, c.chunk_id, c.passage, c.spans, c.passage_reason = shown


def _fuse(
    fusion: Fusion, lists: dict[str, list[tuple[str, float, dict[str, Any]]]], cands: dict[str, Candidate]
) -> list[tuple[str, float]]:
    """``fusion`` of the lists, with each candidate's per-list terms recorded for explanations."""
    for name, lst in lists.items():
        w = fusion.weight(name)
        if fusion.method == "rrf":
            for rank, (key, _, _) in enumerate(lst, start=1):
                cands[key].terms[name] = rrf_term(rank, fusion.k, w)
        else:
            for (key, _, _), v in zip(lst, normalise([s for _, s, _ in lst], fusion.norm), strict=True):
                cands[key].terms[name] = w * v
    return fusion.fuse({name: [(key, s) for key, s, _ in lst] for name, lst in lists.items()})


def passage_text(source: Mapping[str, Any]) -> str:
    """Text the reranker scores for a stored chunk ``source``: its title and text (training pairs use it too,
    so a reranker is trained on exactly what it scores when serving)."""
    title = source.get("title") or ""
    text = source.get("text") or ""
    return f"{title} {text}".strip() if title else str(text)


def rerank_slice(window: Window, depth: int) -> list[Candidate]:
    """The top ``depth`` fused candidates the reranker sees (distinct documents when collapsing)."""
    return window.candidates[:depth]


def apply_rerank(window: Window, depth: int, scores: Sequence[float], blend: float = 1.0) -> None:
    """Reorder the top ``depth`` by ``scores`` (ties keep fused order); the rest keep fused order.

    With ``blend`` below 1 the top is ordered by :func:`~hybridsearch.query.fusion.interpolate`:
    ``blend`` × min-max(reranker score) + (1 − ``blend``) × min-max(fused score); 0 keeps the fused
    order. Raises RerankerError when ``scores`` does not hold one finite number per passage.
    """
    top = rerank_slice(window, depth)
    if len(scores) != len(top):
        raise RerankerError(f"reranker returned {len(scores)} scores for {len(top)} passages")
    vals = [float(s) for s in scores]
    if not all(math.isfinite(s) for s in vals):
        raise RerankerError("reranker returned a score that is not a finite number")
    keys = vals if blend >= 1.0 else interpolate(vals, [c.base_score for c in top], blend)
    order = sorted(range(len(top)), key=lambda i: (-keys[i], i))
    for new_rank, i in enumerate(order, start=1):
        top[i].rerank = Rank(new_rank, vals[i])
        top[i].blended = keys[i] if blend < 1.0 else None
    window.candidates = [top[i] for i in order] + window.candidates[depth:]
    window.reranked = True
    window.rerank_outcome, window.rerank_reason = RerankOutcome.APPLIED, None
    window.blend = blend


def _rank_fields(r: Rank | None) -> dict[str, Any] | None:
    return None if r is None else {"rank": r.rank, "score": r.score}


def _hit_fields(c: Candidate, rank: int, explain: list[str] | None) -> dict[str, Any]:
    """The fields of ``c``'s :class:`Hit` at ``rank``: plain data, validated for the whole page at once
    (:func:`build_result`), which costs about half as much as building a hundred models one by one."""
    src = c.source
    meta = src.get("metadata")
    text = str(src.get("text") or "")
    position = src.get("position")
    return {
        "doc_id": str(src.get("doc_id") or c.key), "chunk_id": c.chunk_id, "title": src.get("title"), "text": text,
        "position": position if isinstance(position, int) else None, "passage": c.passage,
        "highlights": highlights(text, c.spans), "parent_id": src.get("parent_id"),
        "parent_text": src.get("parent_text"), "metadata": meta if isinstance(meta, dict) else {},
        "score": c.blended if c.blended is not None else c.rerank.score if c.rerank else c.base_score, "rank": rank,
        "bm25": _rank_fields(c.stages.get("bm25")), "knn": _rank_fields(c.stages.get("knn")),
        "fused": _rank_fields(c.fused), "rerank": _rank_fields(c.rerank), "explanation": explain,
    }


def explain(rerank_depth: int, window: Window, c: Candidate) -> list[str]:
    """Human-readable reasons for ``c``'s place: each list's rank and fusion term, fusion, rerank."""
    lines: list[str] = []
    for name, depth in window.depths.items():
        label, s = STAGE_LABEL[name], c.stages.get(name)
        if s is None:
            lines.append(f"{label}: not in the top {depth} (adds 0)" if c.fused else f"{label}: not in the top {depth}")
            continue
        line = f"{label}: rank {s.rank}, score {s.score:.4f}"
        f = window.fusion
        if c.fused and f is not None and f.method == "rrf":
            w = f.weight(name)
            line += f" → RRF term {'' if w == 1 else f'{w:g} × '}1/({f.k}+{s.rank}) = {c.terms[name]:.6f}"
        elif c.fused and f is not None:
            line += f" → {f.norm}-normalised × weight {f.weight(name):g} = {c.terms[name]:.4f}"
        lines.append(line)
    if c.fused and window.fusion is not None:
        lines.append(f"fused: rank {c.fused.rank}, score {c.fused.score:.6f} ({window.fusion.describe()})")
    lines.append(passage_line(c))
    if c.rerank:
        before = c.fused.rank if c.fused else next(iter(c.stages.values())).rank
        lines.append(f"rerank: rank {c.rerank.rank}, score {c.rerank.score:.4f} (was rank {before} before rerank)")
        if c.blended is not None and window.blend is not None:
            lines.append(f"blend: {window.blend:g} × min-max(rerank score) + {1 - window.blend:g} × min-max(fused "
                         f"score) = {c.blended:.4f} over the reranked top")
    elif window.reranked:
        lines.append(f"rerank: below the rerank depth {rerank_depth}, keeps its fused order")
    elif window.rerank_outcome is not RerankOutcome.APPLIED:
        detail = window.rerank_reason or window.rerank_outcome.value.replace("_", " ")
        lines.append(f"rerank: not applied ({detail})")
    return lines


def passage_line(c: Candidate) -> str:
    """Which chunk ``c`` shows and why, for people (:func:`~.passages.describe`)."""
    position = c.source.get("position")
    text = str(c.source.get("text") or "")
    return describe(c.passage, c.chunk_id, position if isinstance(position, int) else None,
                    [text[a:b] for a, b in c.spans], c.passage_reason)


def build_result(q: QuerySettings, rerank_depth: int, p: Plan, index: str, window: Window, timings: Timings
                 ) -> SearchResult:
    """Page ``window`` (``k`` hits from ``(page-1)*k``) into a :class:`SearchResult`."""
    start = (p.page - 1) * p.k
    page = window.candidates[start:start + p.k]
    hits = [_hit_fields(c, start + i + 1, explain(rerank_depth, window, c) if p.explain else None)
            for i, c in enumerate(page)]
    return SearchResult.model_validate({
        "query": p.query, "mode": p.mode, "index": index, "k": p.k, "page": p.page, "hits": hits,
        "candidates": len(window.candidates), "reranked": window.reranked, "rerank_outcome": window.rerank_outcome,
        "rerank_reason": window.rerank_reason, "rerank_blend": window.blend, "truncated_query": p.truncated,
        "timings": timings, "fusion": window.fusion.describe() if window.fusion else None})


def query_hash(text: str) -> str:
    """SHA-256 of the searched query text, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def log_doc(p: Plan, result: SearchResult, *, redact: bool, tenant: str | None) -> dict[str, Any]:
    """The query-log document for one answered search (query text omitted when ``redact``)."""
    t = result.timings
    doc: dict[str, Any] = {
        "@timestamp": datetime.now(UTC).isoformat(), "query_hash": query_hash(p.query), "mode": p.mode,
        "index": result.index, "k": p.k, "hits": len(result.hits), "zero_hits": not result.hits,
        "reranked": result.reranked, "top_ids": [h.doc_id for h in result.hits[:10]],
        "latency_ms": {"embed": t.embed_ms, "search": t.search_ms, "fusion": t.fusion_ms,
                       "rerank": t.rerank_ms, "total": t.total_ms},
    }
    if not redact:
        doc["query"] = p.query
    if tenant is not None:
        doc["tenant"] = tenant
    if p.filter_log is not None:
        doc["filters"] = p.filter_log
    if result.rerank_reason:
        doc["rerank_reason"] = result.rerank_reason
    return doc
