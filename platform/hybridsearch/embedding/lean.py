"""The lean query encoder: one query's vector from a model folder's ONNX file, with neither torch nor
sentence-transformers nor transformers imported.

For a folder whose ``modules.json`` is Transformer → Pooling (→ Normalize) it does what sentence-transformers'
``encode`` does for one text:

- tokenise ``prompt + text`` (the query prompt as a plain prefix, as sentence-transformers puts a text prompt) with
  the ``tokenizers`` library from the folder's ``tokenizer.json``. That file's own truncation and padding are not what
  sentence-transformers uses (the packaged MiniLM's says: cut at 128 tokens, pad to 128), so both are set here:
  truncation, longest first, on the tokenizer's ``truncation_side``, to the model's sequence limit (the
  ``max_seq_length`` of ``sentence_bert_config.json``, else the tokenizer's ``model_max_length`` capped at the
  model's ``max_position_embeddings``, as sentence-transformers decides it), or to the query window
  (``HSP_EMBEDDING__QUERY_MAX_TOKENS``) where that is shorter; no padding (one text). The special
  tokens are the file's own post-processor's ([CLS] … [SEP] for BERT). ``do_lower_case`` puts a Lowercase normaliser
  first, as sentence-transformers does;
- run the ONNX file (:func:`.onnx.export`'s, or the one a catalogue folder ships) in an ONNX Runtime session whose
  threads do not spin (:func:`.onnx.ort_session`);
- pool in numpy as ``1_Pooling/config.json`` says (mean over the tokens, or the first token: ``cls``) and scale to
  unit length (the :class:`~hybridsearch.embedding.Embedder` asks for unit vectors, Normalize module or not).

:func:`lean_spec` raises :class:`LeanUnsupported` for anything else (no ``tokenizer.json``, a Dense or other module,
another pooling mode, prompt tokens left out of pooling, no known sequence limit): :mod:`.query` then keeps the
sentence-transformers path. That the vectors equal torch's is never assumed: :mod:`.query` measures it on probe
texts and :mod:`.agreement` records the result next to the ONNX file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

TOKENIZER_FILE = "tokenizer.json"
ST_MODULE_CONFIG = "sentence_bert_config.json"
#: sentence-transformers' module types, by class name (the module path changed between its versions)
TRANSFORMER, POOLING, NORMALIZE = "Transformer", "Pooling", "Normalize"
#: the legacy pooling keys of ``1_Pooling/config.json`` and the mode each one turns on
LEGACY_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                  "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                  "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}


class LeanUnsupported(Exception):
    """Why a folder cannot be served by the lean encoder (the sentence-transformers path serves it)."""


@dataclass(frozen=True)
class LeanSpec:
    """How the lean encoder reads a folder: its tokenizer file, sequence limit, truncation side, lower-casing,
    pooling, and whether the folder has a Normalize module (vectors are unit length either way)."""

    tokenizer: str
    max_length: int
    truncation_side: Literal["left", "right"]
    lowercase: bool
    pooling: Literal["mean", "cls"]
    normalize: bool

    def describe(self) -> dict[str, Any]:
        """The spec for the agreement record (the tokenizer file as a name inside the folder)."""
        return {**asdict(self), "tokenizer": Path(self.tokenizer).name}


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise LeanUnsupported(f"{path.name} is unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise LeanUnsupported(f"{path.name} is not a JSON object")
    return data


def _modules(folder: Path) -> tuple[Path, Path, bool]:
    """The Transformer's and the Pooling module's folders, and whether a Normalize module follows."""
    path = folder / "modules.json"
    try:
        listed = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LeanUnsupported(f"no readable modules.json ({type(exc).__name__})") from exc
    if not isinstance(listed, list) or not all(isinstance(m, dict) for m in listed):
        raise LeanUnsupported("modules.json is not a list of modules")
    kinds = [(str(m.get("type", "")).rsplit(".", 1)[-1], folder / str(m.get("path", "")))
             for m in sorted(listed, key=lambda m: int(m.get("idx", 0)))]
    names = [k for k, _ in kinds]
    if names not in ([TRANSFORMER, POOLING], [TRANSFORMER, POOLING, NORMALIZE]):
        raise LeanUnsupported(f"modules {' → '.join(names) or 'none'} (lean: Transformer → Pooling [→ Normalize])")
    return kinds[0][1], kinds[1][1], len(names) == 3


def _pooling(config: dict[str, Any]) -> Literal["mean", "cls"]:
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [m for key, m in LEGACY_POOLING.items() if config.get(key)]
    else:
        modes = [mode] if isinstance(mode, str) else list(mode)
    if config.get("include_prompt", True) is not True:
        raise LeanUnsupported("the pooling leaves the prompt's tokens out (include_prompt=false)")
    if modes == ["mean"]:
        return "mean"
    if modes == ["cls"]:
        return "cls"
    raise LeanUnsupported(f"pooling {'+'.join(map(str, modes)) or 'none'} (lean: mean or cls)")


def _max_length(module_config: dict[str, Any], word: Path) -> int:
    """sentence-transformers' sequence limit: the module config's, else the tokenizer's capped at the model's."""
    given = module_config.get("max_seq_length")
    if isinstance(given, int) and given > 0:
        return given
    limits = [v for v in (_json(word / "tokenizer_config.json").get("model_max_length"),
                          _json(word / "config.json").get("max_position_embeddings"))
              if isinstance(v, int) and v > 0]
    if not limits:
        raise LeanUnsupported("no sequence limit (max_seq_length, model_max_length or max_position_embeddings)")
    return min(limits)


def lean_spec(folder: str | Path, max_tokens: int | None = None) -> LeanSpec:
    """How the lean encoder serves the sentence-transformers folder ``folder``, cutting queries at ``max_tokens``
    word pieces when that is below the model's limit (the query window). Raises LeanUnsupported."""
    root = Path(folder)
    if not root.is_dir():
        raise LeanUnsupported(f"{folder} is not a local folder")
    word, pool, normalize = _modules(root)
    tokenizer = word / TOKENIZER_FILE
    if not tokenizer.is_file():
        raise LeanUnsupported(f"the folder has no {TOKENIZER_FILE}")
    module_config = _json(word / ST_MODULE_CONFIG)
    task = module_config.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise LeanUnsupported(f"transformer task {task!r}")
    side = _json(word / "tokenizer_config.json").get("truncation_side", "right")
    if side not in ("left", "right"):
        raise LeanUnsupported(f"truncation side {side!r}")
    return LeanSpec(str(tokenizer), window(_max_length(module_config, word), max_tokens), side,
                    module_config.get("do_lower_case") is True, _pooling(_json(pool / "config.json")), normalize)


