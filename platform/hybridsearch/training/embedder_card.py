"""The card of a fine-tuned bi-encoder: ``card.json`` (for programs) and ``README.md`` (for people).

It records the recipe (base, loss, epochs, learning rate, batch, seed, negatives, sequence lengths), the
data (collection, split, query counts, the judgments' SHA-256, the test files checked for shared query
ids), dense-retrieval validation per epoch (epoch 0 is the base model) with the epoch kept, times and
versions, and how to use the folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsearch.embedding.models import record_files, resolve_model
from hybridsearch.training.card import environment, save_model
from hybridsearch.training.embedder_data import file_sha256

if TYPE_CHECKING:
    from hybridsearch.training.config import EmbedderConfig, EmbedderEpoch, EmbedderResult
    from hybridsearch.training.embedder_data import DenseValidation, RowStats
    from hybridsearch.training.negatives import Collected, SplitData

CARD_FILE = "card.json"
KIND = "hybridsearch-domain-embedder"
POOL = "a pool: every document judged for or found by hybrid search for a validation query, plus random others"


def beats_base(result: EmbedderResult) -> bool | None:
    """Whether the kept epoch retrieves the validation queries better than the base model (epoch 0);
    None without validation."""
    scores = {e.epoch: e.ndcg_at_10 for e in result.epochs}
    base, kept = scores.get(0), scores.get(result.best_epoch) if result.best_epoch is not None else None
    if base is None or kept is None:
        return None
    return bool(kept > base)


def make_embedder_card(cfg: EmbedderConfig, data: SplitData, got: Collected, stats: RowStats,
                       val: DenseValidation | None, result: EmbedderResult, model: Any, *,
                       disjoint_from: list[str], seconds: Mapping[str, float],
                       extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``card.json`` content (``model``: the trained SentenceTransformer, for its dims and length)."""
    out = str(Path(cfg.out).expanduser().resolve())
    served_length = int(model.max_seq_length or 512)
    return {
        "kind": KIND,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "base_model": cfg.base,
        "base_model_path": resolve_model(cfg.base),
        "dataset": str(Path(cfg.dataset).expanduser().resolve()),
        "split": data.split,
        "files_read": data.files_read,
        "qrels_sha256": {Path(f).name: file_sha256(f) for f in data.files_read if Path(f).exists()},
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
        "training": {"loss": f"{cfg.loss_name} (cosine, scale 20)", "epochs": cfg.epochs,
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


def card_markdown(card: Mapping[str, Any]) -> str:
    """A README.md a person reads: the card as prose and tables."""
    t, val, neg = card["training"], card["validation"], card["negatives"]
    dropped = neg["dropped_as_likely_false_negatives"]
    corpus = val.get("corpus") or {}
    lines = [
        "# Domain embedding model (hybridsearch)",
        "",
        f"Bi-encoder fine-tuned from `{card['base_model']}` on the `{card['split']}` split of `{card['dataset']}` "
        f"with {t['loss']}: in-batch negatives plus {card['rows']['hard_negatives_per_row']} hard negative(s) "
        "per row mined from the collection's own hybrid search.",
        "",
        "| | |", "|---|---|",
        f"| training / validation queries | {card['queries']['train']} / {card['queries']['validation']} |",
        f"| rows (query, positive, negatives) | {card['rows']['total']} |",
        f"| negatives | {neg['strategy']} from {neg['mined_from']}; skip top {neg['skip_top']}, margin "
        f"{neg['margin']} |",
        f"| dropped as likely false negatives | top {dropped['top']}, duplicate {dropped['duplicate_of_positive']}, "
        f"similar {dropped['similar']} |",
        f"| epochs, batch, lr, warmup | {t['epochs']}, {t['batch_size']}, {t['learning_rate']}, {t['warmup_ratio']} |",
        f"| max_seq_length (training / served) | {t['max_seq_length']} / {card['serving']['max_seq_length']} |",
        f"| seed, steps | {t['seed']}, {t['steps']} |",
        f"| device, training time | {card['device']}, {card['time_seconds']['training']:.0f} s (of which "
        f"validation {card['time_seconds']['of_which_validation']:.0f} s) |",
        f"| judgments | {', '.join(f'`{k}` sha256 {v[:12]}…' for k, v in card['qrels_sha256'].items())} |",
        f"| checked disjoint from | {', '.join(f'`{Path(f).name}`' for f in card['checked_disjoint_from']) or '–'} |",
        "",
        "## Validation",
        "",
        f"{val['metric'].capitalize()}: {val['queries']} queries against {corpus.get('chunks', '?')} chunks of "
        f"{corpus.get('documents', '?')} documents ({'the whole index' if corpus.get('full_index') else POOL}). "
        "Epoch 0 is the base model.",
        "",
    ]
    if val.get("beats_base") is False:
        lines += ["**Warning: the kept epoch retrieves the validation queries no better than the base model. "
                  "Do not roll it out; see docs/embedder-training.md.**", ""]
    lines += ["| epoch | nDCG@10 | Recall@10 | MRR@10 | train loss |", "|---|---|---|---|---|"]
    for e in val["per_epoch"]:
        mark = " (kept)" if e["epoch"] == val["best_epoch"] else (" (base)" if e["epoch"] == 0 else "")
        lines.append(f"| {e['epoch']}{mark} | {_fmt(e['ndcg_at_10'])} | {_fmt(e['recall_at_10'])} | "
                     f"{_fmt(e['mrr_at_10'])} | {_fmt(e['train_loss'])} |")
    lines += ["", "## Use", "", "```",
              f"hsp index migrate --to-model {card['serving']['model']}   # re-embed the live index, swap the alias",
              f"HSP_EMBEDDING__MODEL={card['serving']['model']} hsp search \"...\"", "```", "",
              "Every reader and writer of the index must then use this model (the index's `_meta` names it).", ""]
    return "\n".join(lines)


def _fmt(x: float | None, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def read_embedder_card(folder: str | Path) -> dict[str, Any] | None:
    """The card of a model folder written by ``hsp train-embedder``, or None."""
    try:
        card = json.loads((Path(folder).expanduser() / CARD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return card if isinstance(card, dict) and card.get("kind") == KIND else None


def save_embedder(model: Any, out: Path, card: Mapping[str, Any]) -> Path:
    """Write the SentenceTransformer folder, ``card.json`` and ``README.md`` to ``out`` and record its files
    (:func:`hybridsearch.embedding.models.record_files`: it is checked against them when it loads); returns ``out``."""
    folder = save_model(model, out, card, card_markdown)
    record_files(Path(folder))
    return folder


@dataclass(frozen=True)
class EmbedderCard:
    """The figures of a fine-tuned embedder's card that people read after training: a typed view of
    :func:`make_embedder_card`'s dictionary (``raw``), read in one place next to the code that writes it."""

    split: str
    validation_queries: int
    corpus_chunks: int
    full_index: bool
    epochs: list[EmbedderEpoch]
    best_epoch: int | None
    beats_base: bool | None
    rows: int
    trained_on_queries: int
    dropped: Mapping[str, int]  # candidates dropped as likely false negatives: top, duplicate_of_positive, similar
    seconds: Mapping[str, float]  # mining, training, of_which_validation, ...
    device: str
    model: str  # the folder to serve
    raw: Mapping[str, Any]

    @classmethod
    def of(cls, card: Mapping[str, Any]) -> EmbedderCard:
        """The view of ``card`` (the dictionary :func:`make_embedder_card` built or ``card.json`` holds)."""
        from hybridsearch.training.config import EmbedderEpoch

        val = card["validation"]
        corpus = val["corpus"] or {}
        return cls(split=card["split"], validation_queries=val["queries"], corpus_chunks=corpus.get("chunks", 0),
                   full_index=bool(corpus.get("full_index")), epochs=[EmbedderEpoch(**e) for e in val["per_epoch"]],
                   best_epoch=val["best_epoch"], beats_base=val.get("beats_base"), rows=card["rows"]["total"],
                   trained_on_queries=card["queries"]["trained_on"],
                   dropped=card["negatives"]["dropped_as_likely_false_negatives"], seconds=card["time_seconds"],
                   device=card["device"], model=card["serving"]["model"], raw=card)
