"""SearchClient and AsyncSearchClient on recorded ``_msearch`` answers (tests/unit/recordings/*.json).

The only fake is the engine client object (tests/recorded_engine.py): its ``msearch`` returns a recording (a hybrid
search sends its BM25 lists and its kNN list as two ``_msearch`` requests: each list gets its item of the recording),
and the alias and mapping calls answer for one index built from the settings' own template. Everything else (plan,
query bodies, fusion, rerank with its timeout, paging, why's probes) is the real code, run by both clients, which
must return the same results for the same inputs.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import elasticsearch
import numpy as np
import pytest

from hybridsearch import AsyncSearchClient, SearchClient
from hybridsearch.engine import ELASTICSEARCH, OPENSEARCH, Dialect
from hybridsearch.errors import ClusterError, ClusterUnavailable, IndexMismatch, IndexNotFound, ModelError
from hybridsearch.index.visibility import hidden_lookup
from hybridsearch.query.build import auto_candidates
from hybridsearch.query.results import RerankOutcome, SearchResult, WhyReport
from hybridsearch.settings import Settings
from recorded_engine import (
    INDEX,
    FakeAsyncES,
    FakeES,
    FixedVectors,
    MovingES,
    is_knn,
    list_of,
    one_msearch,
    recording,
    same,
    settings,
)


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


# Hybrid sends BM25 at once and kNN when the vector is ready (hybridsearch.query.steps).

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


# why: the search's steps, then probes of the lists that missed the document, performed by either client


def whys(es: FakeES, doc_id: str, **kw: Any) -> tuple[WhyReport, WhyReport]:
    """``why`` through both clients on the same fake cluster."""
    s = settings()
    with SearchClient(es, s, embedder=FixedVectors(), reranker=Scores()) as sync:  # type: ignore[arg-type]
        one = sync.why("how do bees find food", doc_id, **kw)

    async def run() -> WhyReport:
        async with AsyncSearchClient(FakeAsyncES(es), s, embedder=FixedVectors(),  # type: ignore[arg-type]
                                     reranker=Scores()) as client:
            return await client.why("how do bees find food", doc_id, **kw)

    return one, asyncio.run(run())


@pytest.mark.parametrize(("doc_id", "mode"), [("d2", "hybrid"), ("d3", "hybrid"), ("d4", "bm25"), ("d9", "hybrid")])
def test_async_why_answers_as_sync_why(doc_id: str, mode: str) -> None:
    sync, async_ = whys(FakeES(settings(), recording("hybrid")), doc_id, mode=mode)
    assert same(sync, async_) and sync.doc_id == doc_id and sync.chunks_in_index == 2
    assert (sync.final_rank is None) == (doc_id not in {"d2", "d3"})


def test_why_probes_each_list_that_missed_the_document() -> None:
    """d4 is only in kNN's list: BM25's probe says how high its best section scores; d9 is in neither list."""
    es = FakeES(settings(), recording("hybrid"))
    d4, _ = whys(es, "d4", rerank=False)
    assert d4.knn is not None and d4.knn.rank == 2 and d4.bm25 is None and d4.final_rank == 3
    assert "BM25: best section score 0.5000, about 40 sections score as high or higher; the list keeps 3" in d4.notes
    es.probe_score = None
    d9, _ = whys(es, "d9", rerank=False)
    assert d9.final_rank is None and d9.fused is None
    assert "BM25: no section of d9 matches the query terms (operator or)" in d9.notes
    assert "kNN: no chunk of d9 has a vector" in d9.notes
    assert "fusion: not among the 4 fused candidates" in d9.notes


def test_why_says_when_the_document_is_absent_or_filtered_out() -> None:
    es = FakeES(settings(), recording("hybrid"))
    es.doc_chunks = 0
    report, async_report = whys(es, "d9")
    assert same(report, async_report) and report.chunks_in_index == 0
    assert report.notes[0] == f"d9 is not in {INDEX}: no chunk has this doc_id"
    assert not any(n.startswith(("BM25", "kNN")) for n in report.notes)  # nothing to probe


def fused_by(s: Settings, es: FakeES) -> tuple[SearchResult, SearchResult]:
    """The hybrid recording searched through both clients with settings ``s`` on ``es``, explained."""
    with SearchClient(es, s, embedder=FixedVectors(), reranker=None) as sync:  # type: ignore[arg-type]
        one = sync.search("how do bees find food", rerank=False, explain=True)

    async def run() -> SearchResult:
        async with AsyncSearchClient(FakeAsyncES(es), s, embedder=FixedVectors(),  # type: ignore[arg-type]
                                     reranker=None) as client:
            return await client.search("how do bees find food", rerank=False, explain=True)

    return one, asyncio.run(run())


# BM25 d1 7.25, d2 5.5, d3 2.0; kNN d2 0.91, d4 0.88, d1 0.85. Each list normalised, its lowest shifted to 0:
# minmax bm25 d1 1, d2 2/3, d3 0 and knn d2 1, d4 0.5, d1 0; zscore bm25 d1 2.4054, d2 1.6036, d3 0 and
# knn d2 2.4495, d4 1.2247, d1 0.
@pytest.mark.parametrize(("fusion", "knn_share", "scores", "label"), [
    ("rrf", 0.5, {"d2": 1 / 62 + 1 / 61, "d1": 1 / 61 + 1 / 63, "d4": 1 / 62, "d3": 1 / 63},
     "RRF k=60, weights bm25 1 / kNN 1 (settings)"),
    ("minmax", 0.5, {"d2": 5 / 3, "d1": 1.0, "d4": 0.5, "d3": 0.0}, "minmax sum, weights bm25 1 / kNN 1 (settings)"),
    ("zscore", 0.5, {"d2": 4.0531, "d1": 2.4054, "d4": 1.2247, "d3": 0.0},
     "zscore sum, weights bm25 1 / kNN 1 (settings)"),
    # kNN weighted 0.2 against BM25's 1.8: d1, first in BM25, overtakes d2
    ("rrf", 0.1, {"d1": 1.8 / 61 + 0.2 / 63, "d2": 1.8 / 62 + 0.2 / 61, "d3": 1.8 / 63, "d4": 0.2 / 62},
     "RRF k=60, weights bm25 1.8 / kNN 0.2 (settings)"),
    ("zscore", 0.1, {"d1": 1.8 * 2.4054, "d2": 1.8 * 1.6036 + 0.2 * 2.4495, "d4": 0.2 * 1.2247, "d3": 0.0},
     "zscore sum, weights bm25 1.8 / kNN 0.2 (settings)"),
])
def test_each_fusion_on_the_recorded_hybrid_answer(fusion: str, knn_share: float, scores: dict[str, float],
                                                    label: str) -> None:
    s = settings()
    s = s.model_copy(update={"query": s.query.model_copy(update={"fusion": fusion, "knn_share": knn_share})})
    sync, async_ = fused_by(s, FakeES(s, recording("hybrid")))
    assert [h.doc_id for h in sync.hits] == list(scores) and same(sync, async_)
    for hit in sync.hits:
        assert hit.fused is not None and hit.fused.score == pytest.approx(scores[hit.doc_id], abs=1e-4)
    assert sync.fusion == label
    lines = "\n".join(sync.hits[0].explanation or [])
    assert f"({label})" in lines and ("RRF term" if fusion == "rrf" else f"{fusion}-normalised") in lines


@pytest.mark.parametrize("method", ["zscore", "minmax", "rrf"])
def test_the_fusion_recorded_in_the_index_is_used_unless_the_settings_name_one(method: str) -> None:
    from hybridsearch.query.fusion import Fusion

    s = settings()
    es = FakeES(s, recording("hybrid"))
    es.indices.mappings["_meta"]["fusion"] = Fusion(method=method, k=10, weights=(1.0, 3.0)).to_meta()  # type: ignore[arg-type]
    sync, async_ = fused_by(s, es)
    want = "RRF k=10" if method == "rrf" else f"{method} sum"
    assert sync.fusion == f"{want}, weights bm25 1 / kNN 3 (index)" and same(sync, async_)
    lines = "\n".join(sync.hits[0].explanation or [])
    assert "weight 3" in lines if method != "rrf" else "RRF term 3 × 1/(10+1)" in lines  # kNN's rank 1, weighted
    pinned = s.model_copy(update={"query": s.query.model_copy(update={"fusion": "rrf"})})
    assert fused_by(pinned, es)[0].fusion == "RRF k=60, weights bm25 1 / kNN 1 (settings)"


def test_hsp_index_fusion_records_what_searches_then_use(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import hybridsearch.cli.index as index_cli
    from hybridsearch.cli.main import main

    s = settings()
    es = FakeES(s, recording("hybrid"))
    es.indices.mappings["_meta"]["fusion_calibration"] = {"dataset": "scifact"}  # an earlier calibration
    monkeypatch.setattr(index_cli, "EngineClient", lambda _: es)
    monkeypatch.setenv("HSP_INDEX__PREFIX", "rec")
    assert main(["index", "fusion", "zscore", "--weights", "1,2"]) == 0
    assert f"{INDEX}: hybrid searches fuse with zscore sum, weights bm25 1 / kNN 2" in capsys.readouterr().out
    meta = es.indices.mappings["_meta"]
    assert meta["fusion"] == {"method": "zscore", "weights": [1.0, 2.0]} and meta["fusion_calibration"] is None
    assert meta["embedding_model"] == s.embedding.model  # the rest of _meta kept
    sync, async_ = fused_by(s, es)
    assert sync.fusion == "zscore sum, weights bm25 1 / kNN 2 (index)" and same(sync, async_)
    assert main(["index", "fusion", "minmax", "--k", "10"]) == 2  # k is RRF's
    assert main(["index", "fusion", "rrf", "--weights", "1"]) == 2
    assert main(["index", "fusion", "rrf", "--weights", "1,-1"]) == 2
    assert main(["index", "fusion", "rrf", "--k", "10"]) == 0
    assert es.indices.mappings["_meta"]["fusion"] == {"method": "rrf", "weights": [1.0, 1.0], "k": 10}
