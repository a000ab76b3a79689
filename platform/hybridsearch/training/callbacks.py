"""What both trainers hand sentence-transformers: the validation evaluator, progress events (task ``training[
label]``, each epoch's figures as a note; nothing here draws) and the epoch keeper (figures per epoch, best weights).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from hybridsearch.progress import ProgressSink, Task, note

PREFIX = "eval_val_"


def evaluator(measure: Callable[[Any], dict[str, float]], primary: str) -> Any:
    """A sentence-transformers evaluator named ``val`` reporting ``measure(model)``; :attr:`seconds` sums its time."""
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    class Validation(BaseEvaluator):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.name, self.primary_metric, self.seconds = "val", primary, 0.0

        def __call__(self, model: Any, output_path: str | None = None, epoch: int = -1,
                     steps: int = -1) -> dict[str, float]:
            started = time.perf_counter()
            metrics = measure(model)
            self.seconds += time.perf_counter() - started
            return self.prefix_name_to_metrics(metrics, self.name)  # type: ignore[no-any-return]

    return Validation()


def figures(metrics: dict[str, float]) -> dict[str, float]:
    """The validation figures among a trainer's ``metrics``, unprefixed."""
    return {k.removeprefix(PREFIX): float(v) for k, v in metrics.items() if k.startswith(PREFIX)}


class TrainingProgress(TrainerCallback):  # type: ignore[misc]
    """The trainer's steps and loss as events on ``sink``, each epoch's validation figures as a note."""

    def __init__(self, sink: ProgressSink, label: str = "") -> None:
        self.sink, self.label = sink, label
        self.name = f"training{' ' + label if label else ''}"
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

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None,
                    **kw: Any) -> None:
        if not metrics or PREFIX + "ndcg@10" not in metrics:
            return
        m, epoch = figures(metrics), round(state.epoch or 0)
        if "blend" in m:  # a reranker: its own order, and served blended with the fused order
            text = (f"{self.label + ' ' if self.label else ''}epoch {epoch}: validation nDCG@10 {m['ndcg@10']:.4f} "
                    f"(MRR@10 {m.get('mrr@10', 0.0):.4f}); served at blend {m['blend']:g}: "
                    f"{m.get('blend_ndcg@10', 0.0):.4f}")
        else:
            text = f"epoch {epoch}: validation " + ", ".join(f"{k} {v:.4f}" for k, v in m.items())
        note(self.sink, self.name, text)

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.task is not None:
            self.task.finish()


class EpochKeeper(TrainerCallback):  # type: ignore[misc]
    """Records ``(epoch, validation figures, mean training loss)`` per epoch in :attr:`epochs`; with ``snapshot``
    keeps a copy of the weights of the epoch with the best ``primary`` figure (:attr:`best_epoch`), which
    :meth:`restore` puts back. Stops training after epoch ``stop_after`` when given."""

    def __init__(self, model: Any, snapshot: bool, primary: str = "ndcg@10", stop_after: int | None = None) -> None:
        self.model, self.snapshot, self.primary, self.stop_after = model, snapshot, primary, stop_after
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
        epoch = round(state.epoch or 0)
        self.epochs.append((epoch, {}, loss))
        if self.stop_after is not None and epoch >= self.stop_after:
            control.should_training_stop = True

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None,
                    **kw: Any) -> None:
        if not metrics or PREFIX + self.primary not in metrics or not self.epochs:
            return
        epoch, shown, _ = self.epochs[-1]
        shown.update(figures(metrics))
        score = shown[self.primary]
        if self._best is None or score > self._best:
            self._best, self.best_epoch = score, epoch
            if self.snapshot:
                self._state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def kept_epoch(self, keep: str) -> int | None:
        """The epoch whose weights the model ends with (``keep="best"``: the best one's, restored), or None."""
        if keep == "best" and self.best_epoch is not None:
            if self._state is not None:
                self.model.load_state_dict(self._state)
            return self.best_epoch
        return self.epochs[-1][0] if self.epochs else None
