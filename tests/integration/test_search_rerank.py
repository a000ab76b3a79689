"""Rerank hook (with test rerankers of our own protocol), query log, async twin, unreachable cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from corpora import index_corpus
from hybridsearch import AsyncSearchClient, SearchClient
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import AsyncEngineClient, EngineClient, request
from hybridsearch.errors import ClusterUnavailable, RerankerError
from hybridsearch.query.querylog import query_hash
from hybridsearch.settings import Settings, load_settings

QUERY = "plants sunlight water energy"


class Reverse:
    """Scores passages so the fused order is reversed."""

    name = "reverse"
    blend: float | None = None  # no recommendation (Reranker.blend)

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        self.seen.append(list(passages))
        return [float(i) for i in range(len(passages))]


class Slow:
    name = "slow"
    blend: float | None = None  # no recommendation (Reranker.blend)

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        time.sleep(1.0)
        return [0.0] * len(passages)


class Broken:
    name = "broken"
    blend: float | None = None  # no recommendation (Reranker.blend)

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        raise RerankerError("model exploded")


class ShortAnswer:
    name = "short"
    blend: float | None = None  # no recommendation (Reranker.blend)

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        return [1.0]


def _with(settings: Settings, **query: object) -> Settings:
    return settings.model_copy(update={
        "query": settings.query.model_copy(update=query),
        "reranker": settings.reranker.model_copy(update={"depth": 4, "timeout": 0.2}),
    })


@pytest.fixture()
def tuned(es: EngineClient, settings: Settings, embedder: Embedder) -> Settings:
    index_corpus(es, settings, embedder)
    return _with(settings)


def test_reranker_reorders_the_top_depth_only(es: EngineClient, tuned: Settings, embedder: Embedder) -> None:
    plain = SearchClient(es, tuned, embedder=embedder).search(QUERY, k=8, explain=True)
    rr = Reverse()
    with SearchClient(es, tuned, embedder=embedder, reranker=rr) as c:
        res = c.search(QUERY, k=8, explain=True)
    fused_ids = [h.doc_id for h in plain.hits]
    assert res.reranked and res.rerank_reason is None
    assert [h.doc_id for h in res.hits] == fused_ids[:4][::-1] + fused_ids[4:]
    assert len(rr.seen) == 1 and len(rr.seen[0]) == 4 and len(set(rr.seen[0])) == 4
    assert rr.seen[0][0].startswith(plain.hits[0].title or "")  # title + text of the fused top hit
    assert [h.rerank.rank for h in res.hits[:4]] == [1, 2, 3, 4]  # type: ignore[union-attr]
    assert res.hits[0].score == 3.0 and res.hits[0].fused.rank == 4  # type: ignore[union-attr]
    assert res.hits[4].rerank is None and res.hits[4].score == res.hits[4].fused.score  # type: ignore[union-attr]
    assert any("rerank: rank 1" in line for line in res.hits[0].explanation or [])
    assert any("below the rerank depth" in line for line in res.hits[5].explanation or [])
    with SearchClient(es, tuned, embedder=embedder, reranker=Reverse()) as c:
        res = c.search(QUERY, k=8, rerank=False)
    assert not res.reranked and res.rerank_reason == "rerank not requested"
    assert [h.doc_id for h in res.hits] == fused_ids


@pytest.mark.parametrize(("reranker", "reason"), [
    (Slow(), "reranker timeout after 0.2s"),
    (Broken(), "reranker error: model exploded"),
    (ShortAnswer(), "reranker error: reranker returned 1 scores for 4 passages"),
])
def test_failing_reranker_degrades_to_fused_order(es: EngineClient, tuned: Settings, embedder: Embedder,
                                                  reranker: object, reason: str) -> None:
    fused = SearchClient(es, tuned, embedder=embedder).search(QUERY, k=8)
    with SearchClient(es, tuned, embedder=embedder, reranker=reranker) as c:  # type: ignore[arg-type]
        res = c.search(QUERY, k=8)
    assert not res.reranked and res.rerank_reason == reason
    assert [h.doc_id for h in res.hits] == [h.doc_id for h in fused.hits]
    assert all(h.rerank is None for h in res.hits)


def test_query_log_is_written_in_the_background(es: EngineClient, tuned: Settings, embedder: Embedder) -> None:
    logged = _with(tuned, log_queries=True)
    with SearchClient(es, logged, embedder=embedder) as c:
        nested = {"all_of": [{"source": "wiki"}, {"range": {"position": {"gte": 0}}},
                             {"none_of": [{"metadata.lang": "fr"}]}]}
        res = c.search(QUERY, k=3, filters=nested)
        c.search("zzzqqq", k=3, mode="bm25")
        assert c.query_log is not None and c.query_log.flush(10)
        assert c.query_log.written == 2 and c.query_log.dropped == 0
    es.send(request.refresh(logged.index.query_log))
    docs = {d["_source"]["mode"]: d["_source"] for d in es.send(request.search(logged.index.query_log,
                                                                               request.body()))["hits"]["hits"]}
    hyb = docs["hybrid"]
    assert hyb["query"] == QUERY and hyb["query_hash"] == query_hash(QUERY)
    assert hyb["top_ids"] == [h.doc_id for h in res.hits] and hyb["hits"] == 3 and hyb["reranked"] is False
    assert hyb["filters"]["bool"]["filter"][0] == {"term": {"source": "wiki"}} and hyb["latency_ms"]["total"] > 0
    assert docs["bm25"]["zero_hits"] is True
    mapping = es.send(request.get_mapping(logged.index.query_log))[logged.index.query_log]["mappings"]
    assert mapping["dynamic"] == "strict"  # the logger created the index with its mappings, not by auto-create


def test_the_asyncio_client_writes_its_query_log_through_itself(es: EngineClient, tuned: Settings,
                                                                embedder: Embedder) -> None:
    logged = _with(tuned, log_queries=True)

    async def search() -> None:
        async with AsyncSearchClient(AsyncEngineClient(logged.es), logged, embedder=embedder) as c:
            await c.search(QUERY, k=3)
            assert c.query_log is not None and await asyncio.to_thread(c.query_log.flush, 10)
            assert c.query_log.written == 1 and c.query_log.failed == 0

    asyncio.run(search())
    es.send(request.refresh(logged.index.query_log))
    (doc,) = [d["_source"] for d in es.send(request.search(logged.index.query_log, request.body()))["hits"]["hits"]]
    assert doc["query"] == QUERY


def test_redacted_query_log_keeps_only_the_hash(es: EngineClient, tuned: Settings, embedder: Embedder) -> None:
    logged = _with(tuned, log_queries=True, redact=True)
    with SearchClient(es, logged, embedder=embedder) as c:
        c.search("secret patient name", k=3)
    es.send(request.refresh(logged.index.query_log))
    (doc,) = [d["_source"] for d in es.send(request.search(logged.index.query_log, request.body()))["hits"]["hits"]]
    assert "query" not in doc and doc["query_hash"] == query_hash("secret patient name")


def test_full_query_log_queue_drops_and_counts(es: EngineClient, tuned: Settings) -> None:
    from hybridsearch.query.querylog import QueryLogger

    ql = QueryLogger(EngineClient(load_settings(es_url="http://127.0.0.1:1", es={"max_retries": 0}).es), tuned,
                     max_queue=2)
    accepted = [ql.submit({"mode": "bm25"}) for _ in range(200)]
    assert not all(accepted) and ql.dropped == accepted.count(False) > 0
    ql.close(timeout=10)
    assert ql.failed + ql.dropped + ql.written == 200 and ql.written == 0  # unreachable cluster: none written


def test_async_client_matches_sync_and_degrades_the_same(es: EngineClient, tuned: Settings,
                                                         embedder: Embedder) -> None:
    sync = SearchClient(es, tuned, embedder=embedder).search(QUERY, k=6, filters={"source": "wiki"})

    async def run() -> tuple[list[str], str | None, list[str], bool]:
        aes: AsyncEngineClient = AsyncEngineClient(tuned.es)
        async with AsyncSearchClient(aes, tuned, embedder=embedder, reranker=Slow()) as c:
            res = await c.search(QUERY, k=6, filters={"source": "wiki"})
            rr = await AsyncSearchClient(aes, tuned, embedder=embedder, reranker=Reverse()).search(QUERY, k=6)
        await aes.close()
        return [h.doc_id for h in res.hits], res.rerank_reason, [h.doc_id for h in rr.hits], rr.reranked

    got, reason, reversed_ids, reranked = asyncio.run(run())
    assert got == [h.doc_id for h in sync.hits]
    assert reason == "reranker timeout after 0.2s"
    assert reranked and len(reversed_ids) == 6


def test_unreachable_cluster_is_our_error(settings: Settings, embedder: Embedder) -> None:
    down = load_settings(es_url="http://127.0.0.1:1", es={"max_retries": 0}, query={"log_queries": False})
    with SearchClient(EngineClient(down.es), down, embedder=embedder) as c, \
            pytest.raises(ClusterUnavailable, match=r"es-local\.sh"):
        c.search("bees")

    async def run() -> None:
        aes = AsyncEngineClient(down.es)
        try:
            await AsyncSearchClient(aes, down, embedder=embedder).search("bees")
        finally:
            await aes.close()

    with pytest.raises(ClusterUnavailable):
        asyncio.run(run())


def test_warm_up_loads_models_and_ignores_a_broken_reranker(es: EngineClient, tuned: Settings,
                                                           embedder: Embedder) -> None:
    rr = Reverse()
    with SearchClient(es, tuned, embedder=embedder, reranker=rr) as c:
        c.warm_up()
        assert rr.seen == [["warm up"]]
    with SearchClient(es, tuned, embedder=embedder, reranker=Broken()) as c:
        c.warm_up()  # no error: the searches report it
        assert c.search(QUERY, k=3).rerank_reason == "reranker error: model exploded"

    async def run() -> list[list[str]]:
        aes = AsyncEngineClient(tuned.es)
        arr = Reverse()
        async with AsyncSearchClient(aes, tuned, embedder=embedder, reranker=arr) as ac:
            await ac.warm_up()
        await aes.close()
        return arr.seen

    assert asyncio.run(run()) == [["warm up"]]
