"""Embedder training without a cluster or a model: rows, false-negative filtering, the train/test check,
dense validation, the validation pool, the card and the command's refusals."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybridsearch.cli.main import main
from hybridsearch.errors import ConfigError
from hybridsearch.eval.datasets import check_disjoint
from hybridsearch.settings import load_settings
from hybridsearch.training.card import (
    EMBEDDER_KIND,
    beats_base,
    card_markdown,
    make_embedder_card,
    save_model,
)
from hybridsearch.training.config import Chunk, DenseValidation, EmbedderConfig, EmbedderEpoch, EmbedderResult, RowStats
from hybridsearch.training.embedder import (
    build_rows,
    dense_metrics,
    dense_rankings,
    negative_pool,
    pool_priority,
    rows_as_columns,
    validation_pool,
)
from hybridsearch.training.negatives import Candidate, Collected, SplitData, pick_negatives

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "scifact"


def cands(*ids: str) -> list[Candidate]:
    return [Candidate(d, f"text of {d}") for d in ids]


# ------------------------------------------------------------------------------------ negatives and rows


def test_negative_pool_leaves_out_judged_top_duplicates_and_near_positives() -> None:
    pool, dropped = negative_pool(cands("r", "a", "b", "c", "d", "e"), {"r"}, ["text of r"], skip_top=1)
    assert [c.doc_id for c in pool] == ["b", "c", "d", "e"] and dropped == {"top": 1, "duplicate": 0, "similar": 0}

    dup = [*cands("r", "a"), Candidate("copy", "text of r")]
    pool, dropped = negative_pool(dup, {"r"}, ["text of r"])
    assert [c.doc_id for c in pool] == ["a"] and dropped["duplicate"] == 1

    sims = {"a": 0.80, "b": 0.76, "c": 0.50}
    pool, dropped = negative_pool(cands("a", "b", "c"), set(), [], similarity=sims, positive_similarity=0.8,
                                  margin=0.95)
    assert [c.doc_id for c in pool] == ["b", "c"] and dropped["similar"] == 1  # 0.80 > 0.95 × 0.8 = 0.76
    assert negative_pool(cands("a", "b", "c"), set(), [], similarity=sims, positive_similarity=0.8,
                         margin=None)[0] == cands("a", "b", "c")


def test_pick_negatives_top_sample_and_cycling() -> None:
    pool = cands("a", "b", "c", "d", "e")
    assert [c.doc_id for c in pick_negatives(pool, 2, rng=random.Random(0), strategy="top")] == ["a", "b"]
    got = pick_negatives(pool, 3, rng=random.Random(5))
    assert got == pick_negatives(pool, 3, rng=random.Random(5)) and len({c.doc_id for c in got}) == 3
    assert [c.doc_id for c in got] == sorted(c.doc_id for c in got)  # rank order kept
    assert [c.doc_id for c in pick_negatives(cands("a", "b"), 3, rng=random.Random(0))] == ["a", "b", "a"]
    assert pick_negatives([], 2, rng=random.Random(0)) == []


QUERIES = {"q1": "query one", "q2": "query two", "q3": "query three"}
QRELS = {"q1": {"p1": 1, "p2": 1}, "q2": {"gone": 1}, "q3": {"p3": 1, "n0": 0}}
CANDS = {"q1": cands("p1", "n1", "n2", "n3", "n4"), "q2": cands("n1"), "q3": cands("n0", "p3", "n5")}


def test_build_rows_one_row_per_positive_with_its_own_negatives() -> None:
    rows, stats = build_rows(QUERIES, QUERIES, QRELS, CANDS, {("q1", "p2"): "indexed p2"}, negatives=2, seed=3)
    by_q = {q: [r for r in rows if r.qid == q] for q in QUERIES}
    assert [(r.positive_id, r.positive) for r in by_q["q1"]] == [("p1", "text of p1"), ("p2", "indexed p2")]
    negs = [n for r in by_q["q1"] for n in r.negative_ids]
    assert len(negs) == 4 and set(negs) == {"n1", "n2", "n3", "n4"}  # different negatives while the pool lasts
    assert by_q["q2"] == [] and stats.skipped_queries == ["q2"] and stats.positives_missing == 1
    [row] = by_q["q3"]
    assert sorted(row.negative_ids) == ["n0", "n5"]  # a grade-0 judgment is not relevant: a fine negative
    assert stats.queries == 2 and stats.rows == 3
    assert all(r.negatives == tuple(f"text of {d}" for d in r.negative_ids) for r in rows)
    # seeded per query: the order the queries come in does not matter
    again, _ = build_rows(list(reversed(list(QUERIES))), QUERIES, QRELS, CANDS, {("q1", "p2"): "indexed p2"},
                          negatives=2, seed=3)
    assert again == rows


def test_build_rows_drops_rows_without_negatives_and_filters_by_the_least_similar_positive() -> None:
    qrels = {"q1": {"p1": 1, "p2": 1}}
    sims = {"q1": {"p1": 0.9, "p2": 0.6, "n1": 0.58, "n2": 0.3}}
    rows, stats = build_rows(["q1"], QUERIES, qrels, {"q1": cands("p1", "p2", "n1", "n2")}, {}, negatives=1, seed=0,
                             similarity=sims, margin=0.95)
    assert stats.dropped_similar == 1  # n1: 0.58 > 0.95 × 0.6
    assert {r.negative_ids for r in rows} == {("n2",)} and stats.rows_reusing_negatives == 1
    rows, stats = build_rows(["q1"], QUERIES, qrels, {"q1": cands("p1", "p2")}, {}, negatives=1, seed=0)
    assert rows == [] and stats.rows_without_negatives == 2
    rows, _ = build_rows(["q1"], QUERIES, qrels, {"q1": cands("p1", "p2")}, {}, negatives=0, seed=0)
    assert len(rows) == 2 and rows_as_columns(rows, 0) == {"anchor": ["query one"] * 2,
                                                           "positive": ["text of p1", "text of p2"]}


def test_rows_as_columns_names_the_negatives() -> None:
    rows, _ = build_rows(["q3"], QUERIES, QRELS, CANDS, {}, negatives=2, seed=0)
    cols = rows_as_columns(rows, 2)
    assert list(cols) == ["anchor", "positive", "negative_1", "negative_2"]
    assert cols["anchor"] == ["query three"] and cols["positive"] == ["text of p3"]
    assert sorted(cols["negative_1"] + cols["negative_2"]) == ["text of n0", "text of n5"]


# ------------------------------------------------------------------------------------ train/test check


def _collection(root: Path, test_qids: str = "de") -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "x"}\n')
    (root / "queries.jsonl").write_text("".join(f'{{"_id": "{q}", "text": "query {q}"}}\n' for q in "abcdef"))
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\na\td1\t1\nb\td1\t1\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\td1\t1\n"
                                                                                      for q in test_qids))
    return root


def test_check_disjoint_passes_disjoint_ids_and_names_shared_ones(tmp_path: Path) -> None:
    root = _collection(tmp_path / "ok")
    assert [Path(f).name for f in check_disjoint(root, ["a", "b"])] == ["test.tsv"]
    with pytest.raises(ConfigError, match=r"1 training queries are also judged in .*test.tsv \(b\)"):
        check_disjoint(_collection(tmp_path / "bad", test_qids="bd"), ["a", "b"])
    (root / "qrels" / "test.tsv").unlink()
    assert check_disjoint(root, ["a"]) == []


@pytest.mark.skipif(not SCIFACT.exists(), reason="needs ../shared/datasets/scifact")
def test_scifact_train_queries_pass_the_check() -> None:
    from hybridsearch.training.negatives import load_split

    data = load_split(SCIFACT, "train")
    assert [Path(f).name for f in check_disjoint(SCIFACT, data.queries)] == ["test.tsv"]


def test_cli_refuses_the_test_split_and_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _collection(tmp_path / "c")
    assert main(["train-embedder", str(root), "--split", "test", "--out", str(tmp_path / "m")]) == 2
    assert "refusing" in capsys.readouterr().err
    assert main(["train-embedder", str(root), "--out", str(tmp_path / "m"), "--batch-size", "1"]) == 2
    assert "--batch-size" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


# ------------------------------------------------------------------------------------------ validation


def test_dense_rankings_rank_documents_by_their_best_chunk() -> None:
    chunk_vecs = np.array([[1, 0], [0.6, 0.8], [0.8, 0.6], [0, 1]], dtype=np.float32)
    docs = ["a", "b", "b", "c"]
    got = dense_rankings(np.array([[1, 0], [0, 1]], dtype=np.float32), chunk_vecs, docs, ["x", "y"], k=2)
    assert got == {"x": ["a", "b"], "y": ["c", "b"]}


def test_dense_metrics_match_hsp_eval_metrics() -> None:
    val = DenseValidation(["x", "y"], ["qx", "qy"], {"x": {"a": 1}, "y": {"a": 1}},
                          [Chunk("a", "ta"), Chunk("b", "tb")], True, 2)
    m = dense_metrics(val, np.array([[1, 0], [0, 1]], dtype=np.float32), np.eye(2, dtype=np.float32))
    assert m["ndcg@10"] == pytest.approx((1 + 1 / np.log2(3)) / 2) and m["mrr@10"] == pytest.approx(0.75)
    assert m["recall@10"] == 1.0


def test_validation_pool_is_the_index_when_small_else_capped_by_priority() -> None:
    chunks = [Chunk(d, f"{d}{i}") for d in "abcdef" for i in range(2)]
    assert validation_pool(chunks, [], 0, 1) == (chunks, True)
    assert validation_pool(chunks, [], 12, 1) == (chunks, True)
    pool, full = validation_pool(chunks, ["c", "a", "b"], 5, seed=1)
    assert not full and len(pool) == 5 and [c.doc_id for c in pool[:4]] == ["c", "c", "a", "a"]
    assert pool[4].doc_id in "bdef"
    assert validation_pool(chunks, ["c", "a", "b"], 5, seed=1) == (pool, full)


def test_pool_priority_judged_documents_then_candidates_rank_by_rank() -> None:
    assert pool_priority(["q1", "q3"], QRELS, CANDS) == ["p1", "p2", "p3", "n0", "n1", "n2", "n5", "n3", "n4"]


# ------------------------------------------------------------------------------------------------ card


class FakeModel:
    max_seq_length = 256

    def get_embedding_dimension(self) -> int:
        return 384

    def save(self, path: str, create_model_card: bool = True) -> None:
        assert not create_model_card
        (Path(path) / "model.safetensors").write_bytes(b"weights")


def _card(tmp_path: Path, kept: float = 0.75) -> dict[str, Any]:
    root = _collection(tmp_path / "c")
    cfg = EmbedderConfig(dataset=root, out=tmp_path / "m", epochs=2)
    data = SplitData("train", {"a": "query a", "b": "query b"}, {"a": {"d1": 1}, "b": {"d1": 1}},
                     [str(root / "qrels" / "train.tsv")])
    got = Collected(["a"], ["b"], {}, {}, 1.0)
    result = EmbedderResult([EmbedderEpoch(0, 0.7, 0.8, 0.6), EmbedderEpoch(1, kept, 0.9, 0.7, 1.2),
                             EmbedderEpoch(2, 0.72, 0.85, 0.65, 0.9)], best_epoch=1, seconds=12.0, steps=4)
    val = DenseValidation(["b"], ["query b"], {"b": {"d1": 1}}, [Chunk("d1", "x")], True, 1)
    return make_embedder_card(cfg, data, got, RowStats(queries=1, rows=1, dropped_similar=3), val, result,
                              FakeModel(), load_settings().models,
                              disjoint_from=[str(root / "qrels" / "test.tsv")],
                              seconds={"mining": 2.0})


def test_card_records_recipe_data_and_validation(tmp_path: Path) -> None:
    card = _card(tmp_path)
    assert card["kind"] == EMBEDDER_KIND and card["split"] == "train"
    assert list(card["qrels_sha256"]) == ["train.tsv"] and len(card["qrels_sha256"]["train.tsv"]) == 64
    assert [Path(f).name for f in card["checked_disjoint_from"]] == ["test.tsv"]
    assert card["training"]["loss"].startswith("MultipleNegativesRankingLoss")
    assert card["training"]["max_seq_length"] == 256 and card["serving"]["dims"] == 384
    assert card["negatives"]["dropped_as_likely_false_negatives"]["similar"] == 3
    assert card["validation"]["best_epoch"] == 1 and card["validation"]["beats_base"] is True
    assert [e["epoch"] for e in card["validation"]["per_epoch"]] == [0, 1, 2]
    text = card_markdown(card)
    assert "| 1 (kept) | 0.7500 |" in text and "| 0 (base) | 0.7000 |" in text and "Warning" not in text
    assert "hsp index migrate --to-model" in text
    json.dumps(card)  # serialisable as is


def test_card_warns_when_the_kept_epoch_does_not_beat_the_base(tmp_path: Path) -> None:
    card = _card(tmp_path, kept=0.69)
    assert card["validation"]["beats_base"] is False and "Warning" in card_markdown(card)
    assert beats_base(EmbedderResult([EmbedderEpoch(1, 0.5)], best_epoch=1)) is None  # no epoch 0: no verdict


def test_save_model_writes_the_embedder_folder_card_and_readme(tmp_path: Path) -> None:
    card = _card(tmp_path)
    out = save_model(FakeModel(), tmp_path / "m", card, load_settings().models)
    assert (out / "model.safetensors").exists() and (out / "README.md").read_text().startswith("# Domain embedding")
    assert json.loads((out / "card.json").read_text(encoding="utf-8")) == card


def test_train_embedder_prints_the_figures_of_the_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.cli.main import main

    card = _card(tmp_path)
    monkeypatch.setattr("hybridsearch.training.embedder.run_embedder_training", lambda *a, **k: card)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["train-embedder", str(tmp_path / "c"), "--out", str(tmp_path / "m"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "1 *" in out and "0 (base)" in out and "0.7500" in out and "over 1 chunks" in out
    assert "1 rows from 1 queries" in out and "3 similar" in out and card["serving"]["model"] in out
