"""The two encoders of a fetched folder that :func:`hybridsearch.embedding.fetch.verify` compares: its ONNX file
run by ONNX Runtime without sentence-transformers (:class:`OnnxFolderEncoder`, also how an int8 entry is used), and
sentence-transformers' torch model (:func:`torch_vectors`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hybridsearch.embedding.lean import pool
from hybridsearch.embedding.models import quiet_loading


class OnnxFolderEncoder:
    """A fetched folder's ONNX file run by ONNX Runtime with the folder's tokenizer and the entry's pooling and
    normalisation (no sentence-transformers): the other side of :func:`~hybridsearch.embedding.fetch.verify`, and
    how an int8 entry is used."""

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
