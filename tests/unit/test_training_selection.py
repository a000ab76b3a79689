"""Reranker training's robust parts: fold splitting and k-fold choice, the negatives filter, listwise
data and the card's record of the recipe. Pure functions, no cluster and no model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hybridsearch.errors import ConfigError
from hybridsearch.settings import load_settings
from hybridsearch.training.card import card_markdown, make_card
from hybridsearch.training.config import EpochResult, TrainingConfig, TrainResult
from hybridsearch.training.negatives import (
    Candidate,
    MinedData,
    NegativePolicy,
    Pair,
    PairStats,
    SplitData,
    ValidationQuery,
    build_pairs,
    filter_negatives,
    overlap,
    positive_ranks,
    words,
)
from hybridsearch.training.reranker import choose, kfold, measure, nested_estimate, query_lists, summarize

MODELS = load_settings().models

# ----------------------------------------------------------------------------------------------- folds


def test_kfold_is_a_seeded_partition_independent_of_input_order() -> None:
    qids = [f"q{i}" for i in range(10)]
    folds = kfold(qids, 3, seed=7)
    assert sorted(q for f in folds for q in f) == sorted(qids)  # every query exactly once
    assert sorted(len(f) for f in folds) == [3, 3, 4] and all(f == sorted(f) for f in folds)
    assert kfold(reversed(qids), 3, seed=7) == folds
    assert kfold(qids + qids[:2], 3, seed=7) == folds  # duplicates do not count twice
    assert kfold(qids, 3, seed=8) != folds


@pytest.mark.parametrize("k", [0, 1, 11])
def test_kfold_refuses_impossible_fold_counts(k: int) -> None:
    with pytest.raises(ConfigError, match="folds"):
        kfold([f"q{i}" for i in range(10)], k, seed=1)


def vq(qid: str, rel: str, n: int = 4) -> ValidationQuery:
    """A query whose relevant document sits at fused rank 3 of ``n`` candidates."""
    ids = [f"{qid}-x{i}" for i in range(n)]
    ids[2] = rel
    return ValidationQuery(qid, qid, [Candidate(d, d, 1.0 / (60 + r)) for r, d in enumerate(ids, 1)], {rel: 1})


POOL = [vq(f"q{i}", f"rel{i}") for i in range(6)]


def scores_that_find(pool: list[ValidationQuery], which: set[str]) -> dict[str, list[float]]:
    """The reranker puts the relevant document first for queries in ``which``, last for the others."""
    out = {}
    for v in pool:
        good = v.qid in which
        out[v.qid] = [(1.0 if good else -1.0) if c.doc_id in v.relevant else 0.0 for c in v.candidates]
    return out


def test_choose_picks_the_epoch_and_blend_that_serve_all_queries_best() -> None:
    scores = {1: scores_that_find(POOL, {"q0", "q1"}), 2: scores_that_find(POOL, {f"q{i}" for i in range(6)})}
    pick = choose(POOL, scores)
    assert pick.epoch == 2 and pick.served == pytest.approx(1.0) and pick.queries == 6
    assert pick.fused == pytest.approx(0.5) and pick.gain == pytest.approx(0.5)
    # a reranker that is right nowhere: the fused order (blend 0) is the choice
    bad = choose(POOL, {1: scores_that_find(POOL, set())})
    assert bad.blend == 0.0 and bad.gain == pytest.approx(0.0)
    # measured on a subset: only those queries count
    sub = measure(POOL, scores, 1, 1.0, ["q0", "q5"])
    assert sub.queries == 2 and sub.served == pytest.approx((1.0 + 1 / math.log2(5)) / 2)  # q5: relevant last of 4
    with pytest.raises(ValueError, match="no out-of-fold"):
        choose(POOL, {})


def test_nested_estimate_measures_each_fold_with_the_choice_of_the_others() -> None:
    folds = [["q0", "q1", "q2"], ["q3", "q4", "q5"]]
    # epoch 1 helps the first fold only, epoch 2 the second fold only
    scores = {1: scores_that_find(POOL, {"q0", "q1", "q2"}), 2: scores_that_find(POOL, {"q3", "q4", "q5"})}
    nested = nested_estimate(POOL, scores, folds)
    # each fold gets the epoch that was best on the OTHER fold: the one that does not help it
    assert [p.epoch for p in nested] == [2, 1]
    assert all(p.gain <= 0.0 + 1e-9 for p in nested)
    summary = summarize(POOL, scores, folds, {1: 0.5, 2: 0.25})
    est = summary.estimate()
    assert est["gain_mean"] == pytest.approx(sum(p.gain for p in nested) / 2) and est["gain_std"] >= 0.0
    d = summary.as_dict()
    assert d["folds"] == 2 and d["fold_sizes"] == [3, 3] and len(d["nested_per_fold"]) == 2
    assert [e["epoch"] for e in d["per_epoch_pooled"]] == [1, 2] and d["train_loss_per_epoch"] == {"1": 0.5, "2": 0.25}
    # a selection whose nested estimate is not positive is served at blend 0 (the guard)
    assert est["gain_mean"] <= 0 and "blend 0" in (summary.guard(0.0) or "")
    good = summarize(POOL, {1: scores_that_find(POOL, {f"q{i}" for i in range(6)})}, folds)
    assert good.estimate()["gain_mean"] > 0.1 and good.guard(0.0) is None and good.guard(0.9) is not None


# ------------------------------------------------------------------------------------------- negatives


def cand(doc: str, bm25: int | None, knn: int | None, text: str | None = None) -> Candidate:
    return Candidate(doc, text or f"passage about {doc}", 0.0, bm25, knn)


def test_words_and_overlap() -> None:
    assert words("The p53 gene, THE gene.") == {"the", "p53", "gene"}
    assert overlap({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3) and overlap(set(), set()) == 0.0


def test_positive_ranks_are_the_best_of_the_judged_positives_per_list() -> None:
    cands = [cand("a", 1, 2), cand("p", 3, None), cand("q", None, 5)]
    assert positive_ranks(cands, {"p", "q"}) == (3.0, 5.0)
    assert positive_ranks(cands, {"p"}) == (3.0, float("inf"))
    assert positive_ranks(cands, {"zz"}) is None


def test_filter_skips_candidates_both_lists_rank_above_the_positive() -> None:
    cands = [cand("both", 1, 1), cand("bm25only", 2, None), cand("p", 3, 3), cand("knnabove", 9, 2),
             cand("below", 5, 6)]
    kept, stats = filter_negatives(cands, {"p"}, ["positive text"], NegativePolicy(max_overlap=1.0))
    assert [c.doc_id for c in kept] == ["bm25only", "knnabove", "below"]
    assert (stats.considered, stats.kept, stats.skipped_above_positive) == (4, 3, 1)
    # the rule needs a retrieved positive: with none among the candidates, nothing is "above" it
    kept, _ = filter_negatives(cands, {"missing"}, ["x"], NegativePolicy(max_overlap=1.0))
    assert len(kept) == 5


def test_filter_skips_top_ranks_and_near_duplicates_of_a_positive() -> None:
    pos = "aspirin lowers the risk of colorectal cancer in adults"
    cands = [cand("top", 7, 7), cand("p", 1, 1, pos), cand("dup", 8, 9, pos + " trial"),
             cand("other", 9, 8, "statins and heart failure")]
    kept, stats = filter_negatives(cands, {"p"}, [pos], NegativePolicy(skip_top=1, skip_above_positive=True,
                                                                       max_overlap=0.6))
    assert [c.doc_id for c in kept] == ["other"]
    assert (stats.skipped_top, stats.skipped_duplicate, stats.skipped_above_positive) == (1, 1, 0)
    off, stats = filter_negatives(cands, {"p"}, [pos], NegativePolicy(0, False, 1.0))
    assert [c.doc_id for c in off] == ["top", "dup", "other"] and stats.kept == 3
    assert NegativePolicy(0, False, 1.0).describe() == "no filter" and "Jaccard" in NegativePolicy().describe()


def test_build_pairs_draws_negatives_only_from_what_the_policy_keeps() -> None:
    queries = {"q1": "aspirin cancer"}
    cands = {"q1": [cand("above", 1, 1), cand("p", 2, 2, "aspirin and cancer"), cand("n1", 3, 5),
                    cand("n2", 4, 3)]}
    pairs, stats = build_pairs(["q1"], queries, {"q1": {"p": 1}}, cands, {}, negatives=3, seed=0,
                               policy=NegativePolicy(max_overlap=1.0))
    assert [(p.doc_id, p.label) for p in pairs] == [("p", 1), ("n1", 0), ("n2", 0)]
    assert stats.filtered.skipped_above_positive == 1 and stats.filtered.kept == 2 and stats.negatives == 2


def test_query_lists_group_pairs_and_drop_lists_without_both_labels() -> None:
    pairs = [Pair("q1", "Q1", "a", "A", 1), Pair("q1", "Q1", "b", "B", 0), Pair("q2", "Q2", "c", "C", 1),
             Pair("q1", "Q1", "d", "D", 0)]
    assert query_lists(pairs) == [("Q1", ["A", "B", "D"], [1.0, 0.0, 0.0])]


# ------------------------------------------------------------------------------------------------ card


def test_card_records_the_recipe_folds_and_per_fold_figures(tmp_path: Path) -> None:
    folds = [["q0", "q1", "q2"], ["q3", "q4", "q5"]]
    scores = {1: scores_that_find(POOL, {f"q{i}" for i in range(6)})}
    summary = summarize(POOL, scores, folds)
    result = TrainResult(epochs=[EpochResult(1, 1.0, 1.0, 0.3, summary.chosen.blend, summary.chosen.served)],
                         best_epoch=1, fused={"ndcg@10": 0.5, "mrr@10": 0.33}, cv=summary.as_dict(), cv_seconds=12.0)
    cfg = TrainingConfig(dataset=tmp_path, out=tmp_path / "m", folds=2, epochs=3, skip_top=1)
    stats = PairStats(queries=6, positives=6, negatives=18)
    mined = MinedData([v.qid for v in POOL], [], [], [], stats, 1.0, POOL)
    card = make_card(cfg, SplitData("train", {}, {}, ["train.tsv"]), mined, result, MODELS)
    assert card["training"]["loss"].startswith("LambdaLoss") and card["training"]["folds"] == 2
    assert card["training"]["max_epochs"] == 3 and card["training"]["trained_epochs"] == 1
    assert card["training"]["fit_on"] == "all training queries" and card["training"]["val_fraction"] == 0.0
    assert card["negatives"]["policy"]["skip_top"] == 1 and card["negatives"]["filtered"]["considered"] == 0
    assert card["validation"]["method"] == "2-fold" and card["queries"]["validation_scored"] == 6
    cv = card["cross_validation"]
    assert [f["fold"] for f in cv["nested_per_fold"]] == [1, 2] and cv["chosen"]["epoch"] == 1
    assert card["serving"]["blend"] == summary.chosen.blend
    assert "gain_mean" in cv["estimate"] and card["time_seconds"]["cross_validation"] == 12.0
    readme = card_markdown(card)
    assert "2-fold selection" in readme and "| 2 | 3 |" in readme


def test_cli_prints_the_fold_table_of_a_cross_validated_card(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.cli.train import print_folds

    folds = [["q0", "q1", "q2"], ["q3", "q4", "q5"]]
    summary = summarize(POOL, {1: scores_that_find(POOL, {"q0"})}, folds)
    print_folds({"cross_validation": summary.as_dict()})
    print_folds({"cross_validation": None})  # a one-slice card: nothing to print
    out = capsys.readouterr().out
    assert "2-fold estimate" in out and "validation estimate: gain" in out


def test_card_warns_when_the_base_learnt_from_the_same_judgments(tmp_path: Path) -> None:
    import json as _json

    from hybridsearch.training.card import base_training

    base = tmp_path / "embedder"
    base.mkdir()
    (base / "card.json").write_text(_json.dumps({"kind": "hybridsearch-domain-embedder", "dataset": str(tmp_path),
                                                 "split": "train", "files_read": ["train.tsv"]}))
    assert base_training(str(base), MODELS) == {"kind": "hybridsearch-domain-embedder", "dataset": str(tmp_path),
                                        "split": "train", "files_read": ["train.tsv"]}
    assert base_training(str(tmp_path / "no-card"), MODELS) is None
    result = TrainResult(epochs=[EpochResult(1, 0.5, 0.5, 0.3, 0.5, 0.6)], best_epoch=1, fused={"ndcg@10": 0.5,
                                                                                                  "mrr@10": 0.5})
    mined = MinedData([v.qid for v in POOL], [], [], [], PairStats(), 1.0, POOL)
    split = SplitData("train", {}, {}, ["train.tsv"])
    card = make_card(TrainingConfig(dataset=tmp_path, out=tmp_path / "m", base=str(base)), split, mined, result, MODELS)
    assert "optimistic" in card["validation"]["caveat"] and "optimistic" in card_markdown(card)
    other = make_card(TrainingConfig(dataset=tmp_path / "elsewhere", out=tmp_path / "m", base=str(base)), split,
                      mined, result, MODELS)
    assert other["validation"]["caveat"] is None
