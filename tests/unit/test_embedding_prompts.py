"""Prompts per model family: every passage embedded after the model's passage prompt, every query after
its query prompt (torch and ONNX), the settings' override (empty: none), the embedding cache keyed on the prompt,
the chunk index's _meta recording the passage prompt, train-embedder's texts prompted the same way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybridsearch.embedding.cache import CachedEmbedder, cache_key, model_identity
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.embedding.models import Prompts, folder_prompts, model_prompts, resolve_prompts
from hybridsearch.index.spec import CHECKED_META, chunk_meta, meta_differences
from hybridsearch.settings import EmbeddingSettings, ModelsSettings, Settings, load_settings
from hybridsearch.training.embedder import model_encoder, prompted_columns, record_prompts

Q, P = "query: ", "passage: "
BGE = "Represent this sentence for searching relevant passages: "
TEXTS = ["how do bees find food", "Vitamin D deficiency is associated with fractures.", "a"]


def _models() -> ModelsSettings:
    return load_settings().models



def with_prompts(source: Path, dest: Path, prompts: dict[str, str]) -> Path:
    """A copy of the model folder ``source`` whose config_sentence_transformers.json carries ``prompts``."""
    shutil.copytree(source, dest)
    path = dest / "config_sentence_transformers.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    config.update(prompts=prompts, default_prompt_name=None)
    path.write_text(json.dumps(config))
    return dest


@pytest.fixture(scope="module")
def prompted(tiny_bi_encoder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random bi-encoder (32 dims, mean pooling) with e5-like prompts in its folder config."""
    return with_prompts(tiny_bi_encoder, tmp_path_factory.mktemp("prompted") / "model", {"query": Q, "passage": P})


@pytest.fixture(scope="module")
def st(prompted: Path) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(prompted), device="cpu")


def reference(st: Any, texts: list[str]) -> np.ndarray:
    """sentence-transformers' vectors of exactly these texts (no prompt of its own)."""
    return np.asarray(st.encode(texts, prompt="", normalize_embeddings=True, convert_to_numpy=True), dtype=np.float32)


def cfg(model: str | Path = "all-MiniLM-L6-v2", **kw: Any) -> EmbeddingSettings:
    return EmbeddingSettings(model=str(model), device="cpu", **kw)


def tiny(folder: Path, **kw: Any) -> EmbeddingSettings:
    return cfg(folder, dims=32, backend="torch", **kw)


# --- where the prompts come from -------------------------------------------------------------------------------

def test_catalogue_models_have_their_family_prompts_and_minilm_none() -> None:
    assert model_prompts("bge-small-en-v1.5", _models()) == Prompts(BGE, "")
    assert model_prompts("BAAI/bge-small-en-v1.5", _models()) == Prompts(BGE, "")  # the Hub alias
    assert model_prompts("e5-small-v2-int8", _models()) == Prompts(Q, P)
    assert model_prompts("all-MiniLM-L6-v2", _models()) == Prompts()
    assert resolve_prompts(EmbeddingSettings(), _models()) == Prompts(BGE, "")  # the default model's
    assert resolve_prompts(EmbeddingSettings(model="all-MiniLM-L6-v2"), _models()) == Prompts()


