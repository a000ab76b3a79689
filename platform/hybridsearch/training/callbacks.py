"""Trainer callbacks for reranker training: per-epoch validation records, early stop, progress events."""

from __future__ import annotations

from typing import Any

from hybridsearch.progress import ProgressSink
from hybridsearch.training.config import EpochResult, TrainResult


def make_callbacks(model: Any, result: TrainResult, progress: ProgressSink | None, validating: bool, snapshot: bool,
                   stop_after: int | None = None, label: str = "") -> tuple[Any, Any]:
    """Trainer callbacks: one records per-epoch validation, stops training after epoch ``stop_after``
    and, with ``snapshot``, keeps the best epoch's weights in memory (restored by ``restore()``); the
    other (None without ``progress``) reports the steps and each epoch's figures to ``progress``, its task
    and notes named with ``label``."""
    from hybridsearch.training.progress import EpochKeeper, TrainingProgress

    class BestEpoch(EpochKeeper):
        """The embedder's epoch keeper (mean loss per epoch, best weights, restore), recording the reranker's
        figures in ``result`` and choosing by the served (blended) nDCG@10."""

        def __init__(self) -> None:
            super().__init__(model, snapshot)

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            super().on_epoch_end(args, state, control, **kw)
            epoch, _, loss = self.epochs[-1]
            result.epochs.append(EpochResult(epoch=epoch, train_loss=loss))
            if not validating:  # nothing to choose by: the last epoch is kept
                result.best_epoch = epoch
            if stop_after is not None and epoch >= stop_after:
                control.should_training_stop = True

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None,
                        **kw: Any) -> None:
            if not metrics or "eval_val_ndcg@10" not in metrics:
                return
            epoch = result.epochs[-1] if result.epochs else EpochResult(epoch=round(state.epoch or 0))
            epoch.ndcg_at_10 = float(metrics["eval_val_ndcg@10"])
            epoch.mrr_at_10 = float(metrics.get("eval_val_mrr@10", 0.0))
            epoch.blend = float(metrics.get("eval_val_blend", 1.0))
            epoch.blend_ndcg_at_10 = float(metrics.get("eval_val_blend_ndcg@10", epoch.ndcg_at_10))
            if self._keep(epoch.epoch, epoch.blend_ndcg_at_10) and snapshot:
                result.best_epoch = epoch.epoch


    class Figures(TrainingProgress):
        """The shared training progress; each epoch's note gives the reranker's figures and its served blend."""

        def figures(self, epoch: int, metrics: dict[str, float]) -> str:
            return (f"{label + ' ' if label else ''}epoch {epoch}: validation nDCG@10 "
                    f"{metrics['eval_val_ndcg@10']:.4f} (MRR@10 {metrics.get('eval_val_mrr@10', 0.0):.4f}); "
                    f"served at blend {metrics.get('eval_val_blend', 1.0):g}: "
                    f"{metrics.get('eval_val_blend_ndcg@10', 0.0):.4f}")

    return BestEpoch(), (Figures(progress, label) if progress is not None else None)
