"""``SearchClient`` and ``AsyncSearchClient``: the query layer's public API.

Both run the same steps with the same pure helpers (:mod:`.build`, :mod:`.fusion`, :mod:`.assemble`);
only the I/O differs::

    plan (checks) → embed the query once (LRU) → _msearch (hybrid: BM25 sent at once, kNN when the vector is
    ready; see :mod:`.send`) → collapse + fuse
    → rerank the top ``reranker.depth`` (with a timeout; degrade to fused order) → page → log
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self

from hybridsearch.engine import AsyncEngineClient, Dialect, EngineClient, connect, connect_async, engine_errors
from hybridsearch.errors import HybridSearchError, IndexNotFound, RerankerError
from hybridsearch.indices import check_mapping, get_aliases, section_words_of, single_target
from hybridsearch.mappings import metadata_fields_of
from hybridsearch.query.assemble import (
    Window,
    answered_by,
    apply_rerank,
    build_result,
    check_response,
    fuse_window,
    log_doc,
    passage_text,
    rerank_slice,
)
from hybridsearch.query.build import CHUNKS, PASSAGES, Bm25Scope, Plan, bm25_scope, list_names, list_search, plan
from hybridsearch.query.filters import NOT_YET_KNOWN, Filter
from hybridsearch.query.fusion import Fusion, fusion_for
from hybridsearch.query.querylog import QueryLogger
from hybridsearch.query.results import Mode, RerankOutcome, SearchResult, Timings, WhyReport
from hybridsearch.query.send import Lines, send, send_async
from hybridsearch.rerank.base import Reranker
from hybridsearch.rerank.card import effective_blend
from hybridsearch.settings import QuerySettings, Settings, get_settings

if TYPE_CHECKING:
    import numpy as np

    from hybridsearch.embedding import Embedder

INDEX_RECHECK_S = 60.0
SEARCH_WORKERS = 64  # the sync client's threads for hybrid's BM25 requests (sent while the query is embedded)
FilterArg = Filter | Mapping[str, Any] | None


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


def auto_reranker(settings: Settings) -> tuple[Reranker | None, str | None]:
    """``hybridsearch.rerank.make_reranker(settings)``, or None and the reason the search will report."""
    if not settings.reranker.enabled:
        return None, "reranker disabled (HSP_RERANKER__ENABLED=false)"
    from hybridsearch.rerank import make_reranker

    try:
        reranker: Reranker | None = make_reranker(settings)
    except Exception as exc:  # noqa: BLE001 - a reranker that cannot be built must not stop searching
        what = str(exc) if isinstance(exc, HybridSearchError) else f"{type(exc).__name__}: {exc}"
        return None, f"reranker unavailable: {what}"
    return reranker, None


class _Core:
    """State and pure steps shared by the sync and async clients."""

    def __init__(self, settings: Settings, embedder: Embedder | None, reranker: Reranker | None,
                 no_reranker_reason: str | None, query: QuerySettings | None, log_queries: bool | None) -> None:
        self.settings = settings
        self.query = query or settings.query  # the query knobs searches use (an eval sweep passes others)
        self.log_queries = self.query.log_queries if log_queries is None else log_queries
        self.reranker = reranker
        self._embedder = embedder
        self._embed_lock = threading.Lock()
        self._index: str | None = None
        self._bm25 = CHUNKS  # what BM25 scores on the index (its _meta and mapping; set when the index is checked)
        self._fusion = Fusion()  # the index's fusion (fusion_for: settings, its calibration or the default)
        self._index_checked_at = 0.0
        self._state: str | None = settings.index.ingest_state  # None once the check finds the prefix has none
        self._metadata: dict[str, str] = {}  # the index's typed metadata fields (set when the index is checked)
        self._no_reranker_reason = no_reranker_reason
        self.query_log: QueryLogger | None = None

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from hybridsearch.embedding import Embedder

            self._embedder = Embedder(self.settings.embedding)
        return self._embedder

    def _encode(self, text: str) -> np.ndarray:
        with self._embed_lock:  # the embedder's LRU is not thread-safe
            return self.embedder.encode_query(text)

    def _index_stale(self) -> bool:
        return self._index is None or time.monotonic() - self._index_checked_at > INDEX_RECHECK_S

    def _mapped(self, index: str) -> str:
        """What :meth:`_checked_index` wants the mappings of: the index, and the prefix's ingest state."""
        return f"{index},{self.settings.index.ingest_state}"

    def _checked_index(self, index: str, mappings: Mapping[str, Any], dialect: Dialect) -> str:
        """Remember ``index`` (the alias's one target, see ``indices.single_target``) once its mapping fits, and
        whether the prefix has its ingest state (:meth:`_mapped`; a prefix never ingested since it exists has none,
        and nothing is hidden there)."""
        state = self.settings.index.ingest_state
        self._state = state if state in mappings else None
        self._metadata = metadata_fields_of(mappings[index]["mappings"]) if index in mappings else {}
        if index not in mappings:
            raise IndexNotFound(f"index {index} behind alias {self.settings.index.alias} no longer exists")
        mapping = mappings[index]["mappings"]
        check_mapping(index, mapping, self.settings, dialect)
        meta = mapping.get("_meta") or {}
        self._bm25 = bm25_scope(self.query, section_words_of(meta), mapping.get("properties") or {})
        self._fusion = fusion_for(self.query, meta)
        self._index, self._index_checked_at = index, time.monotonic()
        return index

    def _rerank_skip(self, p: Plan, window: Window) -> bool:
        """True (with the outcome and its reason set on ``window``) when the rerank stage will not run."""
        if not p.rerank:
            outcome, reason = RerankOutcome.SKIPPED, "rerank not requested"
        elif self.reranker is None:
            outcome, reason = RerankOutcome.DISABLED, self._no_reranker_reason or "no reranker configured"
        elif not window.candidates:
            outcome, reason = RerankOutcome.SKIPPED, "no hits to rerank"
        else:
            return False
        window.rerank_outcome, window.rerank_reason = outcome, reason
        return True

    def _rerank_inputs(self, p: Plan, window: Window) -> tuple[str, list[str]]:
        return p.query, [passage_text(c.source) for c in rerank_slice(window, self.settings.reranker.depth)]

    def rerank_blend(self) -> float:
        """The reranker's share in the final order: ``HSP_RERANKER__BLEND`` when set, else what the
        reranker's model recommends (its training card, see ``hsp train-reranker``), else 1."""
        return effective_blend(self.settings.reranker.blend, getattr(self.reranker, "blend", None))[0]

    def _rerank_done(self, window: Window, scores: list[float] | None, error: BaseException | None) -> None:
        depth = self.settings.reranker.depth
        if error is None and scores is not None:
            try:
                apply_rerank(window, depth, scores, self.rerank_blend())
                return
            except RerankerError as exc:
                error = exc
        window.reranked = False
        if isinstance(error, TimeoutError | concurrent.futures.TimeoutError):
            window.rerank_outcome = RerankOutcome.TIMED_OUT
            window.rerank_reason = f"reranker timeout after {self.settings.reranker.timeout}s"
        else:
            window.rerank_outcome = RerankOutcome.FAILED
            what = str(error) if isinstance(error, RerankerError) else f"{type(error).__name__}: {error}"
            window.rerank_reason = f"reranker error: {what}"

    def _finish(self, p: Plan, index: str, window: Window, t: Timings, started: float, fuse_ms: float) -> SearchResult:
        t0 = time.perf_counter()
        result = build_result(self.query, self.settings.reranker.depth, p, index, window, t)
        t.fusion_ms = fuse_ms + _ms(t0)
        t.total_ms = _ms(started)
        result.timings = t
        if self.query_log is not None:
            self.query_log.submit(log_doc(p, result, redact=self.query.redact, tenant=self.settings.index.tenant))
        return result

    @staticmethod
    def _defaults(settings: Settings | None, reranker: Reranker | None) -> tuple[Settings, Reranker | None, str | None]:
        """``from_settings``'s settings (default: the environment) and reranker (default: ``auto_reranker``)."""
        settings = settings or get_settings()
        if reranker is not None:
            return settings, reranker, None
        return (settings, *auto_reranker(settings))

    def _moved(self, index: str, responses: list[dict[str, Any]]) -> bool:
        """Whether the answers came from another index than ``index``, the one checked: the alias moved (a
        migration or rollback swapped it) since. The cached check is dropped, so the next ``index()`` checks
        the new index at once (IndexMismatch for a client of the old model) instead of within 60 s."""
        if not answered_by(responses) - {index}:
            return False
        self._index = None
        return True

    def _fuse(self, p: Plan, scope: Bm25Scope, responses: list[dict[str, Any]]) -> tuple[Window, float]:
        """The fused window of one ``_msearch`` answer (a failed list raises; a failed passage list leaves the
        sections' first chunks) and the milliseconds it took."""
        t0 = time.perf_counter()
        names = list_names(p, scope)
        for name, r in zip(names, responses, strict=True):
            if name != PASSAGES:
                check_response(r, self.settings.index.alias)
        return fuse_window(self.query, names, responses, self._fusion, scope), _ms(t0)

    def _owning(self) -> Self:
        """This client, marked as the owner of its Elasticsearch client (closed with it)."""
        self._owns_es = True
        return self

    def _start_log(self, es: EngineClient) -> None:
        if self.log_queries:
            self.query_log = QueryLogger(es, self.settings)

    def _plan(self, query: str, *, index_known: bool = True, **kwargs: Any) -> Plan:
        """The checked plan; ``index_known=False`` checks everything but metadata types, which only the index knows
        (so bad input is refused before any request)."""
        metadata = self._metadata if index_known else NOT_YET_KNOWN
        return plan(self.query, self.settings.index.tenant, query, state_index=self._state, metadata=metadata,
                    **kwargs)

    def check(self, query: str, **kwargs: Any) -> Plan:
        """Check a search's arguments (those of :meth:`SearchClient.search`) against the index last checked (its
        typed metadata decides metadata filters) without sending anything. Raises QueryError."""
        return self._plan(query, **kwargs)

    def _lines(self, p: Plan, dialect: Dialect, scope: Bm25Scope) -> Lines:
        """``send``'s ``lines``: the ``_msearch`` lines of some lists of ``p`` (``scope``: what BM25 scores, as
        the index check found it; ``_fuse`` reads the answers with the same)."""
        p = dataclasses.replace(p, state_index=self._state)  # as the index check found it
        return functools.partial(list_search, self.query, self.settings.index.alias, p, dialect=dialect, scope=scope)


