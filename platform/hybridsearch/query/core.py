"""The search core: every step and decision of a search, without I/O, for both clients (:mod:`.client`):
resolve the alias and check the index (cached 60 s), plan, send, search again once if the alias moved, fuse,
choose passages, rerank the top (fused order when the reranker fails), page, log; ``why``: that search, then probes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from hybridsearch.engine import Dialect, EngineInfo, Sender
from hybridsearch.engine import request as engine_request
from hybridsearch.errors import HybridSearchError, IndexNotFound, RerankerError, RerankerModelError
from hybridsearch.index.metadata import metadata_fields_of
from hybridsearch.index.spec import check_mapping, follow_index, section_words_of
from hybridsearch.index.versions import live_target
from hybridsearch.query.build import (
    CHUNKS,
    PASSAGES,
    KnnWidth,
    Plan,
    bm25_body,
    bm25_scope,
    is_quantized,
    knn_lines,
    knn_size,
    knn_width,
    list_names,
    plan,
    search_filters,
    text_lines,
)
from hybridsearch.query.filters import NOT_YET_KNOWN, Filter
from hybridsearch.query.fusion import Fusion, fusion_for
from hybridsearch.query.querylog import QueryLogger, log_doc
from hybridsearch.query.results import Mode, RerankOutcome, SearchResult, Timings, WhyReport
from hybridsearch.query.steps import (
    Detect,
    Embed,
    Json,
    Rerank,
    Send,
    Steps,
    embed_steps,
    ms_since,
    msearch,
    send_steps,
)
from hybridsearch.query.window import (
    STAGE_LABEL,
    Window,
    WindowEntry,
    answered_by,
    apply_rerank,
    check_response,
    explain,
    fuse_window,
    highlights,
    passage_line,
    passage_text,
    show_passages,
)
from hybridsearch.rerank.base import Reranker, effective_blend
from hybridsearch.settings import (
    ClusterSettings,
    ModelsSettings,
    QuerySettings,
    RerankerSettings,
    Settings,
    get_settings,
)

if TYPE_CHECKING:
    import numpy as np

    from hybridsearch.embedding.encoder import Embedder

INDEX_RECHECK_S = 60.0
WARM_UP_TIMEOUT_S = 60.0  # at least this long for the reranker's first score (it may load its model)
FilterArg = Filter | Mapping[str, Any] | None
E = TypeVar("E")  # the shell's engine client


def auto_reranker(settings: RerankerSettings, models: ModelsSettings) -> tuple[Reranker | None, str | None]:
    """``hybridsearch.rerank.make_reranker(settings, models)``, or None and the reason the search will report."""
    if not settings.enabled:
        return None, "reranker disabled (HSP_RERANKER__ENABLED=false)"
    from hybridsearch.rerank import make_reranker

    try:
        reranker: Reranker | None = make_reranker(settings, models)
    except Exception as exc:  # noqa: BLE001 - a reranker that cannot be built must not stop searching
        what = str(exc) if isinstance(exc, HybridSearchError) else f"{type(exc).__name__}: {exc}"
        return None, f"reranker unavailable: {what}"
    return reranker, None


class SearchCore(Generic[E]):
    """State and steps shared by the sync and async clients (see the module docstring)."""

    def __init__(self, es: E, settings: Settings, *, embedder: Embedder | None = None,
                 reranker: Reranker | None = None, no_reranker_reason: str | None = None,
                 query: QuerySettings | None = None, log_queries: bool | None = None) -> None:
        self.es = es
        self.settings = settings
        self.query = query or settings.query  # the query knobs searches use (an eval sweep passes others)
        self.log_queries = self.query.log_queries if log_queries is None else log_queries
        self.reranker = reranker
        self._embedder = embedder
        self._follow_index = embedder is None  # the first index check may change the model (never a later one)
        self._embed_lock = threading.Lock()
        self._index: str | None = None
        self._index_checked_at = 0.0
        # what the index check finds: the engine's dialect, kNN width, what BM25 scores, fusion, typed metadata
        self._dialect: Dialect | None = None
        self._width: KnnWidth | None = None
        self._bm25 = CHUNKS
        self._fusion = Fusion()
        self._metadata: dict[str, str] = {}
        self._state: str | None = settings.index.ingest_state  # None once the check finds the prefix has none
        self._no_reranker_reason = no_reranker_reason
        self._owns_es = False
        sender = self._open()
        self.query_log = QueryLogger(sender, settings) if sender is not None and self.log_queries else None

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, reranker: Reranker | None = None,
                      embedder: Embedder | None = None) -> Self:
        """A client on ``settings`` (default: the environment) that closes its engine client."""
        settings = settings or get_settings()
        reason = None
        if reranker is None:
            reranker, reason = auto_reranker(settings.reranker, settings.models)
        client = cls(cls._connect(settings.es), settings, embedder=embedder, reranker=reranker,
                     no_reranker_reason=reason)
        client._owns_es = True
        return client

    @classmethod
    def _connect(cls, cfg: ClusterSettings) -> E:
        raise NotImplementedError

    def _open(self) -> Sender | None:
        """Start the shell's workers; returns what the query log writes with."""
        return None

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from hybridsearch.embedding.encoder import Embedder

            self._embedder = Embedder(self.settings.embedding, self.settings.models)
        return self._embedder

    def _encode(self, text: str) -> np.ndarray:
        with self._embed_lock:  # the embedder's LRU is not thread-safe
            return self.embedder.encode_query(text)

    # ---- the index behind the alias

    def index_steps(self) -> Steps[str]:
        """The concrete index behind the alias, its mapping checked (cached 60 s). Raises IndexNotFound,
        AliasConflict, IndexMismatch, ClusterUnavailable."""
        if self._index is not None and time.monotonic() - self._index_checked_at <= INDEX_RECHECK_S:
            return self._index
        alias = self.settings.index.alias
        engine: EngineInfo = yield Detect(f"resolve alias {alias}")
        index = live_target(alias, (yield Send(engine_request.get_alias(alias), f"resolve alias {alias}")))
        # the prefix's ingest state too: a prefix never ingested since it exists has none, and nothing is hidden
        names = f"{index},{self.settings.index.ingest_state}"
        mappings: Json = yield Send(engine_request.get_mapping(names, ignore_unavailable=True),
                                    f"get mapping of {index}")
        counted: Json = yield Send(engine_request.count(index), f"count the chunks of {index}")
        return self._checked_index(index, mappings, counted, engine)

    def _checked_index(self, index: str, mappings: Mapping[str, Any], counted: Mapping[str, Any],
                       engine: EngineInfo) -> str:
        """Remember ``index`` once its mapping fits, what it holds, and whether the prefix has its ingest state."""
        state = self.settings.index.ingest_state
        self._state = state if state in mappings else None
        self._metadata = metadata_fields_of(mappings[index]["mappings"]) if index in mappings else {}
        if index not in mappings:
            raise IndexNotFound(f"index {index} behind alias {self.settings.index.alias} no longer exists")
        mapping = mappings[index]["mappings"]
        meta = mapping.get("_meta") or {}
        embedding = follow_index(self.settings.embedding, meta) if self._follow_index else self.settings.embedding
        if embedding != self.settings.embedding:  # an embedder made for other settings is made again
            self.settings = self.settings.model_copy(update={"embedding": embedding})
            self._embedder = None
        self._follow_index = False  # another model later is refused (IndexMismatch)
        check_mapping(index, mapping, self.settings, engine.dialect)
        self._bm25 = bm25_scope(self.query, section_words_of(meta))
        self._fusion = fusion_for(self.query, meta)
        self._dialect = engine.dialect
        shards = int((counted.get("_shards") or {}).get("total") or 1)
        chunks = math.ceil(int(counted.get("count") or 0) / max(1, shards))  # the largest shard's, about
        vectors = engine.dialect.vector_summary((mapping.get("properties") or {}).get("embedding") or {})
        self._width = knn_width(self.query, knn_size(self.query), chunks, can_rescore=engine.rescores_vectors,
                                quantized=is_quantized(vectors.options.get("type")))
        self._index, self._index_checked_at = index, time.monotonic()
        return index

    # ---- planning

    def check(self, query: str, *, index_known: bool = True, **kwargs: Any) -> Plan:
        """The checked plan of a search's arguments, sending nothing; ``index_known=False``: metadata types (which
        only the index knows) unchecked. Raises QueryError."""
        metadata = self._metadata if index_known else NOT_YET_KNOWN
        return plan(self.query, self.settings.index.tenant, query, state_index=self._state, metadata=metadata,
                    **kwargs)

    def _planned(self, query: str, **kwargs: Any) -> Steps[Plan]:
        self.check(query, index_known=False, **kwargs)  # QueryError before any request
        yield from self.index_steps()  # its typed metadata decides how metadata filters are checked and sent
        return self.check(query, **kwargs)

    # ---- searching

    def search_steps(self, query: str, *, k: int = 10, mode: Mode = "hybrid", filters: FilterArg = None,
                     rerank: bool = True, explain: bool = False, page: int = 1,
                     highlight: bool = False) -> Steps[SearchResult]:
        """Hits ``(page-1)*k+1 .. page*k`` of the fused (and reranked) window; ``highlight``: ``Hit.highlights`` too
        (costs about another search). Raises QueryError (before any request), IndexNotFound, IndexMismatch,
        ClusterUnavailable or ClusterError; a failing or slow reranker never raises (``reranked=False`` and why)."""
        started = time.perf_counter()
        p = yield from self._planned(query, k=k, mode=mode, filters=filters, rerank=rerank, explain=explain, page=page,
                                     highlight=highlight)
        if p.mode != "hybrid":  # one list's top does not depend on how deep it is fetched: only what is shown
            reranks = p.rerank and self.reranker is not None
            p = dataclasses.replace(p, depth=max(p.k * p.page, self.settings.reranker.depth if reranks else 0))
        t = Timings()
        index, window, fuse_ms = yield from self._window(p, t)
        t0 = time.perf_counter()
        result = build_result(self.settings.reranker.depth, p, index, window, t)
        t.fusion_ms = fuse_ms + ms_since(t0)
        t.total_ms = ms_since(started)
        result.timings = t
        if p.wants_vector and self._width is not None:
            result.knn_width = self._width.reason
        if self.query_log is not None:
            self.query_log.submit(log_doc(p, result, redact=self.query.redact))
        return result

    def why_steps(self, query: str, doc_id: str, *, mode: Mode = "hybrid", filters: FilterArg = None,
                  rerank: bool = True) -> Steps[WhyReport]:
        """Where ``doc_id`` fell in BM25, kNN, fusion and rerank for ``query``. Raises like :meth:`search_steps`."""
        p = yield from self._planned(query, k=1, highlight=True, mode=mode, filters=filters, rerank=rerank)
        index, window, _ = yield from self._window(p, Timings())
        counted = yield from self._probe([_count_body({"bool": {"filter": _doc_filters(p, doc_id, False)}}),
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
            "reranked": window.reranked, "rerank_outcome": window.rerank_outcome,
            "rerank_reason": window.rerank_reason})
        notes = rep.notes
        if total == 0:
            notes.append(f"{doc_id} is not in {index}: no chunk has this doc_id")
        elif allowed == 0:
            notes.append(f"all {total} chunks of {doc_id} are excluded by the filters (or tenant), or still being "
                         "written")
        for name, depth in window.depths.items():
            stage = entry.stages.get(name) if entry else None
            if stage is not None:
                notes.append(f"{STAGE_LABEL[name]}: rank {stage.rank} of {depth}, score {stage.score:.4f}")
            elif allowed:
                notes.append((yield from self._probe_bm25(p, doc_id, depth)) if name == "bm25" else
                             (yield from self._probe_knn(p, doc_id, window, depth)))
        if rep.fused:
            notes.append(f"fused: rank {rep.fused.rank} of {len(window.entries)}, score {rep.fused.score:.6f}")
        elif entry is None and allowed:
            notes.append(f"fusion: not among the {len(window.entries)} fused candidates")
        if rep.rerank:
            notes.append(f"rerank: rank {rep.rerank.rank}, score {rep.rerank.score:.4f}")
        elif entry is not None and window.reranked:
            notes.append(f"rerank: not seen (fused rank {rep.final_rank} is below the depth "
                         f"{self.settings.reranker.depth})")
        elif window.rerank_reason:
            notes.append(f"rerank: not applied ({window.rerank_reason})")
        if entry is not None:
            notes.append(passage_line(entry))  # the chunk shown and reranked
        if rep.final_rank is not None:
            notes.append(f"final: rank {rep.final_rank}")
        return rep

    def _probe(self, bodies: list[Json], what: str) -> Steps[list[Json]]:
        """The answers of one ``_msearch`` of ``bodies`` on the alias; a failed item raises."""
        alias = self.settings.index.alias
        answer: Json = yield msearch([line for body in bodies for line in ({"index": alias}, body)], what)
        items: list[Json] = answer["responses"]
        for item in items:
            check_response(item, alias)
        return items

    def _probe_bm25(self, p: Plan, doc_id: str, depth: int) -> Steps[str]:
        match = bm25_body(self.query, p, self._bm25)["query"]["bool"]["must"][0]
        what = self._bm25.unit
        best, = yield from self._probe([{"size": 1, "_source": False, "query": {
            "bool": {"must": [match], "filter": _doc_filters(p, doc_id, True)}}}], "BM25 probe")
        hits = best["hits"]["hits"]
        if not hits:
            return f"BM25: no {what} of {doc_id} matches the query terms (operator {self.query.operator})"
        score = float(hits[0]["_score"])
        counted, = yield from self._probe([{**_count_body({"bool": {"must": [match], "filter": search_filters(p)}}),
                                            "min_score": score}], "BM25 probe")
        return (f"BM25: best {what} score {score:.4f}, about {_total(counted)} {what}s score as high or higher; "
                f"the list keeps {depth}")

    def _probe_knn(self, p: Plan, doc_id: str, window: Window, depth: int) -> Steps[str]:
        assert self._dialect is not None  # the index was checked
        vector = yield Embed(p.query)
        # rescored as the search was, so that its score compares with the window's
        knn = self._dialect.knn_search("embedding", [float(x) for x in vector], 1, 100, _doc_filters(p, doc_id, True),
                                       self._width.oversample if self._width else None)
        nearest, = yield from self._probe([{"size": 1, "_source": False, **knn}], "kNN probe")
        hits = nearest["hits"]["hits"]
        if not hits:
            return f"kNN: no chunk of {doc_id} has a vector"
        kept = [e.stages["knn"].score for e in window.entries if "knn" in e.stages]
        cutoff = f"; the lowest score kept in the top {depth} is {min(kept):.4f}" if kept else ""
        return f"kNN: best chunk score {float(hits[0]['_score']):.4f}{cutoff}"

    def _window(self, p: Plan, t: Timings) -> Steps[tuple[str, Window, float]]:
        """The index searched, its fused (and reranked) window, fusing's ms; searched again once if the alias moved."""
        for retry in (True, False):
            index, scope, alias = (yield from self.index_steps()), self._bm25, self.settings.index.alias
            assert self._dialect is not None  # the index was checked
            listed = dataclasses.replace(p, state_index=self._state)  # as the index check found it
            text = text_lines(self.query, alias, listed, scope)
            knn = functools.partial(knn_lines, self.query, alias, listed, dialect=self._dialect, width=self._width)
            responses = yield from send_steps(p, t, text, knn, f"search {alias}", self.query.hybrid_overlap)
            if answered_by(responses) - {index}:  # the alias moved since the check: check the new index at once
                self._index = None
                if retry:  # searched as the old index wants
                    continue
            try:
                t0 = time.perf_counter()
                answers = dict(zip(list_names(p, scope), responses, strict=True))
                passages = answers.pop(PASSAGES, None)
                for r in answers.values():
                    check_response(r, alias)
                window = fuse_window(answers, self.query.collapse, self._fusion)
                show_passages(window.entries, scope.sections, passages, self.query.passage_k)
                fuse_ms = ms_since(t0)
            except HybridSearchError:  # a failed list: if the alias moved, say what changed (IndexMismatch) or retry
                self._index = None
                if retry and (yield from self.index_steps()) != index:
                    continue
                raise
            yield from self._rerank(p, window, t)
            return index, window, fuse_ms
        raise AssertionError("unreachable: the second search returns or raises")

    def _rerank(self, p: Plan, window: Window, t: Timings) -> Steps[None]:
        """Rerank the top of ``window`` unless skipped; a failing or slow reranker keeps the fused order."""
        t0, cfg = time.perf_counter(), self.settings.reranker
        if not p.rerank:
            window.rerank_outcome, window.rerank_reason = RerankOutcome.SKIPPED, "rerank not requested"
        elif self.reranker is None:
            window.rerank_outcome = RerankOutcome.DISABLED
            window.rerank_reason = self._no_reranker_reason or "no reranker configured"
        elif not window.entries:
            window.rerank_outcome, window.rerank_reason = RerankOutcome.SKIPPED, "no hits to rerank"
        else:
            passages = [passage_text(e.source) for e in window.entries[:cfg.depth]]
            try:
                scores = yield Rerank(self.reranker, p.query, passages, cfg.timeout)
                apply_rerank(window, cfg.depth, list(scores), effective_blend(cfg.blend, self.reranker.blend)[0])
            except TimeoutError:  # concurrent.futures' and asyncio's timeouts are TimeoutError
                window.rerank_outcome = RerankOutcome.TIMED_OUT
                window.rerank_reason = f"reranker timeout after {cfg.timeout}s"
            except Exception as exc:  # noqa: BLE001 - any reranker failure (or unusable scores) keeps fused order
                window.rerank_outcome = (RerankOutcome.NO_MODEL if isinstance(exc, RerankerModelError)
                                         else RerankOutcome.FAILED)
                what = str(exc) if isinstance(exc, RerankerError) else f"{type(exc).__name__}: {exc}"
                window.rerank_reason = f"reranker error: {what}"
        t.rerank_ms = ms_since(t0)

    # ---- warming up, building

    def warm_up_steps(self, mode: Mode = "hybrid") -> Steps[None]:
        """Load the models the first search would load (the reranker's failure ignored). Raises ModelError."""
        if mode != "bm25":
            yield from embed_steps("warm up", Timings())
        if self.reranker is not None and self.settings.reranker.enabled:
            with contextlib.suppress(Exception):
                yield Rerank(self.reranker, "warm up", ["warm up"],
                             max(WARM_UP_TIMEOUT_S, self.settings.reranker.timeout))


