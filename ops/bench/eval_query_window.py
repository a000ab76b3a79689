#!/usr/bin/env python
"""What the query window and int8 query weights cost in quality: nDCG@10 and Recall@100 of
``dense`` and ``hybrid`` (no rerank) per query-side variant, on the SAME index of each collection.

Variants (``--variants``; each one changes only how queries are embedded):

* ``limit``: the model's own limit (the default, 256 word pieces for all-MiniLM-L6-v2), the reference;
* ``w<N>``: the query window ``HSP_EMBEDDING__QUERY_MAX_TOKENS=N``;
* ``int8`` / ``int8-w<N>``: queries embedded with the int8 ONNX file (``HSP_EMBEDDING__BACKEND=onnx``,
  ``ONNX_QUANTIZED=true`` for the query encoder only) against an index built with the fp32 model.

Each collection is ``PATH=PREFIX`` (``--collection``, repeatable; default SciFact on ``eval-scifact`` and
scifact-long on ``eval-scifact-long``). Its index must exist (``hsp eval`` builds it): every variant runs with
``ingest=False`` through the ``hsp eval`` harness, which refuses an index that does not fit the settings; the
script checks that every variant used the same concrete index. Prints a table (each variant's difference from
``limit``, and whether it is within ``--tolerance`` on every collection and mode) and writes
reports/eval-query-window-<time>.json (``--out DIR``: DIR/eval-query-window.json).

    $V/bin/python ops/bench/eval_query_window.py
    $V/bin/python ops/bench/eval_query_window.py --variants limit,w64 --limit-queries 50

Needs HSP_ES_URL. Exit 0; numbers only, no gate.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from pathlib import Path
from typing import Any

from hybridsearch.settings import EmbeddingSettings, Settings, load_settings

DEFAULT_COLLECTIONS = ("/work/shared/datasets/scifact=eval-scifact",
                       f"{Path.home() / '.cache/hybridsearch/datasets/scifact-long'}=eval-scifact-long")
DEFAULT_VARIANTS = "limit,w128,w64,w32,int8,int8-w128"
MODES = ("dense", "hybrid")
METRICS = ("ndcg@10", "recall@100")
_VARIANT = re.compile(r"^(limit|int8)$|^(int8-)?w([0-9]+)$")


def variant_settings(embedding: EmbeddingSettings, name: str) -> EmbeddingSettings:
    """``embedding`` with the query side of variant ``name`` (module docstring). Raises ValueError."""
    m = _VARIANT.match(name)
    if m is None:
        raise ValueError(f"unknown variant {name!r} (limit, w<N>, int8, int8-w<N>)")
    int8 = name.startswith("int8")
    window = int(m.group(3)) if m.group(3) else None
    return embedding.model_copy(update={
        "query_max_tokens": window, "backend": "onnx", "device": "cpu", "query_cache_size": 0,
        "onnx_quantized": int8})


def run_variant(settings: Settings, dataset: Path, prefix: str, name: str, limit: int | None) -> dict[str, Any]:
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.engine import EngineClient
    from hybridsearch.eval.datasets import load_collection
    from hybridsearch.eval.harness import eval_settings, evaluate_collection

    collection = load_collection(dataset, "test").limit(limit)
    s = eval_settings(settings, prefix)
    s = s.model_copy(update={"embedding": variant_settings(s.embedding, name)})
    embedder = Embedder(s.embedding, s.models)
    es = EngineClient(s.es)
    try:
        evaluation = evaluate_collection(es, s, collection, list(MODES), embedder=embedder, ingest=False)
    finally:
        es.close()
    report = evaluation.report
    return {
        "variant": name, "collection": collection.name, "queries": len(collection.queries),
        "index": report.index["name"], "index_action": report.index["action"],
        "query_encoder": {"backend": embedder.runtime, "type": "OnnxEncoder",
                          "window": s.embedding.query_max_tokens or embedder.max_seq_length},
        "metrics": {m.mode: {k: m.metrics.get(k) for k in METRICS} for m in report.modes if m.status == "ok"},
        "embed_ms_p50": {m.mode: m.latency_ms["embed"].p50 for m in report.modes if m.status == "ok"},
    }


def compare(results: list[dict[str, Any]], tolerance: float) -> dict[str, Any]:
    """Each variant's difference from ``limit`` per collection, mode and metric, and whether nDCG@10 stays within
    ``tolerance`` everywhere."""
    ref = {r["collection"]: r["metrics"] for r in results if r["variant"] == "limit"}
    out: dict[str, Any] = {}
    for r in results:
        if r["variant"] == "limit" or r["collection"] not in ref:
            continue
        entry = out.setdefault(r["variant"], {"deltas": {}, "within": True})
        deltas = {mode: {k: round(v[k] - ref[r["collection"]][mode][k], 4) for k in METRICS}
                  for mode, v in r["metrics"].items()}
        entry["deltas"][r["collection"]] = deltas
        entry["within"] = entry["within"] and all(d["ndcg@10"] >= -tolerance for d in deltas.values())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collection", action="append", metavar="PATH=PREFIX",
                    help="BEIR folder and its evaluation index prefix (repeatable; default: SciFact, scifact-long)")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated (default: %(default)s)")
    ap.add_argument("--limit-queries", type=int, help="only the first N judged queries of each collection")
    ap.add_argument("--tolerance", type=float, default=0.003, help="largest nDCG@10 drop called within "
                    "(default: %(default)s)")
    ap.add_argument("--out", type=Path, help="folder for eval-query-window.json (default: reports/, stamped)")
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    try:
        for v in variants:
            variant_settings(EmbeddingSettings(), v)
    except ValueError as exc:
        ap.error(str(exc))
    if "limit" not in variants:
        variants.insert(0, "limit")
    pairs = []
    for item in args.collection or DEFAULT_COLLECTIONS:
        path, sep, prefix = item.rpartition("=")
        if not sep or not path or not prefix:
            ap.error(f"--collection {item!r}: PATH=PREFIX")
        pairs.append((Path(path).expanduser(), prefix))
    settings = load_settings()
    started = dt.datetime.now(dt.UTC)
    results: list[dict[str, Any]] = []
    for dataset, prefix in pairs:
        for name in variants:
            r = run_variant(settings, dataset, prefix, name, args.limit_queries)
            results.append(r)
            cells = "  ".join(f"{mode} {v['ndcg@10']:.4f}" for mode, v in r["metrics"].items())
            print(f"{r['collection']:>14} {name:>10}  {cells}  (index {r['index']}, {r['query_encoder']['type']} "
                  f"window {r['query_encoder']['window']})", flush=True)
    indices = {(r["collection"], r["index"]) for r in results}
    same_index = len(indices) == len({r["collection"] for r in results})
    summary = compare(results, args.tolerance)
    for name, entry in summary.items():
        parts = [f"{c} {mode} {d['ndcg@10']:+.4f}" for c, by_mode in entry["deltas"].items()
                 for mode, d in by_mode.items()]
        print(f"{name:>10}: {'within' if entry['within'] else 'NOT within'} {args.tolerance} · " + ", ".join(parts))
    print(f"one index per collection for every variant: {same_index}")
    report = {"created_at": started.isoformat(timespec="seconds"), "tolerance": args.tolerance,
              "modes": list(MODES), "same_index_per_collection": same_index, "results": results,
              "against_limit": summary}
    out = args.out or Path("reports")
    name = "eval-query-window" if args.out else f"eval-query-window-{started.strftime('%Y%m%dT%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"-> {out / name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