class SearchClient(_Core):
    """Hybrid search over the read alias ``<prefix>-chunks`` with a synchronous Elasticsearch client.

    ``embedder`` defaults to the model in ``settings.embedding`` (loaded on first dense/hybrid search);
    ``reranker`` defaults to none. Thread-safe. Close it (or use ``with``) to flush the query log.
    """

    def __init__(self, es: EngineClient, settings: Settings, *, embedder: Embedder | None = None,
                 reranker: Reranker | None = None, no_reranker_reason: str | None = None,
                 query: QuerySettings | None = None, log_queries: bool | None = None) -> None:
        super().__init__(settings, embedder, reranker, no_reranker_reason, query, log_queries)
        self.es = es
        self._owns_es = False
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._io = concurrent.futures.ThreadPoolExecutor(max_workers=SEARCH_WORKERS, thread_name_prefix="hsp-bm25")
        self._start_log(es)

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, reranker: Reranker | None = None,
                      embedder: Embedder | None = None) -> SearchClient:
        """A client on ``settings`` (default: the environment); reranker from ``make_reranker`` when not given."""
        settings, reranker, reason = cls._defaults(settings, reranker)
        return cls(connect(settings.es), settings, embedder=embedder, reranker=reranker,
                   no_reranker_reason=reason)._owning()

    def index(self) -> str:
        """The one concrete index behind the alias, its mapping checked (cached 60 s): ``indices.resolve_index``.
        Raises IndexNotFound, AliasConflict (the alias points at several indices), IndexMismatch,
        ClusterUnavailable."""
        if not self._index_stale():
            assert self._index is not None
            return self._index
        index = single_target(self.settings.index.alias, get_aliases(self.es, self.settings.index.alias))
        with engine_errors(f"get mapping of {index}"):
            mappings = self.es.indices.get_mapping(index=self._mapped(index), ignore_unavailable=True)
        return self._checked_index(index, mappings, self.es.dialect)

    def _window(self, p: Plan, t: Timings, retry: bool = True) -> tuple[str, Window, float]:
        index, scope = self.index(), self._bm25
        responses = send(self.es, self._io, p, t, self._lines(p, self.es.dialect, scope), self._encode,
                         f"search {self.settings.index.alias}", self.query.hybrid_overlap)
        if self._moved(index, responses) and retry:  # searched as the old index wants: check the new one, again
            return self._window(p, t, retry=False)
        try:
            window, fuse_ms = self._fuse(p, scope, responses)
        except HybridSearchError:  # a failed list: if the alias moved, say what changed (IndexMismatch) or retry
            self._index = None
            if retry and self.index() != index:
                return self._window(p, t, retry=False)
            raise
        t0 = time.perf_counter()
        self._rerank(p, window)
        t.rerank_ms = _ms(t0)
        return index, window, fuse_ms

    def _rerank(self, p: Plan, window: Window) -> None:
        if self._rerank_skip(p, window):
            return
        assert self.reranker is not None
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="hsp-rerank")
        query, passages = self._rerank_inputs(p, window)
        future = self._pool.submit(self.reranker.score, query, passages)
        try:
            scores = future.result(timeout=self.settings.reranker.timeout)
        except Exception as exc:  # noqa: BLE001 - any reranker failure degrades to fused order
            future.cancel()
            self._rerank_done(window, None, exc)
            return
        self._rerank_done(window, list(scores), None)

    def search(self, query: str, *, k: int = 10, mode: Mode = "hybrid", filters: FilterArg = None,
               rerank: bool = True, explain: bool = False, page: int = 1, highlight: bool = False) -> SearchResult:
        """Search ``query``; returns hits ``(page-1)*k+1 .. page*k`` of the fused (and reranked) window; with
        ``highlight``, where each BM25 hit's passage matched (``Hit.highlights``: the engine's highlighter, which
        costs about as much again as the passage search itself, so only callers that show them ask).

        Raises QueryError (bad arguments, checked before any request), IndexNotFound, IndexMismatch,
        ClusterUnavailable or ClusterError. A failing or slow reranker never raises: the result says
        ``reranked=False`` and why.
        """
        started = time.perf_counter()
        args: dict[str, Any] = {"k": k, "mode": mode, "filters": filters, "rerank": rerank, "explain": explain,
                                "page": page, "highlight": highlight}
        self._plan(query, index_known=False, **args)  # QueryError before any request
        self.index()  # its typed metadata decides how metadata filters are checked and sent
        p = self._plan(query, **args)
        t = Timings()
        index, window, fuse_ms = self._window(p, t)
        return self._finish(p, index, window, t, started, fuse_ms)

    def why(self, query: str, doc_id: str, *, mode: Mode = "hybrid", filters: FilterArg = None,
            rerank: bool = True) -> WhyReport:
        """Where ``doc_id`` fell in BM25, kNN, fusion and rerank for ``query``. Raises like :meth:`search`."""
        from hybridsearch.query.why import Probes, why_report

        self._plan(query, index_known=False, k=1, mode=mode, filters=filters, rerank=rerank)  # before any request
        self.index()
        p = self._plan(query, k=1, mode=mode, filters=filters, rerank=rerank, highlight=True)
        index, window, _ = self._window(p, Timings())
        return why_report(Probes(self.es, self.settings.index.alias, self.query, self.settings.reranker.depth,
                                 self._encode, self._bm25), p, index, window, doc_id)

    def warm_up(self, mode: Mode = "hybrid") -> None:
        """Load the embedding model (unless ``mode`` is bm25) and let the reranker score one pair, so that
        the first search does not pay for loading models. A reranker failure here is ignored (searches
        will report it); an embedding model that cannot load raises ModelError."""
        if mode != "bm25":
            self._encode("warm up")
        if self.reranker is not None and self.settings.reranker.enabled:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="hsp-rerank")
            future = self._pool.submit(self.reranker.score, "warm up", ["warm up"])
            with contextlib.suppress(Exception):
                future.result(timeout=max(60.0, self.settings.reranker.timeout))

    def close(self) -> None:
        """Flush the query log, stop worker threads, close the ES client when this object made it."""
        if self.query_log is not None:
            self.query_log.close()
        for pool in (self._pool, self._io):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        if self._owns_es:
            self.es.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSearchClient(_Core):
    """The asyncio twin of :class:`SearchClient` on ``AsyncElasticsearch``: same arguments, same results.

    The embedder and the reranker run in worker threads (``asyncio.to_thread``); the query log uses a
    synchronous client of its own in its background thread.
    """

    def __init__(self, es: AsyncEngineClient, settings: Settings, *, embedder: Embedder | None = None,
                 reranker: Reranker | None = None, no_reranker_reason: str | None = None,
                 query: QuerySettings | None = None, log_queries: bool | None = None) -> None:
        super().__init__(settings, embedder, reranker, no_reranker_reason, query, log_queries)
        self.es = es
        self._owns_es = False
        self._log_es: EngineClient | None = None
        if self.log_queries:
            self._log_es = connect(settings.es)
            self._start_log(self._log_es)

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, reranker: Reranker | None = None,
                      embedder: Embedder | None = None) -> AsyncSearchClient:
        """Like :meth:`SearchClient.from_settings`, on an ``AsyncElasticsearch`` client."""
        settings, reranker, reason = cls._defaults(settings, reranker)
        return cls(connect_async(settings.es), settings, embedder=embedder, reranker=reranker,
                   no_reranker_reason=reason)._owning()

    async def index(self) -> str:
        """See :meth:`SearchClient.index`."""
        if not self._index_stale():
            assert self._index is not None
            return self._index
        alias = self.settings.index.alias
        with engine_errors(f"resolve alias {alias}"):
            await self.es.detect()
            body = await self.es.indices.get_alias(name=alias)
        index = single_target(alias, body)
        with engine_errors(f"get mapping of {index}"):
            mappings = await self.es.indices.get_mapping(index=self._mapped(index), ignore_unavailable=True)
        return self._checked_index(index, mappings, self.es.dialect)

    async def _window(self, p: Plan, t: Timings, retry: bool = True) -> tuple[str, Window, float]:
        index, scope = await self.index(), self._bm25
        responses = await send_async(self.es, p, t, self._lines(p, self.es.dialect, scope), self._encode,
                                     f"search {self.settings.index.alias}", self.query.hybrid_overlap)
        if self._moved(index, responses) and retry:  # see SearchClient._window
            return await self._window(p, t, retry=False)
        try:
            window, fuse_ms = self._fuse(p, scope, responses)
        except HybridSearchError:
            self._index = None
            if retry and await self.index() != index:
                return await self._window(p, t, retry=False)
            raise
        t0 = time.perf_counter()
        await self._rerank(p, window)
        t.rerank_ms = _ms(t0)
        return index, window, fuse_ms

    async def _rerank(self, p: Plan, window: Window) -> None:
        if self._rerank_skip(p, window):
            return
        assert self.reranker is not None
        query, passages = self._rerank_inputs(p, window)
        try:
            scores = await asyncio.wait_for(asyncio.to_thread(self.reranker.score, query, passages),
                                            timeout=self.settings.reranker.timeout)
        except Exception as exc:  # noqa: BLE001 - any reranker failure degrades to fused order
            self._rerank_done(window, None, exc)
            return
        self._rerank_done(window, list(scores), None)

    async def search(self, query: str, *, k: int = 10, mode: Mode = "hybrid", filters: FilterArg = None,
                     rerank: bool = True, explain: bool = False, page: int = 1,
                     highlight: bool = False) -> SearchResult:
        """See :meth:`SearchClient.search`."""
        started = time.perf_counter()
        args: dict[str, Any] = {"k": k, "mode": mode, "filters": filters, "rerank": rerank, "explain": explain,
                                "page": page, "highlight": highlight}
        self._plan(query, index_known=False, **args)  # QueryError before any request
        await self.index()  # its typed metadata decides how metadata filters are checked and sent
        p = self._plan(query, **args)
        t = Timings()
        index, window, fuse_ms = await self._window(p, t)
        return self._finish(p, index, window, t, started, fuse_ms)

    async def warm_up(self, mode: Mode = "hybrid") -> None:
        """See :meth:`SearchClient.warm_up`."""
        if mode != "bm25":
            await asyncio.to_thread(self._encode, "warm up")
        if self.reranker is not None and self.settings.reranker.enabled:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.to_thread(self.reranker.score, "warm up", ["warm up"]),
                                       timeout=max(60.0, self.settings.reranker.timeout))

    async def close(self) -> None:
        """Flush the query log and close the clients this object made."""
        if self.query_log is not None:
            await asyncio.to_thread(self.query_log.close)
        if self._log_es is not None:
            self._log_es.close()
        if self._owns_es:
            await self.es.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
