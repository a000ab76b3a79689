#!/usr/bin/env python
"""Query-layer benchmark: per-stage latency, client overhead, hybrid vs single-list latency, the query fast
path, depth sweep.

Runs every judged query of a BEIR split (default: SciFact test, 300 queries) through ``SearchClient`` in
the three modes, interleaved per query (rotating which mode goes first) so that all three see the same
cluster and CPU conditions in the same run. Query embeddings are not cached (every call embeds), so
hybrid and dense pay the same embedding cost. Prints p50/p95 per stage (embed, _msearch, fusion +
assembly, rerank, total), the client-side overhead share, the hybrid/slower-single-list latency ratio
(target ≤ 1.2) and nDCG@10 / recall@100 per mode. ``--sweep 50,100,200`` also measures quality,
candidate count and latency of hybrid search at several per-list depths (``bm25_k`` = ``knn_k``).

The fast path (``--no-fast-path`` skips it), side by side in the same run: the query encoders on one query at a
time (torch, the ONNX Runtime fp32 encoder that ``HSP_EMBEDDING__BACKEND=auto`` runs on CPU, and int8 for
comparison): p50/p95 and agreement with torch over every query of the split; then searches interleaved per
query: hybrid with torch and one ``_msearch`` after embedding, hybrid with ONNX, hybrid with ONNX and BM25
sent while embedding (the default), BM25, dense with each encoder, hybrid with int8: p50/p95, nDCG@10 and the
hybrid p50 / BM25 p50 ratio at concurrency 1. ``--compare bm25_fields=auto,separate`` runs BM25
and hybrid with each value of one query setting on the same index, interleaved per query.

    ops/bench/bench_query.py --prefix scifact                   # the lead's SciFact index, all 300 queries
    ops/bench/bench_query.py --prefix bench-small --build-subset 600 --queries 40 --sweep 50,100   # a small trial

Needs a running node (HSP_ES_URL) and an index behind ``<prefix>-chunks`` (``--build-subset N`` ingests the
judged documents of the chosen queries plus others up to N documents). Exit 0; numbers only, no gate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from hybridsearch.cli.output import RichProgress
from hybridsearch.embedding.encoder import Embedder, compare_vectors
from hybridsearch.engine import EngineClient
from hybridsearch.eval.datasets import Collection, iter_corpus, load_collection
from hybridsearch.eval.metrics import evaluate
from hybridsearch.query.client import SearchClient
from hybridsearch.query.results import Mode, SearchResult
from hybridsearch.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_COLLECTION = ROOT.parent / "shared" / "datasets" / "scifact"
MODES: tuple[Mode, ...] = ("hybrid", "bm25", "dense")
STAGES = ("embed_ms", "search_ms", "fusion_ms", "rerank_ms", "total_ms")
console = Console()


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, round(p) - 1))]


def bench_settings(prefix: str | None, depth: int | None = None) -> Settings:
    s = load_settings()
    query: dict[str, Any] = {"log_queries": False}
    if depth is not None:
        query.update(bm25_k=depth, knn_k=depth)
        if s.query.num_candidates is not None:  # set: it must cover the depth; unset: the query layer sizes it
            query["num_candidates"] = max(s.query.num_candidates, 2 * depth)
    return s.model_copy(update={
        "index": s.index.model_copy(update={"prefix": prefix or s.index.prefix}),
        "embedding": s.embedding.model_copy(update={"query_cache_size": 0}),
        "query": s.query.model_copy(update=query),
    })


def build_subset(settings: Settings, col: Collection, n_docs: int, embedder: Embedder) -> None:
    """Ingest the judged documents of ``col`` plus corpus documents up to ``n_docs`` (for trials)."""
    from hybridsearch.ingest.pipeline import run_ingest
    from hybridsearch.ingest.sources import Document

    wanted = {d for q in col.qrels.values() for d in q}
    docs: list[Document] = []
    for rec in iter_corpus(col.corpus_path):
        if rec["_id"] in wanted or len(docs) < n_docs - len(wanted):
            docs.append(Document.make(rec["_id"], rec["text"], title=rec["title"] or None, source=col.name))
        if len(docs) >= max(n_docs, len(wanted)) and wanted <= {d.doc_id for d in docs}:
            break
    console.print(f"ingesting {len(docs)} documents into {settings.index.alias} …")
    with RichProgress() as bar:
        result = run_ingest(docs, settings, progress=bar, embedder=embedder)
    console.print(f"ingest: {getattr(result, 'status', '?')}, {getattr(result, 'chunks', '?')} chunks")


def run_modes(client: SearchClient, col: Collection, rerank: bool, warmup: int, k: int = 100) -> dict[str, Any]:
    queries = list(col.queries.items())
    for _, text in queries[:warmup]:
        for mode in MODES:
            client.search(text, k=k, mode=mode, rerank=rerank)
    timings: dict[str, dict[str, list[float]]] = {m: {s: [] for s in (*STAGES, "wall_ms")} for m in MODES}
    rankings: dict[str, dict[str, list[str]]] = {m: {} for m in MODES}
    candidates: dict[str, list[int]] = {m: [] for m in MODES}
    for i, (qid, text) in enumerate(queries):
        order = MODES[i % 3:] + MODES[: i % 3]
        for mode in order:
            t0 = time.perf_counter()
            res: SearchResult = client.search(text, k=k, mode=mode, rerank=rerank)
            timings[mode]["wall_ms"].append((time.perf_counter() - t0) * 1000)
            for stage in STAGES:
                timings[mode][stage].append(getattr(res.timings, stage))
            rankings[mode][qid] = [h.doc_id for h in res.hits]
            candidates[mode].append(res.candidates)
    quality = {m: evaluate(col.qrels, rankings[m], ("ndcg@10", "recall@100"))[0] for m in MODES}
    return {"timings": timings, "quality": quality, "candidates": candidates}


def report_modes(out: dict[str, Any], rerank: bool) -> dict[str, Any]:
    timings, quality = out["timings"], out["quality"]
    table = Table(title=f"per-stage latency, ms (p50 / p95), rerank={'on' if rerank else 'off'}")
    table.add_column("mode")
    for stage in (*STAGES, "wall_ms"):
        table.add_column(stage.removesuffix("_ms"), justify="right")
    table.add_column("nDCG@10", justify="right")
    table.add_column("R@100", justify="right")
    table.add_column("cands", justify="right")
    summary: dict[str, Any] = {}
    for m in MODES:
        cells = []
        summary[m] = {}
        for stage in (*STAGES, "wall_ms"):
            v = timings[m][stage]
            summary[m][stage] = {"p50": pct(v, 50), "p95": pct(v, 95), "mean": statistics.fmean(v)}
            cells.append(f"{pct(v, 50):.1f} / {pct(v, 95):.1f}")
        summary[m].update(quality[m], candidates=statistics.fmean(out["candidates"][m]))
        table.add_row(m, *cells, f"{quality[m]['ndcg@10']:.4f}", f"{quality[m]['recall@100']:.4f}",
                      f"{summary[m]['candidates']:.0f}")
    console.print(table)
    hyb = timings["hybrid"]
    overhead = sum(hyb["fusion_ms"]) / sum(hyb["total_ms"])
    slower = max(("bm25", "dense"), key=lambda m: summary[m]["total_ms"]["p50"])
    ratio_p50 = summary["hybrid"]["total_ms"]["p50"] / summary[slower]["total_ms"]["p50"]
    ratio_mean = summary["hybrid"]["total_ms"]["mean"] / max(summary["bm25"]["total_ms"]["mean"],
                                                              summary["dense"]["total_ms"]["mean"])
    console.print(f"client overhead (collapse + fusion + assembly) in hybrid: {overhead:.1%} of total time "
                  f"(target < 5%) · p50 {summary['hybrid']['fusion_ms']['p50']:.2f} ms")
    console.print(f"hybrid / slower single list ({slower}) latency: p50 {ratio_p50:.2f}×, mean {ratio_mean:.2f}× "
                  "(target ≤ 1.2×)")
    summary["overhead_share"] = overhead
    summary["hybrid_vs_slower_p50"] = ratio_p50
    summary["hybrid_vs_slower_mean"] = ratio_mean
    return summary


def encoder_embedders(settings: Settings, base: Embedder) -> dict[str, Embedder]:
    """The query encoders compared: torch (sentence-transformers), ``base`` (auto: ONNX fp32 on CPU) and int8 (the
    dynamically quantised ONNX file, never the default)."""
    cfg = settings.embedding
    return {"torch": Embedder(cfg.model_copy(update={"backend": "torch"}), settings.models), "auto": base,
            "int8": Embedder(cfg.model_copy(update={"backend": "onnx", "onnx_quantized": True}), settings.models)}


def bench_encoders(embedders: dict[str, Embedder], texts: list[str], warmup: int) -> dict[str, Any]:
    """One query at a time through each encoder, interleaved per query (rotating order), and agreement with torch."""
    names = list(embedders)
    for text in texts[:warmup]:
        for e in embedders.values():
            e.encode_query(text)
    times: dict[str, list[float]] = {n: [] for n in names}
    for i, text in enumerate(texts):
        for n in names[i % len(names):] + names[: i % len(names)]:
            t0 = time.perf_counter()
            embedders[n].encode_query(text)
            times[n].append((time.perf_counter() - t0) * 1000)
    table = Table(title=f"query encoder, one query at a time ({len(texts)} queries, interleaved), ms")
    for c in ("encoder", "p50", "p95", "mean", "lowest cosine to torch", "largest |diff|"):
        table.add_column(c, justify="right")
    out: dict[str, Any] = {}
    torch_encode = embedders["torch"].encode_query
    for n in names:
        runtime = embedders[n].runtime
        label = f"{runtime}{' int8' if n == 'int8' else ' fp32' if runtime == 'onnx' else ''}"
        cos, diff = compare_vectors(np.stack([torch_encode(t) for t in texts]),
                                    np.stack([embedders[n].encode_query(t) for t in texts]))
        out[n] = {"backend": label, "p50": pct(times[n], 50), "p95": pct(times[n], 95),
                  "mean": statistics.fmean(times[n]), "min_cosine": cos, "max_abs_diff": diff}
        table.add_row(f"{n}: {label}", f"{out[n]['p50']:.2f}", f"{out[n]['p95']:.2f}", f"{out[n]['mean']:.2f}",
                      f"{cos:.7f}", f"{diff:.1e}")
    console.print(table)
    console.print(f"auto runs {embedders['auto'].runtime}")
    out["onnx_vs_torch_p50"] = out["auto"]["p50"] / out["torch"]["p50"]
    return out


def fast_path(prefix: str | None, col: Collection, embedders: dict[str, Embedder], warmup: int,
              k: int) -> dict[str, Any]:
    """Hybrid with torch and one _msearch, and with ONNX and BM25 sent while embedding, against BM25 and dense, and
    the int8 encoder's quality, interleaved per query at concurrency 1."""
    variants: dict[str, tuple[str, bool, Mode]] = {  # label: (embedder, overlap, mode)
        "hybrid · torch · one _msearch (before)": ("torch", False, "hybrid"),
        "hybrid · onnx · one _msearch": ("auto", False, "hybrid"),
        "hybrid · onnx · overlapped (default)": ("auto", True, "hybrid"),
        "bm25": ("auto", True, "bm25"),
        "dense · torch": ("torch", True, "dense"),
        "dense · onnx (default)": ("auto", True, "dense"),
        "hybrid · int8 · overlapped": ("int8", True, "hybrid"),
        "dense · int8": ("int8", True, "dense"),
    }
    s = bench_settings(prefix)
    es = EngineClient(s.es)  # one connection pool; no reranker
    clients = {label: SearchClient(es, s.model_copy(update={"query": s.query.model_copy(
        update={"hybrid_overlap": overlap})}), embedder=embedders[enc])
        for label, (enc, overlap, _) in variants.items()}
    labels = list(variants)
    queries = list(col.queries.items())
    stats: dict[str, dict[str, list[float]]] = {v: {"total": [], "embed": [], "search": []} for v in labels}
    ranks: dict[str, dict[str, list[str]]] = {v: {} for v in labels}
    try:
        for _, text in queries[:warmup]:
            for v in labels:
                clients[v].search(text, k=k, mode=variants[v][2], rerank=False)
        for i, (qid, text) in enumerate(queries):
            for v in labels[i % len(labels):] + labels[: i % len(labels)]:
                res = clients[v].search(text, k=k, mode=variants[v][2], rerank=False)
                stats[v]["total"].append(res.timings.total_ms)
                stats[v]["embed"].append(res.timings.embed_ms)
                stats[v]["search"].append(res.timings.search_ms)
                ranks[v][qid] = [h.doc_id for h in res.hits]
    finally:
        for c in clients.values():
            c.close()
        es.close()
    bm25_p50 = pct(stats["bm25"]["total"], 50)
    table = Table(title=f"fast path: searches interleaved per query, concurrency 1, k={k}, ms")
    for col_name in ("variant", "embed p50", "search p50", "total p50", "total p95", "p50 / bm25 p50", "nDCG@10"):
        table.add_column(col_name, justify="right")
    out: dict[str, Any] = {"variants": {}}
    for v in labels:
        q = evaluate(col.qrels, ranks[v], ("ndcg@10",))[0]
        row = {"embed_p50": pct(stats[v]["embed"], 50), "search_p50": pct(stats[v]["search"], 50),
               "total_p50": pct(stats[v]["total"], 50), "total_p95": pct(stats[v]["total"], 95),
               "ndcg@10": q["ndcg@10"]}
        row["vs_bm25_p50"] = row["total_p50"] / bm25_p50
        out["variants"][v] = row
        table.add_row(v, f"{row['embed_p50']:.1f}", f"{row['search_p50']:.1f}", f"{row['total_p50']:.1f}",
                      f"{row['total_p95']:.1f}", f"{row['vs_bm25_p50']:.2f}×", f"{q['ndcg@10']:.4f}")
    console.print(table)
    before = out["variants"]["hybrid · torch · one _msearch (before)"]["vs_bm25_p50"]
    after = out["variants"]["hybrid · onnx · overlapped (default)"]["vs_bm25_p50"]
    out.update(hybrid_vs_bm25_before=before, hybrid_vs_bm25_after=after)
    console.print(f"hybrid p50 / BM25 p50 at concurrency 1: before {before:.2f}×, after {after:.2f}× (target ≤ 1.5×); "
                  f"dense p50 {out['variants']['dense · onnx (default)']['total_p50']:.1f} ms (onnx), "
                  f"{out['variants']['dense · torch']['total_p50']:.1f} ms (torch)")
    return out


