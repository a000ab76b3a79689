"""The fused window of one query, pure: :func:`fuse_window` builds it from one ``_msearch`` answer's lists,
:func:`show_passages` sets the chunk each entry shows (BM25 over sections hits a section's first chunk; the passage
list finds each document's best-matching chunk; kNN's chunk wins where kNN added more to the fused score), and
:func:`apply_rerank` reorders its top; :func:`explain` says why an entry stands where it does, for people.
Highlights come back between two private-use marks, read as data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hybridsearch.errors import ClusterError, IndexNotFound, RerankerError
from hybridsearch.query.fusion import Fusion, interpolate
from hybridsearch.query.results import PassageSource, RerankOutcome, StageScore

#: where a shown chunk's text matched the query: ``(start, end)`` offsets in that text
MatchOffsets = tuple[int, int]


class Rank(NamedTuple):
    """A stage rank (from 1) and score; a :class:`StageScore` only for returned hits (cheaper to build)."""

    rank: int
    score: float


@dataclass
class WindowEntry:
    """A document (collapsing) or chunk of the window; ``source`` and ``chunk_id``: the chunk shown and reranked."""

    key: str
    source: dict[str, Any]
    chunk_id: str
    passage: PassageSource = PassageSource.BM25
    matches: tuple[MatchOffsets, ...] = ()
    passage_reason: str | None = None  # for people: why the section's first chunk, or kNN's over BM25's
    found: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)  # each list's chunk (source, id)
    stages: dict[str, Rank] = field(default_factory=dict)  # each list's rank and score
    fusion_shares: dict[str, float] = field(default_factory=dict)  # each list's share in the fused score
    fused: Rank | None = None
    base_score: float = 0.0  # the fused score, or the one list's score
    rerank: Rank | None = None
    blended: float | None = None  # final score when the rerank blend weight is below 1

    def stage_scores(self) -> dict[str, StageScore | None]:
        """Its :class:`StageScore` in each stage: ``bm25``, ``knn``, ``fused``, ``rerank``."""
        ranks = {"bm25": self.stages.get("bm25"), "knn": self.stages.get("knn"), "fused": self.fused,
                 "rerank": self.rerank}
        return {name: None if r is None else StageScore(rank=r.rank, score=r.score) for name, r in ranks.items()}


@dataclass
class Window:
    """The fused window before paging: ``entries`` best first, ``depths`` the hits each list returned."""

    entries: list[WindowEntry]
    depths: dict[str, int]
    reranked: bool = False
    rerank_outcome: RerankOutcome = RerankOutcome.SKIPPED
    rerank_reason: str | None = None  # detail for people when not applied
    blend: float | None = None  # reranker share in the final order of the reranked top (1 = reranker only)
    fusion: Fusion | None = None  # how the lists were fused; None for a single list


def _root_cause(resp: Mapping[str, Any]) -> dict[str, Any] | None:
    err = resp.get("error")
    if not err:
        return None
    root = (err.get("root_cause") or [err])[0] if isinstance(err, dict) else {"reason": str(err)}
    return root if isinstance(root, dict) else {"reason": str(root)}


def item_failure(resp: Mapping[str, Any]) -> str | None:
    """The engine's reason for one failed ``_msearch`` item (``type: reason``), or None."""
    root = _root_cause(resp)
    return None if root is None else f"{root.get('type', 'error')}: {root.get('reason')}"


def check_response(resp: Mapping[str, Any], index: str) -> None:
    """Raise our error type for one failed ``_msearch`` item."""
    reason = item_failure(resp)
    if reason is None:
        return
    missing = (_root_cause(resp) or {}).get("index")
    status = int(resp.get("status", 500))
    if status == 404 and str(missing).endswith("-ingest-state"):
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
    best: dict[str, tuple[float, dict[str, Any]]] = {}
    for hit in resp.get("hits", {}).get("hits", []):
        src = hit.get("_source") or {}
        key = str(src.get("doc_id") or hit["_id"]) if collapse else str(src.get("chunk_id") or hit["_id"])
        best.setdefault(key, (float(hit.get("_score") or 0.0), hit))
    return [(key, score, hit) for key, (score, hit) in best.items()]


