"""The ONNX backend: exported locally from the packaged model, same vectors as torch (int8: close)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.settings import EmbeddingSettings

TEXTS = ["Aspirin lowers the risk of heart attack.", "The mitochondria is the powerhouse of the cell.",
         "Vitamin D deficiency is associated with bone fractures in older adults."]


def test_onnx_matches_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_ONNX_CACHE", str(tmp_path))
    torch_vecs = Embedder(EmbeddingSettings(device="cpu")).encode(TEXTS)
    onnx = Embedder(EmbeddingSettings(device="cpu", backend="onnx"))
    vecs = onnx.encode(TEXTS)
    assert list(tmp_path.glob("*/model.onnx")), "the export goes to the cache folder"
    assert type(onnx.model[0].model).__name__ == "OrtTransformer"
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert float((vecs * torch_vecs).sum(1).min()) > 0.9999
    int8 = Embedder(EmbeddingSettings(device="cpu", backend="onnx", onnx_quantized=True)).encode(TEXTS)
    assert list(tmp_path.glob("*/model_qint8.onnx"))
    cos = (int8 * torch_vecs).sum(1)
    assert 0.97 < float(cos.min()) < 0.99999  # quantised: close, not identical


def test_onnx_export_is_redone_when_a_folder_is_trained_again(tmp_path: Path) -> None:
    """A model fine-tuned again into the same folder has weights of the same size: the export cache must
    not hand back the previous weights' ONNX file (it keys on the weights' modification time too)."""
    import os

    from hybridsearch.embedding.onnx import fingerprint

    (tmp_path / "config.json").write_text("{}")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 64)
    first = fingerprint(tmp_path)
    assert fingerprint(tmp_path) == first
    weights.write_bytes(b"b" * 64)
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert fingerprint(tmp_path) != first