def sweep(prefix: str | None, col: Collection, depths: list[int], embedder: Embedder) -> list[dict[str, Any]]:
    rows = []
    table = Table(title="hybrid, no rerank: per-list depth (bm25_k = knn_k) vs quality and latency")
    for col_name in ("depth", "nDCG@10", "R@100", "cands min", "cands mean", "search p50", "total p50", "total p95"):
        table.add_column(col_name, justify="right")
    for depth in depths:
        with SearchClient.from_settings(bench_settings(prefix, depth), embedder=embedder) as client:
            client.reranker = None
            for text in list(col.queries.values())[:5]:
                client.search(text, k=100, rerank=False)
            ranks: dict[str, list[str]] = {}
            search, total, cands = [], [], []
            for qid, text in col.queries.items():
                res = client.search(text, k=100, rerank=False)
                ranks[qid] = [h.doc_id for h in res.hits]
                search.append(res.timings.search_ms)
                total.append(res.timings.total_ms)
                cands.append(res.candidates)
        q = evaluate(col.qrels, ranks, ("ndcg@10", "recall@100"))[0]
        row = {"depth": depth, **q, "candidates_min": min(cands), "candidates_mean": statistics.fmean(cands),
               "search_p50": pct(search, 50), "total_p50": pct(total, 50), "total_p95": pct(total, 95)}
        rows.append(row)
        table.add_row(str(depth), f"{q['ndcg@10']:.4f}", f"{q['recall@100']:.4f}", str(min(cands)),
                      f"{row['candidates_mean']:.0f}", f"{row['search_p50']:.1f}", f"{row['total_p50']:.1f}",
                      f"{row['total_p95']:.1f}")
    console.print(table)
    return rows


