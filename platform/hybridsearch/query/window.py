"""The fused window of one query, pure: its entries, best first, and what each stage records on them.
:func:`fuse_window` builds it from one ``_msearch`` answer's lists; :mod:`.passages` sets the chunk each entry shows;
:func:`apply_rerank` reorders its top.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hybridsearch.errors import ClusterError, IndexNotFound, RerankerError
from hybridsearch.query.fusion import Fusion, interpolate
from hybridsearch.query.results import PassageSource, RerankOutcome, StageScore

#: where a shown chunk's text matched the query: ``(start, end)`` offsets in that text
MatchOffsets = tuple[int, int]


class Rank(NamedTuple):
    """A stage rank (from 1) and score while assembling (cheap); becomes a StageScore only for returned hits."""

    rank: int
    score: float


@dataclass
class WindowEntry:
    """One entry of the fused window (a document when collapsing, else a chunk); ``source`` and ``chunk_id``:
    the chunk it shows and the reranker scores (``passage`` says why, ``matches`` where its text matched)."""

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
        """Its rank and score in each stage (``bm25``, ``knn``, ``fused``, ``rerank``) as results show them."""
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
    """The root cause of one failed ``_msearch`` item, or None when it did not fail."""
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
    """The window of the ranked lists' ``answers`` (``{name: _msearch item}``, ``bm25`` and ``knn``): each list
    collapsed (with ``collapse``), then fused with ``fusion`` (default: RRF k=60, equal weights) when there are two.
    Each entry shows the chunk its first list found until :func:`~.passages.show_passages` picks one."""
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


# ---- the rerank stage


def passage_text(source: Mapping[str, Any]) -> str:
    """Text the reranker scores for a stored chunk ``source``: its title and text (training pairs use it too)."""
    title = source.get("title") or ""
    text = source.get("text") or ""
    return f"{title} {text}".strip() if title else str(text)


def apply_rerank(window: Window, depth: int, scores: Sequence[float], blend: float = 1.0) -> None:
    """Reorder the top ``depth`` by ``scores`` (ties keep fused order), or with ``blend`` below 1 by
    :func:`~hybridsearch.query.fusion.interpolate` of them with the fused scores. Raises RerankerError when
    ``scores`` does not hold one finite number per passage."""
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
