"""The files of a sentence-transformers folder written for a catalogue entry: configuration and torch weights
(read off the ONNX graph by :mod:`.onnx_bert`; none for an int8 entry), tokenizer, pooling, normalisation and
prompts (:func:`build_folder`, called by :func:`hybridsearch.embedding.fetch.build_from_jar`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from hybridsearch.embedding.catalogue import CatalogueEntry
from hybridsearch.embedding.models import quiet_loading
from hybridsearch.embedding.onnx_bert import bert_weights_from_onnx
from hybridsearch.errors import ModelError


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
