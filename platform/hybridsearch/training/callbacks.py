"""Trainer callbacks for reranker training: per-epoch validation records, early stop, progress bar."""

from __future__ import annotations

from typing import Any

from hybridsearch.training.config import EpochResult, TrainResult


def make_callbacks(model: Any, result: TrainResult, progress: bool, validating: bool, snapshot: bool,
                   stop_after: int | None = None, label: str = "") -> tuple[Any, Any]:
    """Trainer callbacks: one records per-epoch validation, stops training after epoch ``stop_after``
    and, with ``snapshot``, keeps the best epoch's weights in memory (restored by ``restore()``); the
    other draws a rich progress bar whose lines start with ``label``."""
    from hybridsearch.training.progress import EpochKeeper, TrainingBar

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


    class Bar(TrainingBar):
        """The shared training bar; each epoch's line gives the reranker's figures and its served blend."""

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None,
                        **kw: Any) -> None:
            if metrics and "eval_val_ndcg@10" in metrics:
                self.progress.console.print(
                    f"{label + ' ' if label else ''}epoch {round(state.epoch or 0)}: validation nDCG@10 "
                    f"{metrics['eval_val_ndcg@10']:.4f} "
                    f"(MRR@10 {metrics.get('eval_val_mrr@10', 0.0):.4f}); served at blend "
                    f"{metrics.get('eval_val_blend', 1.0):g}: {metrics.get('eval_val_blend_ndcg@10', 0.0):.4f}")

    return BestEpoch(), (Bar(label) if progress else None)
