"""The cards of trained models: ``card.json`` (for programs; :mod:`hybridsearch.rerank.base` reads a reranker's
``serving``) and ``README.md`` (for people, from ``cards/*.md.j2``)."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from hybridsearch import __version__
from hybridsearch.embedding.models import file_hash, record_files, resolve_model
from hybridsearch.rerank.base import CARD_FILE, KIND
from hybridsearch.training.config import LOSS_NAMES

if TYPE_CHECKING:
    from hybridsearch.settings import ModelsSettings
    from hybridsearch.training.config import (
        DenseValidation,
        EmbedderConfig,
        EmbedderResult,
        RowStats,
        TrainingConfig,
        TrainResult,
    )
    from hybridsearch.training.negatives import Collected, MinedData, SplitData

EMBEDDER_KIND = "hybridsearch-domain-embedder"


def kept_epoch(result: TrainResult) -> Any:
    """The kept :class:`~hybridsearch.training.config.EpochResult`, or None."""
    return next((e for e in result.epochs if e.epoch == result.best_epoch), None)


def beats_fused(result: TrainResult) -> bool | None:
    """Whether the kept epoch, served with its blend, beats the fused order on validation (None: no validation)."""
    kept = kept_epoch(result)
    if not result.fused or kept is None or kept.blend_ndcg_at_10 is None:
        return None
    return bool(kept.blend_ndcg_at_10 > result.fused["ndcg@10"])


def _head(kind: str, cfg: TrainingConfig | EmbedderConfig, data: SplitData, models: ModelsSettings,
          **base: Any) -> dict[str, Any]:
    """The fields every card starts with: the base model (and ``base``) and the judgments trained on."""
    return {"kind": kind, "created": datetime.now(UTC).isoformat(timespec="seconds"), "base_model": cfg.base,
            "base_model_path": resolve_model(cfg.base, models), **base,
            "dataset": str(Path(cfg.dataset).expanduser().resolve()), "split": data.split,
            "files_read": data.files_read}


def make_card(cfg: TrainingConfig, data: SplitData, mined: MinedData, result: TrainResult, models: ModelsSettings,
              extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``card.json`` content of a reranker."""
    kept, trained = kept_epoch(result), base_training(cfg.base, models)
    return {
        **_head(KIND, cfg, data, models, base_model_trained_on=trained,
                head="one-logit sequence classification (sigmoid = relevance probability)"),
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
                     "loss": LOSS_NAMES[cfg.loss], "steps": result.steps, "keep": cfg.keep,
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
            "caveat": _caveat(cfg, data, trained),
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
    """``host`` and ``versions`` (hybridsearch and the training libraries) for a card."""
    import sentence_transformers
    import torch
    import transformers

    return {
        "host": {"cpu_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
                 "platform": platform.platform()},
        "versions": {"hybridsearch": __version__, "sentence_transformers": sentence_transformers.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__},
    }


def base_training(base: str, models: ModelsSettings) -> dict[str, Any] | None:
    """What the base model was itself trained on, from its hybridsearch card; None for a base without one."""
    card = Path(resolve_model(base, models)) / CARD_FILE
    try:
        data = json.loads(card.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {k: data.get(k) for k in ("kind", "dataset", "split", "files_read")}


def _caveat(cfg: TrainingConfig, data: SplitData, trained: dict[str, Any] | None) -> str | None:
    """A warning when the base (``trained``: its :func:`base_training`) already learnt from this split's judgments
    (validation then flatters the model)."""
    if not trained or trained.get("split") != data.split:
        return None
    if str(Path(str(trained.get("dataset") or "")).resolve()) != str(Path(cfg.dataset).expanduser().resolve()):
        return None
    return (f"the base model was trained on the {data.split!r} judgments of this collection: the validation "
            "queries are not unseen by it, so validation figures are optimistic; trust the test split")


def _num(x: float | None, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).with_name("cards")), undefined=StrictUndefined,
                        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
TEMPLATES.filters["num"] = _num


def card_markdown(card: Mapping[str, Any]) -> str:
    """The README.md a person reads, from the card (``cards/reranker.md.j2`` or ``cards/embedder.md.j2``)."""
    kind = "embedder" if card["kind"] == EMBEDDER_KIND else "reranker"
    return TEMPLATES.get_template(f"{kind}.md.j2").render(c=card)


def save_model(model: Any, out: Path, card: Mapping[str, Any], models: ModelsSettings) -> Path:
    """Write the model folder, ``card.json`` and ``README.md`` to ``out`` and record its files; returns ``out``."""
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    model.save(str(out), create_model_card=False)
    (out / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(card_markdown(card), encoding="utf-8")
    record_files(out, models)
    return out


def beats_base(result: EmbedderResult) -> bool | None:
    """Whether the kept epoch retrieves the validation queries better than the base (epoch 0); None unvalidated."""
    scores = {e.epoch: e.ndcg_at_10 for e in result.epochs}
    base, kept = scores.get(0), scores.get(result.best_epoch) if result.best_epoch is not None else None
    if base is None or kept is None:
        return None
    return bool(kept > base)


def make_embedder_card(cfg: EmbedderConfig, data: SplitData, got: Collected, stats: RowStats,
                       val: DenseValidation | None, result: EmbedderResult, model: Any, models: ModelsSettings, *,
                       disjoint_from: list[str], seconds: Mapping[str, float],
                       extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``card.json`` content of an embedder (``model``: the trained SentenceTransformer)."""
    out = str(Path(cfg.out).expanduser().resolve())
    served_length = int(model.max_seq_length or 512)
    return {
        **_head(EMBEDDER_KIND, cfg, data, models),
        "qrels_sha256": {Path(f).name: file_hash(f) for f in data.files_read if Path(f).exists()},
        "checked_disjoint_from": disjoint_from,
        "queries": {"train": len(got.train_qids), "validation": len(got.val_qids),
                    "trained_on": stats.queries, "skipped_no_positive_passage": len(stats.skipped_queries)},
        "rows": {"total": stats.rows, "hard_negatives_per_row": cfg.negatives,
                 "positives_missing_from_index": stats.positives_missing,
                 "rows_without_negatives_left_out": stats.rows_without_negatives,
                 "rows_reusing_a_negative": stats.rows_reusing_negatives},
        "negatives": {
            "mined_from": f"hybrid top-{cfg.depth} of the collection's index minus judged-relevant documents",
            "strategy": cfg.strategy, "skip_top": cfg.skip_top, "margin": cfg.margin,
            "dropped_as_likely_false_negatives": {"top": stats.dropped_top, "duplicate_of_positive":
                                                  stats.dropped_duplicate, "similar": stats.dropped_similar},
            "in_batch": "every other row's positive and negatives in the batch (no duplicate texts per batch)",
        },
        "training": {"loss": "MultipleNegativesRankingLoss (cosine, scale 20)", "epochs": cfg.epochs,
                     "batch_size": cfg.batch_size, "learning_rate": cfg.lr, "warmup_ratio": cfg.warmup_ratio,
                     "max_seq_length": cfg.max_seq_length or served_length, "seed": cfg.seed,
                     "steps": result.steps, "keep": cfg.keep, "val_fraction": cfg.val_fraction,
                     "limit_queries": cfg.limit_queries},
        "validation": {
            "metric": "dense retrieval of held-out training queries (a document ranks by its best chunk)",
            "corpus": ({"chunks": len(val.chunks), "documents": val.documents, "full_index": val.full_corpus,
                        "index_chunks": val.index_chunks} if val is not None else None),
            "queries": len(val.qids) if val is not None else 0,
            "per_epoch": [asdict(e) for e in result.epochs],
            "best_epoch": result.best_epoch,
            "beats_base": beats_base(result),
        },
        "serving": {"model": out, "dims": int(model.get_embedding_dimension() or 0),
                    "max_seq_length": served_length,
                    "use": f"HSP_EMBEDDING__MODEL={out}; roll an index over with "
                           f"`hsp index migrate --to-model {out}`"},
        "time_seconds": {**{k: round(v, 1) for k, v in seconds.items()}, "training": round(result.seconds, 1),
                         "of_which_validation": round(result.validation_seconds, 1)},
        "device": result.device,
        **environment(),
        **(dict(extra) if extra else {}),
    }

