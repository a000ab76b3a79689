"""The one encoder of passages, queries and the chunker's token counts: :class:`OnnxEncoder` on CPU, else
sentence-transformers' torch model (a GPU, ``backend=torch``, or a folder :func:`read_spec` cannot read)."""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from hybridsearch.embedding import catalogue
from hybridsearch.embedding.models import Prompts, how_to_get, locate_model, pick_device, quiet_loading, resolve_prompts
from hybridsearch.errors import ModelError
from hybridsearch.settings import EmbeddingSettings, ModelsSettings

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)
#: Lowest cosine between torch's and ONNX Runtime's vector of any text for the two to count as the same model
MIN_COSINE = 0.9999


class Unsupported(ModelError):
    """A folder :class:`OnnxEncoder` cannot serve (sentence-transformers' torch model serves it)."""


@dataclass(frozen=True)
class ModelSpec:
    """How a Transformer → Pooling (→ Normalize) folder makes a unit vector."""

    tokenizer: str
    max_length: int
    truncation_side: Literal["left", "right"]
    lowercase: bool
    pooling: Literal["mean", "cls"]


def _json(path: Path, kind: type = dict) -> Any:
    """The JSON ``kind`` in ``path`` (empty when there is no such file). Raises Unsupported."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return kind()
    except (OSError, ValueError) as exc:
        raise Unsupported(f"{path.name} is unreadable: {exc}") from exc
    if not isinstance(data, kind):
        raise Unsupported(f"{path.name} is not a JSON {kind.__name__}")
    return data


def _modules(folder: Path) -> tuple[Path, Path]:
    """The Transformer's and the Pooling module's folders (a Normalize module may follow)."""
    listed: Any = _json(folder / "modules.json", list)
    if not listed or not all(isinstance(m, dict) for m in listed):
        raise Unsupported("no list of modules in modules.json")
    kinds = [(str(m.get("type", "")).rsplit(".", 1)[-1], folder / str(m.get("path", "")))
             for m in sorted(listed, key=lambda m: int(m.get("idx", 0)))]
    names = [k for k, _ in kinds]
    if names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):  # by class name
        raise Unsupported(f"modules {' → '.join(names) or 'none'} (ONNX: Transformer → Pooling [→ Normalize])")
    return kinds[0][1], kinds[1][1]


def _pooling(config: dict[str, Any]) -> Literal["mean", "cls"]:
    mode = config.get("pooling_mode")  # else the older keys pooling_mode_cls_token, pooling_mode_mean_tokens...
    modes = [k.removeprefix("pooling_mode_").removesuffix("_token").removesuffix("_tokens")
             for k, on in config.items() if k.startswith("pooling_mode_") and on is True] if mode is None else (
        [mode] if isinstance(mode, str) else list(mode))
    if config.get("include_prompt", True) is not True:
        raise Unsupported("the pooling leaves the prompt's tokens out (include_prompt=false)")
    if modes in (["mean"], ["cls"]):
        return "mean" if modes == ["mean"] else "cls"
    raise Unsupported(f"pooling {'+'.join(map(str, modes)) or 'none'} (ONNX: mean or cls)")


def _max_length(module_config: dict[str, Any], word: Path) -> int:
    """sentence-transformers' sequence limit: the module config's, else the tokenizer's capped at the model's."""
    given = module_config.get("max_seq_length")
    if isinstance(given, int) and given > 0:
        return given
    limits = [v for v in (_json(word / "tokenizer_config.json").get("model_max_length"),
                          _json(word / "config.json").get("max_position_embeddings"))
              if isinstance(v, int) and v > 0]
    if not limits:
        raise Unsupported("no sequence limit (max_seq_length, model_max_length or max_position_embeddings)")
    return min(limits)


def read_spec(folder: str | Path) -> ModelSpec:
    """How the sentence-transformers folder ``folder`` makes its vectors. Raises Unsupported."""
    root = Path(folder)
    if not root.is_dir():
        raise Unsupported(f"{folder} is not a local folder")
    word, pool_dir = _modules(root)
    tokenizer = word / "tokenizer.json"
    if not tokenizer.is_file():
        raise Unsupported("the folder has no tokenizer.json")
    module_config = _json(word / "sentence_bert_config.json")
    task = module_config.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise Unsupported(f"transformer task {task!r}")
    side = _json(word / "tokenizer_config.json").get("truncation_side", "right")
    if side not in ("left", "right"):
        raise Unsupported(f"truncation side {side!r}")
    return ModelSpec(str(tokenizer), _max_length(module_config, word), side,
                     module_config.get("do_lower_case") is True, _pooling(_json(pool_dir / "config.json")))


def window(limit: int, max_tokens: int | None) -> int:
    """The word pieces a text is cut at: the model's ``limit``, or ``max_tokens`` (the query window) when smaller."""
    return limit if max_tokens is None else max(1, min(limit, max_tokens))


