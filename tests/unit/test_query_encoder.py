"""The query encoder (HSP_EMBEDDING__QUERY_BACKEND): ONNX when it gives the ingestion encoder's vectors, else
torch with the reason; ``onnx`` insists. The last test runs the real packaged model."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybridsearch.embedding import query
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.embedding.query import MIN_COSINE, PROBES, agreement, choose_query_encoder
from hybridsearch.errors import ModelError
from hybridsearch.settings import EmbeddingSettings


def unit(seed: str) -> np.ndarray:
    vec = np.random.default_rng(abs(hash(seed)) % 2**32).standard_normal(384).astype(np.float32)
    return vec / np.linalg.norm(vec)


def reference(text: str) -> np.ndarray:
    return unit(text)


class Built:
    """Stands in for :func:`query.onnx_query_encoder`: records its arguments, returns ``encode`` (or raises)."""

    def __init__(self, encode: Any = reference, error: Exception | None = None) -> None:
        self.encode, self.error = encode, error
        self.calls: list[tuple[Any, str, bool]] = []
        self.prompts: list[str] = []

    def __call__(self, model: Any, model_dir: str, quantized: bool = False, prompt: str = "",
                 max_tokens: int | None = None) -> Any:
        self.calls.append((model, model_dir, quantized))
        self.prompts.append(prompt)
        if self.error is not None:
            raise self.error
        return self.encode


def cfg(**kw: Any) -> EmbeddingSettings:
    return EmbeddingSettings(device="cpu", **kw)


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Built:
    fake = Built()
    monkeypatch.setattr(query, "onnx_query_encoder", fake)
    return fake


def test_auto_takes_onnx_when_its_vectors_agree(built: Built, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "hybridsearch.embedding.query")
    chosen = choose_query_encoder(cfg(), "model", reference)
    assert chosen.backend == "onnx" and chosen.encode is reference and "lowest cosine 1.0000000" in chosen.reason
    assert built.calls and built.calls[0][0] == "model" and built.calls[0][2] is False  # fp32
    assert "query encoder: onnx" in caplog.text


def test_torch_when_asked(built: Built) -> None:
    chosen = choose_query_encoder(cfg(query_backend="torch"), "model", reference)
    assert (chosen.backend, chosen.encode, chosen.reason) == ("torch", reference, "HSP_EMBEDDING__QUERY_BACKEND=torch")
    assert not built.calls


def test_no_onnxruntime_falls_back_to_torch_with_the_reason(built: Built, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "hybridsearch.embedding.query")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails
    chosen = choose_query_encoder(cfg(), "model", reference)
    assert chosen.backend == "torch" and chosen.encode is reference
    assert chosen.reason == "ONNX unavailable: onnxruntime is not installed (pip install 'hybridsearch[onnx]')"
    assert "query encoder: torch, not ONNX: onnxruntime is not installed" in caplog.text and not built.calls
    with pytest.raises(ModelError, match=r"no ONNX query encoder .* onnxruntime is not installed"):
        choose_query_encoder(cfg(query_backend="onnx"), "model", reference)


def test_failed_export_falls_back_with_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(query, "onnx_query_encoder", Built(error=RuntimeError("unsupported operator")))
    chosen = choose_query_encoder(cfg(), "model", reference)
    assert chosen.backend == "torch" and "RuntimeError: unsupported operator" in chosen.reason
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    with pytest.raises(ModelError, match="unsupported operator") as err:
        choose_query_encoder(cfg(query_backend="onnx"), "model", reference)
    assert "HSP_EMBEDDING__QUERY_BACKEND=auto" in str(err.value.fix)


def test_vectors_that_disagree_are_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    def close(text: str) -> np.ndarray:  # cosine about 0.9995 to the reference: int8-like, not the same
        vec = reference(text) + 0.03 * unit(text + "noise")
        return vec / np.linalg.norm(vec)

    monkeypatch.setattr(query, "onnx_query_encoder", Built(close))
    chosen = choose_query_encoder(cfg(), "model", reference)
    assert chosen.backend == "torch" and "disagree with the torch encoder" in chosen.reason
    with pytest.raises(ModelError, match="disagree"):
        choose_query_encoder(cfg(query_backend="onnx"), "model", reference)


def test_gpu_model_keeps_torch_and_int8_index_gets_the_int8_file(built: Built) -> None:
    chosen = choose_query_encoder(EmbeddingSettings(device="cuda"), "model", reference)
    assert chosen.backend == "torch" and "runs on cuda" in chosen.reason and not built.calls
    choose_query_encoder(cfg(backend="onnx", onnx_quantized=True), "model", reference)
    assert built.calls[-1][2] is True  # queries meet the weights the index was built with


def test_agreement_measures_cosine_and_difference() -> None:
    texts = ["a", "b", "c"]
    assert agreement(reference, reference, texts) == (pytest.approx(1.0), 0.0)
    cos, diff = agreement(reference, lambda t: -reference(t), texts)
    assert cos == pytest.approx(-1.0) and diff == pytest.approx(2 * max(float(np.abs(unit(t)).max()) for t in texts))


def tilted(cosine: float, only: str | None = None) -> Any:
    """An encoder whose vector of each text (or of ``only``) lies at exactly ``cosine`` to the reference's."""
    def encode(text: str) -> np.ndarray:
        ref = reference(text).astype(np.float64)
        if only is not None and text != only:
            return ref
        side = unit(text + "side").astype(np.float64)
        side -= (side @ ref) * ref
        return cosine * ref + np.sqrt(1.0 - cosine**2) * side / np.linalg.norm(side)
    return encode


