"""The on-disk embedding cache ``hsp eval`` builds indices with: hits skip the model, misses are embedded once."""

from __future__ import annotations

import hashlib
import sqlite3
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsearch.embedding import encoder
from hybridsearch.embedding.cache import CachedEmbedder, model_identity
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.eval.harness import embedding_cache
from hybridsearch.settings import EmbeddingSettings, ModelsSettings, load_settings

DIMS = 8


def _models() -> ModelsSettings:
    return load_settings().models



def vector(text: str, dims: int = DIMS) -> np.ndarray:
    """Arbitrary float32 values (not unit length), so a lossy round trip would show."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dims).astype(np.float32)


class CountingEmbedder(Embedder):
    """Records every ``embed`` call (the one funnel of every vector); loading its model fails the test."""

    def __init__(self, cfg: EmbeddingSettings | None = None) -> None:
        super().__init__(cfg or EmbeddingSettings(dims=DIMS), load_settings().models)
        self.calls: list[list[str]] = []

    @property
    def model(self) -> object:  # type: ignore[override]
        raise AssertionError("the model was loaded")

    def embed(self, texts: list[str], prompt: str, batch_size: int | None = None,
              max_tokens: int | None = None) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([vector(prompt + t, self.cfg.dims) for t in texts])


def test_misses_are_embedded_in_one_batch_and_hits_skip_the_inner_embedder(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, tmp_path)
    out = cache.encode(["a", "b", "a"])
    assert inner.calls == [["a", "b"]]
    assert out.dtype == np.float32 and out.shape == (3, DIMS)
    assert np.array_equal(out, np.stack([vector("a"), vector("b"), vector("a")]))
    assert np.array_equal(cache.encode(["b", "a"]), np.stack([vector("b"), vector("a")]))
    assert np.array_equal(cache.encode(["c", "a", "d"]), np.stack([vector(t) for t in "cad"]))
    assert inner.calls == [["a", "b"], ["c", "d"]]
    assert (cache.stats()["from_cache"], cache.stats()["embedded"]) == (3, 5)
    assert cache.encode([]).shape == (0, DIMS) and len(inner.calls) == 2


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(max_size=40), min_size=1, max_size=12))
def test_vectors_round_trip_exactly_through_a_second_instance(texts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        first = CachedEmbedder(CountingEmbedder(), folder)
        want = np.stack([vector(t) for t in texts])
        assert np.array_equal(first.encode(texts), want)
        first.close()
        inner = CountingEmbedder()
        second = CachedEmbedder(inner, folder)
        got = second.encode(texts)
        second.close()
        assert inner.calls == [] and got.dtype == np.float32
        assert got.tobytes() == want.tobytes()


def test_a_fully_cached_encode_never_loads_the_real_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = EmbeddingSettings()  # the packaged model, never loaded here
    CachedEmbedder(CountingEmbedder(cfg), tmp_path).encode(["one chunk", "another chunk"])
    loads: list[str] = []
    monkeypatch.setattr(encoder, "load_sentence_transformer", lambda name, *a, **kw: loads.append(name))
    real = Embedder(cfg, _models())
    assert CachedEmbedder(real, tmp_path).encode(["another chunk"]).shape == (1, cfg.dims)
    assert loads == []


def test_another_model_identity_misses(tmp_path: Path) -> None:
    CachedEmbedder(CountingEmbedder(), tmp_path).encode(["a"])
    for cfg in (EmbeddingSettings(model="someone/other-model", dims=DIMS), EmbeddingSettings(dims=DIMS, backend="onnx"),
                EmbeddingSettings(dims=DIMS, backend="onnx", onnx_quantized=True)):
        inner = CountingEmbedder(cfg)
        CachedEmbedder(inner, tmp_path).encode(["a"])
        assert inner.calls == [["a"]], cfg
    assert len(list(tmp_path.glob("*.sqlite"))) == 4
    # what does not change the vectors does not change the identity
    base = EmbeddingSettings(dims=DIMS)
    same = EmbeddingSettings(dims=DIMS, prepend_title=False, batch_size=7)
    assert model_identity(base, _models()) == model_identity(same, _models())


def test_a_model_folder_that_changes_gets_a_new_identity(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    cfg = EmbeddingSettings(model=str(model), dims=DIMS)
    before = model_identity(cfg, _models())
    (model / "model.safetensors").write_bytes(b"retrain")
    assert model_identity(cfg, _models()) != before


def test_queries_pass_through_uncached(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, tmp_path)
    assert np.array_equal(cache.encode_query("q"), vector(inner.prompts.query + "q"))  # the model's query prompt
    cache.encode(["q"])
    assert inner.calls == [["q"], ["q"]] and cache.stats()["embedded"] == 1


def test_concurrent_writers_share_one_file(tmp_path: Path) -> None:
    texts = [f"chunk {i}" for i in range(300)]
    errors: list[BaseException] = []

    def write(part: list[str]) -> None:
        try:
            cache = CachedEmbedder(CountingEmbedder(), tmp_path)
            for i in range(0, len(part), 20):
                cache.encode(part[i:i + 20])
            cache.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(texts[s:s + 200],)) for s in (0, 100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    inner = CountingEmbedder()
    reader = CachedEmbedder(inner, tmp_path)
    assert np.array_equal(reader.encode(texts), np.stack([vector(t) for t in texts])) and inner.calls == []
    with sqlite3.connect(reader.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_an_unusable_cache_file_only_costs_time(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, tmp_path)
    cache.path.write_bytes(b"not a database" * 100)
    assert np.array_equal(cache.encode(["a"]), vector("a")[None])
    assert np.array_equal(cache.encode(["a"]), vector("a")[None])
    assert inner.calls == [["a"], ["a"]] and "unusable" in caplog.text


def test_eval_uses_the_cache_unless_told_not_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_CACHE", str(tmp_path))
    inner = CountingEmbedder()

    ingest = load_settings().ingest
    cache, why = embedding_cache(inner, ingest)
    assert cache is not None and cache.path.parent == tmp_path / "embeddings" and cache.inner is inner and not why
    other, _ = embedding_cache(inner, ingest, cache_dir=tmp_path / "elsewhere")
    assert other is not None and other.path.parent == tmp_path / "elsewhere"
    assert embedding_cache(inner, ingest, enabled=False) == (None, None)
    assert embedding_cache(inner, ingest, build=False) == (None, None)
    off, why = embedding_cache(inner, load_settings(ingest={"workers": 2}).ingest)
    assert off is None and why is not None and "HSP_INGEST__WORKERS" in why