def fuse_window(answers: Mapping[str, Mapping[str, Any]], collapse: bool, fusion: Fusion | None = None) -> Window:
    """The window of ``{name: _msearch item}`` (``bm25``, ``knn``), each list collapsed with ``collapse``, two
    fused with ``fusion`` (default RRF k=60); each entry shows its first list's chunk."""
    lists = {name: stage_list(resp, collapse) for name, resp in answers.items()}
    entries: dict[str, WindowEntry] = {}
    for name, lst in lists.items():
        for rank, (key, score, hit) in enumerate(lst, start=1):
            src = hit.get("_source") or {}
            chunk_id = str(src.get("chunk_id") or hit["_id"])
            e = entries.get(key)
            if e is None:
                e = entries[key] = WindowEntry(key=key, source=src, chunk_id=chunk_id)
            e.found[name] = (src, chunk_id)
            e.stages[name] = Rank(rank, score)
    depths = {n: len(v) for n, v in lists.items()}
    if len(lists) == 1:
        (name, lst), = lists.items()
        for key, score, _ in lst:
            entries[key].base_score = score
        return Window(entries=[entries[key] for key, _, _ in lst], depths=depths)
    fusion = fusion or Fusion()
    scored = {name: [(key, s) for key, s, _ in lst] for name, lst in lists.items()}
    for name, shares in fusion.shares(scored).items():
        for key, share in shares.items():
            entries[key].fusion_shares[name] = share
    order = fusion.fuse(scored)
    for rank, (key, score) in enumerate(order, start=1):
        entries[key].fused = Rank(rank, score)
        entries[key].base_score = score
    return Window(entries=[entries[key] for key, _ in order], depths=depths, fusion=fusion)


# ---- the chunk each entry shows

#: what the highlighter puts around each match: private-use characters, which text rarely holds
MARK_OPEN, MARK_CLOSE = "\ue000", "\ue001"
#: the field the passage list highlights
HIGHLIGHTED_FIELD = "text"
#: what the passage list fetches of each chunk: what differs between a document's chunks (and the text, unless
#: highlighted)
PASSAGE_FIELDS = ["doc_id", "chunk_id", "position", "parent_id", "parent_text"]
BEST = PassageSource.BM25_BEST_CHUNK
_MARKED = re.compile(f"{MARK_OPEN}[^{MARK_OPEN}{MARK_CLOSE}]*{MARK_CLOSE}")


def highlight_body() -> dict[str, Any]:
    """The passage list's ``highlight``: the whole chunk text, matches between marks."""
    return {"type": "unified", "pre_tags": [MARK_OPEN], "post_tags": [MARK_CLOSE], "encoder": "default",
            "fields": {HIGHLIGHTED_FIELD: {"number_of_fragments": 0}}}


def read_highlights(marked: str) -> tuple[str, list[MatchOffsets]] | None:
    """``marked`` without its marks and the offsets of the marked stretches; None when marks are not well formed."""
    matches: list[MatchOffsets] = []
    count = 0
    for count, m in enumerate(_MARKED.finditer(marked), start=1):
        start = m.start() - 2 * (count - 1)  # each earlier match's two marks are gone from the text
        if m.end() - m.start() > 2:
            matches.append((start, start + m.end() - m.start() - 2))
    if marked.count(MARK_OPEN) != count or marked.count(MARK_CLOSE) != count:
        return None
    return marked.replace(MARK_OPEN, "").replace(MARK_CLOSE, ""), matches


