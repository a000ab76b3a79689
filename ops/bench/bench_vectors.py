#!/usr/bin/env python
"""Vector index options measured on a real collection: recall, quality, bytes, build time,
latency per ``index_options``, on the engine that answers (one engine per invocation).

For each option (Elasticsearch: ``hnsw,int8_hnsw,int4_hnsw,bbq_hnsw``; OpenSearch's lucene engine: ``hnsw`` and
``int8_hnsw`` = the ``sq`` encoder) it builds ``<prefix>-<option>-chunks-v1`` from the BEIR corpus with the
package's own ingestion (vectors from the on-disk embedding cache, so the model only embeds what is missing),
then force-merges it to one segment, and reports:

* build time: ingest (incl. its refresh) + force-merge to one segment, each also on its own;
* kNN recall@10 of the engine's kNN search (k=10, ``num_candidates`` / ``ef_search`` from ``--num-candidates``,
  first the settings' default) against exact cosine top-10 in numpy over every chunk vector that was indexed
  (read back from the embedding cache by the text each chunk embedded), chunk level, no collapse; a hit tied
  with the 10th exact neighbour counts as found (``knn.py``);
* nDCG@10 of ``dense`` and ``hybrid`` (the ``hsp eval`` harness, ``hybridsearch.eval.harness``);
* bytes per vector on disk: the Lucene vector files of the merged segment (``_stats`` with
  ``include_segment_file_sizes``; compound files are switched off before the merge so they stay visible):
  raw floats (``.vec``), graph (``.vex``), quantized (``.veq``, Elasticsearch's BBQ ``.veb``) and metadata,
  divided by the vectors the segment holds (live + soft-deleted documents, see :func:`disk`); on
  Elasticsearch also ``_disk_usage?run_expensive_tasks=true`` of the ``embedding`` field (``knn_vectors``);
  and the engine's own indexing and merge time (``_stats``);
* dense and hybrid latency through ``SearchClient`` (k=10, no rerank), every (option, mode) pair interleaved per
  query with a rotating order, in one run after all indices are built; the query vectors are embedded once
  before the timed loop (the client's LRU), so the figures are the search itself (p50/p95 of ``total_ms``
  and of ``search_ms``, the engine round trip).

    ops/es-local.sh start                                        # or HSP_ENGINE=opensearch ops/es-local.sh start
    $V/bin/python ops/bench/bench_vectors.py                           # every option the engine has, 300 test queries
    $V/bin/python ops/bench/bench_vectors.py --options hnsw,int8_hnsw --limit-queries 30   # a quick trial

Needs HSP_ES_URL (a running node); deletes and rebuilds ``<prefix>-<option>-*`` (default prefix ``vecbench``)
and deletes them afterwards unless ``--keep``. Writes reports/bench-vectors-<engine>-<time>.json and .png (``--out
DIR``: into DIR instead; docs/vector-options.md shows a run). Exit 0; numbers only, no gate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_query import DEFAULT_COLLECTION
from hybridsearch.cli.output import RichProgress
from hybridsearch.embedding.cache import CachedEmbedder
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, Request, request
from hybridsearch.engine.dialect import OPENSEARCH_OPTIONS
from hybridsearch.eval.datasets import Collection, load_collection
from hybridsearch.eval.harness import choose_index, eval_settings, evaluate_collection, ingest_corpus
from hybridsearch.ingest.chunking import chunk_embed_text
from hybridsearch.query.build import auto_candidates
from hybridsearch.query.client import SearchClient
from hybridsearch.query.results import Mode
from hybridsearch.settings import Settings, load_settings
from knn import exact_top_k, knn_recall, unit
from loadgen import pct, save_report

ES_OPTIONS = ("hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw")
LAT_MODES: tuple[Mode, ...] = ("dense", "hybrid")
K = 10
# Lucene vector file extensions -> what they hold (ES's BBQ writes .veb/.vemb; everything else is Lucene's)
VECTOR_FILES = {"vec": "raw", "vex": "graph", "veq": "quantized", "veb": "quantized",
                "vemf": "meta", "vem": "meta", "vemq": "meta", "vemb": "meta"}
console = Console()


def option_settings(base: Settings, prefix: str, option: str) -> Settings:
    """``base`` for an index of ``option`` vectors under ``<prefix>-<option>`` (no query log)."""
    s = eval_settings(base, f"{prefix}-{option.replace('_', '-')}")
    return s.model_copy(update={"index": s.index.model_copy(update={"index_options": option}),
                                "query": s.query.model_copy(update={"log_queries": False})})


def build(es: EngineClient, s: Settings, col: Collection, embedder: Embedder) -> dict[str, Any]:
    """A fresh index of ``col`` under ``s``'s prefix, force-merged to one segment; its name and timings."""
    es.send(request.delete_index(f"{s.index.prefix}-*", expand_wildcards="all"))
    t0 = time.perf_counter()
    index = choose_index(es, s).index
    es.send(request.put_settings(index, {"index.compound_format": "false"}))  # vector files stay visible
    with RichProgress() as bar:
        ingest = ingest_corpus(es, s, col.corpus_path, embedder=embedder, progress=bar)
    es.send(request.refresh(index))
    t1 = time.perf_counter()
    es.send(Request("POST", f"/{index}/_forcemerge", request.params(max_num_segments=1)))
    es.send(request.refresh(index))
    t2 = time.perf_counter()
    return {"index": index, "ingest_s": round(t1 - t0, 1), "merge_s": round(t2 - t1, 1),
            "build_s": round(t2 - t0, 1), "chunks": ingest.get("chunks")}


