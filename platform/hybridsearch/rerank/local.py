"""In-process cross-encoder scoring: :class:`LocalReranker` loads a sentence-transformers ``CrossEncoder`` (a folder
or a Hub name) once, on first use, in fp16 on a GPU."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hybridsearch.embedding.models import locate_model, pick_device, quiet_loading
from hybridsearch.errors import ModelError, RerankerError, RerankerModelError
from hybridsearch.rerank.base import serving_hints
from hybridsearch.settings import ModelsSettings, RerankerSettings

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

log = logging.getLogger(__name__)

# text past this many characters per token of max_length would be truncated anyway: it is cut before tokenising
CHARS_PER_TOKEN_CAP = 20
DEFAULT_MAX_LENGTH = 512  # tokens per pair for a model that does not say what it was trained with


def _how_to_fix(name: str) -> str:
    return (f"Copy a sentence-transformers CrossEncoder (or a Hugging Face *ForSequenceClassification folder) "
            f"for {name!r} to this machine and point HSP_RERANKER__MODEL=/path/to/folder at it, "
            "or set HSP_RERANKER__ENABLED=false to search without reranking (HSP_MODELS__ALLOW_DOWNLOAD=true lets "
            "it download from the Hugging Face Hub)")


def load_cross_encoder(name: str, models: ModelsSettings, device: str = "auto", max_length: int = 512) -> CrossEncoder:
    """The CrossEncoder at local path or Hub name ``name``, in fp16 on CUDA. Raises RerankerModelError with the fix."""
    try:
        where, local_only = locate_model(name, models, "HSP_RERANKER__MODEL", check=False)
    except ModelError as exc:
        raise RerankerModelError(f"reranker {exc.problem}", fix=_how_to_fix(name)) from exc
    from sentence_transformers import CrossEncoder

    dev = pick_device(device)
    try:
        with quiet_loading():
            model: CrossEncoder = CrossEncoder(where, device=dev, local_files_only=local_only)
    except Exception as exc:
        raise RerankerModelError(f"cannot load reranker model {name!r} ({type(exc).__name__}: {exc})",
                                 fix=_how_to_fix(name)) from exc
    if model.num_labels != 1:
        raise RerankerModelError(f"reranker model {name!r} has {model.num_labels} output labels; a reranker needs a "
                                 "single-score cross-encoder (num_labels=1)")
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    model.max_seq_length = min(max_length, limit) if isinstance(limit, int) and limit > 0 else max_length
    if dev.startswith("cuda"):
        model.half()
    return model


class LocalReranker:
    """Scores ``(query, passage)`` pairs in this process (a load failure is raised again on every later call);
    ``blend`` and ``max_length`` (unless set) come from the model's card."""

    def __init__(self, cfg: RerankerSettings, models: ModelsSettings) -> None:
        self.cfg = cfg
        self.models = models
        self.name = self.cfg.model
        self._model: CrossEncoder | None = None
        self._error: RerankerModelError | None = None
        self._lock = threading.RLock()  # one load, one inference at a time
        self.blend: float | None
        self.blend, trained = serving_hints(self.cfg.model)
        self.max_length: int = self.cfg.max_length or trained or DEFAULT_MAX_LENGTH

    @property
    def device(self) -> str:
        """Device the model runs on (``auto`` resolved); loads the model."""
        return str(self.model.device)

    @property
    def model(self) -> CrossEncoder:
        """The loaded CrossEncoder. Raises RerankerModelError."""
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._model is None:
                started = time.perf_counter()
                try:
                    self._model = load_cross_encoder(self.cfg.model, self.models, self.cfg.device, self.max_length)
                except RerankerModelError as exc:
                    self._error = exc
                    raise
                log.info("reranker model %s loaded on %s in %.1fs", self.name, self._model.device,
                         time.perf_counter() - started)
            return self._model

    def load(self) -> None:
        """Load the model now. Raises RerankerModelError."""
        _ = self.model

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """One score per ``(query, passage)`` pair, in input order. Raises RerankerError."""
        if not pairs:
            return []
        cap = self.max_length * CHARS_PER_TOKEN_CAP
        with self._lock:
            model = self.model  # RerankerModelError: not wrapped below
            try:
                out: Any = model.predict([(q[:cap], p[:cap]) for q, p in pairs], batch_size=self.cfg.batch_size,
                                         show_progress_bar=False, convert_to_numpy=True)
            except Exception as exc:
                raise RerankerError(f"reranker model {self.name!r} failed: {type(exc).__name__}: {exc}") from exc
        return [float(s) for s in out.reshape(-1).tolist()]

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        return self.score_pairs([(query, p) for p in passages])
