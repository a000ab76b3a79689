"""The one encoder: on CPU the model's ONNX graph with its tokenizer.json, pooled and normalised in numpy, gives
sentence-transformers' vectors for passages and queries; the chunker counts with the same tokenizer; the search
path imports no torch once the graph exists; a folder it cannot read is embedded by torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hybridsearch.embedding.encoder import MIN_COSINE, Embedder, compare_vectors
from hybridsearch.errors import ModelError
from hybridsearch.settings import EmbeddingSettings, ModelsSettings, load_settings

pytest.importorskip("onnxruntime")
TEXTS = ["Aspirin lowers the risk of heart attack.", "The mitochondria is the powerhouse of the cell.",
         "Vitamin D deficiency is associated with bone fractures in older adults; É, ß and 中文 too.", "a",
         " ".join(["Long passages are cut at the model's sequence limit by both runtimes."] * 40)]


def _models() -> ModelsSettings:
    return load_settings().models



@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path_factory.getbasetemp() / "encoder-cache"
    monkeypatch.setenv("HSP_CACHE", str(cache))
    return cache


def minilm(**kw: object) -> Embedder:
    settings = EmbeddingSettings(model="all-MiniLM-L6-v2", device="cpu", **kw)  # type: ignore[arg-type]
    return Embedder(settings, _models())


def test_onnx_gives_torchs_vectors_for_passages_and_queries() -> None:
    onnx, torch_side = minilm(), minilm(backend="torch")
    vecs = onnx.encode(TEXTS, batch_size=2)  # sorted by length, padded per batch
    assert onnx.runtime == "onnx" and torch_side.runtime == "torch"
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert compare_vectors(torch_side.encode(TEXTS), vecs)[0] >= MIN_COSINE
    assert compare_vectors(torch_side.encode_queries(TEXTS), np.stack([onnx.encode_query(t) for t in TEXTS]))[0] \
        >= MIN_COSINE
    assert compare_vectors(vecs, onnx.encode(TEXTS, batch_size=32))[0] >= 0.99999  # batching changes nothing


def test_int8_is_close_but_not_equal() -> None:
    fp32 = minilm().encode(TEXTS)
    int8 = minilm(onnx_quantized=True).encode(TEXTS)
    cos = (fp32 * int8).sum(1)
    assert 0.97 < float(cos.min()) < 0.99999


def test_the_chunker_counts_with_the_models_tokenizer() -> None:
    from transformers import AutoTokenizer

    from hybridsearch.embedding.models import resolve_model

    hf = AutoTokenizer.from_pretrained(resolve_model("all-MiniLM-L6-v2", _models()))
    tokenizer = minilm().tokenizer()
    for text in TEXTS:
        want = hf(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        assert tokenizer.offsets(text) == [(s, e) for s, e in want if e > s]
    assert minilm().max_seq_length == 256


def test_a_search_process_embeds_a_query_without_importing_torch(tmp_path: Path, _cache: Path) -> None:
    minilm().encode(["export the graph once"])
    code = ("import sys; from hybridsearch.embedding.encoder import Embedder; "
            "from hybridsearch.settings import EmbeddingSettings, load_settings; "
            "v = Embedder(EmbeddingSettings(model='all-MiniLM-L6-v2', device='cpu'), load_settings().models)"
            ".encode_query('how do bees find food'); "
            "print(v.shape[0], 'torch' in sys.modules, 'sentence_transformers' in sys.modules)")
    env = {**os.environ, "HSP_CACHE": str(_cache)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["384", "False", "False"]


def test_a_folder_onnx_cannot_read_is_embedded_by_torch_unless_onnx_is_asked_for(tiny_bi_encoder: Path,
                                                                                 tmp_path: Path) -> None:
    folder = Path(shutil.copytree(tiny_bi_encoder, tmp_path / "m"))
    pooling = folder / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text()), "pooling_mode": "max"}))
    auto = Embedder(EmbeddingSettings(model=str(folder), dims=32, device="cpu"), _models())
    assert auto.encode(["a text"]).shape == (1, 32) and auto.runtime == "torch"
    assert auto.tokenizer().offsets("a text") == [(0, 1), (2, 6)]  # the chunker counts with torch's tokenizer
    with pytest.raises(ModelError, match="pooling max"):
        onnx = EmbeddingSettings(model=str(folder), dims=32, device="cpu", backend="onnx")
        Embedder(onnx, _models()).encode(["a text"])


def test_the_export_is_redone_when_a_folder_is_trained_again(tmp_path: Path) -> None:
    """A model fine-tuned again into the same folder has weights of the same size: the export cache must not hand
    back the previous weights' ONNX file (it keys on the weights' modification time too)."""
    from hybridsearch.embedding.onnx import fingerprint

    (tmp_path / "config.json").write_text("{}")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 64)
    first = fingerprint(tmp_path)
    assert fingerprint(tmp_path) == first
    weights.write_bytes(b"b" * 64)
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert fingerprint(tmp_path) != first
