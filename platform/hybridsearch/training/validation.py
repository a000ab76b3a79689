"""Validating a reranker as it is served: its order of held-out queries' fused candidates, blended with the fused
order; k-fold selection of (epochs, blend) on out-of-fold scores, and its nested estimate on unseen queries."""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hybridsearch.errors import ConfigError
from hybridsearch.eval.metrics import evaluate_run
from hybridsearch.query.fusion import interpolate
from hybridsearch.training.callbacks import evaluator
from hybridsearch.training.config import EpochResult
from hybridsearch.training.negatives import ValidationQuery

BLEND_GRID = tuple(round(0.05 * i, 2) for i in range(21))  # 0, 0.05, ..., 1


def rerank_metrics(val: Sequence[ValidationQuery], scores: Mapping[str, Sequence[float]] | None) -> dict[str, float]:
    """nDCG@10 and MRR@10 of the candidates ordered by ``scores``, or fused order when None."""
    run = {v.qid: {c.doc_id: float(len(v.candidates) - i if scores is None else scores[v.qid][i])
                   for i, c in enumerate(v.candidates)} for v in val if v.candidates}
    return evaluate_run({v.qid: v.relevant for v in val}, run, ("ndcg@10", "mrr@10"))[0]


def blended_scores(val: Sequence[ValidationQuery], scores: Mapping[str, Sequence[float]],
                   blend: float) -> dict[str, list[float]]:
    """Per query, the served order's scores (:func:`hybridsearch.query.fusion.interpolate`, as the query layer)."""
    return {v.qid: interpolate(scores[v.qid], [c.score for c in v.candidates], blend)
            for v in val if v.candidates}


def choose_blend(val: Sequence[ValidationQuery], scores: Mapping[str, Sequence[float]],
                 grid: Sequence[float] = BLEND_GRID) -> tuple[float, float]:
    """The blend of ``grid`` whose served order has the best nDCG@10 (the smallest on ties), and that nDCG."""
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
    flat = iter(model.predict(pairs, batch_size=batch_size, convert_to_numpy=True,
                              show_progress_bar=False) if pairs else [])
    return {v.qid: [float(next(flat)) for _ in v.candidates] for v in val}


def rerank_validation_evaluator(val: Sequence[ValidationQuery], batch_size: int,
                                sink: MutableMapping[int, dict[str, list[float]]] | None = None) -> Any:
    """An evaluator of :func:`rerank_metrics` and the best blend; its n-th call's scores in ``sink[n]`` (given
    empty)."""
    def measure(model: Any) -> dict[str, float]:
        scores = score_queries(model, val, batch_size)
        if sink is not None:
            sink[len(sink) + 1] = scores
        metrics = rerank_metrics(val, scores)
        metrics["blend"], metrics["blend_ndcg@10"] = choose_blend(val, scores)
        return metrics

    return evaluator(measure, "blend_ndcg@10")


Scores = Mapping[str, Sequence[float]]  # qid -> one score per candidate
EpochScores = Mapping[int, Scores]  # epoch -> OOF scores of every query


def kfold(qids: Iterable[str], k: int, seed: int) -> list[list[str]]:
    """``k`` seeded disjoint folds of ``qids``, balanced and sorted. Raises ConfigError unless 2 <= k <= queries."""
    ordered = sorted(set(qids))
    if k < 2 or k > len(ordered):
        n = len(ordered)
        fits = "" if n < 2 else "--folds 2, or " if n == 2 else f"--folds between 2 and {n}, or "
        raise ConfigError(f"cannot split {n} training queries into {k} folds (need 2 <= folds <= queries)",
                          fix=f"Pass {fits}--folds 0 to train without k-fold selection, or train on a split with "
                              "more judged queries")
    shuffled = ordered[:]
    random.Random(f"folds:{seed}").shuffle(shuffled)
    return [sorted(shuffled[i::k]) for i in range(k)]


@dataclass
class Pick:
    """One (epochs, blend) choice and the nDCG@10 of the fused, reranked and served orders on some queries."""

    epoch: int
    blend: float
    queries: int
    fused: float
    alone: float
    served: float

    @property
    def gain(self) -> float:
        return self.served - self.fused


