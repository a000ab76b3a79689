"""LocalReranker on a tiny random BERT cross-encoder built on disk: loading, batching, order, determinism."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import hybridsearch.rerank.local as local_mod
from hybridsearch.rerank import LocalReranker
from hybridsearch.settings import RerankerSettings, load_settings

MODELS = load_settings().models

QUERY = "how do vaccines train the immune system"
PASSAGES = [
    "Vaccines expose the immune system to a harmless piece of a pathogen so it learns to recognise it.",
    "The stock market fell sharply on Tuesday.",
    "Memory B cells persist for years after vaccination and respond quickly to reinfection.",
    "A short one.",
    "Mitochondria are the powerhouse of the cell, producing most of its chemical energy through respiration. " * 3,
]


@pytest.fixture(scope="module")
def reranker(tiny_cross_encoder: Path) -> LocalReranker:
    r = LocalReranker(RerankerSettings(model=str(tiny_cross_encoder), device="cpu", batch_size=2, max_length=64),
                      MODELS)
    r.load()
    return r


def test_lazy_load_happens_once_on_first_score(tiny_cross_encoder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = local_mod.load_cross_encoder

    def counting(name: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(local_mod, "load_cross_encoder", counting)
    r = LocalReranker(RerankerSettings(model=str(tiny_cross_encoder), device="cpu"), MODELS)
    assert calls == []
    threads = [threading.Thread(target=r.score, args=(QUERY, PASSAGES[:2])) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert r.device == "cpu"
    first = r.model
    r.score(QUERY, PASSAGES)
    assert r.model is first
    assert calls == [str(tiny_cross_encoder)]


def test_one_finite_float_per_passage(reranker: LocalReranker) -> None:
    scores = reranker.score(QUERY, PASSAGES)
    assert len(scores) == len(PASSAGES)
    assert all(isinstance(s, float) and s == s for s in scores)
    assert len(set(scores)) > 1  # the random model still tells passages apart
    assert reranker.score(QUERY, []) == []


def test_scores_are_deterministic_and_in_input_order(reranker: LocalReranker) -> None:
    scores = reranker.score(QUERY, PASSAGES)
    assert reranker.score(QUERY, PASSAGES) == scores
    perm = [4, 2, 0, 3, 1]
    permuted = reranker.score(QUERY, [PASSAGES[i] for i in perm])
    assert permuted == pytest.approx([scores[i] for i in perm], abs=1e-5)


def test_batch_size_does_not_change_scores(tiny_cross_encoder: Path, reranker: LocalReranker) -> None:
    one_by_one = LocalReranker(RerankerSettings(model=str(tiny_cross_encoder), device="cpu", batch_size=1,
                                                max_length=64), MODELS)
    assert one_by_one.score(QUERY, PASSAGES) == pytest.approx(reranker.score(QUERY, PASSAGES), abs=1e-5)


def test_score_pairs_mixes_queries(reranker: LocalReranker) -> None:
    pairs = [(QUERY, PASSAGES[0]), ("another question", PASSAGES[1]), (QUERY, PASSAGES[2])]
    flat = reranker.score_pairs(pairs)
    assert flat[0] == pytest.approx(reranker.score(QUERY, [PASSAGES[0]])[0], abs=1e-5)
    assert flat[1] == pytest.approx(reranker.score("another question", [PASSAGES[1]])[0], abs=1e-5)


def test_huge_passage_is_truncated_not_fatal(reranker: LocalReranker) -> None:
    scores = reranker.score(QUERY, ["word " * 200_000, PASSAGES[0]])
    assert len(scores) == 2


def test_max_length_from_settings_applies(reranker: LocalReranker) -> None:
    assert reranker.model.max_seq_length == 64


def test_a_crossencoder_saved_folder_loads(tmp_path: Path, reranker: LocalReranker) -> None:
    """What a training run saves with CrossEncoder.save_pretrained loads through HSP_RERANKER__MODEL=DIR."""
    reranker.model.save_pretrained(str(tmp_path / "trained"))
    again = LocalReranker(RerankerSettings(model=str(tmp_path / "trained"), device="cpu", max_length=64), MODELS)
    assert again.score(QUERY, PASSAGES) == pytest.approx(reranker.score(QUERY, PASSAGES), abs=1e-5)


def test_doctor_reports_the_trained_length_and_the_blend_with_its_source(tiny_cross_encoder: Path,
                                                                         tmp_path: Path) -> None:
    import json
    import shutil

    from hybridsearch import doctor
    from hybridsearch.settings import load_settings

    model = tmp_path / "trained"
    shutil.copytree(tiny_cross_encoder, model)
    (model / "card.json").write_text(json.dumps({"kind": "hybridsearch-domain-reranker",
                                                 "serving": {"blend": 0.3, "max_length": 64}}))
    carded = doctor.check_reranker(load_settings(reranker={"model": str(model), "device": "cpu"}).reranker, MODELS)
    assert carded.status == "OK" and "max length 64, blend 0.3 from model card" in carded.detail
    forced = doctor.check_reranker(load_settings(reranker={"model": str(model), "device": "cpu", "blend": 0.7,
                                                           "max_length": 32}).reranker, MODELS)
    assert "max length 32, blend 0.7 from HSP_RERANKER__BLEND" in forced.detail
    plain = doctor.check_reranker(load_settings(reranker={"model": str(tiny_cross_encoder), "device": "cpu"}).reranker,
                                  MODELS)
    assert "blend 1 from default" in plain.detail


def test_serve_reranker_overrides_keep_the_trained_length(tmp_path: Path) -> None:
    import argparse
    import json

    from hybridsearch.cli.rerank import with_overrides
    from hybridsearch.settings import load_settings

    model = tmp_path / "trained"
    model.mkdir()
    (model / "card.json").write_text(json.dumps({"kind": "hybridsearch-domain-reranker",
                                                 "serving": {"blend": 0.45, "max_length": 128}}))
    args = argparse.Namespace(model=str(model), device="cpu", url=None, batch_window_ms=None, micro_batching=None)
    cfg = with_overrides(load_settings().reranker, args)
    assert cfg.max_length is None and LocalReranker(cfg, MODELS).max_length == 128  # not the 512 fallback
    forced = with_overrides(load_settings(reranker={"max_length": 256}).reranker, args)
    assert LocalReranker(forced, MODELS).max_length == 256
