"""SearchClient and AsyncSearchClient on recorded ``_msearch`` answers (tests/unit/recordings/*.json).

The only fake is the Elasticsearch client object: its ``msearch`` returns a recording (a hybrid search sends
its BM25 lists and its kNN list as two ``_msearch`` requests: each list gets its item of the recording, which
holds BM25's, kNN's and, where recorded, the passage list's; unrecorded, the passage list finds nothing), and the alias
and mapping calls answer for one index built from the settings' own template. Everything else (plan,
query bodies, fusion, rerank with its timeout, paging) is the real code, run by both clients, which
must return the same results for the same inputs.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote

import elasticsearch
import numpy as np
import pytest

from hybridsearch import AsyncSearchClient, SearchClient
from hybridsearch.engine import ELASTICSEARCH, OPENSEARCH, Dialect, EngineInfo, Request
from hybridsearch.errors import ClusterError, ClusterUnavailable, IndexMismatch, IndexNotFound, ModelError
from hybridsearch.index.spec import load_template
from hybridsearch.index.visibility import hidden_lookup
from hybridsearch.query.candidates import auto_candidates
from hybridsearch.query.results import RerankOutcome, SearchResult
from hybridsearch.settings import Settings, load_settings

RECORDINGS = Path(__file__).parent / "recordings"
INDEX = "rec-chunks-v1"


def recording(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((RECORDINGS / f"msearch_{name}.json").read_text())
    return body


class FakeIndices:
    def __init__(self, settings: Settings, dialect: Dialect) -> None:
        self.alias = settings.index.alias
        self.mappings = load_template("chunks", settings, dialect)["template"]["mappings"]
        self.state_present = True

    def get_alias(self, name: str) -> dict[str, Any]:
        return {INDEX: {"aliases": {self.alias: {"is_write_index": True}}}}

    def get_mapping(self, index: str, ignore_unavailable: bool | None = None) -> dict[str, Any]:
        """The chunk index's mapping and (``ignore_unavailable``: when asked for and present) the state index's."""
        names = index.split(",")
        found: dict[str, Any] = {INDEX: {"mappings": self.mappings}}
        found.update({n: {"mappings": {}} for n in names[1:] if self.state_present})
        return found


class FakeES:
    """The I/O seam: what the sync client calls on :class:`hybridsearch.engine.EngineClient`."""

    def __init__(self, settings: Settings, answer: dict[str, Any] | Exception,
                 dialect: Dialect = ELASTICSEARCH) -> None:
        self.dialect = dialect
        self.engine = EngineInfo(dialect.kind, "9.3.2" if dialect.kind == "elasticsearch" else "3.5.0")
        self.chunks = 6  # what _count answers: the chunks of the recorded index, on one shard
        self.indices = FakeIndices(settings, dialect)
        self.answer = answer
        self.sent: list[list[dict[str, Any]]] = []

    def msearch(self, searches: list[dict[str, Any]]) -> dict[str, Any]:
        self.sent.append(searches)
        if isinstance(self.answer, Exception):
            raise self.answer
        recorded = dict(zip(RECORDED, self.answer["responses"], strict=False))
        return {"responses": [recorded.get(list_of(body), NOTHING) for body in searches[1::2]]}

    def search(self, *, index: str, **body: Any) -> dict[str, Any]:
        raise AssertionError(f"no recorded answer to a search of {index}")

    def count(self, index: str) -> dict[str, Any]:
        return {"count": self.chunks, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}}

    def send(self, request: Request) -> Any:
        """The answer to each request the search path sends, by its path."""
        path = unquote(request.path)
        if path == "/_msearch":
            return self.msearch(cast(list[dict[str, Any]], request.body))
        body = {("source" if k == "_source" else k): v for k, v in dict(request.body or {}).items()}
        if path.endswith("/_count"):
            extra = {"min_score": float(request.params["min_score"])} if "min_score" in request.params else {}
            return self.count(path[1:].removesuffix("/_count"), **body, **extra)
        if path.endswith("/_search"):
            return self.search(index=path[1:].removesuffix("/_search"), **body)
        if path.startswith("/_alias/"):
            return self.indices.get_alias(path.removeprefix("/_alias/"))
        if path.endswith("/_mapping"):
            return self.indices.get_mapping(path[1:].removesuffix("/_mapping"),
                                            request.params.get("ignore_unavailable") == "true")
        raise AssertionError(f"the search path sent {request}")

    def close(self) -> None:
        pass


#: the lists a recording answers, in its order; an answer of the passage list that finds nothing
RECORDED = ("bm25", "knn", "passages")
NOTHING: dict[str, Any] = {"took": 1, "timed_out": False, "hits": {"hits": []}, "status": 200}


def is_knn(body: dict[str, Any]) -> bool:
    """Whether a search body is the kNN list's (Elasticsearch's top-level ``knn``, OpenSearch's ``knn`` query)."""
    return "knn" in body or "knn" in body.get("query", {})


