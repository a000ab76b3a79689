"""Pure helpers around reranker scores: ordering, top-n, threshold, length-sorted batches."""

from __future__ import annotations

from collections.abc import Sequence


def order_by_score(scores: Sequence[float], top_n: int | None = None, threshold: float | None = None) -> list[int]:
    """Indices of ``scores`` best first (ties keep the input order).

    ``threshold`` drops scores below it; ``top_n`` keeps the first ``top_n`` (None = all).
    """
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if threshold is not None:
        order = [i for i in order if scores[i] >= threshold]
    if top_n is not None:
        order = order[: max(top_n, 0)]
    return order


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Split indices ``0..len(lengths)-1`` into batches of at most ``batch_size``, longest first.

    Grouping inputs of similar length cuts the padding each batch carries. Raises ValueError
    when ``batch_size`` < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    idx = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [idx[s : s + batch_size] for s in range(0, len(idx), batch_size)]


def split_scores(scores: Sequence[float], sizes: Sequence[int]) -> list[list[float]]:
    """Cut a flat score list back into consecutive pieces of ``sizes``. Raises ValueError on a length mismatch."""
    if sum(sizes) != len(scores):
        raise ValueError(f"{len(scores)} scores for {sum(sizes)} pairs")
    out: list[list[float]] = []
    start = 0
    for n in sizes:
        out.append([float(s) for s in scores[start : start + n]])
        start += n
    return out