def stored_vectors(es: EngineClient, index: str, s: Settings, cache: CachedEmbedder) -> tuple[dict[str, int],
                                                                                              np.ndarray]:
    """Every chunk of ``index`` (chunk id -> row) and the unit vector its text got at ingestion (from the
    embedding cache: what was indexed, as float32)."""
    ids: dict[str, int] = {}
    texts: list[str] = []
    source = ["chunk_id", "title", "title_cut", "text"]
    for hit in es.scan(index=index, query={"query": {"match_all": {}}, "_source": source}):
        src = hit["_source"]
        ids[src["chunk_id"]] = len(texts)
        texts.append(chunk_embed_text(src, s.embedding.prepend_title))  # a long title cut as ingestion cut it
    before = cache.embedded
    vectors = unit(cache.encode(texts))
    if cache.embedded > before:
        console.print(f"[yellow]{cache.embedded - before} chunk texts were not in the embedding cache and were "
                      "embedded again: exact search uses those vectors[/]")
    return ids, vectors


def recall(es: EngineClient, index: str, ids: dict[str, int], vectors: np.ndarray, queries: np.ndarray,
           kth: np.ndarray, num_candidates: int) -> float:
    """Mean recall@K of the engine's kNN (chunk level) against exact search."""
    total = 0.0
    for q, kth_score in zip(queries, kth, strict=True):
        body = es.dialect.knn_search("embedding", q.tolist(), K, num_candidates, [])
        hits = es.send(request.search(index, request.body(size=K, source=["chunk_id"], **body)))["hits"]["hits"]
        total += knn_recall(vectors, q, float(kth_score), [ids.get(h["_source"]["chunk_id"], -1) for h in hits], K)
    return total / len(queries)


def per_vector(files: dict[str, int], vectors: int) -> dict[str, float]:
    """Bytes of the vector files (``files``: bytes per Lucene extension) per stored vector, by kind; ``search``:
    what an HNSW search reads, the graph and the vectors it compares (the quantized ones where there are)."""
    kinds = {kind: sum(b for ext, b in files.items() if VECTOR_FILES.get(ext) == kind)
             for kind in ("raw", "graph", "quantized", "meta")}
    out = {f"{kind}_bytes_per_vector": round(b / vectors, 1) for kind, b in kinds.items()}
    out["bytes_per_vector"] = round(sum(kinds.values()) / vectors, 1)
    out["search_bytes_per_vector"] = round((kinds["graph"] + (kinds["quantized"] or kinds["raw"])) / vectors, 1)
    return out


