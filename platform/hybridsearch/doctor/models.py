"""The doctor's model checks: the embedding model loads and makes vectors of the configured size; the reranker
service is ready, or the local cross-encoder loads (a reranker problem is a WARN: searches keep the fused order)."""

from __future__ import annotations

import time

import httpx

from hybridsearch.doctor.check import Check
from hybridsearch.errors import HybridSearchError
from hybridsearch.redact import redact_url
from hybridsearch.settings import EmbeddingSettings, RerankerSettings


def check_embedder(cfg: EmbeddingSettings) -> Check:
    """The embedding model loads and makes vectors of the configured size."""
    from hybridsearch.embedding.encoder import Embedder

    t0 = time.perf_counter()
    try:
        vec = Embedder(cfg).encode(["hybridsearch doctor"])
    except HybridSearchError as exc:
        return Check("models", "embedder", "FAIL", exc.problem,
                     exc.fix or "point HSP_EMBEDDING__MODEL at a local sentence-transformers folder and set "
                     "HSP_EMBEDDING__DIMS to its size")
    return Check("models", "embedder", "OK", f"{cfg.model}: {vec.shape[1]} dims, loaded in "
                                             f"{time.perf_counter() - t0:.1f} s")


def check_reranker(cfg: RerankerSettings) -> Check:
    """The reranker service is ready, or the local cross-encoder loads and scores a pair."""
    degrade = "searches will keep the fused order until this is fixed"
    if not cfg.enabled:
        return Check("reranker", "reranker", "OK", "disabled (HSP_RERANKER__ENABLED=false): fused order")
    if cfg.url:
        readyz = cfg.url.rstrip("/") + "/readyz"
        url = redact_url(readyz)  # what is shown: no credentials
        try:
            resp = httpx.get(readyz, timeout=min(cfg.timeout, 5.0))
        except httpx.HTTPError as exc:
            return Check("reranker", "service", "WARN", f"{url} does not answer ({type(exc).__name__}); {degrade}",
                         "start it (`hsp serve-reranker` or `docker compose up -d reranker`) or fix "
                         "HSP_RERANKER__URL")
        if resp.status_code == 200:
            return Check("reranker", "service", "OK", f"{redact_url(cfg.url)} ready")
        return Check("reranker", "service", "WARN", f"{url} answered {resp.status_code}: {resp.text[:200]}; "
                                                    f"{degrade}", "wait for the model to load, or read the "
                                                                  "service log")
    try:
        from hybridsearch.rerank import LocalReranker

        reranker = LocalReranker(cfg)
        reranker.score("doctor", ["a passage"])
    except HybridSearchError as exc:
        return Check("reranker", "local model", "WARN", f"{exc.problem}; {degrade}",
                     "set HSP_RERANKER__MODEL to a local cross-encoder folder, HSP_RERANKER__URL to a "
                     "reranker service, or HSP_RERANKER__ENABLED=false")
    from hybridsearch.rerank.base import effective_blend

    blend, source = effective_blend(cfg.blend, reranker.blend)
    return Check("reranker", "local model", "OK", f"{cfg.model} loads on {reranker.device} (max length "
                 f"{reranker.max_length}, blend {blend:g} from {source})")
