"""``hsp train-reranker``: fine-tune a cross-encoder on a collection's own judgments."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.table import Table

from hybridsearch.cli.output import console as make_console
from hybridsearch.cli.output import styled
from hybridsearch.settings import Settings

console = make_console()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``train-reranker`` to ``sub``."""
    p = sub.add_parser(
        "train-reranker",
        help="fine-tune a cross-encoder reranker on a BEIR collection's judgments (hard negatives from our index)",
        description=(
            "Train a domain reranker: positives from DATASET/qrels/<split>.tsv, hard negatives mined from the "
            "hybrid top-k of the collection's index under --prefix (ingest the corpus there first, e.g. with "
            "`hsp eval DATASET --prefix P`). Writes a sentence-transformers CrossEncoder folder with card.json "
            "and README.md; serve it with HSP_RERANKER__MODEL=DIR hsp serve-reranker."
        ),
    )
    p.add_argument("dataset", type=Path, metavar="DATASET", help="BEIR collection folder")
    p.add_argument("--split", default="train", help="qrels split to train on (default train; 'test' is refused)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder to write the model to")
    p.add_argument("--base", default=None, metavar="MODEL",
                   help="encoder to start from: Hub name or folder (default: HSP_EMBEDDING__MODEL, i.e. the "
                        "packaged all-MiniLM-L6-v2)")
    p.add_argument("--negatives", type=int, default=4, help="hard negatives per query (default 4)")
    p.add_argument("--depth", type=int, default=None,
                   help="hybrid candidates per query to mine from (default: HSP_RERANKER__DEPTH, 30)")
    p.add_argument("--strategy", choices=("sample", "top"), default="sample",
                   help="sample negatives from the candidates (default) or take the top-ranked ones")
    p.add_argument("--skip-top", type=int, default=0, metavar="N",
                   help="never take the fused top N as negatives (default 0)")
    p.add_argument("--keep-above-positive", action="store_true",
                   help="also take candidates that both BM25 and kNN rank above the judged positive (skipped by "
                        "default: likely unjudged relevant documents)")
    p.add_argument("--max-overlap", type=float, default=0.6,
                   help="skip candidates whose word Jaccard with a positive passage reaches this (default 0.6; 1 = "
                        "off)")
    p.add_argument("--loss", choices=("lambda", "bce"), default="lambda",
                   help="lambda: LambdaLoss over each query's list (default); bce: pointwise binary cross-entropy")
    p.add_argument("--folds", type=int, default=3,
                   help="choose the epoch count and blend by k-fold over the split's queries, then fit once on all "
                        "of them (default 3); 0: hold out one --val-fraction slice instead")
    p.add_argument("--min-gain", type=float, default=0.0,
                   help="with --folds: serve at blend 0 (the fused order) unless the nested k-fold estimate of the "
                        "gain over the fused order is above this (default 0)")
    p.add_argument("--epochs", type=int, default=2,
                   help="passes over the pairs (default 2); with --folds the most tried, the final fit stops at "
                        "the count chosen")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=128, help="tokens per (query, passage) pair (default 128)")
    p.add_argument("--lr", type=float, default=1e-4,
                   help="peak learning rate (default 1e-4, for a bi-encoder base; ~2e-5 to adapt a cross-encoder)")
    p.add_argument("--val-fraction", type=float, default=0.15,
                   help="with --folds 0: share of the split's queries held out for choosing the blend (default "
                        "0.15)")
    p.add_argument("--keep", choices=("last", "best"), default="last",
                   help="save the last epoch (default: the annealed weights) or the epoch whose blended order "
                        "served the validation queries best (noisy with a few hundred validation queries)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--limit-queries", type=int, default=None, metavar="N", help="use the first N queries only")
    p.add_argument("--prefix", default=None, help="index prefix of the collection's index (HSP_INDEX__PREFIX)")
    p.add_argument("--device", default=None, help="cpu, cuda or auto (default: HSP_RERANKER__DEVICE)")
    p.add_argument("--allow-test", action="store_true",
                   help="allow --split test (never for a collection whose test numbers you report)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=train_reranker)


def train_reranker(args: argparse.Namespace, settings: Settings) -> int:
    """Handler of ``hsp train-reranker``. Raises ConfigError, IndexNotFound, ModelError, ClusterError."""
    from pydantic import ValidationError

    from hybridsearch.errors import ConfigError
    from hybridsearch.training.config import TrainingConfig
    from hybridsearch.training.reranker import run_training

    if args.prefix:
        settings = settings.model_copy(update={"index": settings.index.model_copy(update={"prefix": args.prefix})})
    try:
        cfg = TrainingConfig(
            dataset=args.dataset, split=args.split, out=args.out, base=args.base or settings.embedding.model,
            negatives=args.negatives, depth=args.depth or settings.reranker.depth, strategy=args.strategy,
            epochs=args.epochs, batch_size=args.batch_size, max_length=args.max_length, lr=args.lr,
            val_fraction=args.val_fraction, seed=args.seed, limit_queries=args.limit_queries,
            allow_test=args.allow_test, device=args.device or settings.reranker.device, keep=args.keep,
            loss=args.loss, folds=args.folds, skip_top=args.skip_top, min_gain=args.min_gain,
            skip_above_positive=not args.keep_above_positive, max_overlap=args.max_overlap,
        )
    except ValidationError as exc:
        problems = "; ".join(f"--{'-'.join(str(p) for p in e['loc']).replace('_', '-')}: {e['msg']}"
                             for e in exc.errors())
        raise ConfigError(f"invalid arguments: {problems}") from None
    started = time.perf_counter()
    card = run_training(cfg, settings, progress=not args.no_progress)
    wall = time.perf_counter() - started

    table = Table(title=f"validation ({card['queries']['validation_scored']} held-out {card['split']} queries)")
    for col in ("epoch", "reranker alone nDCG@10", "MRR@10", "blend", "served nDCG@10", "train loss"):
        table.add_column(col, justify="right")
    fused = card["validation"]["fused_order"]
    if fused:
        table.add_row("fused (no rerank)", f"{fused['ndcg@10']:.4f}", f"{fused['mrr@10']:.4f}", "0",
                      f"{fused['ndcg@10']:.4f}", "")
    for e in card["validation"]["per_epoch"]:
        mark = " *" if e["epoch"] == card["validation"]["best_epoch"] else ""
        table.add_row(f"{e['epoch']}{mark}", _f(e["ndcg_at_10"]), _f(e["mrr_at_10"]), _f(e.get("blend"), 2),
                      _f(e.get("blend_ndcg_at_10")), _f(e["train_loss"]))
    console.print(table)
    _print_folds(card)
    if card["validation"].get("beats_fused_order") is False:
        console.print(styled(("warning:", "bold yellow"), " even blended with the fused order, the kept epoch ranks "
                             "the held-out queries no better than the fused hybrid order: do not serve this model "
                             "(more judgments, more epochs or steps, a higher --lr, or a cross-encoder as --base; "
                             "see docs/reranker-training.md)"))
    console.print(styled(
        "saved to ", (str(cfg.out), "bold"),
        f" ({card['pairs']['positive']} positive / {card['pairs']['negative']} negative pairs from "
        f"{card['queries']['train']} queries; mining {card['time_seconds']['mining']:.0f} s, training "
        f"{card['time_seconds']['training']:.0f} s, total {wall:.0f} s on {card['device']}). "
        f"Serve it: HSP_RERANKER__MODEL={cfg.out} hsp serve-reranker (served blend "
        f"{card['serving']['blend']:g}, from the card)"
    ))
    return 0


def _print_folds(card: dict[str, object]) -> None:
    cv = card.get("cross_validation")
    if not isinstance(cv, dict):
        return
    table = Table(title=f"{cv['folds']}-fold estimate (each fold measured with the epochs and blend chosen on "
                        "the others)")
    for col in ("fold", "queries", "epochs", "blend", "fused", "reranker alone", "served", "gain"):
        table.add_column(col, justify="right")
    for f in cv["nested_per_fold"]:
        table.add_row(str(f["fold"]), str(f["queries"]), str(f["epoch"]), f"{f['blend']:g}", f"{f['fused']:.4f}",
                      f"{f['alone']:.4f}", f"{f['served']:.4f}", f"{f['gain']:+.4f}")
    console.print(table)
    est, ch = cv["estimate"], cv["chosen"]
    console.print(f"validation estimate: gain {est['gain_mean']:+.4f} ± {est['gain_std']:.4f} (sd over folds); "
                  f"chosen on all folds: {ch['epoch']} epoch(s), blend {ch['blend']:g}")
    if cv.get("guard"):
        console.print(styled(("guard:", "bold yellow"), f" {cv['guard']}"))


def _f(x: float | None, digits: int = 4) -> str:
    return "" if x is None else f"{x:.{digits}f}"
