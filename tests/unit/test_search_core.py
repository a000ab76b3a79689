"""The search core without I/O (hybridsearch.query.core): its steps driven here with recorded ``_msearch`` answers.

:class:`Driver` answers each request the core yields, in this thread, from the fakes of tests/recorded_engine.py (the
alias, the index's mapping from the settings' own template, recorded answers); a spawned request is answered at once
and its outcome handed back on ``Join``. The last tests run the same scenarios through both clients, whose whole job
is to perform those requests: they must return what the core driven here returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from hybridsearch import AsyncSearchClient, SearchClient
from hybridsearch.errors import ClusterError, HybridSearchError, IndexMismatch, ModelError, RerankerModelError
from hybridsearch.query.core import SearchCore
from hybridsearch.query.results import RerankOutcome, SearchResult, WhyReport
from hybridsearch.query.steps import Detect, Drop, Embed, Join, Request, Rerank, Run, Send, Spawn, Steps
from hybridsearch.settings import Settings
from recorded_engine import (
    INDEX,
    FakeAsyncES,
    FakeES,
    FixedVectors,
    MovingES,
    is_knn,
    is_probe,
    list_of,
    one_msearch,
    recording,
    same,
    settings,
)

QUERY = "how do bees find food"
FUSED = ["d2", "d1", "d4", "d3"]  # RRF k=60 over the hybrid recording's two lists


class Scores:
    """A reranker: prefers passages by a word they contain (``ok``), takes ``seconds`` (``slow``), fails
    (``fail``), has no model on this machine (``missing``), or answers one score whatever it is given (``short``);
    ``blend``: its recommendation."""

    name = "core-test"

    def __init__(self, mode: str = "ok", blend: float | None = None) -> None:
        self.mode, self.blend = mode, blend
        self.seconds = 1.0 if mode == "slow" else 0.0

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if self.mode == "fail":
            raise RuntimeError("model exploded")
        if self.mode == "missing":
            raise RerankerModelError("reranker model 'x' is not on this machine")
        if self.mode == "short":
            return [1.0]
        time.sleep(self.seconds)
        return [2.0 if "Wasps" in p else 1.0 if "Moths" in p else 0.0 for p in passages]


class Driver:
    """Performs the core's requests on a fake engine client in this thread and notes each one: no pool, no loop.

    ``embed_error``: what embedding raises; ``embed_s`` / ``search_s``: how long embedding and each ``_msearch``
    take (to check the timings the core measures)."""

    def __init__(self, es: FakeES, embed_error: Exception | None = None, embed_s: float = 0.0,
                 search_s: float = 0.0) -> None:
        self.es, self.embed_error, self.embed_s, self.search_s = es, embed_error, embed_s, search_s
        self.requests: list[Request] = []

    def perform(self, r: Request) -> Any:
        match r:
            case Detect():
                return self.es.engine
            case Send(request):
                if request.path == "/_msearch":
                    time.sleep(self.search_s)
                return self.es.send(request)
            case Embed():
                time.sleep(self.embed_s)
                if self.embed_error is not None:
                    raise self.embed_error
                return FixedVectors().encode_query(r.text)
            case Rerank(reranker, query, passages, timeout):
                if getattr(reranker, "seconds", 0.0) > timeout:
                    raise TimeoutError  # what either client raises for a reranker slower than its timeout
                return reranker.score(query, passages)
            case Spawn(inner):
                try:
                    return ("answer", self.perform(inner))
                except Exception as exc:  # noqa: BLE001 - handed back on Join
                    return ("error", exc)
            case Join((kind, value)):
                if kind == "error":
                    raise value
                return value
            case Drop():
                return None
        raise AssertionError(f"unknown request {r!r}")

    def run(self, steps: Steps[Any]) -> Any:
        run = Run(steps)
        for request in run:
            self.requests.append(request)
            try:
                run.answer(self.perform(request))
            except Exception as exc:  # noqa: BLE001 - thrown into the steps, as the clients do
                run.fail(exc)
        return run.result

    @property
    def kinds(self) -> list[str]:
        return [kind(r) for r in self.requests]


def kind(r: Request) -> str:
    """A request's name: its class, or for one sent to the engine its endpoint (``_msearch``, ``_alias``, ...)."""
    if isinstance(r, Send):
        return next(part for part in reversed(r.request.path.split("/")) if part.startswith("_"))
    return type(r).__name__