def list_of(body: dict[str, Any]) -> str:
    """Which list a search body is: ``knn``, ``passages`` (BM25 on the chunks' text) or ``bm25``."""
    if is_knn(body):
        return "knn"
    return "passages" if "text" in body["query"]["bool"]["must"][0].get("match", {}) else "bm25"


def one_msearch(sent: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The lines of one search's requests as one ``_msearch`` would send them: BM25's, then kNN's."""
    return [line for request in sorted(sent, key=lambda r: is_knn(r[1])) for line in request]


class FakeAsyncES:
    """The same seam for :class:`hybridsearch.engine.AsyncEngineClient`."""

    def __init__(self, sync: FakeES) -> None:
        self.sync = sync
        self.dialect = sync.dialect

    async def detect(self) -> EngineInfo:
        return self.sync.engine

    @property
    def engine(self) -> EngineInfo:
        return self.sync.engine

    async def send(self, request: Request) -> Any:
        return self.sync.send(request)

    async def close(self) -> None:
        pass


class FixedVectors:
    """The embedding model's place: one fixed unit vector per query."""

    def encode_query(self, text: str) -> np.ndarray:
        vec = np.ones(384, dtype=np.float32)
        return vec / np.linalg.norm(vec)


class Scores:
    """A reranker that prefers passages by a word they contain; or fails; or is slow."""

    name = "recorded"
    blend: float | None = None  # no recommendation (Reranker.blend)

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if self.mode == "fail":
            raise RuntimeError("model exploded")
        if self.mode == "slow":
            time.sleep(1.0)
        return [2.0 if "Wasps" in p else 1.0 if "Moths" in p else 0.0 for p in passages]


def settings() -> Settings:
    return load_settings(es_url="http://127.0.0.1:1", index={"prefix": "rec"}, query={"log_queries": False},
                         reranker={"timeout": 0.3})


def both(answer: dict[str, Any] | Exception, reranker: Scores | None = None, dialect: Dialect = ELASTICSEARCH,
         **search: Any) -> tuple[SearchResult, SearchResult, FakeES]:
    """The same search through both clients on the same recorded answer."""
    s = settings()
    es = FakeES(s, answer, dialect)
    with SearchClient(es, s, embedder=FixedVectors(), reranker=reranker) as sync:  # type: ignore[arg-type]
        one = sync.search("how do bees find food", **search)

    async def run() -> SearchResult:
        async with AsyncSearchClient(FakeAsyncES(es), s, embedder=FixedVectors(),  # type: ignore[arg-type]
                                     reranker=reranker) as client:
            return await client.search("how do bees find food", **search)

    return one, asyncio.run(run()), es


def same(a: SearchResult, b: SearchResult) -> bool:
    return a.model_dump(exclude={"timings"}) == b.model_dump(exclude={"timings"})


def test_hybrid_recording_is_fused_alike_by_both_clients() -> None:
    sync, async_, es = both(recording("hybrid"), rerank=False)
    assert [h.doc_id for h in sync.hits] == ["d2", "d1", "d4", "d3"]  # RRF k=60 over both lists
    top = sync.hits[0]
    assert top.bm25 is not None and top.bm25.rank == 2 and top.knn is not None and top.knn.rank == 1
    assert top.fused is not None and top.fused.score == pytest.approx(1 / 62 + 1 / 61)
    assert sync.index == INDEX and sync.rerank_outcome is RerankOutcome.SKIPPED
    assert sync.rerank_reason == "rerank not requested" and same(sync, async_)
    lines = one_msearch(es.sent[:2])  # the sync client's two requests; then the async client's
    bm25_body, passage_body, knn_body = lines[1], lines[3], lines[5]
    # the fake index is built from today's template: BM25 scores the sections' joined field, and the passage list
    # the chunks' own fields
    assert lines[0] == lines[2] == lines[4] == {"index": "rec-chunks"} and "section_all" in json.dumps(bm25_body)
    assert "section_all" not in json.dumps(passage_body) and list_of(passage_body) == "passages"
    assert len(knn_body["knn"]["query_vector"]) == 384 and lines == one_msearch(es.sent[2:])


@pytest.mark.parametrize("state_present", [True, False])
def test_both_lists_leave_out_what_the_prefix_hides(state_present: bool) -> None:
    """The ingest state's terms lookup is in both lists (and in BM25's passage list); a prefix without the state
    index (never ingested since it came) is searched without it rather than failing on the missing index."""
    s = settings()
    es = FakeES(s, recording("hybrid"))
    es.indices.state_present = state_present
    with SearchClient(es, s, embedder=FixedVectors()) as client:  # type: ignore[arg-type]
        client.search("how do bees find food", rerank=False)
    bodies = json.dumps([b for r in es.sent for b in r[1::2]])
    lookup = json.dumps(hidden_lookup(s.index.ingest_state))
    assert bodies.count(lookup) == (3 if state_present else 0)
    assert "pending_run" not in bodies


def test_opensearch_gets_the_knn_query_clause_and_fuses_alike() -> None:
    """OpenSearch answers _msearch in the same format; only the kNN request differs (the ``knn`` query clause
    with a ``filter`` and ``ef_search`` for ``num_candidates``)."""
    es_result = both(recording("hybrid"), rerank=False)[0]
    sync, async_, es = both(recording("hybrid"), rerank=False, dialect=OPENSEARCH)
    assert same(sync, async_) and same(sync.model_copy(update={"knn_width": None}),
                                       es_result.model_copy(update={"knn_width": None}))
    assert "rescored" in str(es_result.knn_width) and "the engine cannot" in str(sync.knn_width)
    knn_body = one_msearch(es.sent[:2])[5]
    assert "knn" not in knn_body and set(knn_body["query"]) == {"knn"}
    clause = knn_body["query"]["knn"]["embedding"]
    q = settings().query
    assert len(clause["vector"]) == 384 and clause["k"] == q.knn_k * q.knn_overfetch
    assert clause["method_parameters"] == {"ef_search": auto_candidates(clause["k"], 6)}  # 6 chunks, one shard
    assert {"term": {"doc_id": "x"}} not in clause["filter"]["bool"]["filter"] and clause["filter"]["bool"]["filter"]
    es_lines = one_msearch(both(recording("hybrid"), rerank=False)[2].sent[:2])
    assert one_msearch(es.sent[:2])[:4] == es_lines[:4]  # the BM25 and passage bodies (highlights too) are the same


def test_reranker_reorders_the_top() -> None:
    sync, async_, _ = both(recording("hybrid"), reranker=Scores())
    assert [h.doc_id for h in sync.hits] == ["d3", "d4", "d2", "d1"]
    assert sync.reranked and sync.rerank_outcome is RerankOutcome.APPLIED and sync.rerank_reason is None
    assert same(sync, async_)


def test_failing_reranker_keeps_the_fused_order() -> None:
    sync, async_, _ = both(recording("hybrid"), reranker=Scores("fail"))
    assert [h.doc_id for h in sync.hits] == ["d2", "d1", "d4", "d3"] and not sync.reranked
    assert sync.rerank_outcome is RerankOutcome.FAILED
    assert sync.rerank_reason == "reranker error: RuntimeError: model exploded" and same(sync, async_)


def test_slow_reranker_times_out_to_the_fused_order() -> None:
    sync, async_, _ = both(recording("hybrid"), reranker=Scores("slow"))
    assert [h.doc_id for h in sync.hits] == ["d2", "d1", "d4", "d3"] and not sync.reranked
    assert sync.rerank_outcome is RerankOutcome.TIMED_OUT and sync.rerank_reason == "reranker timeout after 0.3s"
    assert same(sync, async_)


def test_no_reranker_is_reported_as_disabled() -> None:
    sync, async_, _ = both(recording("hybrid"))
    assert sync.rerank_outcome is RerankOutcome.DISABLED and sync.rerank_reason == "no reranker configured"
    assert same(sync, async_)


def test_one_failed_search_of_the_two_fails_the_query() -> None:
    for client in ("sync", "async"):
        with pytest.raises(ClusterError, match="HTTP 500: search_phase_execution_exception: all shards failed"):
            _one(client, recording("knn_failed"))


def test_missing_index_in_the_answer_is_index_not_found() -> None:
    for client in ("sync", "async"):
        with pytest.raises(IndexNotFound, match="no such index"):
            _one(client, recording("index_gone"))


def test_shard_failures_and_timed_out_searches_return_what_answered() -> None:
    sync, async_, _ = both(recording("partial"), rerank=False)
    assert {h.doc_id for h in sync.hits} == {"d1", "d4"} and sync.candidates == 2 and same(sync, async_)


def test_cluster_timeout_is_cluster_unavailable() -> None:
    timeout = elasticsearch.ConnectionTimeout("timed out after 30 s")
    for client in ("sync", "async"):
        with pytest.raises(ClusterUnavailable, match="did not answer"):
            _one(client, timeout)


def _one(client: str, answer: dict[str, Any] | Exception) -> SearchResult:
    s = settings()
    es = FakeES(s, answer)
    if client == "sync":
        with SearchClient(es, s, embedder=FixedVectors()) as c:  # type: ignore[arg-type]
            return c.search("bees", rerank=False)

    async def run() -> SearchResult:
        async with AsyncSearchClient(FakeAsyncES(es), s, embedder=FixedVectors()) as c:  # type: ignore[arg-type]
            return await c.search("bees", rerank=False)

    return asyncio.run(run())


# Hybrid sends BM25 at once and kNN when the vector is ready (hybridsearch.query.send).

class WaitsForBM25:
    """An embedder that finishes only once the BM25 request has reached the cluster (or gives up after 5 s),
    and says whether it had: proof that BM25 does not wait for the vector."""

    def __init__(self, es: FakeES) -> None:
        self.es = es
        self.bm25_sent_while_embedding: list[bool] = []

    def encode_query(self, text: str) -> np.ndarray:
        self.bm25_sent_while_embedding.append(self.es.bm25_arrived.wait(timeout=5))
        return FixedVectors().encode_query(text)


class RecordingES(FakeES):
    """:class:`FakeES` that notes when the BM25 request arrives (and, with ``fail``, fails one list's request)."""

    def __init__(self, settings: Settings, answer: dict[str, Any], fail: dict[str, Exception] | None = None) -> None:
        super().__init__(settings, answer)
        self.bm25_arrived = threading.Event()
        self.fail = fail or {}

    def msearch(self, searches: list[dict[str, Any]]) -> dict[str, Any]:
        kinds = {"knn" if is_knn(body) else "bm25" for body in searches[1::2]}
        if "bm25" in kinds:
            self.bm25_arrived.set()
        for kind in kinds & set(self.fail):
            raise self.fail[kind]
        return super().msearch(searches)


def overlapped(es: RecordingES, embedder: Any, client: str, mode: str = "hybrid", **query: Any) -> SearchResult:
    s = settings()
    s = s.model_copy(update={"query": s.query.model_copy(update=query)})
    if client == "sync":
        with SearchClient(es, s, embedder=embedder) as c:
            return c.search("how do bees find food", mode=mode, rerank=False)  # type: ignore[arg-type]

    async def run() -> SearchResult:
        async with AsyncSearchClient(FakeAsyncES(es), s, embedder=embedder) as c:  # type: ignore[arg-type]
            return await c.search("how do bees find food", mode=mode, rerank=False)  # type: ignore[arg-type]

    return asyncio.run(run())


@pytest.mark.parametrize("client", ["sync", "async"])
def test_hybrid_sends_bm25_before_the_embedding_finishes(client: str) -> None:
    es = RecordingES(settings(), recording("hybrid"))
    embedder = WaitsForBM25(es)
    result = overlapped(es, embedder, client)
    assert embedder.bm25_sent_while_embedding == [True]
    assert [len(r) for r in es.sent] == [4, 2] and not is_knn(es.sent[0][1]) and is_knn(es.sent[1][1])
    assert [h.doc_id for h in result.hits] == ["d2", "d1", "d4", "d3"]


@pytest.mark.parametrize("client", ["sync", "async"])
def test_overlapped_hybrid_equals_the_one_msearch_path(client: str) -> None:
    """Same request lines, same fused results as HSP_QUERY__HYBRID_OVERLAP=false (one _msearch after embedding)."""
    for name in ("hybrid", "partial"):
        fast, slow = RecordingES(settings(), recording(name)), RecordingES(settings(), recording(name))
        a = overlapped(fast, FixedVectors(), client)
        b = overlapped(slow, FixedVectors(), client, hybrid_overlap=False)
        assert same(a, b) and len(slow.sent) == 1 and one_msearch(fast.sent) == slow.sent[0]
        assert a.timings.embed_ms > 0 and a.timings.search_ms > 0


@pytest.mark.parametrize("client", ["sync", "async"])
def test_bm25_and_dense_stay_one_request(client: str) -> None:
    for mode in ("bm25", "dense"):
        es = RecordingES(settings(), recording("hybrid"))
        overlapped(es, FixedVectors(), client, mode)
        # bm25: the sections' list and its passage list; dense: kNN's
        assert len(es.sent) == 1 and len(es.sent[0]) == (2 if mode == "dense" else 4)
        assert is_knn(es.sent[0][1]) == (mode == "dense")


@pytest.mark.parametrize("client", ["sync", "async"])
def test_either_request_failing_fails_the_search_as_before(client: str) -> None:
    timeout = elasticsearch.ConnectionTimeout("timed out after 30 s")
    for failing in ("bm25", "knn"):
        es = RecordingES(settings(), recording("hybrid"), fail={failing: timeout})
        with pytest.raises(ClusterUnavailable, match="did not answer"):
            overlapped(es, FixedVectors(), client)
    es = RecordingES(settings(), recording("knn_failed"), fail={"bm25": timeout})
    with pytest.raises(ClusterUnavailable):  # both fail: BM25's error first, as in one _msearch
        overlapped(es, FixedVectors(), client)


class Broken:
    def encode_query(self, text: str) -> np.ndarray:
        raise ModelError("cannot load embedding model 'x'")


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_failing_embedding_raises_its_own_error(client: str, caplog: pytest.LogCaptureFixture) -> None:
    """As before the overlap (nothing was sent then): the embedding's error, BM25's answer or error dropped."""
    es = RecordingES(settings(), recording("hybrid"), fail={"bm25": elasticsearch.ConnectionTimeout("late")})
    with pytest.raises(ModelError, match="cannot load embedding model"):
        overlapped(es, Broken(), client)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


class MovingIndices(FakeIndices):
    """An alias that a migration swaps from ``rec-chunks-v1`` to ``rec-chunks-v2`` (whose ``_meta`` names
    ``model``) once ``move()`` is called; ``checked`` records every mapping read."""

    def __init__(self, settings: Settings, model: str) -> None:
        super().__init__(settings, ELASTICSEARCH)
        self.current, self.checked = INDEX, []
        self.moved_mappings = json.loads(json.dumps(self.mappings))
        self.moved_mappings["_meta"]["embedding_model"] = model

    def get_alias(self, name: str) -> dict[str, Any]:
        return {self.current: {"aliases": {self.alias: {"is_write_index": True}}}}

    def get_mapping(self, index: str, ignore_unavailable: bool | None = None) -> dict[str, Any]:
        index = index.split(",")[0]  # the chunk index (the state index after it is absent here)
        self.checked.append(index)
        return {index: {"mappings": self.mappings if index == INDEX else self.moved_mappings}}


class MovingES(FakeES):
    """Answers as the index the alias points at now: every hit's ``_index`` is the current one."""

    def __init__(self, settings: Settings, model: str) -> None:
        super().__init__(settings, recording("hybrid"))
        self.indices: MovingIndices = MovingIndices(settings, model)

    def msearch(self, searches: list[dict[str, Any]]) -> dict[str, Any]:
        answer = json.loads(json.dumps(super().msearch(searches)))
        for r in answer["responses"]:
            for hit in r.get("hits", {}).get("hits", []):
                hit["_index"] = self.indices.current
        return answer


def test_a_swapped_alias_is_checked_at_once_not_after_the_cache_expires() -> None:
    """A migration to another chunker keeps the model: the first search after the swap sees hits of
    ``-v2``, checks that index at once and searches again as it wants (here: the same lines)."""
    s = settings()
    es = MovingES(s, s.embedding.model)
    with SearchClient(es, s, embedder=FixedVectors()) as client:  # type: ignore[arg-type]
        assert client.search("how do bees find food", rerank=False).index == INDEX
        es.indices.current = "rec-chunks-v2"
        sent = len(es.sent)
        after = client.search("how do bees find food", rerank=False)
        assert after.index == "rec-chunks-v2" and es.indices.checked == [INDEX, "rec-chunks-v2"]
        assert len(es.sent) - sent == 4  # two lists, searched twice
        assert [h.doc_id for h in after.hits] == ["d2", "d1", "d4", "d3"]
        client.search("how do bees find food", rerank=False)
        assert es.indices.checked == [INDEX, "rec-chunks-v2"]  # cached again


def test_a_client_of_the_old_model_is_refused_right_after_a_model_migration() -> None:
    """Old-model query vectors against the new model's index would be meaningless: refused on the first
    search after the swap, by both clients (not up to 60 s later, when the cached check expires)."""
    s = settings()
    es = MovingES(s, "/models/trained-embedder")
    with SearchClient(es, s, embedder=FixedVectors()) as client:  # type: ignore[arg-type]
        client.search("how do bees find food", rerank=False)
        es.indices.current = "rec-chunks-v2"
        with pytest.raises(IndexMismatch, match="trained-embedder"):
            client.search("how do bees find food", rerank=False)

    async def run() -> None:
        es.indices.current = INDEX
        async with AsyncSearchClient(FakeAsyncES(es), s, embedder=FixedVectors()) as client:  # type: ignore[arg-type]
            await client.search("how do bees find food", rerank=False)
            es.indices.current = "rec-chunks-v2"
            with pytest.raises(IndexMismatch, match="trained-embedder"):
                await client.search("how do bees find food", rerank=False)

    asyncio.run(run())


def test_a_failed_list_after_a_swap_to_other_dims_says_what_changed() -> None:
    """A new model of other dimensions fails the old client's kNN list (a failed item) and BM25 finds nothing,
    so no hit shows the swap: the client checks the alias at once and reports the mismatch, not the engine's
    failure."""
    s = settings()
    es = MovingES(s, "/models/wider-embedder")
    es.indices.moved_mappings["properties"]["embedding"]["dims"] = 768
    with SearchClient(es, s, embedder=FixedVectors()) as client:  # type: ignore[arg-type]
        client.search("how do bees find food", rerank=False)
        failed = recording("knn_failed")
        failed["responses"][0]["hits"]["hits"] = []
        es.indices.current, es.answer = "rec-chunks-v2", failed
        with pytest.raises(IndexMismatch, match="wider-embedder"):
            client.search("how do bees find food", rerank=False)
        es.indices.current = INDEX  # rolled back: the same failure is the engine's error again
        with pytest.raises(ClusterError, match="HTTP 500"):
            client.search("how do bees find food", rerank=False)