def disk(es: EngineClient, index: str) -> dict[str, Any]:
    """Bytes of the vector files per stored vector and Elasticsearch's ``_disk_usage`` of the field, with the
    engine's own indexing, merge and refresh time.

    Per *stored* vector: the merged segment still holds the chunks that ingestion's commit step re-wrote (each
    chunk is written staged, then flipped visible) as soft-deleted copies, which Elasticsearch retains for a
    while (peer-recovery retention leases) and whose vectors are in the files too; so bytes are divided by
    live + deleted documents, the vectors the files hold."""
    prim = es.send(request.index_stats(index, metric="segments,store,docs,indexing,merge,refresh",
                                       include_segment_file_sizes=True))["indices"][index]["primaries"]
    files = {ext: int(v["size_in_bytes"]) for ext, v in prim["segments"].get("file_sizes", {}).items()}
    docs, deleted = int(prim["docs"]["count"]), int(prim["docs"]["deleted"])
    out: dict[str, Any] = {
        "store_bytes": int(prim["store"]["size_in_bytes"]), "segments": int(prim["segments"]["count"]),
        "file_sizes": files, "compound": "cfs" in files, "docs": docs, "deleted_docs": deleted,
        # the engine's own time (summed over its threads): indexing documents (HNSW inserts), merges, refreshes
        "engine_index_s": round(prim["indexing"]["index_time_in_millis"] / 1000, 1),
        "engine_merge_s": round(prim["merges"]["total_time_in_millis"] / 1000, 1),
        "engine_refresh_s": round(prim["refresh"]["total_time_in_millis"] / 1000, 1),
        **per_vector(files, docs + deleted),
    }
    if es.engine.kind == "elasticsearch":  # OpenSearch has no _disk_usage
        with warnings.catch_warnings():  # Elasticsearch marks the API as a technical preview on every call
            warnings.simplefilter("ignore")
            usage = es.send(Request("POST", f"/{index}/_disk_usage", request.params(run_expensive_tasks=True)))
        field = usage[index]["fields"].get("embedding", {})
        out["disk_usage_knn_bytes_per_vector"] = round(int(field.get("knn_vectors_in_bytes", 0)) / (docs + deleted), 1)
    return out


def quality(es: EngineClient, s: Settings, col: Collection, embedder: Embedder) -> dict[str, float]:
    """nDCG@10 (and recall@100) of dense and hybrid on the built index, by the ``hsp eval`` harness."""
    report = evaluate_collection(es, s, col, ["dense", "hybrid"], embedder=embedder, ingest=False).report
    return {f"{m.mode}_{name}": round(value, 4) for m in report.modes for name, value in m.metrics.items()
            if name in ("ndcg@10", "recall@100")}


def latency(es: EngineClient, settings: dict[str, Settings], col: Collection, embedder: Embedder,
            warmup: int) -> dict[str, dict[str, float]]:
    """p50/p95 of every (option, mode), interleaved per query in a rotating order."""
    clients = {o: SearchClient(es, s, embedder=embedder, log_queries=False) for o, s in settings.items()}
    variants = [(o, m) for o in settings for m in LAT_MODES]
    texts = list(col.queries.values())
    total: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
    search: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
    try:
        for t in texts:  # every query vector into the client's LRU: the timed loop measures the search
            embedder.encode_query(t)
        for t in texts[:warmup]:
            for o, m in variants:
                clients[o].search(t, k=K, mode=m, rerank=False)
        for i, t in enumerate(texts):
            n = i % len(variants)
            for o, m in variants[n:] + variants[:n]:
                res = clients[o].search(t, k=K, mode=m, rerank=False)
                total[(o, m)].append(res.timings.total_ms)
                search[(o, m)].append(res.timings.search_ms)
    finally:
        for c in clients.values():
            c.close()
    out: dict[str, dict[str, float]] = {o: {} for o in settings}
    for o, m in variants:
        out[o].update({f"{m}_p50_ms": round(pct(total[(o, m)], 50), 1), f"{m}_p95_ms": round(pct(total[(o, m)], 95), 1),
                       f"{m}_search_p50_ms": round(pct(search[(o, m)], 50), 1),
                       f"{m}_mean_ms": round(statistics.fmean(total[(o, m)]), 1)})
    return out