def against(prefixes: tuple[str | None, str], col: Collection, embedders: tuple[Embedder, Embedder], warmup: int,
            k: int) -> dict[str, Any]:
    """Hybrid on two indices (e.g. the collection's index before and after a change, or two indices built with
    different models, each searched with its own ``embedders`` entry), interleaved per query with the order
    alternating: p50/p95 wall time, nDCG@10, the fusion each used, and the p50 ratio."""
    clients = [SearchClient.from_settings(bench_settings(p).model_copy(update={"embedding": e.cfg}), embedder=e)
               for p, e in zip(prefixes, embedders, strict=True)]
    walls: list[list[float]] = [[], []]
    rankings: list[dict[str, list[str]]] = [{}, {}]
    fusions: list[str | None] = [None, None]
    try:
        for c in clients:
            c.reranker = None
            for _, text in list(col.queries.items())[:warmup]:
                c.search(text, k=k)
        for i, (qid, text) in enumerate(col.queries.items()):
            for j in ((0, 1) if i % 2 == 0 else (1, 0)):
                t0 = time.perf_counter()
                res = clients[j].search(text, k=k, rerank=False)
                walls[j].append((time.perf_counter() - t0) * 1000)
                rankings[j][qid], fusions[j] = [h.doc_id for h in res.hits], res.fusion
        indices = [c.index() for c in clients]
    finally:
        for c in clients:
            c.close()
    table = Table(title="hybrid on two indices, interleaved per query")
    for col_name in ("index", "fusion", "p50 ms", "p95 ms", "nDCG@10"):
        table.add_column(col_name)
    rows: list[dict[str, Any]] = []
    for j in (0, 1):
        ndcg = evaluate(col.qrels, rankings[j], ("ndcg@10",))[0]["ndcg@10"]
        rows.append({"index": indices[j], "fusion": fusions[j], "p50": pct(walls[j], 50), "p95": pct(walls[j], 95),
                     "ndcg@10": ndcg})
        table.add_row(indices[j], str(fusions[j]), f"{rows[j]['p50']:.1f}", f"{rows[j]['p95']:.1f}", f"{ndcg:.4f}")
    console.print(table)
    ratio = rows[0]["p50"] / rows[1]["p50"] if rows[1]["p50"] else 0.0
    console.print(f"hybrid p50 {indices[0]} / {indices[1]} = {ratio:.3f}")
    return {"rows": rows, "p50_ratio": ratio}


