"""A model folder is checked against the record of its files before it embeds anything, and a catalogue name always
means the catalogue entry, whatever lies in the working directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hybridsearch.embedding import catalogue, models
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.errors import ModelError
from hybridsearch.settings import EmbeddingSettings, ModelsSettings, load_settings


def _models() -> ModelsSettings:
    return load_settings().models



@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_CACHE", str(tmp_path / "hsp-cache"))


@pytest.fixture
def tiny(tiny_bi_encoder: Path, tmp_path: Path) -> Path:
    """A copy of the tiny bi-encoder, exported to ONNX (which records its files and the graph)."""
    folder = Path(shutil.copytree(tiny_bi_encoder, tmp_path / "tiny"))
    from hybridsearch.embedding.onnx import export

    export(Embedder(EmbeddingSettings(model=str(folder), dims=32, device="cpu"), _models()).model, folder, _models())
    return folder


def onnx_graph(folder: Path) -> Path:
    from hybridsearch.embedding.onnx import onnx_files

    return onnx_files(folder, _models())[0]


def flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_an_unchanged_folder_loads_and_embeds(tiny: Path) -> None:
    vecs = Embedder(EmbeddingSettings(model=str(tiny), dims=32, device="cpu"), _models()).encode(["a text"])
    assert vecs.shape == (1, 32)


@pytest.mark.parametrize("name", ["model.safetensors", "model.onnx", "tokenizer.json"])
def test_one_byte_changed_is_refused_at_load(tiny: Path, name: str) -> None:
    target = onnx_graph(tiny) if name == "model.onnx" else next(tiny.rglob(name))
    flip_one_byte(target)
    with pytest.raises(ModelError) as err:
        Embedder(EmbeddingSettings(model=str(tiny), dims=32, device="cpu"), _models()).encode(["a text"])
    assert target.name in err.value.problem
    assert err.value.fix is not None and "hsp models verify" in err.value.fix


def test_a_touched_but_equal_file_is_accepted(tiny: Path) -> None:
    weights = next(tiny.rglob("model.safetensors"))
    weights.write_bytes(weights.read_bytes())  # same bytes, new modification time
    assert models.changed_files(tiny, _models()) == []


def test_a_missing_file_is_refused(tiny: Path) -> None:
    (tiny / "modules.json").unlink()
    changed = models.changed_files(tiny, _models())
    assert changed is not None and any("modules.json" in c for c in changed)


def test_a_folder_in_the_working_directory_does_not_shadow_a_catalogue_name(
        tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    shutil.copytree(tiny, work / "bge-small-en-v1.5")
    shutil.copytree(tiny, work / "all-MiniLM-L6-v2")
    monkeypatch.chdir(work)
    assert models.resolve_model("all-MiniLM-L6-v2", _models()) == models.packaged_model()
    with pytest.raises(ModelError) as err:  # not fetched here: the catalogue entry, not the folder in the cwd
        models.locate_model("bge-small-en-v1.5", _models())
    assert err.value.fix is not None and "hsp models fetch bge-small-en-v1.5" in err.value.fix
    entry = catalogue.entry("bge-small-en-v1.5")
    assert entry is not None and models.resolve_model("bge-small-en-v1.5", _models()) != str(work / "bge-small-en-v1.5")
    assert models.resolve_model("./bge-small-en-v1.5", _models()) == str((work / "bge-small-en-v1.5").resolve())