@dataclass
class CVSummary:
    """What k-fold selection measured and chose (recorded in the card)."""

    folds: int
    fold_sizes: list[int]
    per_epoch: list[EpochResult]  # pooled OOF figures of each epoch count, served at its best blend
    chosen: Pick
    nested: list[Pick] = field(default_factory=list)

    def estimate(self) -> dict[str, float]:
        """Mean and spread (sample standard deviation over folds) of the nested per-fold gains."""
        gains = [p.gain for p in self.nested]
        served = [p.served for p in self.nested]
        return {"gain_mean": _mean(gains), "gain_std": _std(gains), "gain_min": min(gains, default=0.0),
                "gain_max": max(gains, default=0.0), "served_mean": _mean(served), "served_std": _std(served)}

    def guard(self, min_gain: float) -> str | None:
        """Why the model must be served at blend 0: the nested gain estimate is not above ``min_gain``; else None."""
        gain = self.estimate()["gain_mean"]
        if gain > min_gain:
            return None
        return (f"nested estimate of the gain {gain:+.4f} is not above --min-gain {min_gain:g}: served at blend 0 "
                "(the fused order)")

    def as_dict(self) -> dict[str, Any]:
        return {
            "folds": self.folds, "fold_sizes": self.fold_sizes,
            "per_epoch_pooled": [{k: v for k, v in asdict(e).items() if k != "train_loss"} for e in self.per_epoch],
            "chosen": {**asdict(self.chosen), "gain": self.chosen.gain},
            "nested_per_fold": [{"fold": i + 1, **asdict(p), "gain": p.gain} for i, p in enumerate(self.nested)],
            "estimate": self.estimate(),
            "train_loss_per_epoch": {str(e.epoch): e.train_loss for e in self.per_epoch if e.train_loss is not None},
        }


def _mean(xs: Sequence[float]) -> float:
    return float(statistics.fmean(xs)) if xs else 0.0


def _std(xs: Sequence[float]) -> float:
    return float(statistics.stdev(xs)) if len(xs) >= 2 else 0.0


def choose(pool: Sequence[ValidationQuery], scores: EpochScores, qids: Iterable[str] | None = None,
           grid: Sequence[float] = BLEND_GRID) -> Pick:
    """The (epochs, blend) with the best served nDCG@10 over ``qids`` (ties: fewer epochs, smaller blend). Raises
    ValueError without scores."""
    if not scores:
        raise ValueError("no out-of-fold scores to choose from")
    val = _subset(pool, qids)
    best: tuple[int, float, float] | None = None
    for epoch in sorted(scores):
        blend, served = choose_blend(val, scores[epoch], grid)
        if best is None or served > best[2] + 1e-12:
            best = (epoch, blend, served)
    assert best is not None
    return measure(pool, scores, best[0], best[1], qids)


def measure(pool: Sequence[ValidationQuery], scores: EpochScores, epoch: int, blend: float,
            qids: Iterable[str] | None = None) -> Pick:
    """How (``epoch``, ``blend``) serves ``qids`` (default: all of ``pool``)."""
    val = _subset(pool, qids)
    return Pick(epoch, blend, len(val), rerank_metrics(val, None)["ndcg@10"],
                rerank_metrics(val, scores[epoch])["ndcg@10"],
                rerank_metrics(val, blended_scores(val, scores[epoch], blend))["ndcg@10"])


def _subset(pool: Sequence[ValidationQuery], qids: Iterable[str] | None) -> list[ValidationQuery]:
    wanted = set(qids) if qids is not None else {v.qid for v in pool}
    return [v for v in pool if v.qid in wanted and v.candidates]


def nested_estimate(pool: Sequence[ValidationQuery], scores: EpochScores, folds: Sequence[Sequence[str]],
                    grid: Sequence[float] = BLEND_GRID) -> list[Pick]:
    """Per fold: the (epochs, blend) chosen on the other folds' OOF scores, measured on this fold."""
    out = []
    for i, fold in enumerate(folds):
        pick = choose(pool, scores, [q for j, f in enumerate(folds) if j != i for q in f], grid)
        out.append(measure(pool, scores, pick.epoch, pick.blend, fold))
    return out


def summarize(pool: Sequence[ValidationQuery], scores: EpochScores, folds: Sequence[Sequence[str]],
              train_loss: Mapping[int, float] | None = None, grid: Sequence[float] = BLEND_GRID) -> CVSummary:
    """Everything k-fold selection reports: pooled per-epoch figures (reranker alone, and served at its best
    blend), the choice, the nested estimate."""
    val = _subset(pool, None)
    per_epoch = []
    for epoch in sorted(scores):
        alone = rerank_metrics(val, scores[epoch])
        blend, served = choose_blend(val, scores[epoch], grid)
        per_epoch.append(EpochResult(epoch, alone["ndcg@10"], alone["mrr@10"], (train_loss or {}).get(epoch), blend,
                                     served))
    return CVSummary(len(folds), [len(f) for f in folds], per_epoch, choose(pool, scores, None, grid),
                     nested_estimate(pool, scores, folds, grid))
