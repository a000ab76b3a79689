"""Runner, report, baseline gate, worst-query analysis, Markdown and chart, on hand-made results."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridsearch.errors import ConfigError, QueryError
from hybridsearch.eval.harness import ModeRun, mode_report, parse_modes, run_mode, worst_queries
from hybridsearch.eval.metrics import evaluate
from hybridsearch.eval.report import (
    EvalReport,
    ModeReport,
    compare,
    ingest_checks,
    latency_stats,
    load_report,
    quality_checks,
    to_markdown,
)
from hybridsearch.query.results import Hit, Mode, RerankOutcome, SearchResult, StageScore, Timings

QRELS = {"q1": {"a": 1}, "q2": {"b": 1, "c": 1}}
QUERIES = {"q1": "first", "q2": "second"}
# (mode, query) -> doc ids, chunk-level (duplicates allowed)
ANSWERS: dict[tuple[str, str], list[str]] = {
    ("bm25", "first"): ["a", "x"],
    ("dense", "first"): ["x", "a"],
    ("hybrid", "first"): ["x", "x", "y", "a"],  # hybrid loses to both on q1
    ("bm25", "second"): ["b", "c"],
    ("dense", "second"): ["c", "z"],
    ("hybrid", "second"): ["b", "c"],
}


def fake_search(query: str, mode: Mode, rerank: bool) -> SearchResult:
    """Hand-made answers in the query layer's result type (hits listed out of rank order on purpose)."""
    if query == "":
        raise QueryError("empty query")
    docs = ANSWERS[(mode, query)]
    hits = [Hit(doc_id=d, chunk_id=f"{d}#{i}", text="t", score=1.0 / (i + 1), rank=i + 1,
                fused=StageScore(rank=i + 1, score=0.1)) for i, d in enumerate(docs)]
    timings = Timings(embed_ms=2.0 if mode != "bm25" else 0.0, search_ms=10.0, fusion_ms=0.5,
                      rerank_ms=30.0 if rerank else 0.0, total_ms=13.0)
    return SearchResult(query=query, mode=mode, index="i", k=100, hits=list(reversed(hits)), candidates=len(docs),
                        reranked=rerank and query == "first", rerank_reason=None if query == "first" else "timeout",
                        rerank_outcome=(RerankOutcome.APPLIED if rerank and query == "first"
                                        else RerankOutcome.TIMED_OUT),
                        rerank_blend=0.3 if rerank and query == "first" else None, timings=timings)


def build(modes: list[str]) -> tuple[dict[str, ModeRun], dict[str, ModeReport]]:
    runs, reports = {}, {}
    for m in modes:
        run = run_mode(fake_search, QUERIES, m)
        means, per_query = evaluate(QRELS, run.rankings)
        runs[m], reports[m] = run, mode_report(run, means, per_query)
    return runs, reports


def make_report(reports: dict[str, ModeReport], **extra: object) -> EvalReport:
    return EvalReport(created_at="2026-01-01T00:00:00+00:00",
                      dataset={"name": "tiny", "split": "test", "queries": 2, "path": "/x"},
                      index={"name": "eval-tiny-chunks-v1", "documents": 5, "chunks": 6, "action": "created"},
                      model="m", chunker="paragraph-200-0.12-v1", cluster={"versions": ["9.3.2"]},
                      git={"commit": "abc", "dirty": False}, settings={}, k=100, modes=list(reports.values()),
                      **extra)  # type: ignore[arg-type]


def test_parse_modes() -> None:
    assert parse_modes("hybrid, bm25,hybrid") == ["hybrid", "bm25"]
    with pytest.raises(QueryError, match="unknown mode"):
        parse_modes("bm25,sparse")
    with pytest.raises(QueryError):
        parse_modes(" , ")


