"""Trainer callbacks for reranker training: per-epoch validation records, early stop, progress bar."""

from __future__ import annotations

from typing import Any

from hybridsearch.training.config import EpochResult, TrainResult


def make_callbacks(model: Any, result: TrainResult, progress: bool, validating: bool, snapshot: bool,
                   stop_after: int | None = None, label: str = "") -> tuple[Any, Any]:
    """Trainer callbacks: one records per-epoch validation, stops training after epoch ``stop_after``
    and, with ``snapshot``, keeps the best epoch's weights in memory (restored by ``restore()``); the
    other draws a rich progress bar whose lines start with ``label``."""
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
            if stop_after is not None and result.epochs[-1].epoch >= stop_after:
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
            self._keep(epoch.epoch, epoch.blend_ndcg_at_10)

        def _keep(self, epoch: int, score: float) -> None:
            if snapshot and (self.best_score is None or score > self.best_score):
                self.best_score = score
                self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
                result.best_epoch = epoch

        def restore(self) -> None:
            if self.best_state is not None:
                model.load_state_dict(self.best_state)

    from hybridsearch.training.progress import TrainingBar

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
