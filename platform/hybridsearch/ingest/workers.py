"""Embedding workers: in-process (default) or ``ingest.workers`` processes sharing the CPU cores.

With ``workers > 1`` each batch is split across the processes; each loads the model once and uses
``cpu_count // workers`` torch threads. On a 2-core machine one process with two threads is as fast
(see ``ops/bench/bench_ingest.py``), so the default stays 1.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.settings import EmbeddingSettings, IngestSettings

_worker_embedder: Embedder | None = None


def _init_worker(cfg_json: str, threads: int) -> None:
    global _worker_embedder
    _worker_embedder = Embedder(EmbeddingSettings.model_validate_json(cfg_json), threads=threads)
    _worker_embedder.encode(["warm up"])


def _encode_in_worker(texts: list[str]) -> np.ndarray:
    assert _worker_embedder is not None
    return _worker_embedder.encode(texts)


class InProcessEncoder:
    """Encodes with the caller's embedder."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.embedder.encode(texts)

    def close(self) -> None:
        pass


class ProcessPoolEncoder:
    """Splits each batch across ``workers`` processes (spawned, model loaded once in each)."""

    def __init__(self, cfg: EmbeddingSettings, workers: int) -> None:
        self.cfg, self.workers = cfg, workers
        self._pool: ProcessPoolExecutor | None = None

    @property
    def pool(self) -> ProcessPoolExecutor:
        """Started on first use, so a run where nothing changed starts no process."""
        if self._pool is None:
            threads = max(1, (os.cpu_count() or 1) // self.workers)
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn"),
                                             initializer=_init_worker, initargs=(self.cfg.model_dump_json(), threads))
        return self._pool

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.cfg.dims), dtype=np.float32)
        size = -(-len(texts) // self.workers)
        parts = [texts[i:i + size] for i in range(0, len(texts), size)]
        return np.concatenate(list(self.pool.map(_encode_in_worker, parts)))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def make_encoder(embedder: Embedder, cfg: IngestSettings) -> Any:
    """The encoder for ``cfg.workers``: in-process for 1, a process pool otherwise."""
    if cfg.workers <= 1:
        return InProcessEncoder(embedder)
    return ProcessPoolEncoder(embedder.cfg, cfg.workers)
