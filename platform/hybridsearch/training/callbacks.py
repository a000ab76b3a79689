"""The trainers' callbacks (:mod:`.embedder`, :mod:`.reranker`): progress, epoch records, the best epoch's weights.

:class:`TrainingProgress` reports the trainer's steps and loss as :class:`~hybridsearch.progress.ProgressEvent` s
(task ``training[ label]``) and each epoch's validation figures as a note; :class:`EpochKeeper` records them and
keeps the best epoch's weights in memory; :func:`make_callbacks` fits both to the reranker's figures. Nothing
here draws: ``hsp train-*`` renders the events.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from hybridsearch.progress import ProgressSink, Task, note, tracker
from hybridsearch.training.config import EpochResult, TrainResult

PRIMARY = "eval_val_ndcg@10"


class TrainingProgress(TrainerCallback):  # type: ignore[misc]
    """The trainer's steps (of ``max_steps``) and loss as events on ``sink``; each epoch's validation figures as a
    note (:meth:`figures` words them). :attr:`track` reports the validation's own steps to the same sink."""

    def __init__(self, sink: ProgressSink, label: str = "") -> None:
        self.sink, self.label = sink, label
        self.name = f"training{' ' + label if label else ''}"
        self.track = tracker(sink)
        self.task: Task | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.task = Task(self.sink, self.name, state.max_steps)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.task is not None:
            self.task.update(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
               **kw: Any) -> None:
        if self.task is not None and logs and "loss" in logs:
            self.task.update(detail=f"epoch {state.epoch:.2f} loss {logs['loss']:.4f}")

    def figures(self, epoch: int, metrics: dict[str, float]) -> str:
        shown = ", ".join(f"{k.removeprefix('eval_val_')} {v:.4f}" for k, v in metrics.items()
                          if k.startswith("eval_val_"))
        return f"epoch {epoch}: validation {shown}"

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None,
                    **kw: Any) -> None:
        if metrics and PRIMARY in metrics:
            note(self.sink, self.name, self.figures(round(state.epoch or 0), metrics))

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.task is not None:
            self.task.finish()


class EpochKeeper(TrainerCallback):  # type: ignore[misc]
    """Records ``(epoch, validation metrics, mean training loss)`` per epoch in :attr:`epochs`; with
    ``snapshot``, keeps a copy of the weights of the epoch with the best validation nDCG@10
    (:attr:`best_epoch`), which :meth:`restore` puts back."""

    def __init__(self, model: Any, snapshot: bool) -> None:
        self.model = model
        self.snapshot = snapshot
        self.epochs: list[tuple[int, dict[str, float], float | None]] = []
        self.best_epoch: int | None = None
        self._best: float | None = None
        self._state: dict[str, Any] | None = None
        self._losses: list[float] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
               **kw: Any) -> None:
        if logs and "loss" in logs:
            self._losses.append(float(logs["loss"]))

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        loss = sum(self._losses) / len(self._losses) if self._losses else None
        self._losses = []
        self.epochs.append((round(state.epoch or 0), {}, loss))

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None,
                    **kw: Any) -> None:
        if not metrics or PRIMARY not in metrics or not self.epochs:
            return
        epoch, figures, _ = self.epochs[-1]
        figures.update({k.removeprefix("eval_val_"): float(v) for k, v in metrics.items()
                        if k.startswith("eval_val_")})
        self._keep(epoch, float(metrics[PRIMARY]))

    def _keep(self, epoch: int, score: float) -> bool:
        """Make ``epoch`` the best (with ``snapshot``: copy its weights) when ``score`` beats the best so far."""
        if self._best is not None and score <= self._best:
            return False
        self._best, self.best_epoch = score, epoch
        if self.snapshot:
            self._state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        return True

    def restore(self) -> None:
        if self._state is not None:
            self.model.load_state_dict(self._state)


def make_callbacks(model: Any, result: TrainResult, progress: ProgressSink | None, validating: bool, snapshot: bool,
                   stop_after: int | None = None, label: str = "") -> tuple[Any, Any]:
    """Trainer callbacks: one records per-epoch validation, stops training after epoch ``stop_after``
    and, with ``snapshot``, keeps the best epoch's weights in memory (restored by ``restore()``); the
    other (None without ``progress``) reports the steps and each epoch's figures to ``progress``, its task
    and notes named with ``label``."""
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
