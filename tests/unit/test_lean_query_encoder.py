"""The lean ONNX query encoder (tokenizers + ONNX Runtime + numpy) and its agreement record: the same
vectors as sentence-transformers, checked once and recorded beside the ONNX file, so a search process that finds the
record never imports torch; a record of disagreement, a stale record, or a folder the lean encoder cannot read all
fall back to loading the model and checking."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybridsearch.embedding import query
from hybridsearch.embedding.agreement import read_record
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.embedding.lean import LeanQueryEncoder, LeanUnsupported, lean_spec
from hybridsearch.embedding.models import packaged_model
from hybridsearch.embedding.query import (
    MIN_COSINE,
    PROBES,
    OnnxQueryEncoder,
    QueryEncoder,
    agreement,
    recorded_query_encoder,
)
from hybridsearch.settings import EmbeddingSettings

pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "sentence_transformers", "transformers")


def cfg(model: str | Path = "all-MiniLM-L6-v2", **kw: Any) -> EmbeddingSettings:
    return EmbeddingSettings(model=str(model), device="cpu", query_cache_size=0, **kw)


def records_in(cache: Path) -> list[Path]:
    return sorted(cache.glob("*/query-agreement-*.json"))


@pytest.fixture(scope="module")
def minilm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ONNX cache holding the packaged MiniLM's export and the records of its check without a prompt and with
    one, made as a search process makes them (model loaded, torch as the yardstick)."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HSP_ONNX_CACHE", str(cache))
        for prompt in ("", "query: "):
            chosen = Embedder(cfg(query_prompt=prompt)).query_encoder
            assert chosen.backend == "onnx" and isinstance(chosen.encode, LeanQueryEncoder), chosen.reason
            assert "lean encoder; recorded" in chosen.reason
    assert len(records_in(cache)) == 2
    return cache


@pytest.mark.parametrize("prompt", ["", "query: "])
def test_lean_vectors_equal_sentence_transformers_for_the_packaged_minilm(
        minilm_cache: Path, monkeypatch: pytest.MonkeyPatch, prompt: str) -> None:
    monkeypatch.setenv("HSP_ONNX_CACHE", str(minilm_cache))
    torch_side = Embedder(cfg(query_prompt=prompt, query_backend="torch"))
    lean = recorded_query_encoder(cfg(query_prompt=prompt), prompt)
    assert lean is not None and isinstance(lean.encode, LeanQueryEncoder)
    cos, diff = agreement(torch_side.encode_query, lean.encode, (*PROBES, "ß É 中文 🔥", "", "x " * 600))
    assert cos >= MIN_COSINE and diff < 1e-5
    # cut where sentence-transformers cuts (256), not where the tokenizer.json says (128)
    assert len(lean.encode.tokenizer.encode("x " * 600).ids) == 256
    if prompt:  # the prompt is in the vectors: without it they differ
        bare = torch_side.embed(["how do bees find food"], "")[0]
        assert float(bare @ lean.encode("how do bees find food")) < 0.999


def test_the_record_says_what_was_compared(minilm_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_ONNX_CACHE", str(minilm_cache))
    by_prompt = {r.prompt: r for r in map(read_record, records_in(minilm_cache)) if r is not None}
    record = by_prompt["query: "]
    assert record.min_cosine >= MIN_COSINE and record.probes == len(PROBES) and not record.quantized
    assert record.reference == "torch" and record.dims == 384
    assert record.lean == {"tokenizer": "tokenizer.json", "max_length": 256, "truncation_side": "right",
                           "lowercase": False, "pooling": "mean", "normalize": True}
    assert {"onnxruntime", "tokenizers", "torch"} <= set(record.versions)
    chosen = recorded_query_encoder(cfg(), "")
    assert chosen is not None and f"(recorded {record.date}): lowest cosine 1.0000000" in chosen.reason


def test_a_search_process_with_a_recorded_agreement_imports_no_torch(minilm_cache: Path) -> None:
    """The whole search set-up of `hsp search --mode hybrid` (CLI modules, client, embedder, reranker set-up without
    a reranker model on this machine, the query encoder) in a fresh interpreter."""
    code = """
import sys
from hybridsearch.cli.main import build_parser
from hybridsearch.query.client import SearchClient
from hybridsearch.settings import load_settings

build_parser()
client = SearchClient.from_settings(load_settings())
assert client.reranker is not None  # configured, its model absent: set up, then failing without torch
client.warm_up("hybrid")
encoder = client.embedder.query_encoder
assert encoder.backend == "onnx" and "recorded" in encoder.reason, encoder.reason
print(sorted(m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules))
"""
    env = {**os.environ, "HSP_ONNX_CACHE": str(minilm_cache), "HSP_ES_URL": "http://127.0.0.1:9",
           "HSP_EMBEDDING__DEVICE": "cpu", "HSP_RERANKER__MODEL": str(minilm_cache / "no-such-reranker"),
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "platform")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


class Checked:
    """Stands in for :func:`query.choose_query_encoder` (the path that loads the model): records that it ran."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, c: EmbeddingSettings, model: Any, reference: Any, prompt: str | None = None) -> QueryEncoder:
        self.calls += 1
        return QueryEncoder("torch", reference, "checked")