def compare(prefix: str | None, col: Collection, knob: str, embedder: Embedder, warmup: int, k: int
            ) -> dict[str, Any]:
    """BM25 and hybrid with each value of one query setting (``knob``: ``NAME=A,B``, e.g. ``bm25_fields=auto,
    separate``) on the same index, interleaved per query with the order rotating: p50/p95 and nDCG@10."""
    name, _, values = knob.removeprefix("query.").partition("=")
    base = bench_settings(prefix)
    variants = [(mode, v) for v in values.split(",") for mode in ("bm25", "hybrid")]
    clients = {v: SearchClient(EngineClient(base.es), base.model_copy(update={"query": type(base.query).model_validate(
        {**base.query.model_dump(), name: v})}), embedder=embedder) for v in values.split(",")}
    walls: dict[tuple[str, str], list[float]] = {x: [] for x in variants}
    ranks: dict[tuple[str, str], dict[str, list[str]]] = {x: {} for x in variants}
    queries = list(col.queries.items())
    try:
        for _, text in queries[:warmup]:
            for mode, v in variants:
                clients[v].search(text, k=k, mode=mode, rerank=False)  # type: ignore[arg-type]
        for i, (qid, text) in enumerate(queries):
            for mode, v in variants[i % len(variants):] + variants[: i % len(variants)]:
                t0 = time.perf_counter()
                res = clients[v].search(text, k=k, mode=mode, rerank=False)  # type: ignore[arg-type]
                walls[(mode, v)].append((time.perf_counter() - t0) * 1000)
                ranks[(mode, v)][qid] = [h.doc_id for h in res.hits]
    finally:
        for client in clients.values():
            client.close()
    table = Table(title=f"query.{name}: the same index, interleaved per query, concurrency 1, k={k}, ms")
    for col_name in ("mode", name, "p50", "p95", "nDCG@10"):
        table.add_column(col_name, justify="right")
    rows = []
    for mode, v in variants:
        row = {"mode": mode, "value": v, "p50": pct(walls[(mode, v)], 50), "p95": pct(walls[(mode, v)], 95),
               "ndcg@10": evaluate(col.qrels, ranks[(mode, v)], ("ndcg@10",))[0]["ndcg@10"]}
        rows.append(row)
        table.add_row(mode, v, f"{row['p50']:.2f}", f"{row['p95']:.2f}", f"{row['ndcg@10']:.4f}")
    console.print(table)
    return {"knob": name, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", help="index prefix (default: HSP_INDEX__PREFIX / settings)")
    ap.add_argument("--collection", type=Path, default=DEFAULT_COLLECTION, help="BEIR folder (default SciFact)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--queries", type=int, help="only the first N judged queries (default all)")
    ap.add_argument("--warmup", type=int, default=5, help="queries run first and not measured (default 5)")
    ap.add_argument("--k", type=int, default=100,
                    help="hits returned per query (default 100; Recall@100 needs 100, a user's page is often 10)")
    ap.add_argument("--rerank", action="store_true", help="also rerank (reranker from settings; default off)")
    ap.add_argument("--sweep", help="comma-separated per-list depths to compare, e.g. 50,100,200")
    ap.add_argument("--build-subset", type=int, metavar="N", help="first ingest a subset of N documents (trials)")
    ap.add_argument("--no-fast-path", action="store_true", help="skip the encoder and fast-path comparison")
    ap.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    ap.add_argument("--against", metavar="PREFIX", help="also run hybrid on PREFIX's index interleaved with this one "
                                                        "(e.g. the index before a change) and print the p50 ratio")
    ap.add_argument("--against-model", metavar="NAME", help="the embedding model of the --against index (a "
                    "catalogue name or folder; default: the same model)")
    ap.add_argument("--against-int8", action="store_true", help="embed --against queries with the int8 ONNX encoder "
                    "(HSP_EMBEDDING__BACKEND=onnx, ONNX_QUANTIZED=true) while its index keeps its fp32 vectors")
    ap.add_argument("--compare", metavar="NAME=A,B", help="also run BM25 and hybrid with each value of one query "
                    "setting on the same index, interleaved (e.g. bm25_fields=auto,separate)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    col = load_collection(args.collection, args.split).limit(args.queries)
    settings = bench_settings(args.prefix)
    embedder = Embedder(settings.embedding, settings.models)  # one model for ingest and every client
    if args.build_subset:
        build_subset(settings, col, args.build_subset, embedder)
    console.print(f"{col.name}/{col.split}: {len(col)} queries on {settings.index.alias}, "
                  f"bm25_k={settings.query.bm25_k} knn_k={settings.query.knn_k} "
                  f"num_candidates={settings.query.num_candidates} fusion={settings.query.fusion}")
    with SearchClient.from_settings(settings, embedder=embedder) as client:
        if not args.rerank:
            client.reranker = None
        console.print(f"index {client.index()}")
        runs = run_modes(client, col, args.rerank, args.warmup, args.k)
        figures: dict[str, Any] = {"collection": col.name, "queries": len(col), "index": client.index(), "k": args.k,
                                   "modes": report_modes(runs, args.rerank)}
    if not args.no_fast_path:
        embedders = encoder_embedders(settings, embedder)
        every = list(load_collection(args.collection, args.split).queries.values())
        figures["encoders"] = bench_encoders(embedders, every, args.warmup)
        figures["fast_path"] = fast_path(args.prefix, col, embedders, args.warmup, args.k)
    if args.against:
        other = embedder
        if args.against_model or args.against_int8:
            update: dict[str, Any] = {"model": args.against_model or settings.embedding.model}
            if args.against_int8:
                update.update(backend="onnx", onnx_quantized=True)
            other = Embedder(settings.embedding.model_copy(update=update), settings.models)
        figures["against"] = against((args.prefix, args.against), col, (embedder, other), args.warmup, args.k)
        figures["against"]["models"] = [embedder.cfg.model, other.cfg.model]
    if args.compare:
        figures["compare"] = compare(args.prefix, col, args.compare, embedder, args.warmup, args.k)
    if args.sweep:
        figures["sweep"] = sweep(args.prefix, col, [int(d) for d in args.sweep.split(",")], embedder)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
