"""The bi-encoder: model resolution and device choice (:mod:`.models`), the encoder (:mod:`.encoder`)
and its ONNX Runtime backend (:mod:`.onnx`)."""

from hybridsearch.embedding.encoder import Embedder, load_sentence_transformer
from hybridsearch.embedding.models import PACKAGED_ALIASES, pick_device, resolve_model

__all__ = ["PACKAGED_ALIASES", "Embedder", "load_sentence_transformer", "pick_device", "resolve_model"]
