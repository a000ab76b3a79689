"""What both trainers hand sentence-transformers: the validation evaluator and the epoch keeper (with progress)."""

from __future__ import annotations

import tempfile
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


def fit(model: Any, dataset: Any, loss: Any, validation: Any, keeper: EpochKeeper, *, epochs: int, batch_size: int,
        lr: float, warmup_ratio: float, seed: int, device: str, logging_steps: int, **args: Any) -> tuple[int, float]:
    """Train ``model`` (a CrossEncoder or SentenceTransformer) with sentence-transformers' trainer for it, evaluating
    after each epoch, with no checkpoint, Hub card or printed log; returns ``(steps, seconds)``."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.model_card import CrossEncoderModelCardCallback
    from sentence_transformers.sentence_transformer.model_card import SentenceTransformerModelCardCallback
    from transformers import PrinterCallback

    cross = isinstance(model, CrossEncoder)
    with tempfile.TemporaryDirectory(prefix="hsp-train-") as tmp:
        arguments: Any = (CrossEncoderTrainingArguments if cross else SentenceTransformerTrainingArguments)(
            output_dir=tmp, num_train_epochs=epochs, per_device_train_batch_size=batch_size, learning_rate=lr,
            warmup_steps=warmup_ratio, seed=seed, data_seed=seed, save_strategy="no", logging_strategy="steps",
            eval_strategy="epoch" if validation is not None else "no", logging_steps=logging_steps, report_to="none",
            disable_tqdm=True, use_cpu=device == "cpu", dataloader_num_workers=0, **args)
        trainer = (CrossEncoderTrainer if cross else SentenceTransformerTrainer)(
            model=model, args=arguments, train_dataset=dataset, loss=loss, evaluator=validation, callbacks=[keeper])
        # the card callback looks names up on the Hub (we write our own card); the printer prints raw log dicts
        trainer.remove_callback(CrossEncoderModelCardCallback if cross else SentenceTransformerModelCardCallback)
        trainer.remove_callback(PrinterCallback)
        started = time.perf_counter()
        steps = int(trainer.train().global_step)
        return steps, time.perf_counter() - started


class EpochKeeper(TrainerCallback):  # type: ignore[misc]
    """Per epoch ``(epoch, validation figures, mean training loss)`` in :attr:`epochs`, the best epoch's weights kept
    with ``snapshot``; stops training after epoch ``stop_after`` when given. Steps and loss go to ``sink`` as events,
    each epoch's validation figures as a note."""

    def __init__(self, model: Any, snapshot: bool, primary: str = "ndcg@10", stop_after: int | None = None,
                 sink: ProgressSink | None = None, label: str = "") -> None:
        self.model, self.snapshot, self.primary, self.stop_after = model, snapshot, primary, stop_after
        self.sink, self.label = sink, label
        self.name = f"training{' ' + label if label else ''}"
        self.task = Task(None, self.name)
        self.epochs: list[tuple[int, dict[str, float], float | None]] = []
        self.best_epoch: int | None = None
        self._best: float | None = None
        self._state: dict[str, Any] | None = None
        self._losses: list[float] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.task = Task(self.sink, self.name, state.max_steps)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.task.update(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
               **kw: Any) -> None:
        if logs and "loss" in logs:
            self._losses.append(float(logs["loss"]))
            self.task.update(detail=f"epoch {state.epoch:.2f} loss {logs['loss']:.4f}")

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
        shown.update({k.removeprefix(PREFIX): float(v) for k, v in metrics.items() if k.startswith(PREFIX)})
        if "blend" in shown:  # a reranker: its own order, and served blended with the fused order
            text = (f"{self.label + ' ' if self.label else ''}epoch {epoch}: validation nDCG@10 "
                    f"{shown['ndcg@10']:.4f} (MRR@10 {shown.get('mrr@10', 0.0):.4f}); served at blend "
                    f"{shown['blend']:g}: {shown.get('blend_ndcg@10', 0.0):.4f}")
        else:
            text = f"epoch {epoch}: validation " + ", ".join(f"{k} {v:.4f}" for k, v in shown.items())
        note(self.sink, self.name, text)
        score = shown[self.primary]
        if self._best is None or score > self._best:
            self._best, self.best_epoch = score, epoch
            if self.snapshot:
                self._state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.task.finish()

    def kept_epoch(self, keep: str) -> int | None:
        """The epoch whose weights the model ends with (``keep="best"``: the best one's, restored), or None."""
        if keep == "best" and self.best_epoch is not None:
            if self._state is not None:
                self.model.load_state_dict(self._state)
            return self.best_epoch
        return self.epochs[-1][0] if self.epochs else None
