"""Fine-tune a cross-encoder reranker on a collection's own judgments (``hsp train-reranker``;
docs/reranker-training.md): ``LambdaLoss`` over each query's list (or BCE), epochs and blend chosen by k-fold."""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hybridsearch.embedding.models import pick_device, resolve_model
from hybridsearch.errors import ModelError
from hybridsearch.progress import ProgressSink
from hybridsearch.training.callbacks import EpochKeeper, fit
from hybridsearch.training.card import make_card, save_model
from hybridsearch.training.config import EpochResult, TrainingConfig, TrainResult
from hybridsearch.training.negatives import MinedData, Pair, load_split, mine
from hybridsearch.training.validation import kfold, rerank_metrics, rerank_validation_evaluator, summarize

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.engine import EngineClient
    from hybridsearch.settings import ModelsSettings, Settings


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
    final = replace(mined, validation=[])
    model, result = train_cross_encoder(final, cfg.model_copy(update={"keep": "last"}), models, progress=progress,
                                        stop_after=chosen.epoch, label="final fit (all queries)")
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


