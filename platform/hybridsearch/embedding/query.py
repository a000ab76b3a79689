"""The query encoder: one text at a time on the search path (``HSP_EMBEDDING__QUERY_BACKEND``).

Ingestion embeds batches with the :class:`~hybridsearch.embedding.Embedder`'s model (torch by default); a
search embeds one short text, where loading torch and ``SentenceTransformer.encode`` cost more than the model
does. ``onnx`` runs the same transformer exported to ONNX by :func:`.onnx.export` (the file cached where the ONNX
backend caches it; the int8 file only when ingestion itself uses it, so queries always meet the weights the index
was built with: int8 queries on an fp32 index cost 0.0045 dense nDCG@10 on SciFact, docs/evaluation.md) in an
ONNX Runtime session whose threads do not spin. For a plain Transformer → Pooling (→ Normalize) folder with a
``tokenizer.json`` that is the lean encoder (:mod:`.lean`: tokenizers, ONNX Runtime and numpy; no torch); for any
other folder the model's own tokenisation (``preprocess``), pooling and normalisation modules
(:class:`OnnxQueryEncoder`). Either puts the query prompt (:mod:`.prompts`) first.

Every query encoder (lean, :class:`OnnxQueryEncoder`, torch) cuts a query at the query window
(``HSP_EMBEDDING__QUERY_MAX_TOKENS`` word pieces, special tokens and prompt included) where that is shorter than the
model's own limit; unset, at the model's limit. The window is query-side only: the index needs no rebuild, and the
agreement record names it (in its ``lean`` spec), so a record made with another window is stale. What shorter windows
cost and save: docs/evaluation.md, "Long queries".

``auto`` takes onnx when the model runs on CPU, onnxruntime imports, the export works and the vectors agree
with the ingestion encoder's on :data:`PROBES` (cosine ≥ :data:`MIN_COSINE`: the index needs no rebuild);
otherwise torch, with one log line saying why. ``onnx`` insists: any of those failing raises ModelError.

The check needs the model loaded, so it is made once: its result is recorded beside the ONNX file
(:mod:`.agreement`), and :func:`recorded_query_encoder` serves a later process from the record with the lean encoder
straight away, without importing torch. :func:`choose_query_encoder` (model loaded) makes and records the check.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from hybridsearch.embedding import agreement as records
from hybridsearch.embedding.lean import (
    MIN_COSINE,
    LeanQueryEncoder,
    LeanUnsupported,
    compare_vectors,
    lean_spec,
    window,
)
from hybridsearch.embedding.models import pick_device, resolve_model
from hybridsearch.embedding.prompts import resolve_prompts
from hybridsearch.errors import ModelError
from hybridsearch.settings import EmbeddingSettings

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)
Encode = Callable[[str], np.ndarray]
#: Texts of several lengths (one past the model's 256-token limit, so truncation is compared too).
PROBES = (
    "how do bees find food",
    "0-dimensional biomaterials lack inductive properties.",
    "Vitamin D deficiency is associated with bone fractures in older adults; É, ß and 中文 too.",
    "a",
    " ".join(["Long queries are cut at the model's sequence limit, the same way by both encoders."] * 30),
)


@dataclass(frozen=True)
class QueryEncoder:
    """The encoder queries use: ``backend`` (``torch``: the ingestion encoder, ``onnx``), the function, and
    why it was chosen (logged once; ``hsp``'s benchmarks print it)."""

    backend: Literal["torch", "onnx"]
    encode: Encode
    reason: str


class OnnxQueryEncoder:
    """``model``'s vector for ``prompt + text`` with its transformer run by the ONNX Runtime ``session`` (the
    prompt handed to the model's own ``preprocess``, as sentence-transformers' ``encode`` does), cut at
    ``max_tokens`` word pieces where that is below the model's limit."""

    def __init__(self, model: SentenceTransformer, session: Any, prompt: str = "",
                 max_tokens: int | None = None) -> None:
        first: Any = model[0]
        self.model = model
        self.session = session
        self.prompt = prompt
        self.processing = window_kwargs(model, max_tokens)
        self.output = str(getattr(first, "module_output_name", "token_embeddings"))
        self.post = list(model)[1:]  # pooling, normalisation, any dense layers: the model's own modules

    def __call__(self, text: str) -> np.ndarray:
        import torch

        features = self.model.preprocess([text], prompt=self.prompt or None, **self.processing)
        ids = np.asarray(features["input_ids"], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.asarray(features["attention_mask"], dtype=np.int64),
                 "token_type_ids": (np.asarray(features["token_type_ids"], dtype=np.int64)
                                    if "token_type_ids" in features else np.zeros_like(ids))}
        (hidden,) = self.session.run(["last_hidden_state"], feeds)
        features[self.output] = torch.from_numpy(hidden)
        with torch.inference_mode():
            for module in self.post:
                features = module(features)
        vec = np.asarray(features["sentence_embedding"][0].numpy(), dtype=np.float32)
        return vec / max(float(np.linalg.norm(vec)), 1e-12)


def window_kwargs(model: SentenceTransformer, max_tokens: int | None) -> dict[str, Any]:
    """The keyword arguments that make ``model.preprocess`` (and ``encode``) cut a text at the query window
    ``max_tokens`` (never past the model's own limit); none when the window is unset."""
    if max_tokens is None:
        return {}
    limit = int(getattr(model, "max_seq_length", None) or max_tokens)
    return {"processing_kwargs": {"text": {"max_length": window(limit, max_tokens)}}}


def onnx_query_encoder(model: SentenceTransformer, model_dir: str, quantized: bool = False,
                       prompt: str = "", max_tokens: int | None = None) -> Encode:
    """The ONNX query encoder on ``model``'s export (made on first use, then cached on disk) putting ``prompt``
    before each query and cutting it at ``max_tokens`` word pieces (the query window; None: the model's limit):
    the lean one (:mod:`.lean`) when ``model_dir`` allows, else an :class:`OnnxQueryEncoder`."""
    from hybridsearch.embedding.onnx import export, ort_session

    path = export(model, model_dir, quantized)
    try:
        return LeanQueryEncoder(path, lean_spec(model_dir, max_tokens), prompt)
    except (LeanUnsupported, ImportError) as exc:
        log.info("ONNX query encoder with the model's own modules, not the lean one: %s", exc)
    return OnnxQueryEncoder(model, ort_session(path, "cpu", spinning=False), prompt, max_tokens)


def agreement(reference: Encode, candidate: Encode, texts: Iterable[str]) -> tuple[float, float]:
    """The lowest cosine and the largest absolute difference between the two encoders' vectors of ``texts``."""
    texts = list(texts)
    return compare_vectors(np.stack([reference(t) for t in texts]), np.stack([candidate(t) for t in texts]))


def choose_query_encoder(cfg: EmbeddingSettings, model: SentenceTransformer, reference: Encode, *,
                         prompt: str | None = None) -> QueryEncoder:
    """The query encoder ``cfg.query_backend`` asks for; ``reference`` is the ingestion encoder of one query
    with the query prompt, cut at the query window (the torch choice, and the yardstick of the ONNX one);
    ``prompt``: that query prompt (None: ``cfg``'s, :func:`.prompts.resolve_prompts`), which the ONNX encoder puts
    first too, as it cuts at ``cfg.query_max_tokens``. Raises ModelError when ``onnx`` cannot be had."""
    if cfg.query_backend == "torch":
        return QueryEncoder("torch", reference, "HSP_EMBEDDING__QUERY_BACKEND=torch")
    device = pick_device(cfg.device)
    try:
        if device != "cpu":
            raise _NoOnnx(f"the model runs on {device}; the ONNX query encoder is for CPU", expected=True)
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            raise _NoOnnx("onnxruntime is not installed (pip install 'hybridsearch[onnx]')", expected=True) from None
        try:
            if prompt is None:
                prompt = resolve_prompts(cfg).query
            encoder = onnx_query_encoder(model, resolve_model(cfg.model), cfg.backend == "onnx" and cfg.onnx_quantized,
                                         prompt=prompt, max_tokens=cfg.query_max_tokens)
            cos, diff = agreement(reference, encoder, PROBES)
            _record(cfg, encoder, prompt, cos, diff)
        except Exception as exc:  # any failure of the export or the session means torch
            raise _NoOnnx(f"the ONNX export or session failed: {type(exc).__name__}: {exc}") from exc
        if cos < MIN_COSINE:
            raise _NoOnnx(f"its vectors disagree with the {cfg.backend} encoder's (lowest cosine {cos:.7f} < "
                          f"{MIN_COSINE} on {len(PROBES)} probe texts)")
    except _NoOnnx as exc:
        if cfg.query_backend == "onnx":
            raise ModelError(f"no ONNX query encoder for {cfg.model!r}: {exc}",
                             fix="Set HSP_EMBEDDING__QUERY_BACKEND=auto (or torch).") from exc
        log.log(logging.INFO if exc.expected else logging.WARNING, "query encoder: torch, not ONNX: %s", exc)
        return QueryEncoder("torch", reference, f"ONNX unavailable: {exc}")
    reason = f"agrees with the {cfg.backend} encoder: lowest cosine {cos:.7f}, largest difference {diff:.1e}"
    if isinstance(encoder, LeanQueryEncoder):
        reason += f" on {len(PROBES)} probe texts (lean encoder; recorded for the next start)"
    log.info("query encoder: onnx (%s)", reason)
    return QueryEncoder("onnx", encoder, reason)


def _record(cfg: EmbeddingSettings, encoder: Encode, prompt: str, cos: float, diff: float) -> None:
    """Write the agreement record of the lean ``encoder`` (nothing for any other). It never raises: a record that
    cannot be written only costs the next process the check again."""
    if not isinstance(encoder, LeanQueryEncoder):
        return
    try:
        dims = int(encoder(PROBES[0]).shape[0])
        now = _expected(cfg, encoder.onnx_path, encoder.spec.describe(), prompt, dims)
        versions = {**now.versions, **records.package_versions(records.NOTED_PACKAGES)}
        path = records.record_path(_cache_folder(now.fingerprint), prompt, now.quantized, now.reference)
        records.write_record(path, dataclasses.replace(now, min_cosine=cos, max_abs_diff=diff, versions=versions))
        log.info("query encoder agreement recorded in %s", path)
    except Exception as exc:  # noqa: BLE001 - the record is an optimisation
        log.warning("could not record the query encoder's agreement: %s: %s", type(exc).__name__, exc)


def _cache_folder(fingerprint: str) -> Path:
    from hybridsearch.embedding.onnx import cache_root

    return cache_root() / fingerprint


def _expected(cfg: EmbeddingSettings, onnx_path: Path, lean: dict[str, Any], prompt: str, dims: int,
              fingerprint: str | None = None) -> records.Agreement:
    """A record of what a check of ``cfg``'s lean encoder is made with now (its result left at 0)."""
    from hybridsearch.embedding.onnx import fingerprint as fingerprint_of

    fingerprint = fingerprint or fingerprint_of(Path(resolve_model(cfg.model)))
    file, size, mtime = records.onnx_identity(onnx_path, _cache_folder(fingerprint))
    return records.Agreement(
        min_cosine=0.0, max_abs_diff=0.0, probes=len(PROBES), probes_digest=records.digest(PROBES), prompt=prompt,
        quantized=cfg.backend == "onnx" and cfg.onnx_quantized, reference=cfg.backend, model=cfg.model,
        fingerprint=fingerprint, onnx_file=file, onnx_size=size, onnx_mtime_ns=mtime, dims=dims, lean=lean,
        versions=records.package_versions())


def recorded_query_encoder(cfg: EmbeddingSettings, prompt: str) -> QueryEncoder | None:
    """The lean ONNX query encoder when an agreement record (:mod:`.agreement`) says it agrees with the ingestion
    encoder for ``cfg``'s model, ``prompt`` and quantisation as they are now, else None (then
    :func:`choose_query_encoder` decides, loading the model). Imports no torch on a CPU-only machine."""
    if cfg.query_backend == "torch":
        return None
    try:
        if pick_device(cfg.device) != "cpu":
            return None
        from hybridsearch.embedding.onnx import fingerprint, onnx_files

        folder = resolve_model(cfg.model)
        spec = lean_spec(folder, cfg.query_max_tokens)
        quantized = cfg.backend == "onnx" and cfg.onnx_quantized
        cache = _cache_folder(fingerprint(Path(folder)))
        onnx_path = onnx_files(folder, quantized, cache)[1]
        record = records.read_record(records.record_path(cache, prompt, quantized, cfg.backend))
        if record is None:
            log.info("query encoder: no agreement record for %s yet: checking it", cfg.model)
            return None
        stale = record.stale(_expected(cfg, onnx_path, spec.describe(), prompt, cfg.dims, cache.name))
        if stale is not None:
            log.info("query encoder: the agreement record of %s is stale (%s): checking again", cfg.model, stale)
            return None
        if record.min_cosine < MIN_COSINE:
            log.info("query encoder: the agreement record of %s says the vectors disagree (lowest cosine %.7f)",
                     cfg.model, record.min_cosine)
            return None
        encoder = LeanQueryEncoder(onnx_path, spec, prompt)
    except Exception as exc:  # noqa: BLE001 - anything amiss: the model is loaded and the check made instead
        log.info("query encoder: no lean encoder from a record: %s: %s", type(exc).__name__, exc)
        return None
    reason = (f"agrees with the {cfg.backend} encoder (recorded {record.date}): lowest cosine {record.min_cosine:.7f}, "
              f"largest difference {record.max_abs_diff:.1e} on {record.probes} probe texts")
    log.info("query encoder: onnx, lean (%s)", reason)
    return QueryEncoder("onnx", encoder, reason)


class _NoOnnx(Exception):
    """Why the ONNX query encoder cannot be used; ``expected``: a setup without it (logged as info, not a
    warning)."""

    def __init__(self, reason: str, *, expected: bool = False) -> None:
        super().__init__(reason)
        self.expected = expected
