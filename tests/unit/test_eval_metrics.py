"""Run building and metrics: our pipeline's numbers against ranx and against hand computation."""

from __future__ import annotations

import math
import warnings

import pytest
from ranx import Qrels, Run
from ranx import evaluate as ranx_evaluate

from hybridsearch.errors import ConfigError
from hybridsearch.eval.metrics import METRICS, evaluate, to_run
from hybridsearch.query.fusion import unique

QRELS = {
    "1": {"d1": 1, "d2": 1},
    "2": {"d7": 2, "d8": 1, "d9": 0},
    "10": {"d5": 1},
    "9": {"d4": 1},
}
# Chunk-level hits as the query layer could return them without collapsing: doc ids repeat.
CHUNK_HITS = {
    "1": ["d3", "d1", "d1", "d4", "d2", "d3"],
    "2": ["d8", "d9", "d8", "d7"] + [f"x{i}" for i in range(20)],
    "10": [f"y{i}" for i in range(12)] + ["d5"],  # relevant only at rank 13: outside @10, inside @100
    # "9": no hits at all
}


def test_doc_ranking_keeps_each_documents_best_chunk_in_order() -> None:
    assert unique(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]
    assert unique([]) == []


def test_to_run_scores_decrease_strictly_with_rank() -> None:
    run = to_run({"1": CHUNK_HITS["1"]})
    assert list(run["1"]) == ["d3", "d1", "d4", "d2"]
    scores = list(run["1"].values())
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)


def test_hand_computed_values_for_one_query() -> None:
    means, per_query = evaluate({"1": QRELS["1"]}, {"1": CHUNK_HITS["1"]})
    # documents ranked d3, d1, d4, d2: relevant at ranks 2 and 4 of 2 relevant.
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 + 1 / math.log2(3)
    assert means["ndcg@10"] == pytest.approx(dcg / idcg)  # 0.6509...
    assert means["ndcg@10"] == pytest.approx(0.650921, abs=1e-6)
    assert means["recall@10"] == 1.0
    assert means["mrr@10"] == pytest.approx(0.5)
    assert means["precision@5"] == pytest.approx(2 / 5)
    assert per_query["ndcg@10"] == {"1": pytest.approx(dcg / idcg)}


def test_matches_ranx_on_a_hand_made_run_per_query_and_mean() -> None:
    means, per_query = evaluate(QRELS, CHUNK_HITS)
    collapsed = {q: unique(h) for q, h in CHUNK_HITS.items()}
    # ranx fed directly with arbitrary decreasing scores, and the query without hits left out
    direct = {q: {d: 100.0 - i * 0.5 for i, d in enumerate(docs)} for q, docs in collapsed.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ranx_evaluate(Qrels(QRELS), Run(direct), list(METRICS), return_mean=False, make_comparable=True)
    order = Qrels(QRELS).get_query_ids()
    for metric in METRICS:
        want = dict(zip(order, (float(v) for v in expected[metric]), strict=True))
        assert per_query[metric] == pytest.approx(want), metric
        assert means[metric] == pytest.approx(sum(want.values()) / len(want)), metric
    assert per_query["recall@10"]["10"] == 0.0 and per_query["recall@100"]["10"] == 1.0
    assert all(per_query[m]["9"] == 0.0 for m in METRICS)  # no hits: zero, still counted in the mean
    assert per_query["mrr@10"]["2"] == 1.0


def test_graded_judgements_use_the_grade_as_gain() -> None:
    # d8 (grade 1) before d7 (grade 2): below the ideal order, so nDCG < 1 although both are found
    _, per_query = evaluate({"2": QRELS["2"]}, {"2": ["d8", "d7"]})
    dcg = 1 + 2 / math.log2(3)
    idcg = 2 + 1 / math.log2(3)
    assert per_query["ndcg@10"]["2"] == pytest.approx(dcg / idcg)


def test_rankings_of_unjudged_queries_are_ignored_and_empty_runs_score_zero() -> None:
    means, _ = evaluate({"1": QRELS["1"]}, {"1": ["d1", "d2"], "zzz": ["d1"]})
    assert means["ndcg@10"] == pytest.approx(1.0)
    means, per_query = evaluate(QRELS, {})
    assert means == dict.fromkeys(METRICS, 0.0)
    assert set(per_query["ndcg@10"]) == set(QRELS)


def test_no_judged_queries_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="no judged queries"):
        evaluate({}, {"1": ["d1"]})