def _hit_fields(e: WindowEntry, rank: int, explanation: list[str] | None) -> dict[str, Any]:
    """The fields of ``e``'s :class:`Hit` at ``rank``."""
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
        "explanation": explanation, **e.stage_scores(),
    }


def build_result(rerank_depth: int, p: Plan, index: str, window: Window, timings: Timings) -> SearchResult:
    """``p``'s page of ``window`` as a :class:`SearchResult`, each hit explained when ``p.explain``."""
    start = (p.page - 1) * p.k
    page = window.entries[start:start + p.k]
    hits = [_hit_fields(e, start + i + 1, explain(rerank_depth, window, e) if p.explain else None)
            for i, e in enumerate(page)]
    return SearchResult.model_validate({
        "query": p.query, "mode": p.mode, "index": index, "k": p.k, "page": p.page, "hits": hits,
        "candidates": len(window.entries), "reranked": window.reranked, "rerank_outcome": window.rerank_outcome,
        "rerank_reason": window.rerank_reason, "rerank_blend": window.blend, "truncated_query": p.truncated,
        "timings": timings, "fusion": window.fusion.describe() if window.fusion else None})


def _doc_filters(p: Plan, doc_id: str, with_filters: bool) -> list[dict[str, Any]]:
    """The document's chunks, and with ``with_filters`` only those the search's filters let through."""
    return [{"term": {"doc_id": doc_id}}, *(search_filters(p) if with_filters else [])]


def _count_body(query: Json) -> Json:
    """A search that counts, exactly, the chunks ``query`` matches."""
    return {"size": 0, "track_total_hits": True, "query": query}


def _total(item: Json) -> int:
    return int(item["hits"]["total"]["value"])
