"""Pure parts of the query layer: input checks, request bodies, collapse, fusion window, rerank, paging."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybridsearch.engine import ELASTICSEARCH as ES
from hybridsearch.errors import ClusterError, IndexNotFound, QueryError, RerankerError
from hybridsearch.query.build import (
    JOINED_FIELD,
    Bm25Scope,
    bm25_scope,
    clean_query,
    knn_lines,
    list_names,
    list_size,
    plan,
    text_lines,
)
from hybridsearch.query.core import build_result
from hybridsearch.query.fusion import Fusion, fusion_for
from hybridsearch.query.querylog import log_doc, query_hash
from hybridsearch.query.results import RerankOutcome, Timings
from hybridsearch.query.window import Window, apply_rerank, check_response, fuse_window, show_passages
from hybridsearch.settings import QuerySettings, Settings, load_settings


@pytest.fixture()
def settings() -> Settings:
    return load_settings(index={"prefix": "unit"}, query={"log_queries": False})


def test_clean_query() -> None:
    assert clean_query("  hello \t world\n", 100) == ("hello world", False)
    assert clean_query("ﬁsh\u200b\u202e\x00 ｃａｔ", 100) == ("fish cat", False)
    assert clean_query("a\ud800b", 100) == ("a b", False)
    q, cut = clean_query("word " * 100, 32)
    assert cut and q == "word word word word word word" and len(q) <= 32
    q, cut = clean_query("x" * 100, 32)
    assert cut and q == "x" * 32
    q, cut = clean_query("y " * 100_000, 2000)
    assert cut and len(q) <= 2000
    for bad in ("", "   ", "\x00\x1f", "?!", None, 3):
        with pytest.raises(QueryError):
            clean_query(bad, 100)


def test_emoji_are_searchable_but_punctuation_and_math_symbols_are_not() -> None:
    # what the standard analyzer makes tokens of (checked with _analyze on 9.3): emoji yes, $ + → no
    for ok in ("🔥🔥", "\u200b🔥\u200d", "©", "★ ☃", "🇫🇷", "々"):
        assert clean_query(ok, 100)[0]
    for bad in ("$$$", "+= ->", "→ ∑ ≥", "\u200b\u200d\ufe0f", "_"):
        with pytest.raises(QueryError, match="the query is empty"):
            clean_query(bad, 100)


def test_plan_checks_arguments_before_any_request(settings: Settings) -> None:
    p = plan(settings.query, settings.index.tenant, "bees", k=5, mode="dense", page=2)
    assert (p.query, p.k, p.mode, p.page, p.wants_vector) == ("bees", 5, "dense", 2, True)
    for kwargs, msg in (({"k": 0}, "k must"), ({"k": 101}, "k must"), ({"k": True}, "k must"),
                        ({"k": 2.5}, "k must"), ({"page": 0}, "page must"), ({"mode": "sparse"}, "unknown mode"),
                        ({"filters": {"body": "x"}}, "unknown field")):
        with pytest.raises(QueryError, match=msg):
            plan(settings.query, settings.index.tenant, "bees", **kwargs)  # type: ignore[arg-type]


def test_one_msearch_with_the_same_filters_in_bm25_and_knn(settings: Settings) -> None:
    s = settings.model_copy(update={"index": settings.index.model_copy(update={"tenant": "acme"}),
                                    "query": settings.query.model_copy(update={"title_boost": 2.5, "operator": "and"})})
    p = plan(s.query, s.index.tenant, "bees dance", filters={"source": "wiki"})
    names = list_names(p)
    lines = text_lines(s.query, s.index.alias, p) + knn_lines(s.query, s.index.alias, p, [0.5, 0.25], ES)
    assert names == ["bm25", "knn"] and len(lines) == 4
    assert lines[0] == lines[2] == {"index": "unit-chunks"}
    bm25, knn = lines[1], lines[3]
    visible = {"bool": {"must_not": []}}  # a prefix without an ingest state hides nothing
    want = [{"term": {"tenant": "acme"}}, {"term": {"source": "wiki"}}, visible]
    assert bm25["query"]["bool"]["filter"] == want == knn["knn"]["filter"]
    assert bm25["query"]["bool"]["must"] == [{"multi_match": {"query": "bees dance", "fields": ["title^2.5", "text"],
                                                              "type": "best_fields", "tie_breaker": 0.5,
                                                              "operator": "and"}}]
    assert knn["knn"] == {"field": "embedding", "query_vector": [0.5, 0.25], "k": 200, "num_candidates": 200,
                          "filter": want}  # collapse: knn_k × knn_overfetch chunks, for ~knn_k documents
    for body in (bm25, knn):
        assert body["size"] == 100 and body["collapse"] == {"field": "doc_id"} and "embedding" not in body["_source"]
    q, alias, tenant = settings.query, settings.index.alias, settings.index.tenant
    assert list_names(plan(q, tenant, "x", mode="bm25")) == ["bm25"]
    dense = plan(q, tenant, "x", mode="dense")
    assert list_names(dense) == ["knn"] and text_lines(q, alias, dense) == []
    assert knn_lines(q, alias, dense, [1.0], ES)[1]["knn"]["filter"] == [visible]
    assert text_lines(q, alias, plan(q, tenant, "x", mode="bm25"))[1]["query"]["bool"]["filter"] == [visible]


def _hit(chunk: str, score: float, doc: str | None = None) -> dict[str, Any]:
    doc = doc or chunk.split("#")[0]
    return {"_id": chunk, "_score": score, "_source": {"doc_id": doc, "chunk_id": chunk, "title": doc.upper(),
                                                       "text": f"text of {chunk}"}}


def _resp(*hits: dict[str, Any]) -> dict[str, Any]:
    return {"hits": {"hits": list(hits)}, "status": 200}


BM25 = _resp(_hit("a#0", 9.0), _hit("a#1", 8.0), _hit("b#0", 7.0), _hit("c#0", 6.0))
KNN = _resp(_hit("b#1", 0.9), _hit("d#0", 0.8), _hit("a#1", 0.7))
BOTH = {"bm25": BM25, "knn": KNN}


def fused(q: QuerySettings, answers: dict[str, dict[str, Any]], fusion: Fusion | None = None) -> Window:
    """The window of ``answers`` as a search over chunks has it: fused, each entry showing its chunk."""
    w = fuse_window(answers, q.collapse, fusion)
    show_passages(w.entries, False, None, q.passage_k)
    return w


def test_fuse_window_collapses_each_list_then_applies_rrf(settings: Settings) -> None:
    w = fused(settings.query, BOTH)
    order = [c.key for c in w.entries]
    # bm25 doc ranks a1 b2 c3 ; knn b1 d2 a3 → b: 1/62+1/61, a: 1/61+1/63, d: 1/62, c: 1/63
    assert order == ["b", "a", "d", "c"] and w.depths == {"bm25": 3, "knn": 3}
    b = w.entries[0]
    assert b.stages["bm25"].rank == 2 and b.stages["knn"].rank == 1 and b.chunk_id == "b#1"  # kNN's chunk
    assert b.fused is not None and b.fused.score == pytest.approx(1 / 62 + 1 / 61)
    # a document in both lists shows kNN's chunk even where BM25 ranks it higher (its hit may be a section's
    # first chunk); one found by BM25 alone shows BM25's
    assert w.entries[1].chunk_id == "a#1" and w.entries[1].stages["bm25"].score == 9.0
    assert w.entries[3].chunk_id == "c#0"


def test_without_collapse_chunks_are_separate(settings: Settings) -> None:
    flat = settings.model_copy(update={"query": settings.query.model_copy(update={"collapse": False})})
    w = fused(flat.query, {"bm25": BM25})
    assert [c.key for c in w.entries] == ["a#0", "a#1", "b#0", "c#0"]
    assert [c.base_score for c in w.entries] == [9.0, 8.0, 7.0, 6.0] and w.entries[0].fused is None
    q, alias, tenant = flat.query, flat.index.alias, flat.index.tenant
    assert "collapse" not in text_lines(q, alias, plan(q, tenant, "x", mode="bm25"))[1]
    assert knn_lines(q, alias, plan(q, tenant, "x", mode="dense"), [1.0], ES)[1]["knn"]["k"] == 100


def test_minmax_fusion_is_selected_by_settings(settings: Settings) -> None:
    lin = settings.model_copy(update={"query": settings.query.model_copy(update={"fusion": "minmax",
                                                                                  "knn_share": 0.25})})
    calibrated = {"fusion": Fusion(method="rrf", k=5, weights=(0.1, 1.9)).to_meta()}
    w = fused(lin.query, BOTH, fusion_for(lin.query, calibrated))
    # minmax: bm25 a1 b.333 c0 ; knn b1 d.5 a0; weights 1.5 / 0.5 → a 1.5, b 1, d .25, c 0
    assert [(c.key, round(c.fused.score, 4)) for c in w.entries] == [  # type: ignore[union-attr]
        ("a", 1.5), ("b", 1.0), ("d", 0.25), ("c", 0.0)]
    assert w.fusion is not None and w.fusion.describe() == "minmax sum, weights bm25 1.5 / kNN 0.5 (settings)"


def test_an_index_calibration_is_used_unless_the_settings_name_a_fusion(settings: Settings) -> None:
    q = settings.query
    assert fusion_for(q, {}) == Fusion()  # nothing calibrated: RRF k=60, equal weights
    recorded = Fusion(method="rrf", k=5, weights=(0.1, 1.9))
    fusion = fusion_for(q, {"fusion": recorded.to_meta()})
    assert fusion.source == "index" and (fusion.k, fusion.weights) == (5, (0.1, 1.9))
    assert fusion_for(q.model_copy(update={"fusion": "rrf"}), {"fusion": recorded.to_meta()}).k == 60
    w = fused(q, BOTH, fusion)
    # bm25 a1 b2 c3 ; knn b1 d2 a3 with weights 0.1 / 1.9 at k=5: the kNN list dominates
    assert [c.key for c in w.entries] == ["b", "d", "a", "c"]
    lines = build_result(30, plan(q, None, "x", explain=True), "i", w, Timings()).hits[0].explanation
    assert lines is not None and "RRF term 1.9 × 1/(5+1)" in "\n".join(lines)
    with pytest.raises(QueryError, match="malformed"):
        fusion_for(q, {"fusion": {"method": "rrf"}})


def test_rerank_reorders_only_the_top_depth(settings: Settings) -> None:
    w = fused(settings.query, BOTH)
    apply_rerank(w, 2, [0.1, 0.9])
    assert [c.key for c in w.entries] == ["a", "b", "d", "c"] and w.reranked
    assert w.entries[0].rerank.rank == 1 and w.entries[2].rerank is None  # type: ignore[union-attr]
    for bad in ([1.0], [float("nan"), 1.0]):
        with pytest.raises(RerankerError):
            apply_rerank(fused(settings.query, {"bm25": BM25}), 2, bad)


def test_rerank_blend_interpolates_with_the_fused_score(settings: Settings) -> None:
    # fused top 2 is b, a; the reranker prefers a. Over the top, min-max gives b: rerank 0, fused 1; a: 1, 0.
    w = fused(settings.query, BOTH)
    assert [c.key for c in w.entries[:2]] == ["b", "a"]
    apply_rerank(w, 2, [0.1, 0.9], blend=0.4)  # b = 0.6, a = 0.4: fused order holds
    assert [c.key for c in w.entries] == ["b", "a", "d", "c"] and w.blend == 0.4
    assert [c.rerank.rank for c in w.entries[:2]] == [1, 2]  # type: ignore[union-attr]
    w = fused(settings.query, BOTH)
    apply_rerank(w, 2, [0.1, 0.9], blend=0.6)  # b = 0.4, a = 0.6: the reranker wins
    assert [c.key for c in w.entries] == ["a", "b", "d", "c"]
    p = plan(settings.query, settings.index.tenant, "q", k=3, explain=True)
    res = build_result(settings.reranker.depth, p, "idx", w, Timings())
    assert res.rerank_blend == 0.6
    top = res.hits[0]
    assert top.score == pytest.approx(0.6) and top.rerank is not None and top.rerank.score == pytest.approx(0.9)
    assert any(line.startswith("blend: 0.6") for line in top.explanation or [])
    assert res.hits[2].score == res.hits[2].fused.score  # type: ignore[union-attr]  # below the depth: fused


def test_result_paging_and_explain(settings: Settings) -> None:
    w = fused(settings.query, BOTH)
    w.rerank_outcome, w.rerank_reason = RerankOutcome.DISABLED, "no reranker configured"
    p = plan(settings.query, settings.index.tenant, "q", k=3, page=2, explain=True)
    res = build_result(settings.reranker.depth, p, "unit-chunks-v1", w, Timings())
    assert [h.doc_id for h in res.hits] == ["c"] and res.hits[0].rank == 4 and res.candidates == 4
    assert res.hits[0].explanation == [
        "BM25: rank 3, score 6.0000 → RRF term 1/(60+3) = 0.015873", "kNN: not in the top 3 (adds 0)",
        "fused: rank 4, score 0.015873 (RRF k=60, weights bm25 1 / kNN 1 (default))",
        "passage: chunk c#0, the chunk BM25 scored", "rerank: not applied (no reranker configured)"]
    doc = log_doc(p, res, redact=settings.query.redact)
    assert doc["query"] == "q" and doc["query_hash"] == query_hash("q") and doc["top_ids"] == ["c"]
    assert "query" not in log_doc(p, res, redact=True)


def test_failed_msearch_items_become_our_errors() -> None:
    check_response({"status": 200, "hits": {"hits": []}}, "x")
    missing = {"status": 404, "error": {"root_cause": [{"type": "index_not_found_exception", "reason": "no such"}]}}
    with pytest.raises(IndexNotFound, match="hsp ingest"):
        check_response(missing, "x")
    no_state = {"status": 404, "error": {"root_cause": [{"type": "index_not_found_exception", "reason": "no such",
                                                         "index": "t-ingest-state"}]}}
    with pytest.raises(IndexNotFound, match="ingest state index t-ingest-state of t-chunks was deleted") as lost:
        check_response(no_state, "t-chunks")
    assert "recreates t-ingest-state" in str(lost.value.fix)
    with pytest.raises(ClusterError, match="HTTP 400: parse_exception"):
        check_response({"status": 400, "error": {"type": "parse_exception", "reason": "bad"}}, "x")


def test_client_refuses_bad_input_without_touching_the_cluster() -> None:
    from hybridsearch import SearchClient
    from hybridsearch.engine import EngineClient

    down = load_settings(es_url="http://127.0.0.1:1", es={"max_retries": 0}, query={"log_queries": False})
    with SearchClient(EngineClient(down.es), down) as c:  # would raise ClusterUnavailable on any request
        for kwargs in ({"filters": {"nope": 1}}, {"k": 0}, {"mode": "x"}):
            with pytest.raises(QueryError):
                c.search("bees", **kwargs)  # type: ignore[arg-type]
        with pytest.raises(QueryError):
            c.search(" \n ")


def test_bm25_scores_sections_only_where_the_index_has_them_and_results_are_per_document(settings: Settings) -> None:
    q, alias = settings.query, settings.index.alias
    p = plan(q, None, "x", mode="bm25")
    fields = text_lines(q, alias, p, Bm25Scope(sections=True))[1]["query"]["bool"]["must"][0][
        "multi_match"]["fields"]
    assert fields == ["section_title^1", "section_text"]
    fields = text_lines(q, alias, p)[1]["query"]["bool"]["must"][0]["multi_match"]["fields"]
    assert fields == ["title^1", "text"]
    assert bm25_scope(q, 1000).sections and not bm25_scope(q, None).sections
    assert not bm25_scope(q.model_copy(update={"collapse": False}), 1000).sections  # chunk results: chunk BM25
    assert not bm25_scope(q.model_copy(update={"bm25_unit": "chunk"}), 1000).sections


def test_bm25_scores_title_and_text_as_one_field_over_sections_unless_separate(settings: Settings) -> None:
    q = settings.query
    assert bm25_scope(q, 500) == Bm25Scope(sections=True, joined=True)
    assert bm25_scope(q, None) == Bm25Scope()  # no sections: chunk fields, never joined
    separate = q.model_copy(update={"bm25_fields": "separate"})
    assert bm25_scope(separate, 500) == Bm25Scope(sections=True, joined=False)


def test_the_joined_scope_sends_one_match_with_the_operator_and_the_filters(settings: Settings) -> None:
    q = settings.query.model_copy(update={"operator": "and"})
    p = plan(q, "team-a", "bees find food", mode="bm25", filters={"source": "wiki"})
    body = text_lines(q, settings.index.alias, p, Bm25Scope(sections=True, joined=True))[1]
    assert body["query"]["bool"]["must"] == [{"match": {JOINED_FIELD: {"query": "bees find food", "operator": "and"}}}]
    separate = text_lines(q, settings.index.alias, p, Bm25Scope(sections=True))[1]
    assert body["query"]["bool"]["filter"] == separate["query"]["bool"]["filter"]
    assert "team-a" in str(body["query"]["bool"]["filter"])  # the tenant filter too


@given(depth=st.one_of(st.none(), st.integers(-5, 2000)), k=st.integers(1, 1000))
def test_list_size_is_the_lists_k_unless_the_plan_asks_for_fewer(depth: int | None, k: int) -> None:
    q = load_settings(index={"prefix": "unit"}, query={"log_queries": False}).query
    p = dataclasses.replace(plan(q, None, "bees", mode="bm25"), depth=depth)
    size = list_size(p, k)
    assert 1 <= size <= k and (size == k if depth is None or depth >= k else size == max(1, depth))
