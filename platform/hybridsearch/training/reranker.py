"""Fine-tune a cross-encoder reranker on a collection's own judgments (``hsp train-reranker``;
docs/reranker-training.md): ``LambdaLoss`` over each query's list (or BCE). Validated as served (its order of held-out
queries' fused candidates, blended with the fused order); epochs and blend chosen by k-fold on out-of-fold scores,
with a nested estimate on unseen queries."""

from __future__ import annotations

import contextlib
import random
import statistics
import time
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hybridsearch.embedding.models import pick_device, resolve_model
from hybridsearch.errors import ConfigError, ModelError
from hybridsearch.eval.metrics import evaluate_run
from hybridsearch.progress import ProgressSink
from hybridsearch.query.fusion import interpolate
from hybridsearch.training.callbacks import EpochKeeper, evaluator, fit
from hybridsearch.training.card import make_card, save_model
from hybridsearch.training.config import EpochResult, TrainingConfig, TrainResult
from hybridsearch.training.negatives import MinedData, Pair, ValidationQuery, load_split, mine

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.engine import EngineClient
    from hybridsearch.settings import ModelsSettings, Settings

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


def load_base(base: str, max_length: int, device: str, models: ModelsSettings) -> CrossEncoder:
    """``base`` as a CrossEncoder with one output logit (a plain encoder gets a fresh head). Raises ModelError."""
    from sentence_transformers import CrossEncoder

    where = resolve_model(base, models)
    try:
        model: CrossEncoder = CrossEncoder(where, num_labels=1, max_length=max_length, device=device)
    except Exception as exc:
        raise ModelError(f"cannot load base model {base!r} for training ({type(exc).__name__}: {exc}). "
                         "Without network access, pass --base a local folder.") from exc
    return model


def query_lists(pairs: list[Pair]) -> list[tuple[str, list[str], list[float]]]:
    """Per query: ``(query, passages, labels)`` for a listwise loss; lists with no ranking signal left out."""
    grouped: dict[str, tuple[str, list[str], list[float]]] = {}
    for p in pairs:
        entry = grouped.setdefault(p.qid, (p.query, [], []))
        entry[1].append(p.passage)
        entry[2].append(float(p.label))
    return [e for e in grouped.values() if 0.0 < sum(e[2]) < len(e[2])]


def _loss_and_dataset(model: Any, pairs: list[Pair], cfg: TrainingConfig) -> tuple[Any, Any, int]:
    """The loss, its dataset and the per-step batch size (about ``cfg.batch_size`` pairs either way)."""
    from datasets import Dataset
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss, LambdaLoss

    if cfg.loss == "bce":
        ds = Dataset.from_dict({"query": [p.query for p in pairs], "passage": [p.passage for p in pairs],
                                "label": [float(p.label) for p in pairs]})
        return BinaryCrossEntropyLoss(model), ds, cfg.batch_size
    lists = query_lists(pairs)
    if not lists:
        raise ModelError("no query has both a positive and a negative passage: nothing to rank (--negatives 0, "
                         "or a negatives filter that removes everything, e.g. a low --max-overlap)")
    ds = Dataset.from_dict({"query": [q for q, _, _ in lists], "docs": [d for _, d, _ in lists],
                            "labels": [lab for _, _, lab in lists]})
    per_query = statistics.fmean(len(d) for _, d, _ in lists)
    return LambdaLoss(model), ds, max(1, round(cfg.batch_size / per_query))