def test_a_folder_config_gives_the_prompts(prompted: Path, tmp_path: Path) -> None:
    assert model_prompts(str(prompted), _models()) == Prompts(Q, P)
    # sentence-transformers' other names for the passage prompt; empty ones are no prompt
    (tmp_path / "doc").mkdir()
    (tmp_path / "doc" / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "", "document": "doc: "}, "default_prompt_name": None}))
    assert model_prompts(str(tmp_path / "doc"), _models()) == Prompts("", "doc: ")
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "config_sentence_transformers.json").write_text('{"prompts": {"query": "", "document": ""}}')
    assert model_prompts(str(tmp_path / "none"), _models()) == Prompts()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config_sentence_transformers.json").write_text("{not json")
    assert folder_prompts(tmp_path / "broken") == {} and model_prompts(str(tmp_path / "broken"), _models()) == Prompts()


def test_the_settings_override_and_an_empty_value_disables(prompted: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    both = resolve_prompts(tiny(prompted, query_prompt="search: "), _models())
    assert both == Prompts("search: ", P)
    off = resolve_prompts(tiny(prompted, query_prompt="", passage_prompt=""), _models())
    assert off == Prompts()
    e5 = resolve_prompts(cfg("e5-small-v2", passage_prompt=""), _models())
    assert e5 == Prompts(Q, "")
    # from the environment: unset is the model's own, empty disables
    monkeypatch.setenv("HSP_EMBEDDING__MODEL", "e5-small-v2")
    monkeypatch.setenv("HSP_EMBEDDING__PASSAGE_PROMPT", "")
    env = Settings().embedding
    assert (env.query_prompt, env.passage_prompt) == (None, "")
    assert (resolve_prompts(env, _models()).query, resolve_prompts(env, _models()).passage) == (Q, "")


# --- what is embedded ------------------------------------------------------------------------------------------

def test_passages_and_queries_are_embedded_after_their_prompts(prompted: Path, st: Any) -> None:
    e = Embedder(tiny(prompted), _models())
    assert e.prompts == Prompts(Q, P)
    passages = e.encode(TEXTS)
    assert np.allclose(passages, reference(st, [P + t for t in TEXTS]), atol=1e-6)
    assert not np.allclose(passages, reference(st, TEXTS), atol=1e-3)  # the prompt changes the vectors
    queries = e.encode_queries(TEXTS)
    assert np.allclose(queries, reference(st, [Q + t for t in TEXTS]), atol=1e-6)
    for text, want in zip(TEXTS, queries, strict=True):
        assert np.allclose(e.encode_query(text), want, atol=1e-6)
    assert e.runtime == "torch"


def test_the_onnx_encoder_puts_the_prompts_first(prompted: Path, st: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("HSP_CACHE", str(tmp_path))
    e = Embedder(cfg(prompted, dims=32, backend="onnx", query_cache_size=0), _models())
    got = np.stack([e.encode_query(t) for t in TEXTS])
    assert e.runtime == "onnx"
    want = reference(st, [Q + t for t in TEXTS])
    assert float((got * want).sum(1).min()) > 0.99999
    assert float((got * reference(st, TEXTS)).sum(1).min()) < 0.999
    passages = e.encode(TEXTS)
    assert float((passages * reference(st, [P + t for t in TEXTS])).sum(1).min()) > 0.99999


def test_the_override_replaces_or_disables_the_models_prompts(prompted: Path, st: Any) -> None:
    e = Embedder(tiny(prompted, query_prompt="search: ", passage_prompt=""), _models())
    assert np.allclose(e.encode(TEXTS), reference(st, TEXTS), atol=1e-6)
    assert np.allclose(e.encode_query(TEXTS[0]), reference(st, ["search: " + TEXTS[0]])[0], atol=1e-6)
    off = Embedder(tiny(prompted, query_prompt="", passage_prompt=""), _models())
    assert np.allclose(off.encode_queries(TEXTS), reference(st, TEXTS), atol=1e-6)


def test_a_default_prompt_name_in_the_folder_never_applies_on_its_own(tiny_bi_encoder: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    folder = with_prompts(tiny_bi_encoder, tmp_path / "m", {"query": Q})
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    (folder / "config_sentence_transformers.json").write_text(json.dumps({**config, "default_prompt_name": "query"}))
    plain = SentenceTransformer(str(folder), device="cpu")
    e = Embedder(tiny(folder), _models())
    assert e.prompts == Prompts(Q, "")
    assert np.allclose(e.encode(TEXTS), reference(plain, TEXTS), atol=1e-6)  # passages: no prompt at all


def test_minilm_is_embedded_without_a_prompt() -> None:
    from sentence_transformers import SentenceTransformer

    from hybridsearch.embedding.models import resolve_model

    e = Embedder(cfg(backend="torch"), _models())
    assert e.prompts == Prompts()
    plain = SentenceTransformer(resolve_model("all-MiniLM-L6-v2", _models()), device="cpu")
    want = np.asarray(plain.encode(TEXTS, normalize_embeddings=True), dtype=np.float32)
    assert np.allclose(e.encode(TEXTS), want, atol=1e-6)
    assert np.allclose(e.encode_query(TEXTS[0]), want[0], atol=1e-6)


# --- the embedding cache -----------------------------------------------------------------------------------------

class PromptEcho(Embedder):
    """Embeds by a hash of ``prompt + text`` (no model); records what it was asked."""

    def __init__(self, cfg: EmbeddingSettings) -> None:
        super().__init__(cfg, _models())
        self.calls: list[tuple[str, list[str]]] = []

    def embed(self, texts: list[str], prompt: str, batch_size: int | None = None,
              max_tokens: int | None = None) -> np.ndarray:
        self.calls.append((prompt, list(texts)))
        rng = [np.random.default_rng(abs(hash(prompt + t)) % 2**32) for t in texts]
        return np.stack([r.standard_normal(self.cfg.dims).astype(np.float32) for r in rng])


def test_cache_keys_differ_with_the_prompt() -> None:
    assert cache_key("bees") == cache_key("bees", "")
    keys = {cache_key("bees"), cache_key("bees", P), cache_key("bees", Q), cache_key(P + "bees")}
    assert len(keys) == 4


def test_the_cache_identity_names_the_passage_prompt(prompted: Path) -> None:
    minilm = model_identity(EmbeddingSettings(), _models())
    assert "prompt" not in minilm  # caches built before prompts keep their files
    own = model_identity(tiny(prompted), _models())
    assert f"passage_prompt={P!r}" in own
    assert model_identity(tiny(prompted, passage_prompt=""), _models()) != own
    assert model_identity(tiny(prompted, query_prompt="other: "), _models()) == own  # query vectors are keyed by prompt


def test_cached_passages_and_queries_never_mix(tmp_path: Path) -> None:
    inner = PromptEcho(EmbeddingSettings(dims=8, query_prompt=Q, passage_prompt=P))
    cache = CachedEmbedder(inner, tmp_path)
    passages = cache.encode(["bees", "ants"])
    queries = cache.encode_queries(["bees"])
    assert inner.calls == [(P, ["bees", "ants"]), (Q, ["bees"])]
    assert not np.array_equal(passages[0], queries[0])
    assert np.array_equal(cache.encode(["ants", "bees"]), passages[::-1]) and len(inner.calls) == 2  # hits
    cache.close()
    # the same texts with no passage prompt: another file, embedded afresh
    plain = PromptEcho(EmbeddingSettings(dims=8, query_prompt=Q, passage_prompt=""))
    other = CachedEmbedder(plain, tmp_path)
    assert other.path != cache.path
    assert not np.array_equal(other.encode(["bees"])[0], passages[0]) and plain.calls == [("", ["bees"])]
    other.close()


# --- what the index records --------------------------------------------------------------------------------------

def _settings(**embedding: Any) -> Settings:
    return Settings(embedding=EmbeddingSettings(**embedding))


def test_the_chunk_index_records_and_checks_the_passage_prompt() -> None:
    assert "passage_prompt" in CHECKED_META
    minilm, e5 = _settings(), _settings(model="e5-small-v2")
    assert chunk_meta(minilm)["passage_prompt"] == "" and chunk_meta(e5)["passage_prompt"] == P
    assert meta_differences(chunk_meta(minilm), minilm) == []
    built = chunk_meta(e5)
    assert meta_differences(built, e5) == []
    unprompted = _settings(model="e5-small-v2", passage_prompt="")
    assert meta_differences(built, unprompted) == [("_meta.passage_prompt", "", P)]
    assert meta_differences({**chunk_meta(unprompted)}, e5) == [("_meta.passage_prompt", P, "")]


# --- train-embedder ------------------------------------------------------------------------------------------

def test_training_pairs_and_validation_use_the_prompts(st: Any, tmp_path: Path) -> None:
    cols = {"anchor": ["bees"], "positive": ["pollen"], "negative_1": ["ants"]}
    assert prompted_columns(cols, Prompts(Q, P)) == {"anchor": [Q + "bees"], "positive": [P + "pollen"],
                                                     "negative_1": [P + "ants"]}
    assert prompted_columns(cols, Prompts()) == cols
    assert np.allclose(model_encoder(st, 4, Q)(TEXTS), reference(st, [Q + t for t in TEXTS]), atol=1e-6)
    assert np.allclose(model_encoder(st, 4)(TEXTS), reference(st, TEXTS), atol=1e-6)


def test_a_trained_model_keeps_the_prompts_it_was_trained_with(prompted: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(prompted), device="cpu")
    record_prompts(model, Prompts("search: ", ""))
    model.save(str(tmp_path / "trained"))
    assert model_prompts(str(tmp_path / "trained"), _models()) == Prompts("search: ", "")