def lines(r: Request) -> list[dict[str, Any]]:
    """The ``_msearch`` bodies (header lines left out) of ``r`` or of the request it spawns."""
    inner = r.request if isinstance(r, Spawn) else r
    if isinstance(inner, Send) and inner.request.path == "/_msearch":
        return cast(list[dict[str, Any]], inner.request.body)[1::2]
    return []


def core(s: Settings | None = None, reranker: Any = None, **query: Any) -> SearchCore[None]:
    s = s or settings()
    return SearchCore(None, s, reranker=reranker, query=s.query.model_copy(update=query), log_queries=False)


CHECK = ["Detect", "_alias", "_mapping", "_count"]
HYBRID = ["Spawn", "Embed", "_msearch", "Join"]


def test_hybrid_spawns_bm25_then_embeds_then_sends_knn() -> None:
    d = Driver(FakeES(settings(), recording("hybrid")))
    result = d.run(core().search_steps(QUERY, rerank=False))
    assert d.kinds == CHECK + HYBRID
    spawned, knn = d.requests[len(CHECK)], d.requests[len(CHECK) + 2]
    assert isinstance(spawned, Spawn) and lines(spawned) and not any(is_knn(b) for b in lines(spawned))
    assert isinstance(knn, Send) and [is_knn(b) for b in lines(knn)] == [True]
    assert [h.doc_id for h in result.hits] == FUSED and result.index == INDEX


@pytest.mark.parametrize(("mode", "overlap", "kinds"), [
    ("hybrid", False, ["Embed", "_msearch"]), ("dense", True, ["Embed", "_msearch"]), ("bm25", True, ["_msearch"])])
def test_one_msearch_unless_hybrid_overlaps(mode: str, overlap: bool, kinds: list[str]) -> None:
    d = Driver(FakeES(settings(), recording("hybrid")))
    d.run(core(hybrid_overlap=overlap).search_steps(QUERY, mode=mode, rerank=False))
    assert d.kinds == CHECK + kinds


def list_sizes(requests: Sequence[Request]) -> dict[str, int]:
    """The ``size`` each list asked for in the ``_msearch`` requests among ``requests`` (spawned ones too)."""
    sizes: dict[str, int] = {}
    for r in requests:
        sizes |= {list_of(body): body["size"] for body in lines(r) if not is_probe(body)}
    return sizes


@pytest.mark.parametrize(("mode", "k", "page", "rerank", "bm25", "knn"), [
    ("bm25", 10, 1, False, 10, None), ("bm25", 4, 3, False, 12, None), ("bm25", 10, 1, True, 30, None),
    ("bm25", 50, 1, True, 50, None), ("bm25", 60, 2, False, 100, None), ("dense", 10, 1, False, None, 10),
    ("dense", 7, 1, True, None, 30), ("hybrid", 10, 1, False, 100, 100), ("hybrid", 3, 1, True, 100, 100)])
def test_one_list_fetches_only_what_its_page_and_rerank_show(mode: str, k: int, page: int, rerank: bool,
                                                              bm25: int | None, knn: int | None) -> None:
    d = Driver(FakeES(settings(), recording("hybrid")))
    d.run(core(reranker=Scores()).search_steps(QUERY, mode=mode, k=k, page=page, rerank=rerank))
    sizes = list_sizes(d.requests)
    assert (sizes.get("bm25"), sizes.get("knn")) == (bm25, knn)  # hybrid fuses whole lists; bm25_k = knn_k = 100


def test_one_list_without_a_reranker_fetches_only_the_page_and_why_fetches_whole_lists() -> None:
    d, c = Driver(FakeES(settings(), recording("hybrid"))), core()
    d.run(c.search_steps(QUERY, mode="bm25", k=5))
    assert list_sizes(d.requests)["bm25"] == 5  # rerank asked for, but nothing to rerank with
    d.requests = []
    d.run(c.why_steps(QUERY, "d1", mode="bm25"))
    assert list_sizes(d.requests)["bm25"] == 100  # why says where a document ranks in the whole list


def test_the_checked_index_is_cached() -> None:
    d, c = Driver(FakeES(settings(), recording("hybrid"))), core()
    d.run(c.search_steps(QUERY, rerank=False))
    d.requests.clear()
    d.run(c.search_steps(QUERY, rerank=False))
    assert d.kinds == HYBRID