def train_cross_encoder(mined: MinedData, cfg: TrainingConfig, models: ModelsSettings, *,
                        progress: ProgressSink | None = None, stop_after: int | None = None, label: str = "",
                        sink: dict[int, dict[str, list[float]]] | None = None) -> tuple[Any, TrainResult]:
    """Fine-tune on ``mined.pairs``, validating on ``mined.validation`` after each epoch (scores in ``sink[epoch]``);
    stops after ``stop_after`` epochs. Returns the model and what happened."""
    import torch
    from transformers import set_seed

    device = pick_device(cfg.device)
    set_seed(cfg.seed)
    model = load_base(cfg.base, cfg.max_length, device, models)
    if cfg.loss != "bce":  # a listwise loss trains unbounded logits: serve them raw (a sigmoid would tie them)
        model.activation_fn = torch.nn.Identity()
    loss, train_ds, batch = _loss_and_dataset(model, mined.pairs, cfg)
    evaluator = (rerank_validation_evaluator(mined.validation, cfg.batch_size * 4, sink)
                 if mined.validation else None)
    result = TrainResult(device=device, fused=rerank_metrics(mined.validation, None) if evaluator is not None else {})
    keeper = EpochKeeper(model, cfg.keep == "best", "blend_ndcg@10", stop_after, progress, label)
    result.steps, result.seconds = fit(
        model, train_ds, loss, evaluator, keeper, epochs=cfg.epochs, batch_size=batch, lr=cfg.lr,
        warmup_ratio=cfg.warmup_ratio, seed=cfg.seed, device=device,
        logging_steps=max(1, min(50, len(train_ds) // batch // 10 or 1)))
    result.epochs = [EpochResult(e, m.get("ndcg@10"), m.get("mrr@10"), loss, m.get("blend"), m.get("blend_ndcg@10"))
                     for e, m, loss in keeper.epochs]
    result.best_epoch = keeper.kept_epoch(cfg.keep)
    return model, result


def cross_validate(mined: MinedData, cfg: TrainingConfig, models: ModelsSettings, *,
                   progress: ProgressSink | None = None) -> tuple[Any, TrainResult]:
    """K-fold selection of epochs and blend on out-of-fold scores, then one fit on all pairs; a nested gain not above
    ``cfg.min_gain`` serves blend 0 (``cv["guard"]``). Raises ConfigError for fewer queries than folds."""
    folds = kfold(mined.train_qids, cfg.folds, cfg.seed)
    oof: dict[int, dict[str, list[float]]] = {}
    losses: dict[int, list[float]] = {}
    started = time.perf_counter()
    for i, fold in enumerate(folds, start=1):
        held = set(fold)
        part = replace(mined, train_qids=[q for q in mined.train_qids if q not in held], val_qids=list(fold),
                       pairs=[p for p in mined.pairs if p.qid not in held],
                       validation=[v for v in mined.pool if v.qid in held])
        sink: dict[int, dict[str, list[float]]] = {}
        _, res = train_cross_encoder(part, cfg.model_copy(update={"keep": "last"}), models, progress=progress,
                                     label=f"fold {i}/{len(folds)}", sink=sink)
        for epoch, scores in sink.items():
            oof.setdefault(epoch, {}).update(scores)
        for e in res.epochs:
            if e.train_loss is not None:
                losses.setdefault(e.epoch, []).append(e.train_loss)
    summary = summarize(mined.pool, oof, folds, {e: statistics.fmean(v) for e, v in losses.items()})
    cv_seconds = time.perf_counter() - started
    chosen = summary.chosen
    model, result = train_cross_encoder(replace(mined, validation=[]), cfg.model_copy(update={"keep": "last"}), models,
                                        progress=progress, stop_after=chosen.epoch, label="final fit (all queries)")
    result.cv, result.cv_seconds = summary.as_dict(), cv_seconds
    result.fused = rerank_metrics([v for v in mined.pool if v.candidates], None)
    result.epochs = [replace(e) for e in summary.per_epoch]
    why = summary.guard(cfg.min_gain)  # validation cannot vouch for the model: serve the fused order
    guarded = why is not None
    if guarded:
        result.cv["guard"] = why
    for e in result.epochs:  # the served figure at the chosen epoch is the one with the chosen blend
        if e.epoch == chosen.epoch:
            e.blend, e.blend_ndcg_at_10 = (0.0, chosen.fused) if guarded else (chosen.blend, chosen.served)
    result.best_epoch = chosen.epoch
    return model, result


def run_training(cfg: TrainingConfig, settings: Settings, *, es: EngineClient | None = None,
                 embedder: Embedder | None = None, progress: ProgressSink | None = None) -> dict[str, Any]:
    """Load the split, mine pairs, train, save to ``cfg.out``; returns the card. Raises ConfigError, IndexNotFound,
    ModelError, ClusterError."""
    from hybridsearch.engine import EngineClient
    from hybridsearch.eval.datasets import check_disjoint
    from hybridsearch.training.negatives import IndexMiner

    data = load_split(cfg.dataset, cfg.split, allow_test=cfg.allow_test, limit=cfg.limit_queries)
    if cfg.split != "test":
        check_disjoint(cfg.dataset, data.queries)
    with contextlib.nullcontext(es) if es is not None else contextlib.closing(EngineClient(settings.es)) as client:
        miner = IndexMiner(client, settings, embedder)
        mined = mine(miner, data, depth=cfg.depth, negatives=cfg.negatives,
                     val_fraction=0.0 if cfg.cross_validating else cfg.val_fraction, seed=cfg.seed,
                     strategy=cfg.strategy, policy=cfg.policy, progress=progress)
    if cfg.cross_validating:
        model, result = cross_validate(mined, cfg, settings.models, progress=progress)
    else:
        model, result = train_cross_encoder(mined, cfg, settings.models, progress=progress)
    card = make_card(cfg, data, mined, result, settings.models,
                     extra={"index": miner.index, "prefix": settings.index.prefix})
    save_model(model, cfg.out, card, settings.models)
    return card


