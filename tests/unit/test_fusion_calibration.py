"""Fusion calibration on recorded lists: the single lists are candidates, the default stays without a real gain."""

from __future__ import annotations

import random

from hybridsearch.eval.calibrate import Calibration, calibrate, fused_rankings, grid
from hybridsearch.query.fusion import Fusion

DOCS = [f"d{i}" for i in range(30)]
FEW = [Fusion(weights=(1.0, 0.0)), Fusion(k=10, weights=(1.6, 0.4)), Fusion(method="minmax", weights=(0.5, 0.5)),
       Fusion(weights=(0.0, 1.0))]  # a small grid: the full one takes a minute here


def _lists(seed: int, n: int, knn_quality: float) -> tuple[dict[str, dict[str, list[tuple[str, float]]]],
                                                          dict[str, dict[str, int]]]:
    """``n`` queries whose relevant document BM25 ranks first; kNN finds it only with ``knn_quality`` odds."""
    rng = random.Random(seed)
    lists, qrels = {}, {}
    for q in range(n):
        qid, rel = f"q{q}", rng.choice(DOCS)
        others = [d for d in DOCS if d != rel]
        rng.shuffle(others)
        bm25 = [rel, *others[:19]]
        knn = others[5:25] if rng.random() > knn_quality else [others[6], rel, *others[7:25]]
        lists[qid] = {"bm25": [(d, 20.0 - i) for i, d in enumerate(bm25)],
                      "knn": [(d, 1.0 - i / 50) for i, d in enumerate(knn)]}
        qrels[qid] = {rel: 1}
    return lists, qrels


def test_the_grid_holds_both_single_lists_and_both_methods() -> None:
    g = grid()
    assert Fusion(weights=(1.0, 0.0)) in g and Fusion(weights=(0.0, 1.0)) in g
    assert {f.method for f in g} == {"rrf", "zscore", "minmax"} and len(g) == len(set(g))


def test_a_weak_list_is_weighted_down_so_hybrid_keeps_the_strong_lists_quality() -> None:
    lists, qrels = _lists(1, 40, knn_quality=0.1)
    cal = calibrate(lists, qrels, candidates=FEW)
    assert cal.bm25_score == 1.0 and cal.knn_score < 0.2
    assert cal.default_score < cal.bm25_score - 0.01  # equal-weight RRF loses to the strong list ...
    assert cal.chosen_score >= cal.bm25_score - 1e-9  # ... the calibrated fusion does not
    assert cal.chosen.weights[0] > cal.chosen.weights[1]
    assert cal.heldout["chosen"] > cal.heldout["default"]
    cal.dataset, cal.split, cal.at = "toy", "train", "now"
    meta = cal.meta()
    assert meta["queries"] == 40 and meta["chosen"] == round(cal.chosen_score, 4)


def test_the_default_stays_unless_a_candidate_gains_more_than_min_gain() -> None:
    lists, qrels = _lists(2, 20, knn_quality=0.1)
    cal: Calibration = calibrate(lists, qrels, min_gain=1.0, candidates=FEW)
    assert cal.chosen == Fusion()


def test_a_zero_weight_list_adds_nothing() -> None:
    lists, _ = _lists(3, 3, knn_quality=0.0)
    ranked = fused_rankings(Fusion(weights=(1.0, 0.0)), lists, ["q0"])
    assert ranked["q0"] == [d for d, _ in lists["q0"]["bm25"]]