def load_tokenizer(spec: ModelSpec) -> Tokenizer:
    """The folder's ``tokenizer.json`` as sentence-transformers uses it, without truncation or padding of its own."""
    from tokenizers import Tokenizer, normalizers

    tokenizer = Tokenizer.from_file(spec.tokenizer)
    if spec.lowercase:
        own = [tokenizer.normalizer] if tokenizer.normalizer is not None else []
        tokenizer.normalizer = normalizers.Sequence([normalizers.Lowercase(), *own])
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """Token vectors ``[texts, tokens, dims]`` pooled (first token or mean over attended ones) to unit length."""
    if mode == "cls":
        vecs = hidden[:, 0, :]
    else:
        weights = mask.astype(np.float32)[:, :, None]
        vecs = (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
    norms = np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    out: np.ndarray = np.asarray(vecs / norms, dtype=np.float32)
    return out


def compare_vectors(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The lowest cosine between matching rows of ``a`` and ``b`` and their largest absolute difference."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    cos = (a64 * b64).sum(1) / np.maximum(np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1), 1e-12)
    return float(cos.min()), float(np.abs(a64 - b64).max())


class TextTokenizer:
    """The model's word pieces as the chunker counts them (special tokens left out). One per thread."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def offsets(self, text: str) -> list[tuple[int, int]]:
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        return [(int(s), int(e)) for s, e in enc.offsets if e > s]


class OnnxEncoder:
    """Unit vectors of texts by the ONNX graph ``onnx_path`` of a folder read as ``spec`` says."""

    def __init__(self, onnx_path: Path, spec: ModelSpec, threads: int | None = None) -> None:
        import onnxruntime as ort

        self.spec = spec
        self.tokenizer = load_tokenizer(spec)
        self._lock = threading.Lock()  # the Rust tokenizer's truncation is set per call
        opts = ort.SessionOptions()  # every graph optimisation; idle threads sleep rather than spin
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                                else os.cpu_count() or 1)
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(onnx_path), sess_options=opts, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        self.output = "last_hidden_state" if "last_hidden_state" in outputs else outputs[0]

    def encode(self, texts: list[str], prompt: str = "", batch_size: int = 32,
               max_tokens: int | None = None) -> np.ndarray:
        """Vectors of ``prompt + text`` for each text, cut at ``max_tokens`` word pieces (None: the model's limit)."""
        with self._lock:
            self.tokenizer.enable_truncation(window(self.spec.max_length, max_tokens), stride=0,
                                             strategy="longest_first", direction=self.spec.truncation_side)
            encs = self.tokenizer.encode_batch([prompt + t for t in texts])
        order = sorted(range(len(texts)), key=lambda i: -len(encs[i].ids))  # longest first: least padding
        parts = []
        for start in range(0, len(order), batch_size):
            rows = [encs[i] for i in order[start:start + batch_size]]
            for enc in rows:
                enc.pad(len(rows[0].ids))
            mask = np.array([e.attention_mask for e in rows], dtype=np.int64)
            feeds = {"input_ids": np.array([e.ids for e in rows], dtype=np.int64), "attention_mask": mask,
                     "token_type_ids": np.array([e.type_ids for e in rows], dtype=np.int64)}
            (hidden,) = self.session.run([self.output], {k: v for k, v in feeds.items() if k in self.inputs})
            parts.append(pool(np.asarray(hidden, dtype=np.float32), mask, self.spec.pooling))
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.concatenate(parts)[np.argsort(order)]


def load_sentence_transformer(name: str, models: ModelsSettings, device: str = "auto") -> SentenceTransformer:
    """A SentenceTransformer by local folder, catalogue name or Hub name. Raises ModelError with the fix."""
    entry = catalogue.entry(name)
    if entry is not None and not entry.torch_weights:
        raise ModelError(f"{entry.name} is an int8 ONNX-only model (no torch weights); sentence-transformers cannot "
                         "load it", fix=f"Use {getattr(catalogue.fp32_of(entry), 'name', 'its fp32 model')} for "
                         "HSP_EMBEDDING__MODEL (hsp models list)")
    where, local_only = locate_model(name, models)  # ModelError, before sentence-transformers is even imported
    from sentence_transformers import SentenceTransformer

    try:
        with quiet_loading():
            return SentenceTransformer(where, device=pick_device(device), local_files_only=local_only)
    except Exception as exc:
        raise ModelError(f"cannot load embedding model {name!r} ({type(exc).__name__}: {exc})",
                         fix=how_to_get(name)) from exc


class Embedder:
    """Encodes texts into unit vectors with ``threads`` CPU threads (None: one per core); loads its model once."""

    def __init__(self, cfg: EmbeddingSettings, models: ModelsSettings, *, threads: int | None = None) -> None:
        self.cfg = cfg
        self.models = models
        self.threads = threads
        self._model: SentenceTransformer | None = None
        self._onnx: tuple[OnnxEncoder | None] | None = None  # set once the runtime is decided
        self._lock = threading.RLock()
        self._query_cache = functools.lru_cache(maxsize=self.cfg.query_cache_size)(self._embed_query)

    @functools.cached_property
    def prompts(self) -> Prompts:
        return resolve_prompts(self.cfg, self.models)

    @property
    def model(self) -> SentenceTransformer:
        """sentence-transformers' torch model (training, the GPU path, the ONNX export)."""
        with self._lock:
            if self._model is None:
                if self.threads:
                    import torch

                    torch.set_num_threads(self.threads)
                model = load_sentence_transformer(self.cfg.model, self.models, self.cfg.device)
                self._check_dims(model.get_embedding_dimension())
                self._model = model
            return self._model

    def _check_dims(self, dims: int | None) -> None:
        if dims != self.cfg.dims:
            raise ModelError(f"model {self.cfg.model!r} makes {dims}-dim vectors but "
                             f"HSP_EMBEDDING__DIMS={self.cfg.dims}")

    @property
    def onnx(self) -> OnnxEncoder | None:
        """:class:`OnnxEncoder` on CPU for a folder it can read; None where the torch model embeds."""
        with self._lock:
            if self._onnx is None:
                self._onnx = (self._load_onnx(),)
            return self._onnx[0]

    @property
    def runtime(self) -> Literal["onnx", "torch"]:
        return "onnx" if self.onnx is not None else "torch"

    def _load_onnx(self) -> OnnxEncoder | None:
        if self.cfg.backend == "torch" or pick_device(self.cfg.device) != "cpu":
            return None
        where, _ = locate_model(self.cfg.model, self.models)  # ModelError: not here, or its files changed
        try:
            spec = read_spec(where)
        except Unsupported as exc:
            if self.cfg.backend == "onnx":
                raise
            log.info("embedding with sentence-transformers, not ONNX Runtime: %s", exc.problem)
            return None
        from hybridsearch.embedding.onnx import export, onnx_files

        quantized = self.cfg.onnx_quantized
        target = onnx_files(where, self.models, quantized)[1]
        if not target.is_file():
            entry = catalogue.entry(self.cfg.model)
            if entry is not None and not entry.torch_weights:
                raise ModelError(f"{entry.name} has no ONNX graph",
                                 fix=f"Run `hsp models fetch {entry.name} --force`")
            target = export(self.model, where, self.models, quantized)  # once: torch loads for it
        encoder = OnnxEncoder(target, spec, self.threads)
        self._check_dims(int(encoder.encode(["a"]).shape[1]))
        return encoder

    @property
    def max_seq_length(self) -> int:
        if (onnx := self.onnx) is not None:
            return onnx.spec.max_length
        return int(self.model.max_seq_length or 512)

    def tokenizer(self) -> TextTokenizer:
        """A new copy of the model's tokenizer for the chunker (one per thread)."""
        if (onnx := self.onnx) is not None:
            return TextTokenizer(load_tokenizer(onnx.spec))
        from tokenizers import Tokenizer

        copy = Tokenizer.from_str(self.model.tokenizer.backend_tokenizer.to_str())
        copy.no_truncation()
        copy.no_padding()
        return TextTokenizer(copy)

    def encode(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        """Unit passage vectors, float32 ``(len(texts), dims)``."""
        return self.embed(texts, self.prompts.passage, batch_size)

    def encode_queries(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        """Query vectors for ``texts``, uncached, cut at the model's limit."""
        return self.embed(texts, self.prompts.query, batch_size)

    def embed(self, texts: list[str], prompt: str, batch_size: int | None = None,
              max_tokens: int | None = None) -> np.ndarray:
        """Vectors of ``prompt + text`` for each text, cut at ``max_tokens`` word pieces (None: the model's limit)."""
        if not texts:
            return np.zeros((0, self.cfg.dims), dtype=np.float32)
        batch = batch_size or self.cfg.batch_size
        if (onnx := self.onnx) is not None:
            return onnx.encode(texts, prompt, batch, max_tokens)
        model = self.model
        extra: dict[str, Any] = {}
        if max_tokens is not None:
            limit = int(getattr(model, "max_seq_length", None) or max_tokens)
            extra = {"processing_kwargs": {"text": {"max_length": window(limit, max_tokens)}}}
        out: np.ndarray = model.encode(texts, prompt=prompt, batch_size=batch, normalize_embeddings=True,
                                       convert_to_numpy=True, show_progress_bar=False, **extra)
        return np.asarray(out, dtype=np.float32)

    def clear_cache(self) -> None:
        self._query_cache.cache_clear()

    def encode_query(self, text: str) -> np.ndarray:
        """One query vector, cut at ``query_max_tokens``, from an LRU cache of ``query_cache_size`` entries."""
        return self._query_cache(text)

    def _embed_query(self, text: str) -> np.ndarray:
        vec: np.ndarray = self.embed([text], self.prompts.query, max_tokens=self.cfg.query_max_tokens)[0]
        return vec

