"""ONNX graphs of model folders: the export (once, int8 on request) into ``<cache_dir>/onnx/<fingerprint>/``, a
catalogue folder's own ``onnx/model.onnx``, and a BERT encoder's torch weights read back off an fp32 graph."""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybridsearch.embedding.catalogue import MARKER
from hybridsearch.embedding.models import record_files
from hybridsearch.errors import ModelError
from hybridsearch.settings import ModelsSettings

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_export_lock = threading.Lock()
_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.")


def fingerprint(model_dir: Path) -> str:
    """A model folder's identity: path, opset, weight files' sizes and modification times, configuration contents."""
    h = hashlib.sha256(f"opset={OPSET};{model_dir}".encode())
    for p in sorted(model_dir.rglob("*")):
        if p.is_file() and p.suffix in {".safetensors", ".bin", ".json", ".txt"}:
            st = p.stat()
            h.update(f"{p.relative_to(model_dir)}:{st.st_size}".encode())
            if p.suffix in {".json", ".txt"}:
                h.update(p.read_bytes())
            else:
                h.update(f":{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def onnx_files(model_dir: str | Path, models: ModelsSettings, quantized: bool = False) -> tuple[Path, Path]:
    """``(fp32, target)``: where ``model_dir``'s float ONNX file is (or will be) and the one that runs (int8 when
    ``quantized``)."""
    folder = models.cache_dir / "onnx" / fingerprint(Path(model_dir))
    shipped = Path(model_dir) / "onnx" / "model.onnx"
    fp32 = shipped if (Path(model_dir) / MARKER).is_file() and shipped.is_file() else folder / "model.onnx"
    return fp32, folder / "model_qint8.onnx" if quantized else fp32


def export(model: SentenceTransformer, model_dir: str | Path, models: ModelsSettings, quantized: bool = False) -> Path:
    """Path of the ONNX file for ``model`` (loaded from ``model_dir``), exporting it on first use."""
    fp32, target = onnx_files(model_dir, models, quantized)
    with _export_lock:
        if target.exists():
            return target
        if not fp32.exists():
            _export_fp32(model, fp32)
        if not target.exists():  # int8
            from onnxruntime.quantization import QuantType, quantize_dynamic

            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp.onnx")
            root = logging.getLogger()
            level = root.level
            root.setLevel(logging.ERROR)  # quantize_dynamic logs advice on the root logger
            try:
                quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
            finally:
                root.setLevel(level)
            tmp.replace(target)
        record_files(Path(model_dir), models, [target] if target == fp32 else [fp32, target])
    return target


def _export_fp32(model: SentenceTransformer, path: Path) -> None:
    import torch

    transformer: Any = model[0].model
    transformer.eval()

    class _Wrapped(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    sample = model.tokenizer(["an example sentence", "another, longer example sentence here"], padding=True,
                             return_tensors="pt")
    args = tuple(sample[k] if k in sample else torch.zeros_like(sample["input_ids"]) for k in INPUTS)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    axes = {k: {0: "batch", 1: "sequence"} for k in (*INPUTS, "last_hidden_state")}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Wrapped(transformer).cpu(), args, str(tmp), input_names=list(INPUTS),
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=OPSET,
                          dynamo=False)
    tmp.replace(path)


def bert_weights_from_onnx(onnx_path: Path, heads: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(BertConfig keyword arguments, BertModel state dict)`` read off the fp32 ONNX graph of a BERT encoder with
    ``heads`` attention heads; each ``MatMul`` weight is transposed into ``nn.Linear``'s ``[out, in]``. Raises
    ModelError."""
    import onnx
    from onnx import numpy_helper

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
    for node in graph.node:  # x @ W with W [in, out]
        if node.op_type == "MatMul" and node.input[1] in inits and len(inits[node.input[1]].dims) == 2:
            weights[_linear_name(node, consumers, inits)] = arr(node.input[1]).T
    weights = {k: v for k, v in weights.items() if k.endswith((".weight", ".bias"))}
    try:
        vocab, hidden = weights["embeddings.word_embeddings.weight"].shape
        positions = weights["embeddings.position_embeddings.weight"].shape[0]
        types = weights["embeddings.token_type_embeddings.weight"].shape[0]
        intermediate = weights["encoder.layer.0.intermediate.dense.bias"].shape[0]
    except KeyError as exc:
        raise ModelError(f"{onnx_path.name} is not a BERT encoder this builder knows: no initializer {exc}") from exc
    layers = 1 + max((int(m.group(1)) for k in weights if (m := _LAYER.match(k))), default=-1)
    config = {"vocab_size": int(vocab), "hidden_size": int(hidden), "num_hidden_layers": layers,
              "num_attention_heads": heads, "intermediate_size": int(intermediate), "hidden_act": "gelu",
              "max_position_embeddings": int(positions), "type_vocab_size": int(types), "layer_norm_eps": 1e-12,
              "pad_token_id": 0}
    return config, weights


def _linear_name(node: Any, consumers: dict[str, list[Any]], inits: dict[str, Any]) -> str:
    """The ``nn.Linear`` weight name of a MatMul: from the bias added to its output, else from the node's name."""
    names = [i for c in consumers.get(node.output[0], []) if c.op_type == "Add" for i in c.input if i in inits]
    for n in names:
        clean = _param_name(n.split("."))
        if clean is not None and clean.endswith(".bias"):
            return clean.removesuffix(".bias") + ".weight"
    path = _param_name([p for p in node.name.strip("/").split("/")[:-1] if p])
    return f"{path}.weight" if path else f"unnamed:{node.name or node.output[0]}"


def _param_name(parts: list[str]) -> str | None:
    """BertModel's name for a path, whatever wraps the model: from its first ``embeddings`` or ``encoder`` on."""
    for i, part in enumerate(parts):
        if part in {"embeddings", "encoder"}:
            return ".".join(parts[i:])
    return None
