"""Fine-tune a cross-encoder reranker on a collection's own judgments.

The steps (``hsp train-reranker`` runs them all, see :func:`run_training`):

1. :func:`~hybridsearch.training.negatives.load_split` reads the queries and qrels of ONE split of a
   BEIR collection; ``test`` is refused unless explicitly allowed, no other split's file is opened.
2. :func:`~hybridsearch.training.negatives.mine` splits those queries into train and a held-out
   validation slice, runs each through the hybrid search and builds ``(query, passage, label)``
   pairs: judged-relevant documents as positives, the hybrid top-k minus them as hard negatives.
3. :func:`train_cross_encoder` puts a one-logit head on a BERT-family encoder and trains it with
   sentence-transformers' ``CrossEncoderTrainer`` and ``BinaryCrossEntropyLoss``. After each epoch it
   reranks the validation queries' fused candidates (nDCG@10, MRR@10) and finds the blend with the
   fused order that serves them best (:func:`choose_blend`). The last epoch is kept (``keep="best"``:
   the epoch with the best served figure), and its blend is the one the model is served with.
4. The model is saved as a normal sentence-transformers CrossEncoder folder with ``card.json`` and
   ``README.md`` (:mod:`hybridsearch.training.card`): base model, data, split, negatives, epochs,
   per-epoch validation and the blend to serve it with.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hybridsearch.embedding.models import pick_device, resolve_model
from hybridsearch.errors import ModelError
from hybridsearch.query.fusion import interpolate
from hybridsearch.training.card import make_card, save_model
from hybridsearch.training.config import EpochResult, TrainingConfig, TrainResult
from hybridsearch.training.negatives import MinedData, ValidationQuery, load_split, mine

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

    from hybridsearch.embedding import Embedder
    from hybridsearch.engine import EngineClient
    from hybridsearch.settings import Settings

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


def _rerank_validation_evaluator(val: Sequence[ValidationQuery], batch_size: int) -> Any:
    """A sentence-transformers evaluator that reranks ``val`` and reports :func:`rerank_metrics`."""
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    class RerankValidation(BaseEvaluator):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.name = "val"
            self.primary_metric = "blend_ndcg@10"

        def __call__(self, model: Any, output_path: str | None = None, epoch: int = -1,
                     steps: int = -1) -> dict[str, float]:
            pairs = [(v.query, c.text) for v in val for c in v.candidates]
            flat = model.predict(pairs, batch_size=batch_size, convert_to_numpy=True,
                                 show_progress_bar=False) if pairs else []
            scores: dict[str, list[float]] = {}
            at = 0
            for v in val:
                scores[v.qid] = [float(s) for s in flat[at:at + len(v.candidates)]]
                at += len(v.candidates)
            metrics = rerank_metrics(val, scores)
            metrics["blend"], metrics["blend_ndcg@10"] = choose_blend(val, scores)
            return self.prefix_name_to_metrics(metrics, self.name)  # type: ignore[no-any-return]

    return RerankValidation()


# ------------------------------------------------------------------------------------------ training


def load_base(base: str, max_length: int, device: str) -> CrossEncoder:
    """``base`` (Hub name, folder, or the packaged all-MiniLM-L6-v2) as a CrossEncoder with one
    output logit; a plain encoder gets a freshly initialised head. Raises ModelError."""
    from sentence_transformers import CrossEncoder

    where = resolve_model(base)
    try:
        model: CrossEncoder = CrossEncoder(where, num_labels=1, max_length=max_length, device=device)
    except Exception as exc:
        raise ModelError(f"cannot load base model {base!r} for training ({type(exc).__name__}: {exc}). "
                         "Without network access, pass --base a local folder.") from exc
    return model


def train_cross_encoder(mined: MinedData, cfg: TrainingConfig, *, progress: bool = True) -> tuple[Any, TrainResult]:
    """Fine-tune a cross-encoder on ``mined.pairs``; returns the model (best validation epoch
    restored) and what happened. Seeded by ``cfg.seed``: the same inputs give the same weights."""
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    from sentence_transformers.cross_encoder.model_card import CrossEncoderModelCardCallback
    from transformers import PrinterCallback, set_seed

    device = pick_device(cfg.device)
    set_seed(cfg.seed)
    model = load_base(cfg.base, cfg.max_length, device)
    pairs = mined.pairs
    train_ds = Dataset.from_dict({
        "query": [p.query for p in pairs], "passage": [p.passage for p in pairs],
        "label": [float(p.label) for p in pairs],
    })
    evaluator = _rerank_validation_evaluator(mined.validation, cfg.batch_size * 4) if mined.validation else None
    result = TrainResult(device=device)
    if evaluator is not None:
        result.fused = rerank_metrics(mined.validation, None)
    best, bar = _callbacks(model, result, progress, validating=evaluator is not None, snapshot=cfg.keep == "best")
    callbacks: list[Any] = [best] + ([bar] if bar is not None else [])
    with tempfile.TemporaryDirectory(prefix="hsp-train-") as tmp:
        args = CrossEncoderTrainingArguments(
            output_dir=tmp, num_train_epochs=cfg.epochs, per_device_train_batch_size=cfg.batch_size,
            learning_rate=cfg.lr, warmup_steps=cfg.warmup_ratio, seed=cfg.seed, data_seed=cfg.seed,
            eval_strategy="epoch" if evaluator is not None else "no", save_strategy="no",
            logging_strategy="steps", logging_steps=max(1, min(50, len(pairs) // cfg.batch_size // 10 or 1)),
            report_to="none", disable_tqdm=True, use_cpu=device == "cpu", dataloader_num_workers=0,
        )
        trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=train_ds,
                                      loss=BinaryCrossEntropyLoss(model), evaluator=evaluator, callbacks=callbacks)
        trainer.remove_callback(CrossEncoderModelCardCallback)  # it looks up the Hub; we write our own card
        trainer.remove_callback(PrinterCallback)  # raw log dicts on stdout; the rich bar shows the loss
        started = time.perf_counter()
        out = trainer.train()
        result.seconds = time.perf_counter() - started
        result.steps = int(out.global_step)
    if cfg.keep == "best":
        best.restore()
    elif result.epochs:
        result.best_epoch = result.epochs[-1].epoch
    return model, result


def _callbacks(model: Any, result: TrainResult, progress: bool, validating: bool,
               snapshot: bool) -> tuple[Any, Any]:
    """Trainer callbacks: one records per-epoch validation and, with ``snapshot``, keeps the best
    epoch's weights in memory (restored by ``restore()``); the other draws a rich progress bar."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.progress import Progress as RichProgress
    from transformers import TrainerCallback

    class BestEpoch(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.best_score: float | None = None
            self.best_state: dict[str, Any] | None = None
            self.losses: list[float] = []

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kw: Any) -> None:
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            loss = sum(self.losses) / len(self.losses) if self.losses else None
            self.losses = []
            result.epochs.append(EpochResult(epoch=round(state.epoch or 0), train_loss=loss))
            if not validating:  # nothing to choose by: the last epoch is kept
                result.best_epoch = result.epochs[-1].epoch

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None,
                        **kw: Any) -> None:
            if not metrics or "eval_val_ndcg@10" not in metrics:
                return
            epoch = result.epochs[-1] if result.epochs else EpochResult(epoch=round(state.epoch or 0))
            epoch.ndcg_at_10 = float(metrics["eval_val_ndcg@10"])
            epoch.mrr_at_10 = float(metrics.get("eval_val_mrr@10", 0.0))
            epoch.blend = float(metrics.get("eval_val_blend", 1.0))
            epoch.blend_ndcg_at_10 = float(metrics.get("eval_val_blend_ndcg@10", epoch.ndcg_at_10))
            self._keep(epoch.epoch, epoch.blend_ndcg_at_10)

        def _keep(self, epoch: int, score: float) -> None:
            if snapshot and (self.best_score is None or score > self.best_score):
                self.best_score = score
                self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
                result.best_epoch = epoch

        def restore(self) -> None:
            if self.best_state is not None:
                model.load_state_dict(self.best_state)

    class Bar(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.progress = RichProgress(
                TextColumn("[bold]training[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
            )
            self.task: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.progress.start()
            self.task = self.progress.add_task("", total=state.max_steps)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.progress.update(self.task, completed=state.global_step)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kw: Any) -> None:
            if logs and "loss" in logs:
                self.progress.update(self.task, description=f"epoch {state.epoch:.2f} loss {logs['loss']:.4f}")

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None,
                        **kw: Any) -> None:
            if metrics and "eval_val_ndcg@10" in metrics:
                self.progress.console.print(
                    f"epoch {round(state.epoch or 0)}: validation nDCG@10 {metrics['eval_val_ndcg@10']:.4f} "
                    f"(MRR@10 {metrics.get('eval_val_mrr@10', 0.0):.4f}); served at blend "
                    f"{metrics.get('eval_val_blend', 1.0):g}: {metrics.get('eval_val_blend_ndcg@10', 0.0):.4f}")

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.progress.stop()

    return BestEpoch(), (Bar() if progress else None)


