"""The ONNX graph of a model folder: exported once from sentence-transformers' torch model, quantised on request.

sentence-transformers' own ``backend="onnx"`` needs Optimum, whose releases do not work with the transformers 5
installed here, so the export is done with ``torch.onnx.export`` and the int8 variant with
``onnxruntime.quantization.quantize_dynamic``. Both are written once to ``<cache>/onnx/<hash of the model's files and
the opset>/``; a catalogue folder ships its own ``onnx/model.onnx`` (:func:`onnx_files`). An export records the
folder's files and the graph (:func:`.models.record_files`), so the graph is checked whenever the model loads.
:func:`ort_session` opens a graph for :class:`.encoder.OnnxEncoder`. Importing this module imports neither torch
nor sentence-transformers (only :func:`export` does).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsearch.embedding.catalogue import MARKER, cache_home
from hybridsearch.embedding.models import record_files

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_export_lock = threading.Lock()


def cache_root() -> Path:
    """Where exports are kept: ``<cache>/onnx`` (:func:`.catalogue.cache_home`)."""
    return cache_home() / "onnx"


def fingerprint(model_dir: Path) -> str:
    """What the export depends on: the folder, the opset, each weight file's size and modification time (a model
    fine-tuned again into the same folder keeps its sizes) and the configuration files' contents."""
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


def export_folder(model_dir: str | Path) -> Path:
    """The cache folder of ``model_dir``'s exports: ``cache_root()/<fingerprint>``."""
    return cache_root() / fingerprint(Path(model_dir))


def onnx_files(model_dir: str | Path, quantized: bool = False, folder: Path | None = None) -> tuple[Path, Path]:
    """``(fp32, target)``: where the float ONNX file of ``model_dir`` is (or will be) and the file queries run
    (the int8 one when ``quantized``); nothing is exported. A catalogue model's folder (``hsp models fetch``) ships
    its float file: that one is used. ``folder``: :func:`export_folder`'s answer, when known."""
    folder = folder or export_folder(model_dir)
    shipped = Path(model_dir) / "onnx" / "model.onnx"
    fp32 = shipped if (Path(model_dir) / MARKER).is_file() and shipped.is_file() else folder / "model.onnx"
    return fp32, folder / "model_qint8.onnx" if quantized else fp32


def export(model: SentenceTransformer, model_dir: str | Path, quantized: bool = False) -> Path:
    """Path of the ONNX file for ``model`` (loaded from ``model_dir``), exporting it on first use
    (:func:`onnx_files`: a catalogue model's shipped file is used, not exported again)."""
    fp32, target = onnx_files(model_dir, quantized)
    with _export_lock:
        made = not fp32.exists() or (quantized and not target.exists())
        if not fp32.exists():
            _export_fp32(model, fp32)
        if quantized and not target.exists():
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
        if made:
            record_files(Path(model_dir), [target] if target == fp32 else [fp32, target])
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


def ort_session(path: Path, device: str = "cpu", threads: int | None = None) -> Any:
    """An ONNX Runtime session on ``path`` (CUDA first when ``device`` allows and the provider exists): every graph
    optimisation, ``threads`` intra-op threads (None: one per core this process may use), threads that sleep between
    runs rather than spin (a CPU shared with the engine keeps its cores)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1))
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers = ["CPUExecutionProvider"]
    if device in {"auto", "cuda"} and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    return ort.InferenceSession(str(path), sess_options=opts, providers=providers)
