"""Run every judged query of a collection through one retrieval mode and keep what scoring needs.

Modes: ``bm25``, ``dense``, ``hybrid`` (RRF of the two) and ``hybrid+rerank``. The runner talks to a
*search function* ``(query, mode, rerank) -> SearchResult`` — in practice
``SearchClient.search`` bound to ``k`` — so it stays independent of how the query layer is built.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from hybridsearch.errors import QueryError
from hybridsearch.eval.metrics import doc_ranking
from hybridsearch.query.results import Mode, SearchResult

EvalMode = Literal["bm25", "dense", "hybrid", "hybrid+rerank"]
# eval mode -> (query-layer mode, rerank?)
MODES: dict[str, tuple[Mode, bool]] = {
    "bm25": ("bm25", False),
    "dense": ("dense", False),
    "hybrid": ("hybrid", False),
    "hybrid+rerank": ("hybrid", True),
}
DEFAULT_MODES = ("bm25", "dense", "hybrid", "hybrid+rerank")
STAGES = ("embed", "search", "fusion", "rerank", "total")

SearchFn = Callable[[str, Mode, bool], SearchResult]


def parse_modes(text: str) -> list[str]:
    """``"bm25,hybrid"`` → ``["bm25", "hybrid"]`` (order kept, duplicates dropped). Raises QueryError."""
    modes = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise QueryError(f"unknown mode(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(MODES)}")
    return modes


@dataclass
class ModeRun:
    """What one mode returned for every query: document rankings and per-stage latencies (ms)."""

    mode: str
    rankings: dict[str, list[str]] = field(default_factory=dict)
    latency: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in (*STAGES, "wall")})
    failed: dict[str, str] = field(default_factory=dict)
    reranked: int = 0
    rerank_reasons: Counter[str] = field(default_factory=Counter)  # by RerankOutcome value
    rerank_blends: Counter[float] = field(default_factory=Counter)

    def rank_of(self, qid: str, doc_id: str) -> int | None:
        """1-based rank of ``doc_id`` for ``qid`` in this mode, None when it was not retrieved."""
        try:
            return self.rankings.get(qid, []).index(doc_id) + 1
        except ValueError:
            return None


def run_mode(
    search: SearchFn,
    queries: Mapping[str, str],
    mode: str,
    *,
    on_query: Callable[[], None] | None = None,
    ignore_identical_ids: bool = True,
) -> ModeRun:
    """Search every query in ``queries`` with ``mode``.

    Chunk hits are collapsed to documents (best chunk wins). A query the query layer rejects
    (QueryError, e.g. an empty text) is recorded in ``failed`` and scores 0; cluster errors propagate.
    With ``ignore_identical_ids`` (BEIR's protocol, the default) a hit whose document id equals the
    query id is dropped: where queries are also documents, each would otherwise find itself first.
    """
    layer_mode, rerank = MODES[mode]
    out = ModeRun(mode)
    for qid, text in queries.items():
        t0 = time.perf_counter()
        try:
            result = search(text, layer_mode, rerank)
        except QueryError as exc:
            out.failed[qid] = str(exc)
            out.rankings[qid] = []
            if on_query:
                on_query()
            continue
        wall = (time.perf_counter() - t0) * 1000.0
        ranking = doc_ranking(h.doc_id for h in sorted(result.hits, key=lambda h: h.rank))
        out.rankings[qid] = [d for d in ranking if d != qid] if ignore_identical_ids else ranking
        t = result.timings
        for stage, value in zip(STAGES, (t.embed_ms, t.search_ms, t.fusion_ms, t.rerank_ms, t.total_ms), strict=True):
            out.latency[stage].append(value)
        out.latency["wall"].append(wall)
        if rerank:
            if result.reranked:
                out.reranked += 1
                out.rerank_blends[result.rerank_blend if result.rerank_blend is not None else 1.0] += 1
            else:
                out.rerank_reasons[result.rerank_outcome.value] += 1
        if on_query:
            on_query()
    return out
