"""``hsp eval DATASET`` (quality and latency per mode on a BEIR collection, in its own ``eval-<dataset>`` index,
reports under ``--out``) and ``hsp calibrate-fusion``; exit 1 when the ``--baseline`` gate fails."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Column

from hybridsearch.cli import AddCommand
from hybridsearch.cli.output import RichProgress, print_table, right, styled, table
from hybridsearch.cli.output import stdout as console
from hybridsearch.eval.harness import DEFAULT_MODES
from hybridsearch.eval.metrics import METRICS
from hybridsearch.eval.report import LATENCY_KEYS, SWEEP_METRICS, Diff, EvalReport
from hybridsearch.settings import Settings


def register(add: AddCommand) -> None:
    p = add("eval", run, help="measure retrieval quality and latency on a BEIR collection", description=__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", type=Path, help="BEIR folder: corpus.jsonl[.gz], queries.jsonl, qrels/<split>.tsv")
    p.add_argument("--split", default="test", help="qrels split to evaluate (default: test)")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES),
                   help="comma-separated: bm25,dense,hybrid,hybrid+rerank (default: all four; "
                        "hybrid+rerank is skipped, with the reason, when no reranker loads)")
    p.add_argument("--out", type=Path, default=Path("reports"), help="folder for the JSON/Markdown/PNG reports")
    p.add_argument("--baseline", type=Path, help="earlier JSON report: print per-metric differences and exit 1 "
                                                 "when any metric fell by more than --tolerance")
    p.add_argument("--tolerance", type=float, default=0.01, help="largest allowed drop per metric (default 0.01)")
    p.add_argument("--worst", type=int, default=0, metavar="N",
                   help="list the N queries where hybrid loses most nDCG@10 to the better single retriever "
                        "(adds bm25, dense and hybrid to the modes)")
    p.add_argument("--limit-queries", type=int, metavar="N", help="evaluate only the first N judged queries")
    p.add_argument("--keep-identical-ids", action="store_true",
                   help="keep hits whose id equals the query id (BEIR drops them; so do we by default)")
    p.add_argument("--prefix", help="index prefix (default: eval-<dataset folder name>)")
    p.add_argument("--sweep", action="append", default=[], metavar="query.NAME=V1,V2",
                   help="after the run, re-run the query phase once per value of a query setting (repeatable; "
                        "one knob at a time, same index) and report nDCG@10 and Recall@100 per mode")
    p.add_argument("--no-ingest", action="store_true",
                   help="use the existing index as it is (it must fit the settings); skip ingestion")
    p.add_argument("--embedding-cache", type=Path, metavar="DIR",
                   help="on-disk cache of chunk vectors, one SQLite file per model (default: $HSP_CACHE/embeddings, "
                        "HSP_CACHE defaulting to ~/.cache/hybridsearch): rebuilding the same collection with the "
                        "same model, on any engine or index options, embeds nothing")
    p.add_argument("--no-embedding-cache", action="store_true", help="embed every chunk, without the cache")

    p = add("calibrate-fusion", calibrate_fusion,
            help="choose the fusion (RRF k, zscore or minmax) and list weights on a collection's train judgments",
            description="Search every judged query of DATASET's --split (train) once per list on the collection's "
                        "index (build it first, e.g. `hsp eval DATASET --prefix P`), score every candidate fusion on "
                        "those lists (RRF k 1-100 x BM25 share 0-1, zscore/minmax x share) and record the best in "
                        "the index's _meta; searches then use it unless HSP_QUERY__FUSION names one (rrf, zscore, "
                        "minmax). The default (RRF k=60, equal weights) is kept unless a candidate beats it by more "
                        "than --min-gain.")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="BEIR collection folder")
    p.add_argument("--split", default="train",
                   help="qrels split to calibrate on (default train; 'test' is refused, and so is a split sharing "
                        "query ids with test: the error names them)")
    p.add_argument("--prefix", help="index prefix of the collection's index (default: eval-<name>)")
    p.add_argument("--min-gain", type=float, default=0.002,
                   help="nDCG@10 a candidate must gain over the default to replace it (default 0.002)")
    p.add_argument("--limit-queries", type=int, metavar="N", help="use the first N judged queries")
    p.add_argument("--dry-run", action="store_true", help="measure and report, record nothing")
    p.add_argument("--keep-identical-ids", action="store_true",
                   help="keep hits whose id equals the query id (BEIR drops them; so do we by default)")
    p.add_argument("--out", type=Path, default=Path("reports"), help="folder for the JSON report")
    p.add_argument("--allow-test", action="store_true",
                   help="allow --split test (never for a collection whose test numbers you report)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Handler of ``hsp eval``; returns 0, or 1 when the baseline gate fails."""
    from hybridsearch.eval.harness import run_evaluation

    with RichProgress(console) as progress:
        done = run_evaluation(
            args.dataset, settings, split=args.split, modes=args.modes, out=args.out, baseline=args.baseline,
            tolerance=args.tolerance, worst=args.worst, limit_queries=args.limit_queries,
            keep_identical_ids=args.keep_identical_ids, prefix=args.prefix, sweep=args.sweep,
            ingest=not args.no_ingest, use_embedding_cache=not args.no_embedding_cache,
            embedding_cache_dir=args.embedding_cache, progress=progress)
    if done.cache_stats is not None:
        console.print(f"embedding cache: {done.cache_stats['from_cache']} chunk vectors from the cache, "
                      f"{done.cache_stats['embedded']} embedded ({done.cache_stats['path']})")
    print_report(done.report, done.diffs, done.tolerance)
    console.print("wrote " + ", ".join(str(p) for p in done.paths))
    if done.gate_failed and done.diffs:
        worst = min(done.diffs, key=lambda d: d.delta)
        console.print(styled(("quality gate failed:", "bold red"), f" {sum(d.regressed for d in done.diffs)} "
                             f"metric(s) fell by more than {done.tolerance:g} (worst: {worst.mode} "
                             f"{METRICS[worst.metric]} {worst.delta:+.4f})"))
        return 1
    return 0


