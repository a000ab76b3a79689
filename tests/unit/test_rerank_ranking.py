"""Pure reranker helpers, make_reranker's choice, and model-loading errors (no model needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridsearch.cli.main import exit_code
from hybridsearch.errors import ModelError, RerankerError, RerankerModelError
from hybridsearch.rerank import HttpReranker, LocalReranker, make_reranker
from hybridsearch.rerank.base import order_by_score
from hybridsearch.rerank.batching import split_scores
from hybridsearch.rerank.local import load_cross_encoder
from hybridsearch.settings import RerankerSettings, load_settings

MODELS = load_settings().models


def test_order_by_score_best_first_ties_keep_input_order() -> None:
    assert order_by_score([0.1, 0.9, 0.5, 0.9]) == [1, 3, 2, 0]


def test_order_by_score_top_n() -> None:
    scores = [0.1, 0.9, 0.5, 0.7]
    assert order_by_score(scores, top_n=2) == [1, 3]
    assert order_by_score(scores, top_n=0) == []
    assert order_by_score([]) == []


def test_split_scores_cuts_in_sizes_and_checks_lengths() -> None:
    assert split_scores([1, 2, 3, 4, 5], [2, 0, 3]) == [[1.0, 2.0], [], [3.0, 4.0, 5.0]]
    with pytest.raises(ValueError, match="4 scores for 5 pairs"):
        split_scores([1, 2, 3, 4], [2, 3])


def test_make_reranker_disabled_url_and_local() -> None:
    assert make_reranker(load_settings(reranker={"enabled": False}).reranker, MODELS) is None
    http = make_reranker(load_settings(reranker={"url": "http://127.0.0.1:1/", "token": "s3cret"}).reranker, MODELS)
    assert isinstance(http, HttpReranker)
    assert http.url == "http://127.0.0.1:1"
    local = make_reranker(load_settings(reranker={"model": "/nowhere/model"}).reranker, MODELS)
    assert isinstance(local, LocalReranker)
    assert local.name == "/nowhere/model"  # lazy: a missing model is not loaded yet


def test_offline_hub_name_fails_fast_naming_model_and_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RerankerModelError) as info:
        load_cross_encoder("cross-encoder/ms-marco-MiniLM-L-6-v2", MODELS)
    msg = str(info.value)
    assert "cross-encoder/ms-marco-MiniLM-L-6-v2" in msg and "HSP_RERANKER__MODEL=" in msg
    assert isinstance(info.value, ModelError) and isinstance(info.value, RerankerError)
    assert exit_code(info.value) == 5


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RerankerModelError, match="does not exist"):
        load_cross_encoder(str(tmp_path / "no-such-model"), MODELS)


def test_folder_without_a_model_is_a_model_error(tmp_path: Path) -> None:
    (tmp_path / "junk.txt").write_text("not a model")
    with pytest.raises(RerankerModelError, match="cannot load reranker model"):
        load_cross_encoder(str(tmp_path), MODELS)


def test_local_reranker_load_failure_surfaces_on_score_and_is_remembered(tmp_path: Path) -> None:
    reranker = LocalReranker(RerankerSettings(model=str(tmp_path / "missing")), MODELS)
    assert reranker.score("q", []) == []  # nothing to score: no load needed
    with pytest.raises(RerankerError, match="missing"):
        reranker.score("q", ["p"])
    (tmp_path / "missing").mkdir()  # remembered: not retried on every query
    with pytest.raises(RerankerError, match="does not exist"):
        reranker.score("q", ["p"])
