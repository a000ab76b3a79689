"""Progress bars and epoch bookkeeping for the embedder trainer (:mod:`.embedder`).

:func:`make_bar` is a rich progress display on stderr; :func:`tracker` turns one into the
``(description, total) -> advance(n)`` callbacks the data steps take. :class:`TrainingBar` draws the
trainer's steps and loss and prints each epoch's validation figures; :class:`EpochKeeper` records them
and keeps the best epoch's weights in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress
from transformers import TrainerCallback

Track = Callable[[str, int], Callable[[int], None]]
PRIMARY = "eval_val_ndcg@10"


def make_bar(enabled: bool = True, label: str = "{task.description}") -> RichProgress:
    return RichProgress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=Console(stderr=True), disable=not enabled)


def tracker(bar: RichProgress) -> Track:
    """Tasks on ``bar``: ``track(description, total)`` adds one and returns its ``advance(n)``; a task
    is removed when it completes."""
    def track(desc: str, total: int) -> Callable[[int], None]:
        task = bar.add_task(desc, total=total)
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            bar.update(task, completed=done)
            if done >= total:
                bar.remove_task(task)
        return advance
    return track


def one_at_a_time(track: Track) -> Callable[[str, int], Callable[[], None]]:
    """``track`` as the ``advance()``-by-one callbacks of :func:`hybridsearch.training.negatives.collect`."""
    def progress(desc: str, total: int) -> Callable[[], None]:
        advance = track(desc, total)
        return lambda: advance(1)
    return progress


class TrainingBar(TrainerCallback):  # type: ignore[misc]
    """The trainer's steps and loss on a rich bar; each epoch's validation figures printed under it.
    :attr:`track` puts the validation's own progress on the same display."""

    def __init__(self, label: str = "") -> None:
        self.progress = make_bar(label=f"[bold]training{' ' + label if label else ''}[/] {{task.description}}")
        self.track = tracker(self.progress)
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
        if metrics and PRIMARY in metrics:
            figures = ", ".join(f"{k.removeprefix('eval_val_')} {v:.4f}" for k, v in metrics.items()
                                if k.startswith("eval_val_"))
            self.progress.console.print(f"epoch {round(state.epoch or 0)}: validation {figures}")

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.progress.stop()


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
