#!/usr/bin/env python
"""Does the domain reranker gain every time? N independent runs of the whole recipe, then a summary.

Run i (from ``--start``):

1. builds a fresh index of the collection under prefix ``<--prefix>-<i>`` (vectors from the embedding
   cache; a new HNSW graph each time), dropping a leftover one first;
2. trains a reranker with ``hsp train-reranker``'s code on the TRAIN split, seed ``--seed + i - 1``,
   mining its negatives from that index (k-fold selection as configured, then the final fit);
3. measures hybrid and hybrid+rerank on the TEST split through ``hsp eval``'s harness (the model
   served in-process by ``LocalReranker`` with the blend and length of its card);
4. drops the index unless ``--keep`` (the model folders stay under ``--models``).

It prints a table (per run: validation estimate, hybrid, hybrid+rerank, gain; then mean ± sd) and
writes JSON to ``--json`` after every run, so a run cut short by ``--budget-min`` keeps what it did.

Usage (engine from HSP_ES_URL / HSP_ES__ENGINE as for ``hsp``):
    python ops/bench/reranker_runs.py --runs 3
    python ops/bench/reranker_runs.py --runs 1 --limit-queries 60 --test-limit 30 --folds 2 --epochs 1   # trial
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from hybridsearch.cli.output import RichProgress
from hybridsearch.embedding.cache import CachedEmbedder
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.eval.datasets import load_collection
from hybridsearch.eval.harness import choose_index, eval_settings, evaluate_collection, ingest_corpus
from hybridsearch.eval.report import EvalReport
from hybridsearch.rerank import LocalReranker
from hybridsearch.settings import Settings
from hybridsearch.training.config import TrainingConfig
from hybridsearch.training.reranker import run_training

ROOT = Path(__file__).resolve().parents[2]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
console = Console(stderr=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", type=Path, default=SCIFACT)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--start", type=int, default=1, help="number of the first run (default 1)")
    p.add_argument("--prefix", default="rr", help="index prefix stem: run i uses <prefix>-<i>")
    p.add_argument("--seed", type=int, default=42, help="run i trains with seed + i - 1")
    p.add_argument("--models", type=Path, default=Path.home() / ".cache" / "hybridsearch" / "models" / "reranker-runs")
    p.add_argument("--json", type=Path, default=None, help="default: reports/reranker-runs-<time>.json")
    p.add_argument("--keep", action="store_true", help="keep each run's index")
    p.add_argument("--budget-min", type=float, default=None, help="start no run after this many minutes")
    p.add_argument("--test-limit", type=int, default=None, help="first N test queries only (trials)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--from-json", type=Path, nargs="+", metavar="JSON",
                   help="run nothing: merge the runs of these reports, print the table (and write --json)")
    # the recipe (defaults: hsp train-reranker's)
    defaults = TrainingConfig(dataset=Path("."), out=Path("."))
    for name in ("base", "negatives", "epochs", "folds", "max_length", "lr", "batch_size", "loss", "skip_top",
                 "max_overlap", "min_gain", "limit_queries"):
        default = getattr(defaults, name)
        kind = type(default) if default is not None else int
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default)
    return p.parse_args(argv)


def drop_prefix(es: EngineClient, prefix: str) -> list[str]:
    """Delete every index named ``<prefix>-...`` (by name: wildcard deletes may be refused)."""
    names = sorted(es.send(request.get_index(f"{prefix}-*", allow_no_indices=True, expand_wildcards="all")))
    for name in names:
        es.send(request.delete_index(name))
    return names


def mode_figures(report: EvalReport, mode: str) -> dict[str, Any]:
    m = next(m for m in report.modes if m.mode == mode)
    return {"status": m.status, "reason": m.reason, **{k: round(v, 4) for k, v in m.metrics.items()},
            "reranked_queries": m.reranked_queries, "rerank_reasons": m.rerank_reasons, "blend": m.rerank_blend}


def one_run(i: int, args: argparse.Namespace, base: Settings) -> dict[str, Any]:
    prefix = f"{args.prefix}-{i}"
    s = eval_settings(base, prefix)
    s = s.model_copy(update={"reranker": s.reranker.model_copy(update={"timeout": 600.0, "device": args.device})})
    out = args.models / prefix
    seed = args.seed + i - 1
    rec: dict[str, Any] = {"run": i, "prefix": prefix, "seed": seed, "model": str(out)}
    collection = load_collection(args.dataset, "test").limit(args.test_limit)
    es = EngineClient(s.es)
    embedder = Embedder(s.embedding, s.models)
    cache = CachedEmbedder(embedder)
    try:
        t0 = time.perf_counter()
        rec["dropped_before"] = drop_prefix(es, prefix)
        choice = choose_index(es, s, create=True)
        with RichProgress(enabled=not args.no_progress) as bar:
            ingest_corpus(es, s, collection.corpus_path, embedder=cache, progress=bar)
        es.send(request.refresh(s.index.alias))
        rec["index"], rec["build_s"] = choice.index, round(time.perf_counter() - t0, 1)
        console.print(f"run {i}: index {choice.index} built in {rec['build_s']} s")

        cfg = TrainingConfig(dataset=args.dataset, out=out, base=args.base, negatives=args.negatives,
                             epochs=args.epochs, folds=args.folds, max_length=args.max_length, lr=args.lr,
                             batch_size=args.batch_size, loss=args.loss, skip_top=args.skip_top,
                             max_overlap=args.max_overlap, min_gain=args.min_gain,
                             limit_queries=args.limit_queries, seed=seed,
                             device=args.device, depth=s.reranker.depth)
        t0 = time.perf_counter()
        with RichProgress(enabled=not args.no_progress, keep_finished=False) as bar:
            card = run_training(cfg, s, es=es, embedder=embedder, progress=bar)
        rec["train_s"] = round(time.perf_counter() - t0, 1)
        cv = card.get("cross_validation") or {}
        rec["validation"] = {"fused": card["validation"]["fused_order"].get("ndcg@10"),
                             "best_epoch": card["validation"]["best_epoch"], "blend": card["serving"]["blend"],
                             "estimate": cv.get("estimate"), "chosen": cv.get("chosen"),
                             "per_fold": cv.get("nested_per_fold"), "per_epoch": card["validation"]["per_epoch"],
                             "guard": cv.get("guard")}
        rec["negatives"] = card["negatives"]
        rec["card"] = str(out / "card.json")

        t0 = time.perf_counter()
        reranker = LocalReranker(s.reranker.model_copy(update={"model": str(out)}), s.models)
        ev = evaluate_collection(es, s, collection, ["hybrid", "hybrid+rerank"], embedder=embedder,
                                 reranker=reranker, ingest=False)
        rec["eval_s"] = round(time.perf_counter() - t0, 1)
        rec["test"] = {"queries": len(collection.queries), "hybrid": mode_figures(ev.report, "hybrid"),
                       "hybrid+rerank": mode_figures(ev.report, "hybrid+rerank")}
        h, r = rec["test"]["hybrid"].get("ndcg@10"), rec["test"]["hybrid+rerank"].get("ndcg@10")
        rec["gain"] = round(r - h, 4) if h is not None and r is not None else None
    finally:
        if not args.keep:
            rec["dropped_after"] = drop_prefix(es, prefix)
        cache.close()
        es.close()
    return rec


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def stat(values: list[float]) -> dict[str, float]:
        return {"mean": round(statistics.fmean(values), 4), "sd": round(statistics.stdev(values), 4)
                if len(values) > 1 else 0.0, "min": min(values), "max": max(values)} if values else {}

    done = [r for r in runs if r.get("gain") is not None]
    return {"runs": len(done),
            "hybrid": stat([r["test"]["hybrid"]["ndcg@10"] for r in done]),
            "hybrid+rerank": stat([r["test"]["hybrid+rerank"]["ndcg@10"] for r in done]),
            "gain": stat([r["gain"] for r in done]),
            "validation_gain": stat([r["validation"]["estimate"]["gain_mean"] for r in done
                                     if r["validation"].get("estimate")]),
            "every_run_gains_0.02": bool(done) and all(r["gain"] >= 0.02 for r in done)}


def print_table(runs: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    t = Table(title="domain reranker: independent runs (test nDCG@10)")
    for col in ("run", "seed", "epochs", "blend", "val. gain ± sd", "hybrid", "hybrid+rerank", "gain", "min"):
        t.add_column(col, justify="right")
    for r in runs:
        if r.get("gain") is None:
            t.add_row(str(r["run"]), str(r["seed"]), "", "", "", "", "", "failed", "")
            continue
        est = r["validation"].get("estimate")
        val = f"{est['gain_mean']:+.4f} ± {est['gain_std']:.4f}" if est else ""
        mins = (r["build_s"] + r["train_s"] + r["eval_s"]) / 60
        t.add_row(str(r["run"]), str(r["seed"]), str(r["validation"]["best_epoch"]), f"{r['validation']['blend']:g}",
                  val, f"{r['test']['hybrid']['ndcg@10']:.4f}", f"{r['test']['hybrid+rerank']['ndcg@10']:.4f}",
                  f"{r['gain']:+.4f}", f"{mins:.0f}")
    if summary["runs"]:
        g, h, rr = summary["gain"], summary["hybrid"], summary["hybrid+rerank"]
        vg = summary["validation_gain"]
        t.add_row("mean ± sd", "", "", "", f"{vg['mean']:+.4f} ± {vg['sd']:.4f}" if vg else "",
                  f"{h['mean']:.4f} ± {h['sd']:.4f}", f"{rr['mean']:.4f} ± {rr['sd']:.4f}",
                  f"{g['mean']:+.4f} ± {g['sd']:.4f}", "")
    Console(width=140).print(t)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        runs = [r for f in args.from_json for r in json.loads(f.read_text(encoding="utf-8"))["runs"]]
        summary = summarize(runs)
        print_table(runs, summary)
        if args.json:
            args.json.write_text(json.dumps({"merged_from": [str(f) for f in args.from_json], "runs": runs,
                                             "summary": summary}, indent=2, default=str) + "\n", encoding="utf-8")
        return 0
    base = Settings()
    path = args.json or ROOT / "reports" / f"reranker-runs-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    doc: dict[str, Any] = {"created": datetime.now(UTC).isoformat(timespec="seconds"), "argv": sys.argv[1:],
                           "recipe": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                           "engine": base.es.engine, "runs": []}
    for i in range(args.start, args.start + args.runs):
        if args.budget_min is not None and (time.perf_counter() - started) / 60 > args.budget_min:
            console.print(f"budget of {args.budget_min:g} min spent: run {i} and later not started")
            doc["stopped_by_budget"] = i
            break
        try:
            doc["runs"].append(one_run(i, args, base))
        except Exception as exc:  # noqa: BLE001 - one failed run is reported, the others still count
            console.print(f"run {i} failed: {type(exc).__name__}: {exc}")
            doc["runs"].append({"run": i, "seed": args.seed + i - 1, "error": f"{type(exc).__name__}: {exc}"})
        doc["summary"] = summarize(doc["runs"])
        doc["minutes"] = round((time.perf_counter() - started) / 60, 1)
        path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    print_table(doc["runs"], doc.get("summary") or summarize([]))
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