def window(limit: int, max_tokens: int | None) -> int:
    """The word pieces a query is cut at: the model's ``limit``, or ``max_tokens`` (the query window) when smaller."""
    return limit if max_tokens is None else max(1, min(limit, max_tokens))


class LeanQueryEncoder:
    """The vector of ``prompt + text`` by the ONNX file ``onnx_path`` read as ``spec`` says (module docstring)."""

    def __init__(self, onnx_path: Path, spec: LeanSpec, prompt: str = "") -> None:
        from tokenizers import Tokenizer, normalizers

        from hybridsearch.embedding.onnx import ort_session

        tokenizer = Tokenizer.from_file(spec.tokenizer)
        if spec.lowercase:  # sentence-transformers' do_lower_case: a Lowercase normaliser first
            own = [tokenizer.normalizer] if tokenizer.normalizer is not None else []
            tokenizer.normalizer = normalizers.Sequence([normalizers.Lowercase(), *own])
        tokenizer.enable_truncation(spec.max_length, stride=0, strategy="longest_first",
                                    direction=spec.truncation_side)
        tokenizer.no_padding()
        self.tokenizer, self.spec, self.prompt, self.onnx_path = tokenizer, spec, prompt, onnx_path
        self.session: Any = ort_session(onnx_path, "cpu", spinning=False)
        self.inputs = {i.name for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        self.output = "last_hidden_state" if "last_hidden_state" in outputs else outputs[0]

    def __call__(self, text: str) -> np.ndarray:
        enc = self.tokenizer.encode(self.prompt + text)
        mask = np.asarray([enc.attention_mask], dtype=np.int64)
        feeds = {"input_ids": np.asarray([enc.ids], dtype=np.int64), "attention_mask": mask,
                 "token_type_ids": np.asarray([enc.type_ids], dtype=np.int64)}
        (hidden,) = self.session.run([self.output], {k: v for k, v in feeds.items() if k in self.inputs})
        return pool(np.asarray(hidden[0], dtype=np.float32), mask[0], self.spec.pooling)


def pool(hidden: np.ndarray, mask: np.ndarray, mode: str, normalize: bool = True) -> np.ndarray:
    """One text's token vectors (``[tokens, dims]``) pooled as sentence-transformers' Pooling does (``cls``: the
    first attended token; otherwise the mean over attended tokens), then scaled to unit length unless
    ``normalize`` is false."""
    if mode == "cls":
        vec = hidden[int(np.argmax(mask))]
    else:
        weights = mask.astype(np.float32)[:, None]
        vec = (hidden * weights).sum(0) / max(float(weights.sum()), 1e-9)
    if normalize:
        vec = vec / max(float(np.linalg.norm(vec)), 1e-12)
    out: np.ndarray = np.asarray(vec, dtype=np.float32)
    return out


#: Lowest cosine between torch's (sentence-transformers') and ONNX Runtime's vector of any text checked for the two
#: to count as the same model: when a model is fetched or verified (:mod:`.fetch`), and for the query encoder
MIN_COSINE = 0.9999


def compare_vectors(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The lowest cosine between matching rows of ``a`` and ``b`` and their largest absolute difference."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    cos = (a64 * b64).sum(1) / np.maximum(np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1), 1e-12)
    return float(cos.min()), float(np.abs(a64 - b64).max())
