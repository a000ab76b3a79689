"""Embedding in worker processes gives the same vectors as in-process embedding."""

from __future__ import annotations

import numpy as np
import pytest

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.ingest.writer import ProcessPoolEncoder
from hybridsearch.settings import EmbeddingSettings, ModelsSettings, load_settings

TEXTS = [f"Sentence number {i} about proteins and cells." for i in range(5)]


def _models() -> ModelsSettings:
    return load_settings().models



@pytest.mark.slow
def test_process_pool_matches_in_process() -> None:
    cfg = EmbeddingSettings(device="cpu")
    local = Embedder(cfg, _models())
    pool = ProcessPoolEncoder(cfg, _models(), 2)
    try:
        vecs = pool.encode(TEXTS)
    finally:
        pool.close()
    assert vecs.shape == (5, 384)
    assert np.allclose(vecs, local.encode(TEXTS), atol=1e-4)