@pytest.mark.parametrize("below", [False, True])
def test_onnx_is_taken_exactly_down_to_the_threshold(monkeypatch: pytest.MonkeyPatch, below: bool) -> None:
    margin = (1.0 - MIN_COSINE) / 4
    cosine = MIN_COSINE - margin if below else MIN_COSINE + margin
    monkeypatch.setattr(query, "onnx_query_encoder", Built(tilted(cosine)))
    chosen = choose_query_encoder(cfg(), "model", reference)
    assert chosen.backend == ("torch" if below else "onnx"), chosen.reason


def test_every_probe_text_is_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(set(PROBES)) >= 2
    for probe in PROBES:  # one probe off alone is enough to refuse ONNX
        monkeypatch.setattr(query, "onnx_query_encoder", Built(tilted(0.99, only=probe)))
        chosen = choose_query_encoder(cfg(), "model", reference)
        assert chosen.backend == "torch" and "lowest cosine 0.9900000" in chosen.reason, probe


def test_embedder_queries_go_through_the_chosen_encoder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HSP_ONNX_CACHE", str(tmp_path))  # no agreement recorded: the encoder is chosen
    calls: list[tuple[Any, ...]] = []

    def choose(c: EmbeddingSettings, model: Any, ref: Any, prompt: str | None = None) -> query.QueryEncoder:
        calls.append((c, model, ref, prompt))
        return query.QueryEncoder("onnx", lambda text: unit("q:" + text), "test")

    monkeypatch.setattr(query, "choose_query_encoder", choose)
    e = Embedder(cfg())
    monkeypatch.setattr(Embedder, "model", "model")
    assert np.array_equal(e.encode_query("bees"), unit("q:bees")) and np.array_equal(e.encode_query("x"), unit("q:x"))
    assert len(calls) == 1 and calls[0][1] == "model" and e.query_encoder.backend == "onnx"


def test_real_model_onnx_query_vectors_equal_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("HSP_ONNX_CACHE", str(tmp_path))
    e = Embedder(cfg(query_cache_size=0))
    assert e.query_encoder.backend == "onnx", e.query_encoder.reason
    assert list(tmp_path.glob("*/model.onnx")), "the export goes to the ONNX backend's cache folder"
    texts = ["Aspirin lowers the risk of heart attack.", "how do bees find food", "ß É 中文 🔥", "x " * 400]
    cos, diff = agreement(lambda t: e.encode([t])[0], e.encode_query, texts)
    assert cos >= MIN_COSINE and diff < 1e-5
    assert type(e.model[0].model).__name__ != "OrtTransformer"  # ingestion keeps torch