def test_timings_are_measured_across_the_requests() -> None:
    d = Driver(FakeES(settings(), recording("hybrid")), embed_s=0.05, search_s=0.02)
    t = d.run(core().search_steps(QUERY, rerank=False)).timings
    assert t.embed_ms >= 50 and 20 <= t.search_ms < 50  # the kNN request after the vector; BM25 ran meanwhile
    assert t.total_ms >= t.embed_ms + t.search_ms + t.fusion_ms and t.rerank_ms < 20


def test_a_failing_embedding_drops_the_spawned_bm25_and_raises() -> None:
    d = Driver(FakeES(settings(), recording("hybrid")), embed_error=ModelError("cannot load embedding model 'x'"))
    with pytest.raises(ModelError, match="cannot load"):
        d.run(core().search_steps(QUERY, rerank=False))
    assert d.kinds == [*CHECK, "Spawn", "Embed", "Drop"]  # no kNN request
    dropped = d.requests[-1]
    assert isinstance(dropped, Drop) and dropped.handle[0] == "answer"  # the handle Spawn was answered


def test_the_alias_moved_under_the_search_is_checked_and_searched_again_once() -> None:
    s = settings()
    es = MovingES(s, s.embedding.model)
    d, c = Driver(es), core(s)
    d.run(c.search_steps(QUERY, rerank=False))
    es.indices.current, d.requests = "rec-chunks-v2", []
    result = d.run(c.search_steps(QUERY, rerank=False))
    assert d.kinds == HYBRID + CHECK + HYBRID and result.index == "rec-chunks-v2"
    assert [h.doc_id for h in result.hits] == FUSED


def test_a_failed_list_after_a_swap_names_the_mismatch_and_after_a_rollback_the_failure() -> None:
    s = settings()
    es = MovingES(s, "/models/wider-embedder")
    es.indices.moved_mappings["properties"]["embedding"]["dims"] = 768
    d, c = Driver(es), core(s)
    d.run(c.search_steps(QUERY, rerank=False))
    failed = recording("knn_failed")
    failed["responses"][0]["hits"]["hits"] = []  # nothing shows the swap but the failure
    es.indices.current, es.answer = "rec-chunks-v2", failed
    with pytest.raises(IndexMismatch, match="wider-embedder"):
        d.run(c.search_steps(QUERY, rerank=False))
    es.indices.current, d.requests = INDEX, []
    with pytest.raises(ClusterError, match="HTTP 500"):
        d.run(c.search_steps(QUERY, rerank=False))
    assert d.kinds == CHECK + HYBRID + CHECK  # checked again: the same index, so the engine's failure stands


@pytest.mark.parametrize(("reranker", "outcome", "reason", "order"), [
    (Scores(), RerankOutcome.APPLIED, None, ["d3", "d4", "d2", "d1"]),
    (Scores(blend=0.0), RerankOutcome.APPLIED, None, FUSED),  # the reranker's own blend: keep the fused order
    (Scores("slow"), RerankOutcome.TIMED_OUT, "reranker timeout after 0.3s", FUSED),
    (Scores("fail"), RerankOutcome.FAILED, "reranker error: RuntimeError: model exploded", FUSED),
    (Scores("short"), RerankOutcome.FAILED, "reranker error: reranker returned 1 scores for 4 passages", FUSED),
    (Scores("missing"), RerankOutcome.NO_MODEL, "reranker error: reranker model 'x' is not on this machine", FUSED),
    (None, RerankOutcome.DISABLED, "no reranker configured", FUSED),
])
def test_rerank_applies_or_degrades_to_the_fused_order(reranker: Scores | None, outcome: RerankOutcome,
                                                       reason: str | None, order: list[str]) -> None:
    d = Driver(FakeES(settings(), recording("hybrid")))
    result = d.run(core(reranker=reranker).search_steps(QUERY))
    assert [h.doc_id for h in result.hits] == order
    assert (result.rerank_outcome, result.rerank_reason) == (outcome, reason)
    assert result.reranked == (outcome is RerankOutcome.APPLIED)
    assert d.kinds[-1] == ("Join" if reranker is None else "Rerank")
    if outcome is RerankOutcome.APPLIED:
        assert result.rerank_blend == (1.0 if reranker is None or reranker.blend is None else reranker.blend)