def print_table(engine: str, rows: list[dict[str, Any]], candidates: list[int]) -> None:
    table = Table(title=f"vector index options on {engine} (SciFact test; shared 2-core machine)")
    cols = ["option", *[f"recall@10 nc={c}" for c in candidates], "dense nDCG@10", "hybrid nDCG@10",
            "B/vector", "search B/vector", "build s (ingest + merge)", "engine index + merge s", "dense p50 ms",
            "hybrid p50 ms"]
    for c in cols:
        table.add_column(c, justify="right")
    for r in rows:
        table.add_row(r["option"], *[f"{r[f'recall_at_10_nc{c}']:.4f}" for c in candidates],
                      f"{r['dense_ndcg@10']:.4f}", f"{r['hybrid_ndcg@10']:.4f}", f"{r['bytes_per_vector']}",
                      f"{r['search_bytes_per_vector']}", f"{r['build_s']} ({r['ingest_s']} + {r['merge_s']})",
                      f"{r['engine_index_s']} + {r['engine_merge_s']}",
                      f"{r['dense_p50_ms']}", f"{r['hybrid_p50_ms']}")
    Console(width=max(console.width, 200)).print(table)


def plot(engine: str, rows: list[dict[str, Any]], candidates: list[int], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["option"] for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(1, 4, figsize=(16, 3.6))
    width = 0.8 / len(candidates)
    for j, c in enumerate(candidates):
        ax[0].bar(x + j * width, [r[f"recall_at_10_nc{c}"] for r in rows], width, label=f"num_candidates {c}")
    ax[0].set_title("kNN recall@10 vs exact")
    ax[0].set_ylim(max(0.0, min(r[f"recall_at_10_nc{c}"] for r in rows for c in candidates) - 0.1), 1.0)
    ax[0].legend(fontsize=6, loc="lower left")
    ax[1].bar(x - 0.2, [r["dense_ndcg@10"] for r in rows], 0.4, label="dense")
    ax[1].bar(x + 0.2, [r["hybrid_ndcg@10"] for r in rows], 0.4, label="hybrid")
    ax[1].set_title("nDCG@10")
    ax[1].set_ylim(0.5, 0.75)
    ax[1].legend(fontsize=7)
    ax[2].bar(x - 0.2, [r["bytes_per_vector"] for r in rows], 0.4, label="all vector files")
    ax[2].bar(x + 0.2, [r["search_bytes_per_vector"] for r in rows], 0.4, label="graph + searched vectors")
    ax[2].set_title("bytes per stored vector on disk")
    ax[2].legend(fontsize=6, loc="lower left")
    ax[3].bar(x - 0.2, [r["dense_p50_ms"] for r in rows], 0.4, label="dense")
    ax[3].bar(x + 0.2, [r["hybrid_p50_ms"] for r in rows], 0.4, label="hybrid")
    ax[3].set_title("p50 latency, ms (interleaved)")
    ax[3].legend(fontsize=7)
    for a in ax:
        a.set_xticks(x + (width * (len(candidates) - 1) / 2 if a is ax[0] else 0), names, fontsize=8)
        a.grid(alpha=0.3, axis="y")
    fig.suptitle(f"vector index options, {engine}, SciFact (384-dim all-MiniLM-L6-v2; shared 2-core machine)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--options", help="comma-separated index_options (default: every one the engine has)")
    ap.add_argument("--collection", type=Path, default=DEFAULT_COLLECTION, help="BEIR folder (default SciFact)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit-queries", type=int, metavar="N", help="only the first N judged queries (a trial)")
    ap.add_argument("--num-candidates", default="",
                    help="extra num_candidates for recall, comma-separated (the settings' default always runs "
                         "first), e.g. 50")
    ap.add_argument("--prefix", default="vecbench", help="index prefix; each option gets <prefix>-<option>")
    ap.add_argument("--warmup", type=int, default=5, help="queries searched once per variant before timing")
    ap.add_argument("--keep", action="store_true", help="keep the indices (default: delete them at the end)")
    ap.add_argument("--out", type=Path, help="write the report (JSON and PNG) into this folder instead of reports/")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    base = load_settings()
    if base.ingest.workers > 1:
        ap.error("HSP_INGEST__WORKERS must be 1: worker processes embed without the embedding cache")
    es = EngineClient(base.es, request_timeout=900)
    engine = es.engine
    have = tuple(OPENSEARCH_OPTIONS) if engine.kind == "opensearch" else ES_OPTIONS
    options = args.options.split(",") if args.options else list(have)
    if unknown := [o for o in options if o not in have]:
        ap.error(f"{engine.name} has no {', '.join(unknown)} here; choose from {', '.join(have)}")
    candidates = list(dict.fromkeys([base.query.num_candidates or auto_candidates(K, None),
                                     *(int(c) for c in args.num_candidates.split(",") if c.strip())]))
    if any(c < K or c > 10_000 for c in candidates) or (args.limit_queries is not None and args.limit_queries < 1):
        ap.error(f"num_candidates must be {K}..10000 and --limit-queries ≥ 1")
    col = load_collection(args.collection, args.split).limit(args.limit_queries)
    cache = CachedEmbedder(Embedder(base.embedding, base.models))
    console.print(f"{engine.name} · {col.name}/{col.split}: {len(col)} queries · options {', '.join(options)} · "
                  f"recall at num_candidates {', '.join(map(str, candidates))} · cache {cache.path}")

    settings = {o: option_settings(base, args.prefix, o) for o in options}
    rows: list[dict[str, Any]] = []
    exact: tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray] | None = None
    try:
        for o, s in settings.items():
            console.rule(f"{o}: build")
            row: dict[str, Any] = {"engine": engine.name, "option": o, **build(es, s, col, cache)}
            if exact is None:  # every option indexes the same chunks: exact neighbours once
                ids, vectors = stored_vectors(es, row["index"], s, cache)
                queries = unit(np.stack([cache.encode_query(t) for t in col.queries.values()]))
                _, scores = exact_top_k(vectors, queries, K)
                exact = (ids, vectors, queries, scores[:, -1])
            ids, vectors, queries, kth = exact
            row["chunks"] = len(ids)
            for c in candidates:
                row[f"recall_at_10_nc{c}"] = round(recall(es, row["index"], ids, vectors, queries, kth, c), 4)
            row.update(disk(es, row["index"]))
            console.rule(f"{o}: dense and hybrid nDCG@10")
            row.update(quality(es, s, col, cache))
            console.print({k: v for k, v in row.items() if k not in ("file_sizes",)})
            rows.append(row)
        console.rule("latency: every option and mode interleaved per query")
        for r, lat in zip(rows, latency(es, settings, col, cache, args.warmup).values(), strict=True):
            r.update(lat)
    finally:
        if not args.keep:
            for s in settings.values():
                es.send(request.delete_index(f"{s.index.prefix}-*", expand_wildcards="all"))
        cache.close()
        es.close()
    print_table(engine.name, rows, candidates)
    data = {"engine": engine.name, "collection": col.name, "split": col.split, "queries": len(col), "k": K,
            "num_candidates": candidates, "model": base.embedding.model, "dims": base.embedding.dims, "rows": rows}
    def draw(png: Path) -> None:
        plot(engine.name, rows, candidates, png)

    save_report(f"bench-vectors-{engine.kind}", data, draw, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
