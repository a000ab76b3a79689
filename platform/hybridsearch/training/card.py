"""Writing the card of a trained domain reranker: ``card.json`` (for programs) and ``README.md`` (for people).

The card says what the model was trained on (base model, data, split, negatives, epochs), how it did
on held-out queries of the training split per epoch, and how to serve it (``serving.blend``,
``serving.max_length``), which :mod:`hybridsearch.rerank.card` reads back when the model is served.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsearch import __version__
from hybridsearch.embedding.models import resolve_model
from hybridsearch.rerank.card import CARD_FILE, KIND

if TYPE_CHECKING:
    from hybridsearch.training.config import EpochResult, TrainingConfig, TrainResult
    from hybridsearch.training.negatives import MinedData, SplitData


def kept_epoch(result: TrainResult) -> Any:
    """The :class:`~hybridsearch.training.config.EpochResult` that was kept, or None."""
    return next((e for e in result.epochs if e.epoch == result.best_epoch), None)


def beats_fused(result: TrainResult) -> bool | None:
    """Whether the kept epoch, served with its blend, ranks the validation queries better than the
    fused order (None: no validation)."""
    kept = kept_epoch(result)
    if not result.fused or kept is None or kept.blend_ndcg_at_10 is None:
        return None
    return bool(kept.blend_ndcg_at_10 > result.fused["ndcg@10"])


def make_card(cfg: TrainingConfig, data: SplitData, mined: MinedData, result: TrainResult,
              extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``card.json`` content: what the model was trained from and how it did on validation."""
    kept = kept_epoch(result)
    return {
        "kind": KIND,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "base_model": cfg.base,
        "base_model_path": resolve_model(cfg.base),
        "base_model_trained_on": base_training(cfg.base),
        "head": "one-logit sequence classification (sigmoid = relevance probability)",
        "dataset": str(Path(cfg.dataset).expanduser().resolve()),
        "split": data.split,
        "files_read": data.files_read,
        "queries": {"train": len(mined.train_qids), "validation": len(mined.val_qids),
                    "validation_scored": len(mined.validation) or (len(mined.pool) if result.cv else 0),
                    "skipped_no_positive_passage": len(mined.stats.skipped_queries)},
        "pairs": {"total": len(mined.pairs), "positive": mined.stats.positives, "negative": mined.stats.negatives,
                  "positives_missing_from_index": mined.stats.positives_missing},
        "negatives": {"per_query": cfg.negatives, "mined_from": f"hybrid top-{cfg.depth} minus judged-relevant",
                      "strategy": cfg.strategy, "policy": {**asdict(cfg.policy), "rules": cfg.policy.describe()},
                      "filtered": asdict(mined.stats.filtered)},
        "training": {"epochs": cfg.epochs, "batch_size": cfg.batch_size, "max_length": cfg.max_length,
                     "learning_rate": cfg.lr, "warmup_ratio": cfg.warmup_ratio, "seed": cfg.seed,
                     "loss": cfg.loss_name, "steps": result.steps, "keep": cfg.keep,
                     "limit_queries": cfg.limit_queries, "val_fraction": 0.0 if result.cv else cfg.val_fraction,
                     "folds": cfg.folds if result.cv else 0, "max_epochs": cfg.epochs,
                     "trained_epochs": result.best_epoch if result.cv else cfg.epochs,
                     "fit_on": "all training queries" if result.cv else "training queries minus validation"},
        "validation": {
            "metric": "nDCG@10 of reranking the fused hybrid candidates of held-out train queries" + (
                f" (out-of-fold over {cfg.folds} folds, pooled)" if result.cv else ""),
            "method": f"{cfg.folds}-fold" if result.cv else f"one held-out slice ({cfg.val_fraction:g})",
            "fused_order": result.fused,
            "per_epoch": [asdict(e) for e in result.epochs],
            "best_epoch": result.best_epoch,
            "beats_fused_order": beats_fused(result),
            "caveat": _caveat(cfg, data),
        },
        "cross_validation": result.cv,
        "serving": {
            "blend": kept.blend if kept is not None and kept.blend is not None else 1.0,
            "how": "final order of the reranked top = blend × min-max(reranker score) + (1 - blend) × "
                   "min-max(fused score); chosen on the validation queries (HSP_RERANKER__BLEND overrides)",
            "max_length": cfg.max_length,
        },
        "time_seconds": {"mining": round(mined.seconds, 1), "cross_validation": round(result.cv_seconds, 1),
                         "training": round(result.seconds, 1)},
        "device": result.device,
        **environment(),
        **(dict(extra) if extra else {}),
    }