def best_chunks(resp: Mapping[str, Any]) -> dict[str, tuple[dict[str, Any], str, tuple[MatchOffsets, ...]]]:
    """``{doc_id: (fields, chunk_id, matches)}``: each document's first hit in the passage list's answer, its text
    from the highlight or ``_source`` (its fields are laid over the BM25 hit's)."""
    out: dict[str, tuple[dict[str, Any], str, tuple[MatchOffsets, ...]]] = {}
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
            out[doc] = ({**fields, "text": read[0]}, str(src.get("chunk_id") or hit["_id"]), tuple(read[1]))
    return out


def highlights(text: str, matches: Sequence[MatchOffsets]) -> list[dict[str, Any]]:
    """The fields of the :class:`Highlight` s of ``matches`` in ``text``."""
    return [{"start": a, "end": b, "term": text[a:b]} for a, b in matches]


def _keeps_bm25(e: WindowEntry, knn_chunk: str) -> bool:
    """Whether a document kNN found too keeps BM25's best chunk: the same chunk, or kNN added no more (ties: BM25)."""
    shares = e.fusion_shares
    return e.passage is BEST and (e.chunk_id == knn_chunk or shares.get("bm25", 0.0) >= shares.get("knn", 0.0))


def show_passages(entries: Sequence[WindowEntry], sections: bool, answer: Mapping[str, Any] | None,
                  depth: int) -> None:
    """Set the chunk each entry shows; ``answer``: the passage list's (``depth`` documents; None when off)."""
    failed = item_failure(answer) if answer is not None else None
    best = best_chunks(answer) if answer is not None and failed is None else {}
    first = ("the passage search is off (HSP_QUERY__BEST_PASSAGE=false)" if answer is None else
             f"the passage search failed: {failed}" if failed else
             f"no chunk's text matched among the passage search's top {depth} documents")
    for e in entries:  # each shows the chunk of the first list that found it, BM25's where both did
        bm25, knn = e.found.get("bm25"), e.found.get("knn")
        if bm25 is not None and sections:
            if e.key in best:
                fields, e.chunk_id, e.matches = best[e.key]
                e.source, e.passage = {**bm25[0], **fields}, BEST
            else:
                e.passage, e.passage_reason = PassageSource.SECTION_FIRST_CHUNK, first
        if knn is None or _keeps_bm25(e, knn[1]):
            continue
        e.passage_reason = (None if bm25 is None or e.passage is PassageSource.BM25 else
                            f"kNN added more to the fused score than BM25, whose best chunk is {e.chunk_id}"
                            if e.passage is BEST else f"BM25 has no better chunk than its section's first: {first}")
        (e.source, e.chunk_id), e.passage, e.matches = knn, PassageSource.KNN, ()


# ---- the rerank stage


def passage_text(source: Mapping[str, Any]) -> str:
    """Text the reranker scores for a stored chunk ``source``: its title and text."""
    title = source.get("title") or ""
    text = source.get("text") or ""
    return f"{title} {text}".strip() if title else str(text)


def apply_rerank(window: Window, depth: int, scores: Sequence[float], blend: float = 1.0) -> None:
    """Reorder the top ``depth`` by ``scores`` (ties keep fused order; ``blend`` below 1: interpolated with the fused
    scores). Raises RerankerError unless ``scores`` holds one finite number per passage."""
    top = window.entries[:depth]
    if len(scores) != len(top):
        raise RerankerError(f"reranker returned {len(scores)} scores for {len(top)} passages")
    vals = [float(s) for s in scores]
    if not all(math.isfinite(s) for s in vals):
        raise RerankerError("reranker returned a score that is not a finite number")
    keys = vals if blend >= 1.0 else interpolate(vals, [e.base_score for e in top], blend)
    order = sorted(range(len(top)), key=lambda i: (-keys[i], i))
    for new_rank, i in enumerate(order, start=1):
        top[i].rerank = Rank(new_rank, vals[i])
        top[i].blended = keys[i] if blend < 1.0 else None
    window.entries = [top[i] for i in order] + window.entries[depth:]
    window.reranked = True
    window.rerank_outcome, window.rerank_reason = RerankOutcome.APPLIED, None
    window.blend = blend


# ---- explanations for people

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
