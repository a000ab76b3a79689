"""``hsp train-reranker`` and ``hsp train-embedder``: fine-tune a cross-encoder or the bi-encoder on judgments."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from hybridsearch.cli import AddCommand, with_prefix
from hybridsearch.cli.output import RichProgress, print_table, right, styled, table
from hybridsearch.cli.output import stdout as console
from hybridsearch.settings import Settings

M = TypeVar("M", bound=BaseModel)


def register(add: AddCommand) -> None:
    common = argparse.ArgumentParser(add_help=False)  # the options both trainers take
    common.add_argument("dataset", type=Path, metavar="DATASET", help="BEIR collection folder")
    common.add_argument("--split", default="train", help="qrels split to train on (default train; 'test' is refused)")
    common.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder to write the model to")
    common.add_argument("--prefix", help="index prefix of the collection's index (HSP_INDEX__PREFIX)")
    common.add_argument("--strategy", choices=("sample", "top"), default="sample",
                        help="sample negatives from the candidates (default) or take the top-ranked ones")
    common.add_argument("--seed", type=int, default=42)
    common.add_argument("--limit-queries", type=int, metavar="N", help="use the first N queries only")
    common.add_argument("--allow-test", action="store_true",
                        help="allow --split test (never for a collection whose test numbers you report)")
    common.add_argument("--no-progress", action="store_true", help="no progress bars")
    p = add("train-reranker", train_reranker, parents=[common],
            help="fine-tune a cross-encoder reranker on a BEIR collection's judgments (hard negatives from our index)",
            description="Train a domain reranker: positives from DATASET/qrels/<split>.tsv, hard negatives mined "
                        "from the hybrid top-k of the collection's index under --prefix (ingest the corpus there "
                        "first, e.g. with `hsp eval DATASET --prefix P`). Writes a sentence-transformers "
                        "CrossEncoder folder with card.json and README.md; serve it with HSP_RERANKER__MODEL=DIR hsp "
                        "serve-reranker.")
    p.add_argument("--base", metavar="MODEL",
                   help="encoder to start from: Hub name or folder (default: HSP_EMBEDDING__MODEL, else the "
                        "default embedder bge-small-en-v1.5)")
    p.add_argument("--negatives", type=int, default=4, help="hard negatives per query (default 4)")
    p.add_argument("--depth", type=int,
                   help="hybrid candidates per query to mine from (default: HSP_RERANKER__DEPTH, 30)")
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
    p.add_argument("--device", help="cpu, cuda or auto (default: HSP_RERANKER__DEVICE)")
    p = add("train-embedder", train_embedder, parents=[common],
            help="fine-tune the bi-encoder on a BEIR collection's judgments (hard negatives from our index)",
            description="Train a domain embedding model: (query, judged-relevant passage, hard negatives) rows from "
                        "DATASET/qrels/<split>.tsv and the hybrid top-k of the collection's index under --prefix "
                        "(ingest the corpus there first, e.g. with `hsp eval DATASET --prefix P`), "
                        "MultipleNegativesRankingLoss with in-batch negatives, the epoch chosen by dense nDCG@10 of "
                        "held-out training queries. Writes a SentenceTransformer folder with card.json and "
                        "README.md; use it with HSP_EMBEDDING__MODEL=DIR and roll an index over with `hsp index "
                        "migrate --to-model DIR`.")
    p.add_argument("--base", metavar="MODEL",
                   help="model to start from: Hub name or folder (default: HSP_EMBEDDING__MODEL)")
    p.add_argument("--negatives", type=int, default=1, help="hard negatives per (query, positive) row (default 1)")
    p.add_argument("--depth", type=int, default=30, help="hybrid candidates per query to mine from (default 30)")
    p.add_argument("--skip-top", type=int, default=0, metavar="N",
                   help="never use the N best-ranked non-relevant candidates as negatives (default 0)")
    p.add_argument("--margin", type=float, default=0.95,
                   help="drop a candidate the base model finds more than MARGIN × as similar to the query as "
                        "its judged positive, as a likely false negative (default 0.95; 1 keeps all but ties)")
    p.add_argument("--no-margin", action="store_true", help="no similarity filter on the negatives")
    p.add_argument("--epochs", type=int, default=2, help="passes over the rows (default 2)")
    p.add_argument("--batch-size", type=int, default=32, help="rows per batch: the in-batch negatives (default 32)")
    p.add_argument("--max-seq-length", type=int, metavar="N",
                   help="tokens per text while training (default: the base model's; the saved model keeps the "
                        "base's length, so chunks cut for it still fit)")
    p.add_argument("--lr", type=float, default=3e-5, help="peak learning rate (default 3e-5)")
    p.add_argument("--val-fraction", type=float, default=0.2,
                   help="share of the split's queries held out for choosing the epoch (default 0.2)")
    p.add_argument("--val-corpus", type=int, default=2000, metavar="N",
                   help="chunks the validation embeds and ranks after each epoch: the whole index when it has at "
                        "most N, else N: the validation queries' judged documents, their hybrid candidates rank "
                        "by rank, random other chunks (0: always the whole index; default 2000)")
    p.add_argument("--keep", choices=("best", "last"), default="best",
                   help="save the epoch with the best validation nDCG@10 (default) or the last")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default: a GPU when there is one)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="torch CPU threads (default: torch's choice; on a CPU shared with other work, 1 can be "
                        "twice as fast)")
    p.add_argument("--embedding-cache", type=Path, metavar="DIR",
                   help="where the base model's chunk vectors are cached (default: $HSP_CACHE/embeddings, filled "
                        "by `hsp eval`)")


def train_reranker(args: argparse.Namespace, settings: Settings) -> int:
    """Handler of ``hsp train-reranker``. Raises ConfigError, IndexNotFound, ModelError, ClusterError."""
    from hybridsearch.training.config import TrainingConfig
    from hybridsearch.training.reranker import run_training

    settings = with_prefix(settings, args.prefix)
    cfg = _validated(TrainingConfig, args, settings, depth=args.depth or settings.reranker.depth,
                     max_length=args.max_length, device=args.device or settings.reranker.device, loss=args.loss,
                     folds=args.folds, min_gain=args.min_gain, skip_above_positive=not args.keep_above_positive,
                     max_overlap=args.max_overlap)
    started = time.perf_counter()
    with RichProgress(enabled=not args.no_progress, keep_finished=False) as progress:
        card = run_training(cfg, settings, progress=progress)
    wall = time.perf_counter() - started

    val, pairs, seconds = card["validation"], card["pairs"], card["time_seconds"]
    grid = table(console, *right("epoch", "reranker alone nDCG@10", "MRR@10", "blend", "served nDCG@10", "train loss"),
                 title=f"validation ({card['queries']['validation_scored']} held-out {card['split']} queries)")
    fused = val["fused_order"]
    if fused:
        grid.add_row("fused (no rerank)", f"{fused['ndcg@10']:.4f}", f"{fused['mrr@10']:.4f}", "0",
                      f"{fused['ndcg@10']:.4f}", "")
    for e in val["per_epoch"]:
        mark = " *" if e["epoch"] == val["best_epoch"] else ""
        grid.add_row(f"{e['epoch']}{mark}", _f(e["ndcg_at_10"]), _f(e["mrr_at_10"]), _f(e["blend"], 2),
                      _f(e["blend_ndcg_at_10"]), _f(e["train_loss"]))
    print_table(console, grid)
    print_folds(card)
    if val["beats_fused_order"] is False:
        console.print(styled(("warning:", "bold yellow"), " even blended with the fused order, the kept epoch ranks "
                             "the held-out queries no better than the fused hybrid order: do not serve this model "
                             "(more judgments, more epochs or steps, a higher --lr, or a cross-encoder as --base; "
                             "see docs/reranker-training.md)"))
    console.print(styled("saved to ", (str(cfg.out), "bold"),
                         f" ({pairs['positive']} positive / {pairs['negative']} negative pairs from "
                         f"{card['queries']['train']} queries; mining {seconds['mining']:.0f} s, training "
                         f"{seconds['training']:.0f} s, total {wall:.0f} s on {card['device']}). Serve it: "
                         f"HSP_RERANKER__MODEL={cfg.out} hsp serve-reranker (served blend "
                         f"{card['serving']['blend']:g}, from the card)"))
    return 0


def print_folds(card: Mapping[str, Any]) -> None:
    """The k-fold table of a reranker's card (nothing for a one-slice card)."""
    cv = card.get("cross_validation")  # reranker.CVSummary.as_dict()
    if not isinstance(cv, dict):
        return
    grid = table(console, *right("fold", "queries", "epochs", "blend", "fused", "reranker alone", "served", "gain"),
                 title=f"{cv['folds']}-fold estimate (each fold measured with the epochs and blend chosen on the "
                       "others)")
    for f in cv["nested_per_fold"]:
        grid.add_row(str(f["fold"]), str(f["queries"]), str(f["epoch"]), f"{f['blend']:g}", f"{f['fused']:.4f}",
                      f"{f['alone']:.4f}", f"{f['served']:.4f}", f"{f['gain']:+.4f}")
    print_table(console, grid)
    est, ch = cv["estimate"], cv["chosen"]
    console.print(f"validation estimate: gain {est['gain_mean']:+.4f} ± {est['gain_std']:.4f} (sd over folds); "
                  f"chosen on all folds: {ch['epoch']} epoch(s), blend {ch['blend']:g}")
    if cv.get("guard"):
        console.print(styled(("guard:", "bold yellow"), f" {cv['guard']}"))