def run_training(cfg: TrainingConfig, settings: Settings, *, es: EngineClient | None = None,
                 embedder: Embedder | None = None, progress: bool = True) -> dict[str, Any]:
    """Load the split, mine pairs from the index under ``settings.index.prefix``, train, save to
    ``cfg.out``; returns the card. Raises ConfigError (test split, bad collection, no pairs),
    IndexNotFound (collection not ingested under this prefix), ModelError, ClusterError."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.progress import Progress as RichProgress

    from hybridsearch.engine import connect
    from hybridsearch.training.negatives import IndexMiner

    data = load_split(cfg.dataset, cfg.split, allow_test=cfg.allow_test, limit=cfg.limit_queries)
    own = es is None
    client = es if es is not None else connect(settings.es)
    try:
        miner = IndexMiner(client, settings, embedder)
        bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                           TimeRemainingColumn(), console=Console(stderr=True), disable=not progress)

        def track(desc: str, total: int) -> Callable[[], None]:
            task = bar.add_task(desc, total=total)
            return lambda: bar.advance(task)

        with bar:
            mined = mine(miner, data, depth=cfg.depth, negatives=cfg.negatives, val_fraction=cfg.val_fraction,
                         seed=cfg.seed, strategy=cfg.strategy, progress=track)
    finally:
        if own:
            client.close()
    model, result = train_cross_encoder(mined, cfg, progress=progress)
    card = make_card(cfg, data, mined, result, extra={"index": miner.index, "prefix": settings.index.prefix})
    save_model(model, cfg.out, card)
    return card