def test_warm_up_embeds_unless_bm25_and_ignores_a_failing_reranker() -> None:
    d = Driver(FakeES(settings(), recording("hybrid")))
    d.run(core(reranker=Scores("fail")).warm_up_steps("hybrid"))
    assert d.kinds == ["Embed", "Rerank"] and isinstance(d.requests[1], Rerank) and d.requests[1].timeout == 60.0
    d.requests = []
    d.run(core().warm_up_steps("bm25"))
    assert d.kinds == []
    d.embed_error = ModelError("cannot load embedding model 'x'")
    with pytest.raises(ModelError):
        d.run(core().warm_up_steps("dense"))


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(["hybrid", "dense", "bm25"]), name=st.sampled_from(["hybrid", "partial", "passages"]),
       rerank=st.booleans(), behaviour=st.sampled_from([None, "ok", "slow", "fail", "short"]),
       blend=st.sampled_from([None, 0.0, 0.4, 1.0]), k=st.integers(1, 5), page=st.integers(1, 2))
def test_any_search_sends_the_same_lines_overlapped_or_not_and_never_fails_on_the_reranker(
        mode: str, name: str, rerank: bool, behaviour: str | None, blend: float | None, k: int, page: int) -> None:
    reranker = None if behaviour is None else Scores(behaviour, blend)  # slow: the driver times it out at once
    fast, slow = Driver(FakeES(settings(), recording(name))), Driver(FakeES(settings(), recording(name)))
    kw: dict[str, Any] = {"mode": mode, "rerank": rerank, "k": k, "page": page}
    a = fast.run(core(reranker=reranker).search_steps(QUERY, **kw))
    b = slow.run(core(reranker=reranker, hybrid_overlap=False).search_steps(QUERY, **kw))
    assert same(a, b)
    assert one_msearch(fast.es.sent) == slow.es.sent[0] and len(slow.es.sent) == 1
    assert ("Spawn" in fast.kinds) == (mode == "hybrid") and ("Embed" in fast.kinds) == (mode != "bm25")
    fused = fast.run(core().search_steps(QUERY, **{**kw, "rerank": False}))
    asked = rerank and reranker is not None and fused.candidates > 0
    assert ("Rerank" in fast.kinds) == asked
    scored = behaviour == "ok" or (behaviour == "short" and fused.candidates == 1)  # one score for one passage
    expected = (RerankOutcome.SKIPPED if not rerank or (reranker is not None and not fused.candidates) else
                RerankOutcome.DISABLED if reranker is None else
                RerankOutcome.APPLIED if scored else
                RerankOutcome.TIMED_OUT if behaviour == "slow" else RerankOutcome.FAILED)
    assert a.rerank_outcome is expected and a.candidates == fused.candidates  # reordered at most: none come or go
    if expected is not RerankOutcome.APPLIED:
        assert [h.doc_id for h in a.hits] == [h.doc_id for h in fused.hits]
    elif page == 1 and k >= fused.candidates:
        assert sorted(h.doc_id for h in a.hits) == sorted(h.doc_id for h in fused.hits)


# ---- the same scenarios through both clients: they perform the requests, the core decides


def searches(shell: str, es: FakeES, changes: list[Callable[[], None]], reranker: Any = None,
             **kw: Any) -> list[SearchResult | HybridSearchError]:
    """One client of ``shell`` searching once after each change to the fake cluster: each result or error."""
    s = settings()
    out: list[SearchResult | HybridSearchError] = []
    if shell == "sync":
        with SearchClient(es, s, embedder=FixedVectors(), reranker=reranker) as c:  # type: ignore[arg-type]
            for change in changes:
                change()
                try:
                    out.append(c.search(QUERY, **kw))
                except HybridSearchError as exc:
                    out.append(exc)
        return out

    async def run() -> None:
        async with AsyncSearchClient(FakeAsyncES(es), s, embedder=FixedVectors(),  # type: ignore[arg-type]
                                     reranker=reranker) as c:
            for change in changes:
                change()
                try:
                    out.append(await c.search(QUERY, **kw))
                except HybridSearchError as exc:
                    out.append(exc)

    asyncio.run(run())
    return out


