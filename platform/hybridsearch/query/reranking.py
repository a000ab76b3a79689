"""The rerank stage of a search, pure: what the reranker scores, its scores applied to the window's top (blended
with the fused order where asked), and what the stage did when it did not run or failed (``RerankOutcome``).

The core (:mod:`.core`) asks for the scores (the :class:`~.steps.Rerank` request, under the reranker's timeout).
"""

from __future__ import annotations

import concurrent.futures
import math
from collections.abc import Mapping, Sequence
from typing import Any

from hybridsearch.errors import RerankerError, RerankerModelError
from hybridsearch.query.fusion import interpolate
from hybridsearch.query.results import RerankOutcome
from hybridsearch.query.window import Rank, Window, WindowEntry


def passage_text(source: Mapping[str, Any]) -> str:
    """Text the reranker scores for a stored chunk ``source``: its title and text (training pairs use it too,
    so a reranker is trained on exactly what it scores when serving)."""
    title = source.get("title") or ""
    text = source.get("text") or ""
    return f"{title} {text}".strip() if title else str(text)


def rerank_slice(window: Window, depth: int) -> list[WindowEntry]:
    """The top ``depth`` fused entries the reranker sees (distinct documents when collapsing)."""
    return window.entries[:depth]


def skip_reason(requested: bool, has_reranker: bool, no_reranker_reason: str | None,
                window: Window) -> tuple[RerankOutcome, str] | None:
    """Why the rerank stage will not run (its outcome and the reason for people), or None when it will:
    not ``requested``, no reranker (``no_reranker_reason``: why none was built), or nothing to rerank."""
    if not requested:
        return RerankOutcome.SKIPPED, "rerank not requested"
    if not has_reranker:
        return RerankOutcome.DISABLED, no_reranker_reason or "no reranker configured"
    if not window.entries:
        return RerankOutcome.SKIPPED, "no hits to rerank"
    return None


def record_failure(window: Window, error: BaseException, timeout: float) -> None:
    """Record on ``window`` that the reranker failed with ``error`` (or gave no answer within ``timeout``
    seconds): the fused order stays."""
    window.reranked = False
    if isinstance(error, TimeoutError | concurrent.futures.TimeoutError):
        window.rerank_outcome = RerankOutcome.TIMED_OUT
        window.rerank_reason = f"reranker timeout after {timeout}s"
    else:
        window.rerank_outcome = (RerankOutcome.NO_MODEL if isinstance(error, RerankerModelError)
                                 else RerankOutcome.FAILED)
        what = str(error) if isinstance(error, RerankerError) else f"{type(error).__name__}: {error}"
        window.rerank_reason = f"reranker error: {what}"


def apply_rerank(window: Window, depth: int, scores: Sequence[float], blend: float = 1.0) -> None:
    """Reorder the top ``depth`` by ``scores`` (ties keep fused order); the rest keep fused order.

    With ``blend`` below 1 the top is ordered by :func:`~hybridsearch.query.fusion.interpolate`:
    ``blend`` × min-max(reranker score) + (1 − ``blend``) × min-max(fused score); 0 keeps the fused
    order. Raises RerankerError when ``scores`` does not hold one finite number per passage.
    """
    top = rerank_slice(window, depth)
    if len(scores) != len(top):
        raise RerankerError(f"reranker returned {len(scores)} scores for {len(top)} passages")
    vals = [float(s) for s in scores]
    if not all(math.isfinite(s) for s in vals):
        raise RerankerError("reranker returned a score that is not a finite number")
    keys = vals if blend >= 1.0 else interpolate(vals, [e.base_score for e in top], blend)
    order = sorted(range(len(top)), key=lambda i: (-keys[i], i))
    for new_rank, i in enumerate(order, start=1):
        top[i].rerank = Rank(new_rank, vals[i])
        top[i].blended = keys[i] if blend < 1.0 else None
    window.entries = [top[i] for i in order] + window.entries[depth:]
    window.reranked = True
    window.rerank_outcome, window.rerank_reason = RerankOutcome.APPLIED, None
    window.blend = blend