def test_run_mode_collapses_chunks_orders_by_rank_and_records_latency() -> None:
    run = run_mode(fake_search, QUERIES, "hybrid")
    assert run.rankings == {"q1": ["x", "y", "a"], "q2": ["b", "c"]}
    assert run.rank_of("q1", "a") == 3 and run.rank_of("q1", "nope") is None
    assert run.latency["search"] == [10.0, 10.0] and len(run.latency["wall"]) == 2
    assert run.reranked == 0 and not run.rerank_reasons


def test_rerank_mode_counts_reranked_queries_and_reasons() -> None:
    ANSWERS[("hybrid", "first")]  # same answers as hybrid
    run = run_mode(fake_search, QUERIES, "hybrid+rerank")
    assert run.reranked == 1 and dict(run.rerank_reasons) == {"timed_out": 1}
    assert dict(run.rerank_blends) == {0.3: 1}
    means, per_query = evaluate(QRELS, run.rankings)
    assert mode_report(run, means, per_query).rerank_blend == 0.3


def test_beir_protocol_drops_a_hit_whose_id_is_the_query_id_unless_asked_to_keep_it() -> None:
    queries = {"x": "first"}  # the query's own id "x" is hybrid's top document for "first"
    assert run_mode(fake_search, queries, "hybrid").rankings == {"x": ["y", "a"]}
    assert run_mode(fake_search, queries, "hybrid", ignore_identical_ids=False).rankings == {"x": ["x", "y", "a"]}
    qrels = {"x": {"y": 1}}
    dropped, _ = evaluate(qrels, run_mode(fake_search, queries, "hybrid").rankings)
    kept, _ = evaluate(qrels, run_mode(fake_search, queries, "hybrid", ignore_identical_ids=False).rankings)
    assert dropped["mrr@10"] == 1.0 and kept["mrr@10"] == 0.5


def test_markdown_says_which_protocol_the_figures_follow() -> None:
    _, reports = build(["bm25"])
    beir = make_report(reports)
    beir.dataset["ignore_identical_ids"] = True
    assert "BEIR's (a hit whose id equals the query id is dropped)" in to_markdown(beir)
    kept = make_report(reports)
    kept.dataset["ignore_identical_ids"] = False
    assert "are kept (not comparable with BEIR tables)" in to_markdown(kept)


def test_rejected_query_scores_zero_and_is_recorded() -> None:
    run = run_mode(fake_search, {"q1": "first", "q2": ""}, "bm25")
    assert run.failed == {"q2": "empty query"} and run.rankings["q2"] == []
    assert len(run.latency["total"]) == 1


def test_latency_stats() -> None:
    stats = latency_stats([float(i) for i in range(1, 101)])
    assert stats.p50 == pytest.approx(50.5) and stats.p95 == pytest.approx(95.05) and stats.mean == 50.5
    assert latency_stats([]).p95 == 0.0


def test_worst_queries_lists_hybrid_losses_with_ranks_per_stage() -> None:
    runs, reports = build(["bm25", "dense", "hybrid"])
    worst = worst_queries(reports, runs, QUERIES, QRELS, 5)
    assert [w.qid for w in worst] == ["q1"]  # q2: hybrid is as good as bm25
    w = worst[0]
    assert w.best_single_mode == "bm25" and w.best_single == 1.0 and w.loss == pytest.approx(1.0 - w.hybrid)
    assert [(r.doc_id, r.bm25, r.knn, r.fusion, r.rerank) for r in w.relevant] == [("a", 1, 2, 3, None)]
    assert worst_queries(reports, runs, QUERIES, QRELS, 0) == []


def test_quality_checks_flag_hybrid_below_best_single() -> None:
    _, reports = build(["bm25", "dense", "hybrid"])
    (check,) = quality_checks(reports)
    assert not check.passed and "hybrid" in check.detail
    assert quality_checks({"hybrid": reports["hybrid"]}) == []