def print_report(report: EvalReport, diffs: list[Diff] | None, tolerance: float) -> None:
    """Tables of quality, latency, notes, checks, baseline differences and worst queries."""
    ok = [m for m in report.modes if m.status == "ok"]
    quality = table(console, "mode", *right(*METRICS.values()),
                    title=f"{report.dataset['name']} {report.dataset['split']} · {report.dataset['queries']} queries · "
                          f"{report.index.get('documents')} docs / {report.index.get('chunks')} chunks")
    for m in ok:
        quality.add_row(m.mode, *(f"{m.metrics[k]:.4f}" for k in METRICS))
    print_table(console, quality)
    latency = table(console, "stage", *right(*(m.mode for m in ok)), title="latency ms (p50 / p95)")
    for stage in LATENCY_KEYS:
        latency.add_row(stage, *(f"{m.latency_ms[stage].p50:.1f} / {m.latency_ms[stage].p95:.1f}" for m in ok))
    print_table(console, latency)
    for m in report.modes:
        if m.status != "ok":
            console.print(styled((f"{m.mode} skipped:", "yellow"), f" {m.reason or ''}"))
        elif m.rerank_reasons:
            console.print(styled((f"{m.mode}:", "yellow"), f" {m.reranked_queries}/{m.queries} reranked; others: "
                                 + "; ".join(f"{r} ({n})" for r, n in m.rerank_reasons.items())))
    for c in report.checks:
        console.print(styled(("PASS", "green") if c.passed else ("FAIL", "red"), f" {c.name}: {c.detail}"))
    if diffs is not None:
        against = table(console, "mode", "metric", *right("baseline", "now", "Δ"),
                        title=f"against the baseline (tolerance {tolerance:g})")
        for d in diffs:
            style = "red" if d.regressed else ("green" if d.delta > 0 else "")
            against.add_row(d.mode, METRICS[d.metric], f"{d.baseline:.4f}", f"{d.current:.4f}", f"{d.delta:+.4f}",
                            style=style)
        print_table(console, against)
    if report.sweep:
        sweep_modes = [m.mode for m in ok if m.mode != "hybrid+rerank"]
        knobs = table(console, "knob", "value", *right(*(f"{name} {METRICS[x]}" for name in sweep_modes
                                                         for x in SWEEP_METRICS)),
                      title="knob sweep (query phase only, same index)")
        for t in report.sweep:
            knobs.add_row(t["knob"], t["value"], *(f"{t['metrics'][name][x]:.4f}" if name in t["metrics"] else "—"
                                                   for name in sweep_modes for x in SWEEP_METRICS))
        print_table(console, knobs)
    if report.worst:
        losses = table(console, *(Column(col, overflow="fold") for col in ("query", "hybrid", "best single", "loss",
                                                                            "relevant")),
                       title="where hybrid loses most nDCG@10 (relevant doc: rank in BM25 / kNN / fusion / rerank)")
        for w in report.worst:
            ranks = "\n".join(f"{r.doc_id}: {r.bm25 or '—'} / {r.knn or '—'} / {r.fusion or '—'} / {r.rerank or '—'}"
                              for r in w.relevant)
            losses.add_row(f"{w.qid}: {w.query}", f"{w.hybrid:.3f}",
                           f"{w.best_single:.3f} ({w.best_single_mode})", f"{w.loss:.3f}", ranks)
        print_table(console, losses)


def calibrate_fusion(args: argparse.Namespace, settings: Settings) -> int:
    """Handler of ``hsp calibrate-fusion``. Raises ConfigError, IndexNotFound, IndexMismatch, ClusterError."""
    from hybridsearch.eval.calibrate import calibrate_fusion as run

    with RichProgress(console, width=10) as progress:
        done = run(args.dataset, settings, split=args.split, allow_test=args.allow_test, prefix=args.prefix,
                   min_gain=args.min_gain, limit_queries=args.limit_queries, dry_run=args.dry_run,
                   keep_identical_ids=args.keep_identical_ids, out=args.out, progress=progress)
    console.print(f"scored fusions on {done.queries} {done.split} queries of {done.index}")
    scores, calibration = done.scores, done.meta()
    grid = table(console, "fusion", *right("nDCG@10"), title=f"nDCG@10 on {calibration['queries']} "
                 f"{calibration['split']} queries (best of {len(scores)} fusions first)")
    for name, value in list(scores.items())[:8]:  # the best eight
        grid.add_row(name, f"{value:.4f}")
    print_table(console, grid)
    console.print(f"BM25 alone {calibration['bm25']:.4f} · kNN alone {calibration['knn']:.4f} · default "
                  f"{calibration['default']:.4f} · chosen {calibration['chosen']:.4f}")
    if "heldout_chosen" in calibration:
        console.print(f"2-fold check (chosen on one half, scored on the other): default "
                      f"{calibration['heldout_default']:.4f} → chosen {calibration['heldout_chosen']:.4f}")
    else:
        console.print("2-fold check: too few queries")
    verb = "recorded" if done.recorded else "would record"
    console.print(styled((f"{verb} in {done.index}'s _meta: ", "bold"), done.chosen.label))
    console.print(f"wrote {done.report}")
    return 0