def environment() -> dict[str, Any]:
    """``host`` (CPUs, platform) and ``versions`` (hybridsearch and the training libraries) for a card."""
    import sentence_transformers
    import torch
    import transformers

    return {
        "host": {"cpu_count": _cpu_count(), "platform": platform.platform()},
        "versions": {"hybridsearch": __version__, "sentence_transformers": sentence_transformers.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__},
    }


def base_training(base: str) -> dict[str, Any] | None:
    """What the base model was itself trained on, from its hybridsearch card (``kind``, ``dataset``,
    ``split``, ``files_read``); None for a base without one (e.g. the packaged MiniLM)."""
    card = Path(resolve_model(base)) / CARD_FILE
    try:
        data = json.loads(card.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {k: data.get(k) for k in ("kind", "dataset", "split", "files_read")}


def _caveat(cfg: TrainingConfig, data: SplitData) -> str | None:
    """A warning when the base already learnt from this split's judgments: then the held-out (or
    out-of-fold) queries were seen by the base, and validation flatters the model."""
    trained = base_training(cfg.base)
    if not trained or trained.get("split") != data.split:
        return None
    if str(Path(str(trained.get("dataset") or "")).resolve()) != str(Path(cfg.dataset).expanduser().resolve()):
        return None
    return (f"the base model was trained on the {data.split!r} judgments of this collection: the validation "
            "queries are not unseen by it, so validation figures are optimistic; trust the test split")


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def card_markdown(card: Mapping[str, Any]) -> str:
    """A README.md a person reads: the card as prose and tables."""
    val = card["validation"]
    blend = card.get("serving", {}).get("blend", 1.0)
    lines = [
        "# Domain reranker (hybridsearch)",
        "",
        f"Cross-encoder fine-tuned from `{card['base_model']}` with {card['head']}, on the "
        f"`{card['split']}` split of `{card['dataset']}`.",
        "",
        "| data | value |", "|---|---|",
        f"| training queries | {card['queries']['train']} |",
        f"| validation | {card['validation'].get('method', 'one held-out slice')}: "
        f"{card['queries']['validation_scored']} queries scored |",
        f"| pairs (positive / negative) | {card['pairs']['positive']} / {card['pairs']['negative']} |",
        f"| negatives per query | {card['negatives']['per_query']} ({card['negatives']['strategy']}, "
        f"{card['negatives']['mined_from']}; {card['negatives'].get('policy', {}).get('rules', 'no filter')}) |",
        f"| epochs, batch, max length, lr | {card['training']['epochs']}, {card['training']['batch_size']}, "
        f"{card['training']['max_length']}, {card['training']['learning_rate']} |",
        f"| loss | {card['training'].get('loss', 'BinaryCrossEntropyLoss')} |",
        f"| seed | {card['training']['seed']} |",
        f"| device | {card['device']} |",
        f"| time (mining / training) | {card['time_seconds']['mining']} s / {card['time_seconds']['training']} s |",
        "",
        f"## Validation ({val['metric']})",
        "",
        "\"reranker alone\" orders the candidates by the model's score only; \"served\" blends it with the "
        "fused score at the epoch's best blend weight, which is how the model is served.",
        "",
    ]
    if val.get("caveat"):
        lines += [f"**Note: {val['caveat']}.**", ""]
    if val.get("beats_fused_order") is False:
        lines += ["**Warning: even blended, this model ranks the validation queries no better than the fused "
                  "hybrid order. Do not deploy it; see docs/reranker-training.md.**", ""]
    lines += ["| epoch | reranker alone nDCG@10 | MRR@10 | blend | served nDCG@10 |", "|---|---|---|---|---|"]
    if val["fused_order"]:
        lines.append(f"| fused order (no rerank) | {val['fused_order']['ndcg@10']:.4f} | "
                     f"{val['fused_order']['mrr@10']:.4f} | 0 | {val['fused_order']['ndcg@10']:.4f} |")
    for e in val["per_epoch"]:
        mark = " (kept)" if e["epoch"] == val["best_epoch"] else ""
        lines.append(f"| {e['epoch']}{mark} | {_fmt(e['ndcg_at_10'])} | {_fmt(e['mrr_at_10'])} | "
                     f"{_fmt(e.get('blend'), 2)} | {_fmt(e.get('blend_ndcg_at_10'))} |")
    lines += _cv_markdown(card.get("cross_validation"))
    lines += [
        "",
        "## Use",
        "",
        "```",
        "HSP_RERANKER__MODEL=<this folder> hsp serve-reranker",
        "```",
        "",
        f"The served order blends the reranker's score with the fused score at {blend:g} (from `serving.blend` "
        "in card.json; `HSP_RERANKER__BLEND` overrides it, 1 = reranker order only).",
        "",
        "Files read for training: " + ", ".join(f"`{f}`" for f in card["files_read"]) + ".",
        "",
    ]
    return "\n".join(lines)


def _cv_markdown(cv: Mapping[str, Any] | None) -> list[str]:
    if not cv:
        return []
    est, ch = cv["estimate"], cv["chosen"]
    lines = ["", f"## {cv['folds']}-fold selection", "",
             f"Chosen on the pooled out-of-fold scores of {ch['queries']} queries: {ch['epoch']} epoch(s), blend "
             f"{ch['blend']:g} (served {ch['served']:.4f} against fused {ch['fused']:.4f}, {ch['gain']:+.4f}). "
             "The final model was fitted on all training queries and stopped at that epoch.", "",
             "Nested estimate (each fold measured with the epochs and blend chosen on the other folds): gain "
             f"{est['gain_mean']:+.4f} ± {est['gain_std']:.4f} (sd over folds; min {est['gain_min']:+.4f}).", "",
             *([f"**Guard: {cv['guard']}.**", ""] if cv.get("guard") else []),
             "| fold | queries | epochs | blend | fused | reranker alone | served | gain |",
             "|---|---|---|---|---|---|---|---|"]
    for f in cv["nested_per_fold"]:
        lines.append(f"| {f['fold']} | {f['queries']} | {f['epoch']} | {f['blend']:g} | {f['fused']:.4f} | "
                     f"{f['alone']:.4f} | {f['served']:.4f} | {f['gain']:+.4f} |")
    return lines


def _fmt(x: float | None, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def save_model(model: Any, out: Path, card: Mapping[str, Any],
               markdown: Callable[[Mapping[str, Any]], str] | None = None) -> Path:
    """Write the model folder (a CrossEncoder or SentenceTransformer), ``card.json`` and ``README.md`` (the card
    as ``markdown`` renders it, by default the reranker's :func:`card_markdown`) to ``out``; returns ``out``."""
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    model.save(str(out), create_model_card=False)
    (out / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text((markdown or card_markdown)(card), encoding="utf-8")
    return out


@dataclass(frozen=True)
class RerankerCard:
    """The figures of a reranker's card that people read after training: a typed view of :func:`make_card`'s
    dictionary (``raw``), read in one place next to the code that writes it."""

    split: str
    train_queries: int
    validation_scored: int
    fused: dict[str, float]
    epochs: list[EpochResult]
    best_epoch: int | None
    beats_fused: bool | None
    cross_validation: dict[str, Any] | None  # folds.CVSummary.as_dict(), with k-fold selection
    positive_pairs: int
    negative_pairs: int
    mining_seconds: float
    training_seconds: float
    device: str
    blend: float
    raw: Mapping[str, Any]

    @classmethod
    def of(cls, card: Mapping[str, Any]) -> RerankerCard:
        """The view of ``card`` (the dictionary :func:`make_card` built or ``card.json`` holds)."""
        from hybridsearch.training.config import EpochResult

        val = card["validation"]
        return cls(split=card["split"], train_queries=card["queries"]["train"],
                   validation_scored=card["queries"]["validation_scored"], fused=dict(val["fused_order"] or {}),
                   epochs=[EpochResult(**e) for e in val["per_epoch"]], best_epoch=val["best_epoch"],
                   beats_fused=val.get("beats_fused_order"), cross_validation=card.get("cross_validation"),
                   positive_pairs=card["pairs"]["positive"], negative_pairs=card["pairs"]["negative"],
                   mining_seconds=card["time_seconds"]["mining"], training_seconds=card["time_seconds"]["training"],
                   device=card["device"], blend=card["serving"]["blend"], raw=card)