def copy_cache(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest


def edit_record(cache: Path, prompt: str, **changes: Any) -> None:
    for path in records_in(cache):
        data = json.loads(path.read_text())
        if data["prompt"] == prompt:
            path.write_text(json.dumps({**data, **changes}))


@pytest.mark.parametrize(("change", "why"), [
    ({"min_cosine": 0.9995}, "says the vectors disagree"),
    ({"fingerprint": "0123456789abcdef"}, "stale (its fingerprint was"),  # made for other weights
    ({"versions": {"onnxruntime": "0.0.1", "tokenizers": "0.0.1"}}, "stale (made with onnxruntime 0.0.1"),
    ({"lean": {"pooling": "cls"}}, "stale (its lean was"),  # checked with another reading of the folder
])
def test_a_record_that_does_not_vouch_for_the_encoder_means_loading_and_checking(
        minilm_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        change: dict[str, Any], why: str) -> None:
    caplog.set_level(logging.INFO, "hybridsearch.embedding.query")
    cache = copy_cache(minilm_cache, tmp_path / "cache")
    monkeypatch.setenv("HSP_ONNX_CACHE", str(cache))
    assert recorded_query_encoder(cfg(), "") is not None  # a copied cache serves as well
    edit_record(cache, "", **change)
    assert recorded_query_encoder(cfg(), "") is None and why in caplog.text
    checked = Checked()
    monkeypatch.setattr(query, "choose_query_encoder", checked)
    monkeypatch.setattr(Embedder, "model", "model")
    assert Embedder(cfg()).query_encoder.reason == "checked" and checked.calls == 1
    assert recorded_query_encoder(cfg(query_prompt="query: "), "query: ") is not None  # the other record stands


def test_a_record_is_not_used_for_a_new_export_another_prompt_or_the_int8_file(
        minilm_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "hybridsearch.embedding.query")
    cache = copy_cache(minilm_cache, tmp_path / "cache")
    monkeypatch.setenv("HSP_ONNX_CACHE", str(cache))
    assert recorded_query_encoder(cfg(), "") is not None
    assert recorded_query_encoder(cfg(query_prompt="search: "), "search: ") is None
    assert recorded_query_encoder(cfg(backend="onnx", onnx_quantized=True), "") is None
    (onnx,) = cache.glob("*/model.onnx")
    st = onnx.stat()
    os.utime(onnx, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # exported again
    assert recorded_query_encoder(cfg(), "") is None and "its onnx_mtime_ns was" in caplog.text


@pytest.fixture
def tiny(tiny_bi_encoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the tiny bi-encoder (mean pooling, no Normalize module, its limit only in tokenizer_config.json)
    and an empty ONNX cache."""
    monkeypatch.setenv("HSP_ONNX_CACHE", str(tmp_path / "cache"))
    return Path(shutil.copytree(tiny_bi_encoder, tmp_path / "tiny"))


def tiny_cfg(folder: Path, **kw: Any) -> EmbeddingSettings:
    return cfg(folder, dims=32, **kw)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_a_tiny_folder_is_served_lean_and_recorded(tiny: Path, tmp_path: Path, pooling: str) -> None:
    (tiny / "1_Pooling" / "config.json").write_text(json.dumps(
        {"embedding_dimension": 32, "pooling_mode": pooling, "include_prompt": True}))
    e = Embedder(tiny_cfg(tiny, query_prompt="query: "))
    chosen = e.query_encoder
    assert chosen.backend == "onnx" and isinstance(chosen.encode, LeanQueryEncoder), chosen.reason
    assert chosen.encode.spec.pooling == pooling and chosen.encode.spec.max_length == 256
    want = e.encode_queries(list(PROBES))
    assert float(np.min((np.stack([chosen.encode(t) for t in PROBES]) * want).sum(1))) >= MIN_COSINE
    assert len(records_in(tmp_path / "cache")) == 1


def test_a_folder_without_tokenizer_json_keeps_the_models_own_modules(tiny: Path, tmp_path: Path) -> None:
    (tiny / "tokenizer.json").unlink()
    with pytest.raises(LeanUnsupported, match=r"no tokenizer\.json"):
        lean_spec(tiny)
    e = Embedder(tiny_cfg(tiny))
    assert recorded_query_encoder(e.cfg, "") is None
    chosen = e.query_encoder
    assert chosen.backend == "onnx" and isinstance(chosen.encode, OnnxQueryEncoder), chosen.reason
    assert records_in(tmp_path / "cache") == []  # only the lean encoder's check is recorded


@pytest.mark.parametrize(("pooling", "modules", "reason"), [
    ({"pooling_mode": "max"}, None, "pooling max"),
    ({"pooling_mode": ["mean", "cls"]}, None, "pooling mean\\+cls"),
    ({"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}, None, "pooling mean\\+max"),
    ({"pooling_mode": "mean", "include_prompt": False}, None, "include_prompt"),
    ({"pooling_mode": "mean"}, ["Transformer", "Pooling", "Dense", "Normalize"], "Dense"),
])
def test_folders_the_lean_encoder_cannot_read_are_refused(tiny: Path, pooling: dict[str, Any],
                                                          modules: list[str] | None, reason: str) -> None:
    (tiny / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 32, **pooling}))
    if modules:
        (tiny / "modules.json").write_text(json.dumps([
            {"idx": i, "name": str(i), "path": "" if i == 0 else f"{i}_{m}",
             "type": f"sentence_transformers.models.{m}"} for i, m in enumerate(modules)]))
    with pytest.raises(LeanUnsupported, match=reason):
        lean_spec(tiny)


def test_the_packaged_folder_is_read_lean() -> None:
    folder = packaged_model()
    assert folder is not None and (Path(folder) / "tokenizer.json").is_file()
    spec = lean_spec(folder)  # sentence-transformers 2 layout: pooling_mode_mean_tokens, max_seq_length 256
    assert (spec.pooling, spec.max_length, spec.normalize, spec.lowercase) == ("mean", 256, True, False)
