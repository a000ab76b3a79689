"""``hsp train-reranker`` prints its figures from the card the training run returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hybridsearch.cli.main import main
from hybridsearch.settings import ModelsSettings
from hybridsearch.training.card import make_card
from hybridsearch.training.config import EpochResult, TrainingConfig, TrainResult
from hybridsearch.training.negatives import MinedData, PairStats, SplitData


def test_train_reranker_prints_the_figures_of_the_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    result = TrainResult(epochs=[EpochResult(1, 0.5, 0.5, 0.3, 0.5, 0.6), EpochResult(2, 0.55, 0.5, 0.2, 0.4, 0.62)],
                         best_epoch=2, fused={"ndcg@10": 0.5, "mrr@10": 0.5}, device="cpu")
    mined = MinedData(["a", "b"], ["c"], [], [], PairStats(positives=3, negatives=9), 4.0)
    card = make_card(TrainingConfig(dataset=tmp_path, out=tmp_path / "m"), SplitData("train", {}, {}, []), mined,
                     result, ModelsSettings())

    def run_training(cfg: TrainingConfig, settings: Any, **_: Any) -> dict[str, Any]:
        return card

    monkeypatch.setattr("hybridsearch.training.reranker.run_training", run_training)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["train-reranker", str(tmp_path), "--out", str(tmp_path / "m"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "0.6200" in out and "2 *" in out and "fused (no rerank)" in out
    assert "3 positive / 9 negative pairs from 2 queries" in out and "served blend 0.4" in out