def pure(es: FakeES, changes: list[Callable[[], None]], reranker: Any = None,
         **kw: Any) -> list[SearchResult | HybridSearchError]:
    """The same searches with the core driven here (:class:`Driver`)."""
    d, c, out = Driver(es), core(reranker=reranker), []
    for change in changes:
        change()
        try:
            out.append(d.run(c.search_steps(QUERY, **kw)))
        except HybridSearchError as exc:
            out.append(exc)
    return out


def alike(a: list[SearchResult | HybridSearchError], b: list[SearchResult | HybridSearchError]) -> bool:
    return len(a) == len(b) and all(
        same(x, y) if isinstance(x, SearchResult) and isinstance(y, SearchResult) else
        type(x) is type(y) and str(x) == str(y) for x, y in zip(a, b, strict=True))


def moves(es: MovingES, *to: str) -> list[Callable[[], None]]:
    return [lambda i=i: setattr(es.indices, "current", i) for i in to]


@pytest.mark.parametrize("shell", ["sync", "async"])
def test_both_clients_search_again_when_the_alias_moved_as_the_core_decides(shell: str) -> None:
    s = settings()
    one, other = MovingES(s, s.embedding.model), MovingES(s, s.embedding.model)
    expected = pure(one, moves(one, INDEX, "rec-chunks-v2", "rec-chunks-v2"), rerank=False)
    got = searches(shell, other, moves(other, INDEX, "rec-chunks-v2", "rec-chunks-v2"), rerank=False)
    assert other.indices.checked == one.indices.checked == [INDEX, "rec-chunks-v2"]  # the new index checked once
    assert alike(got, expected) and [r.index for r in got] == [INDEX, "rec-chunks-v2", "rec-chunks-v2"]  # type: ignore[union-attr]


@pytest.mark.parametrize("shell", ["sync", "async"])
def test_both_clients_refuse_an_old_model_client_after_a_swap_as_the_core_decides(shell: str) -> None:
    s = settings()
    one, other = MovingES(s, "/models/trained-embedder"), MovingES(s, "/models/trained-embedder")
    expected = pure(one, moves(one, INDEX, "rec-chunks-v2"), rerank=False)
    got = searches(shell, other, moves(other, INDEX, "rec-chunks-v2"), rerank=False)
    assert alike(got, expected) and isinstance(got[1], IndexMismatch)


@pytest.mark.parametrize("shell", ["sync", "async"])
@pytest.mark.parametrize("mode", ["ok", "slow", "fail", "short"])
def test_both_clients_rerank_or_degrade_as_the_core_decides(shell: str, mode: str) -> None:
    reranker = Scores(mode)
    expected = pure(FakeES(settings(), recording("hybrid")), [lambda: None], reranker=reranker)
    got = searches(shell, FakeES(settings(), recording("hybrid")), [lambda: None], reranker=reranker)
    assert alike(got, expected)
    result = got[0]
    assert isinstance(result, SearchResult) and result.reranked == (mode == "ok")
    assert result.rerank_outcome is {"ok": RerankOutcome.APPLIED, "slow": RerankOutcome.TIMED_OUT}.get(
        mode, RerankOutcome.FAILED)


def why(shell: str, es: FakeES, doc_id: str, **kw: Any) -> WhyReport:
    """``why`` through one client of ``shell``."""
    s = settings()
    if shell == "sync":
        with SearchClient(es, s, embedder=FixedVectors(), reranker=Scores()) as c:  # type: ignore[arg-type]
            return c.why(QUERY, doc_id, **kw)

    async def run() -> WhyReport:
        async with AsyncSearchClient(FakeAsyncES(es), s, embedder=FixedVectors(),  # type: ignore[arg-type]
                                     reranker=Scores()) as c:
            return await c.why(QUERY, doc_id, **kw)

    return asyncio.run(run())


@pytest.mark.parametrize("shell", ["sync", "async"])
@pytest.mark.parametrize(("doc_id", "mode"), [("d2", "hybrid"), ("d4", "hybrid"), ("d9", "hybrid"), ("d1", "dense")])
def test_both_clients_answer_why_as_the_core_decides(shell: str, doc_id: str, mode: str) -> None:
    expected = Driver(FakeES(settings(), recording("hybrid"))).run(
        core(reranker=Scores()).why_steps(QUERY, doc_id, mode=mode))
    got = why(shell, FakeES(settings(), recording("hybrid")), doc_id, mode=mode)
    assert same(got, expected) and got.notes == expected.notes and got.rerank_outcome is RerankOutcome.APPLIED

