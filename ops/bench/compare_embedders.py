#!/usr/bin/env python3
"""The embedders side by side on BEIR collections: one ``hsp eval`` per model and collection, one Markdown table.

For each model and each collection it runs, as a subprocess with ``HSP_EMBEDDING__MODEL`` set,

    hsp eval DATASET --modes bm25,dense,hybrid --prefix eval-<collection>-<model short name>
        --sweep query.fusion=rrf,zscore,minmax --out OUT/<collection>-<model short name>

(an index already built with the same settings is reused, and chunk vectors come from the embedding cache), then
reads the JSON reports and prints nDCG@10 per mode and per fusion, the chunks, ingestion chunks/s (as measured by
that run, under whatever load the machine had) and hybrid p50. ``--from-reports OUT`` only prints the table.

    export HSP_ES_URL=http://127.0.0.1:9270 HSP_ENGINE=elasticsearch HF_HUB_OFFLINE=1
    nice -n 19 $V/bin/python ops/bench/compare_embedders.py \\
        ../shared/datasets/scifact ../shared/datasets/nfcorpus --out reports/embedders
    $V/bin/python ops/bench/compare_embedders.py --from-reports reports/embedders
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from hybridsearch.errors import ConfigError
from hybridsearch.eval.report import EvalReport, load_report

DEFAULT_MODELS = ("all-MiniLM-L6-v2", "bge-small-en-v1.5", "e5-small-v2")
FUSIONS = ("rrf", "zscore", "minmax")
PRIMARY = "ndcg@10"
#: ``hsp`` in this interpreter (the package's entry point, whichever checkout is on the path)
HSP = "import sys; from hybridsearch.cli.main import main; sys.exit(main())"


def short_name(model: str) -> str:
    """The last path part of a Hub name or folder, lower case: ``sentence-transformers/all-MiniLM-L6-v2`` →
    ``all-minilm-l6-v2`` (index prefixes are lower case)."""
    return model.rstrip("/").rsplit("/", 1)[-1].lower()


def run_eval(dataset: Path, model: str, out: Path, split: str) -> int:
    """One ``hsp eval`` of ``dataset`` with ``model``; returns its exit code."""
    name = f"{dataset.name}-{short_name(model)}"
    cmd = [sys.executable, "-c", HSP, "eval", str(dataset), "--split", split,
           "--modes", "bm25,dense,hybrid", "--prefix", f"eval-{name}",
           "--sweep", "query.fusion=" + ",".join(FUSIONS), "--out", str(out / name)]
    print(f"$ HSP_EMBEDDING__MODEL={model} hsp " + " ".join(cmd[3:]), flush=True)
    return subprocess.run(cmd, env={**os.environ, "HSP_EMBEDDING__MODEL": model}, check=False).returncode


def latest_reports(out: Path) -> list[EvalReport]:
    """The newest JSON report of each run folder under ``out``."""
    reports: list[EvalReport] = []
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        found = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        if found:
            reports.append(load_report(found[-1]))
    return reports


def _cell(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def row(report: EvalReport) -> tuple[str, str, list[str]]:
    """Collection, model and the table cells of one report."""
    def mode_score(name: str) -> float | None:
        m = report.mode(name)
        return m.metrics.get(PRIMARY) if m is not None else None

    fused = {t["value"]: t["metrics"].get("hybrid", {}).get(PRIMARY) for t in report.sweep
             if t.get("knob") == "fusion"}
    ingest = report.ingest or {}
    cache = ingest.get("embedding_cache") or {}
    if not ingest.get("chunks_per_second"):
        rate = "— (index reused)"
    elif cache.get("from_cache") and not cache.get("embedded"):
        rate = "— (vectors cached)"
    else:
        rate = f"{float(ingest['chunks_per_second']):.1f}" + (" (part cached)" if cache.get("from_cache") else "")
    hybrid = report.mode("hybrid")
    p50 = hybrid.latency_ms["wall"].p50 if hybrid is not None and "wall" in hybrid.latency_ms else None
    cells = [str(report.index.get("chunks")), _cell(mode_score("bm25")), _cell(mode_score("dense")),
             *(_cell(fused.get(f)) for f in FUSIONS),
             rate, _cell(p50, 1)]
    return f"{report.dataset.get('name')} {report.dataset.get('split')}", short_name(report.model), cells


def table(reports: list[EvalReport]) -> str:
    """The Markdown table of ``reports``, by collection then model."""
    lines = ["| collection | model | chunks | bm25 | dense | hybrid RRF | hybrid zscore | hybrid minmax | "
             "ingest chunks/s | hybrid p50 ms |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = sorted(row(r) for r in reports)
    lines += [f"| {collection} | {model} | " + " | ".join(cells) + " |" for collection, model, cells in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("datasets", type=Path, nargs="*", help="BEIR folders")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated model names or folders")
    ap.add_argument("--split", default="test")
    ap.add_argument("--out", type=Path, default=Path("reports/embedders"), help="folder of the run folders")
    ap.add_argument("--from-reports", type=Path, metavar="DIR", help="only print the table of the reports in DIR")
    args = ap.parse_args(argv)
    if args.from_reports is None and not args.datasets:
        ap.error("give BEIR folders, or --from-reports DIR")
    out: Path = args.from_reports or args.out
    failed = 0
    if args.from_reports is None:
        for model in (m.strip() for m in args.models.split(",") if m.strip()):
            for dataset in args.datasets:
                code = run_eval(dataset, model, out, args.split)
                if code != 0:
                    print(f"hsp eval {dataset} with {model} exited {code}", file=sys.stderr)
                    failed += 1
    try:
        print(table(latest_reports(out)))
    except (ConfigError, FileNotFoundError) as exc:
        print(f"no table: {exc}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