def test_baseline_compare_flags_drops_beyond_tolerance(tmp_path: Path) -> None:
    _, reports = build(["bm25", "hybrid"])
    current = make_report(reports)
    path = tmp_path / "old.json"
    path.write_text(current.to_json())
    baseline = load_report(path)
    assert all(not d.regressed and d.delta == 0 for d in compare(current, baseline, 0.01))
    doctored = baseline.model_copy(deep=True)
    doctored.modes[1].metrics["ndcg@10"] += 0.02
    doctored.modes[0].metrics["recall@10"] += 0.005  # within tolerance
    diffs = {(d.mode, d.metric): d for d in compare(current, doctored, 0.01)}
    assert diffs[("hybrid", "ndcg@10")].regressed and diffs[("hybrid", "ndcg@10")].delta == pytest.approx(-0.02)
    assert not diffs[("bm25", "recall@10")].regressed
    assert sum(d.regressed for d in diffs.values()) == 1


def test_baseline_without_common_modes_or_invalid_is_a_config_error(tmp_path: Path) -> None:
    _, reports = build(["bm25", "dense"])
    a, b = make_report({"bm25": reports["bm25"]}), make_report({"dense": reports["dense"]})
    with pytest.raises(ConfigError, match="none of the modes"):
        compare(a, b, 0.01)
    (tmp_path / "bad.json").write_text('{"hello": 1}')
    with pytest.raises(ConfigError, match="not an hsp eval report"):
        load_report(tmp_path / "bad.json")
    with pytest.raises(ConfigError, match="does not exist"):
        load_report(tmp_path / "missing.json")


def test_markdown_and_chart(tmp_path: Path) -> None:
    from hybridsearch.eval.report import write_chart

    runs, reports = build(["bm25", "dense", "hybrid"])
    reports["hybrid+rerank"] = ModeReport(mode="hybrid+rerank", status="skipped", reason="no reranker configured")
    report = make_report(reports, worst=worst_queries(reports, runs, QUERIES, QRELS, 3),
                         checks=quality_checks(reports))
    md = to_markdown(report, compare(report, report, 0.01), 0.01)
    assert "blended" not in md
    blended = make_report({**build(["hybrid+rerank"])[1]}, worst=[], checks=[])
    blended.settings = {"reranker": {"model": "/models/x", "depth": 30}}
    md_blended = to_markdown(blended, None, 0.01)
    assert "reranker score blended with the fused score at 0.3" in md_blended
    assert "- reranker: `/models/x` · blend 0.3 · depth 30" in md_blended
    assert "| mode | nDCG@10 | Recall@10 | Recall@100 | MRR@10 | P@5 |" in md
    assert f"| bm25 | {reports['bm25'].metrics['ndcg@10']:.4f} |" in md
    assert "**hybrid+rerank** skipped: no reranker configured" in md
    assert "FAIL" in md and "a: 1 / 2 / 3 / —" in md and "tolerance 0.01" in md
    png = write_chart(report, tmp_path / "sub" / "chart.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ingest_checks_fail_when_documents_were_dead_lettered() -> None:
    assert ingest_checks(None) == []
    (ok,) = ingest_checks({"documents": 20, "documents_failed": 0})
    assert ok.passed
    (bad,) = ingest_checks({"documents": 20, "documents_failed": 3, "dead_letter_path": "dl/x.jsonl"})
    assert not bad.passed and "3 of 20" in bad.detail and "dl/x.jsonl" in bad.detail


def test_markdown_sweep_table_has_one_row_per_knob_value_without_the_rerank_mode() -> None:
    _, reports = build(["hybrid", "hybrid+rerank"])
    report = make_report(reports, sweep=[{"knob": "rrf_k", "value": "20",
                                          "metrics": {"hybrid": {"ndcg@10": 0.5, "recall@100": 0.9}}}])
    md = to_markdown(report)
    assert "| knob | value | hybrid nDCG@10 | hybrid Recall@100 |\n|---|---|---:|---:|\n" in md
    assert "| rrf_k | 20 | 0.5000 | 0.9000 |\n" in md
