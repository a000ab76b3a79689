"""``hsp train`` reads the reranker's card through a typed view built next to the code that writes the card."""

from __future__ import annotations

from pathlib import Path

from hybridsearch.training.card import RerankerCard, make_card
from hybridsearch.training.config import EpochResult, TrainingConfig, TrainResult
from hybridsearch.training.negatives import MinedData, PairStats, SplitData


def test_the_reranker_card_view_holds_what_the_cli_prints(tmp_path: Path) -> None:
    result = TrainResult(epochs=[EpochResult(1, 0.5, 0.5, 0.3, 0.5, 0.6), EpochResult(2, 0.55, 0.5, 0.2, 0.4, 0.62)],
                         best_epoch=2, fused={"ndcg@10": 0.5, "mrr@10": 0.5}, device="cpu")
    mined = MinedData(["a", "b"], ["c"], [], [], PairStats(positives=3, negatives=9), 4.0)
    card = make_card(TrainingConfig(dataset=tmp_path, out=tmp_path / "m"), SplitData("train", {}, {}, []), mined,
                     result)
    view = RerankerCard.of(card)
    assert (view.split, view.train_queries, view.best_epoch, view.beats_fused) == ("train", 2, 2, True)
    assert view.epochs == result.epochs and view.fused == result.fused
    assert (view.positive_pairs, view.negative_pairs, view.mining_seconds, view.blend) == (3, 9, 4.0, 0.4)