def _f(x: float | None, digits: int = 4) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def train_embedder(args: argparse.Namespace, settings: Settings) -> int:
    """Handler of ``hsp train-embedder``. Raises ConfigError, IndexNotFound, ModelError, ClusterError."""
    from hybridsearch.training.config import EmbedderConfig
    from hybridsearch.training.embedder import run_embedder_training

    settings = with_prefix(settings, args.prefix)
    cfg = _validated(EmbedderConfig, args, settings, depth=args.depth, margin=None if args.no_margin else args.margin,
                     max_seq_length=args.max_seq_length, val_corpus=args.val_corpus, device=args.device,
                     threads=args.threads)
    started = time.perf_counter()
    with RichProgress(enabled=not args.no_progress, keep_finished=False) as progress:
        card = run_embedder_training(cfg, settings, cache_dir=args.embedding_cache, progress=progress)
    wall = time.perf_counter() - started

    val = card["validation"]
    corpus = val["corpus"] or {}
    grid = table(console, *right("epoch", "nDCG@10", "Recall@10", "MRR@10", "train loss"),
                 title=f"validation: dense retrieval of {val['queries']} held-out {card['split']} queries over "
                       f"{corpus.get('chunks', 0)} chunks" + ("" if corpus.get("full_index") else " (pool)"))
    for e in val["per_epoch"]:
        mark = " *" if e["epoch"] == val["best_epoch"] else (" (base)" if e["epoch"] == 0 else "")
        grid.add_row(f"{e['epoch']}{mark}", _f(e["ndcg_at_10"]), _f(e["recall_at_10"]), _f(e["mrr_at_10"]),
                     _f(e["train_loss"]))
    print_table(console, grid)
    if val["beats_base"] is False:
        console.print(styled(("warning:", "bold yellow"), " the kept epoch retrieves the held-out queries no better "
                             "than the base model: do not roll it out (more judgments, another --lr or more epochs; "
                             "see docs/embedder-training.md)"))
    dropped, times = card["negatives"]["dropped_as_likely_false_negatives"], card["time_seconds"]
    console.print(styled("saved to ", (str(cfg.out), "bold"),
                         f" ({card['rows']['total']} rows from {card['queries']['trained_on']} queries; candidates "
                         f"dropped as likely false negatives: {dropped['top']} top, {dropped['duplicate_of_positive']} "
                         f"duplicates, {dropped['similar']} similar; mining {times['mining']:.0f} s, training "
                         f"{times['training']:.0f} s (validation {times['of_which_validation']:.0f} s of it), total "
                         f"{wall:.0f} s on {card['device']}). Roll it out: hsp index migrate --to-model "
                         f"{card['serving']['model']}"))
    return 0


def _validated(model: type[M], args: argparse.Namespace, settings: Settings, **values: object) -> M:
    """``model`` from the options both trainers take and ``values``; raises one ConfigError naming the bad options."""
    from pydantic import ValidationError

    from hybridsearch.errors import ConfigError

    common = {name: getattr(args, name) for name in (
        "dataset", "split", "out", "negatives", "strategy", "skip_top", "epochs", "batch_size", "lr", "val_fraction",
        "seed", "limit_queries", "allow_test", "keep")}
    try:
        return model.model_validate({**common, "base": args.base or settings.embedding.model, **values})
    except ValidationError as exc:
        problems = "; ".join(f"--{'-'.join(str(p) for p in e['loc']).replace('_', '-')}: {e['msg']}"
                             for e in exc.errors())
        raise ConfigError(f"invalid arguments: {problems}") from None
