"""Scoring a reranker on held-out queries the way it is served: reranking their fused candidates.

:func:`rerank_metrics` gives nDCG@10 and MRR@10 of an order; :func:`choose_blend` finds the share of
the reranker's score in the served order (``serving.blend``) that serves the queries best;
:func:`score_queries` runs a model over the queries' candidates; :func:`rerank_validation_evaluator`
wraps both for the sentence-transformers trainer (once per epoch).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from hybridsearch.query.fusion import interpolate
from hybridsearch.training.negatives import ValidationQuery

BLEND_GRID = tuple(round(0.05 * i, 2) for i in range(21))  # 0, 0.05, ..., 1


# ---------------------------------------------------------------------------------------- validation


def rerank_metrics(val: Sequence[ValidationQuery], scores: Mapping[str, Sequence[float]] | None) -> dict[str, float]:
    """nDCG@10 and MRR@10 (ranx) of the validation candidates ordered by ``scores`` (per query, one per
    candidate), or in fused order when ``scores`` is None. Judged documents outside the candidates
    count as missed, so the numbers compare with the fused order and with ``hsp eval``."""
    from ranx import Qrels, Run, evaluate

    qrels = Qrels({v.qid: dict(v.relevant) for v in val})
    run: dict[str, dict[str, float]] = {}
    for v in val:
        if not v.candidates:
            continue
        if scores is None:
            run[v.qid] = {c.doc_id: float(len(v.candidates) - i) for i, c in enumerate(v.candidates)}
        else:
            run[v.qid] = {c.doc_id: float(s) for c, s in zip(v.candidates, scores[v.qid], strict=True)}
    if not run:
        return {"ndcg@10": 0.0, "mrr@10": 0.0}
    res = evaluate(qrels, Run(run), ["ndcg@10", "mrr@10"], make_comparable=True)
    return {k: float(v) for k, v in res.items()}


def blended_scores(val: Sequence[ValidationQuery], scores: Mapping[str, Sequence[float]],
                   blend: float) -> dict[str, list[float]]:
    """Per query, the served order's scores: ``blend`` × min-max(reranker) + (1 − ``blend``) ×
    min-max(fused), exactly what the query layer does (:func:`hybridsearch.query.fusion.interpolate`)."""
    return {v.qid: interpolate(scores[v.qid], [c.score for c in v.candidates], blend)
            for v in val if v.candidates}


def choose_blend(val: Sequence[ValidationQuery], scores: Mapping[str, Sequence[float]],
                 grid: Sequence[float] = BLEND_GRID) -> tuple[float, float]:
    """The blend weight of ``grid`` whose served order has the best validation nDCG@10, and that
    nDCG; the smallest such weight on ties (closest to the fused order)."""
    best: tuple[float, float] | None = None
    for w in sorted(grid):
        ndcg = rerank_metrics(val, blended_scores(val, scores, w))["ndcg@10"]
        if best is None or ndcg > best[1] + 1e-12:
            best = (w, ndcg)
    assert best is not None, "empty blend grid"
    return best


def score_queries(model: Any, val: Sequence[ValidationQuery], batch_size: int) -> dict[str, list[float]]:
    """The model's score (as served: its own activation) for every candidate of every query in ``val``."""
    pairs = [(v.query, c.text) for v in val for c in v.candidates]
    flat = model.predict(pairs, batch_size=batch_size, convert_to_numpy=True,
                         show_progress_bar=False) if pairs else []
    scores: dict[str, list[float]] = {}
    at = 0
    for v in val:
        scores[v.qid] = [float(s) for s in flat[at:at + len(v.candidates)]]
        at += len(v.candidates)
    return scores


def rerank_validation_evaluator(val: Sequence[ValidationQuery], batch_size: int,
                                sink: MutableMapping[int, dict[str, list[float]]] | None = None) -> Any:
    """A sentence-transformers evaluator that reranks ``val`` and reports :func:`rerank_metrics` and the
    best blend; with ``sink``, the scores of its n-th call are kept in ``sink[n]`` (n from 1: the epoch)."""
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    class RerankValidation(BaseEvaluator):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.name = "val"
            self.primary_metric = "blend_ndcg@10"
            self.calls = 0

        def __call__(self, model: Any, output_path: str | None = None, epoch: int = -1,
                     steps: int = -1) -> dict[str, float]:
            scores = score_queries(model, val, batch_size)
            self.calls += 1
            if sink is not None:
                sink[self.calls] = scores
            metrics = rerank_metrics(val, scores)
            metrics["blend"], metrics["blend_ndcg@10"] = choose_blend(val, scores)
            return self.prefix_name_to_metrics(metrics, self.name)  # type: ignore[no-any-return]

    return RerankValidation()
