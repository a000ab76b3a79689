#!/usr/bin/env python
"""How cost grows with the collection: synthetic chunks at several sizes.

For each size N (default 10k and 100k; 1M with ``--sizes 10000,100000,1000000`` where time and disk allow)
it creates ``<prefix>-<N>-chunks-v1`` (``--prefix``, default ``scale``) with hybridsearch's own mapping
(``ensure_index``: 384-dim ``int8_hnsw`` vectors, BM25 text; ``--shards`` primaries, ``--replicas`` replicas),
bulk-writes N synthetic chunks, and reports:

* indexing time (bulk of all N, then a refresh) and chunks/s;
* bytes on disk per chunk (primary store size after the refresh, no force-merge, divided by N);
* hybrid search p50/p99 at concurrency 1 and 16 (``AsyncSearchClient``, ``mode="hybrid"``, no rerank; the
  query vector comes from the same synthetic distribution instead of the model, so the model's cost does
  not hide the cluster's);
* kNN recall of the index's ``knn`` search (``--knn-k``, default 10; the client's ``num_candidates``) against exact
  search, at 10 and at k (the whole list, as fusion reads it: the client asks k = 200 with collapse),
  brute force in numpy over the very vectors that were stored (cosine; vectors are unit length;
  ``knn.py``).

Synthetic data: vectors are unit-length noisy copies of 2,000 random centroids (clustered, as real
embeddings are; uniform random vectors make ANN search unrealistically hard), text is 40-80 words drawn
from a Zipf-distributed vocabulary of 20,000 made-up words, so BM25 has realistic posting lists.

    ops/es-local.sh cluster start
    $V/bin/python ops/bench/bench_scale.py                                   # 10k, 100k
    $V/bin/python ops/bench/bench_scale.py --sizes 10000,100000,1000000      # if it fits

Writes reports/bench-scale-<time>.json and .png (``--out DIR``: into DIR instead; docs/scale.md shows a run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybridsearch.engine import request
from loadgen import drive, save_report

if TYPE_CHECKING:  # imported where used, so that --help loads nothing of the package
    from hybridsearch.engine import EngineClient
    from hybridsearch.query.build import KnnWidth
    from hybridsearch.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
ES_LOCAL = ROOT / "ops" / "es-local.sh"
DIMS = 384


class Synthetic:
    """Clustered unit vectors and Zipf text, reproducible from a seed."""

    def __init__(self, seed: int = 0, centroids: int = 2000, vocab: int = 20000) -> None:
        self.rng = np.random.default_rng(seed)
        c = self.rng.standard_normal((centroids, DIMS)).astype(np.float32)
        self.centroids = c / np.linalg.norm(c, axis=1, keepdims=True)
        syll = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "do", "ha", "xi", "bu", "fe", "go"]
        self.words = np.array(["".join(syll[(i >> (4 * j)) % 16] for j in range(1 + i % 3 + 1)) + str(i % 97)
                               for i in range(vocab)])
        ranks = np.arange(1, vocab + 1, dtype=np.float64)
        self.p = (1 / ranks) / (1 / ranks).sum()

    def vectors(self, n: int) -> np.ndarray:
        idx = self.rng.integers(0, len(self.centroids), n)
        # noise of norm about 0.6 around unit centroids: neighbours within a cluster, clusters apart
        v = self.centroids[idx] + 0.6 * self.rng.standard_normal((n, DIMS)).astype(np.float32) / np.sqrt(DIMS)
        out: np.ndarray = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
        return out

    def texts(self, n: int) -> list[str]:
        lens = self.rng.integers(40, 81, n)
        flat = self.rng.choice(len(self.words), size=int(lens.sum()), p=self.p)
        out, at = [], 0
        for ln in lens:
            out.append(" ".join(self.words[flat[at:at + ln]]))
            at += ln
        return out


def actions(index: str, start: int, vecs: np.ndarray, texts: list[str]) -> Iterator[dict[str, Any]]:
    for i, (v, t) in enumerate(zip(vecs, texts, strict=True)):
        n = start + i
        yield {"_index": index, "_id": f"d{n}#0@synthetic", "_source": {
            "doc_id": f"d{n}", "chunk_id": f"d{n}#0@synthetic", "position": 0, "char_start": 0, "char_end": len(t),
            "title": None, "text": t, "source": "synthetic", "content_hash": f"h{n}",
            "embedding": [round(float(x), 6) for x in v]}}


class FixedEmbedder:
    """Stands in for the model at query time: the query vector for a text is looked up, not computed."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def encode_query(self, text: str) -> np.ndarray:
        return self.table[text]


def build(es: EngineClient, settings: Settings, n: int, syn: Synthetic, batch: int) -> tuple[np.ndarray, float, str]:
    from tqdm import tqdm

    from hybridsearch.index.versions import ensure_index
    from hybridsearch.ingest.writer import write_actions
    from hybridsearch.settings import IngestSettings

    es.send(request.delete_index(f"{settings.index.prefix}-*", expand_wildcards="all"))  # a fresh start
    index = ensure_index(es, settings)
    es.send(request.put_settings(index, {"index.refresh_interval": "30s"}))
    stored = np.empty((n, DIMS), dtype=np.float32)
    t0 = time.perf_counter()
    with tqdm(total=n, desc=f"index {n:,}", unit="chunk") as bar:
        for start in range(0, n, batch):
            m = min(batch, n - start)
            vecs, texts = syn.vectors(m), syn.texts(m)
            stored[start:start + m] = vecs
            report = write_actions(es, list(actions(index, start, vecs, texts)), IngestSettings(bulk_chunk_size=500))
            if report.failures:
                raise RuntimeError(str(report.failures[0]))
            bar.update(m)
    es.send(request.put_settings(index, {"index.refresh_interval": settings.index.refresh_interval}))
    es.send(request.refresh(index))
    seconds = time.perf_counter() - t0
    return stored, seconds, index


def recall(es: EngineClient, index: str, stored: np.ndarray, queries: np.ndarray, width: KnnWidth,
           k: int = 10) -> tuple[float, float, float]:
    """Recall of the index's kNN search for ``k`` neighbours as ``width`` sends it (``num_candidates``; with an
    oversample, Elasticsearch's ``rescore_vector``: that many times k quantized candidates rescored on the float
    vectors) against exact search: at 10 and at ``k``, the whole list fusion reads. Also that raw kNN request's
    p50 in ms at one client."""
    from knn import exact_top_k, knn_recall

    _, scores = exact_top_k(stored, queries, k)
    at_10, at_k, took = 0.0, 0.0, []
    for q, kth in zip(queries, scores, strict=True):
        body = es.dialect.knn_search("embedding", q.tolist(), k, width.num_candidates, [], width.oversample)
        t0 = time.perf_counter()
        r = es.send(request.search(index, request.body(source=False, size=k, **body)))
        took.append((time.perf_counter() - t0) * 1000)
        got = [int(h["_id"][1:].split("#")[0]) for h in r["hits"]["hits"]]
        at_10 += knn_recall(stored, q, float(kth[min(10, k) - 1]), got, min(10, k))
        at_k += knn_recall(stored, q, float(kth[-1]), got, k)
    return at_10 / len(queries), at_k / len(queries), float(np.percentile(took, 50))


def regenerate(n: int, syn: Synthetic, batch: int) -> np.ndarray:
    """The vectors :func:`build` stored for ``n`` chunks from ``syn``'s seed (same draws, same order), so a kept
    index (``--reuse``) is measured without writing it again."""
    stored = np.empty((n, DIMS), dtype=np.float32)
    for start in range(0, n, batch):
        m = min(batch, n - start)
        stored[start:start + m] = syn.vectors(m)
        syn.texts(m)
    return stored


async def latency(settings: Settings, table: dict[str, np.ndarray], levels: list[int], seconds: float
                  ) -> dict[int, dict[str, Any]]:
    """Hybrid search (no rerank) p50/p99 at each concurrency in ``levels`` with ``settings``' query knobs."""
    from hybridsearch import AsyncSearchClient
    from hybridsearch.engine import AsyncEngineClient

    client = AsyncSearchClient(AsyncEngineClient(settings.es), settings, embedder=FixedEmbedder(table))  # type: ignore[arg-type]
    texts = list(table)

    async def call(q: str) -> str | None:
        await client.search(q, k=10, mode="hybrid", rerank=False)
        return None

    out = {}
    try:
        await drive("warm-up", call, texts, 4, 3.0)
        for c in levels:
            out[c] = (await drive("hybrid", call, texts, c, seconds, 50_000)).summary()
    finally:
        await client.close()
        await client.es.close()
    return out


def store_bytes(es: EngineClient, index: str) -> int:
    stats = es.send(request.index_stats(index, metric="store"))
    return int(stats["indices"][index]["primaries"]["store"]["size_in_bytes"])


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = {r["chunks"]: r for r in reversed(rows) if r.get("oversample") is None and "p50_c1_ms" in r}
    per_size = [curve[c] for c in sorted(curve)]  # one point per size: its smallest num_candidates measured
    n = [r["chunks"] for r in per_size]
    fig, ax = plt.subplots(1, 5, figsize=(19, 3.6))
    ax[0].plot(n, [r["index_seconds"] for r in per_size], marker="o")
    ax[0].set_title("indexing time (s)")
    ax[1].plot(n, [r["bytes_per_chunk"] for r in per_size], marker="o")
    ax[1].set_title("bytes on disk per chunk")
    for c in (1, 16):
        ax[2].plot(n, [r[f"p50_c{c}_ms"] for r in per_size], marker="o", label=f"p50 c={c}")
        ax[2].plot(n, [r[f"p99_c{c}_ms"] for r in per_size], marker="s", linestyle="--", label=f"p99 c={c}")
    ax[2].set_title("hybrid latency (ms)")
    ax[2].legend(fontsize=7)
    ax[3].plot(n, [r["knn_recall_at_10"] for r in per_size], marker="o")
    ax[3].set_title("kNN recall@10 vs exact")
    ax[3].set_ylim(0, 1.02)
    for size in sorted({r["chunks"] for r in rows}):
        sweep = sorted((r["num_candidates"], r["knn_recall_at_10"]) for r in rows
                       if r["chunks"] == size and r.get("oversample") is None and "num_candidates" in r)
        if len(sweep) > 1:
            ax[4].plot(*zip(*sweep, strict=True), marker="o", label=f"{size:,} chunks")
    ax[4].axhline(0.95, color="grey", linestyle=":")
    ax[4].set_title("recall@10 vs num_candidates")
    ax[4].set_xlabel("num_candidates")
    ax[4].grid(alpha=0.3)
    if ax[4].get_legend_handles_labels()[0]:  # a size swept over num_candidates
        ax[4].legend(fontsize=7)
    for a in ax[:4]:
        a.set_xscale("log")
        a.set_xlabel("chunks")
        a.grid(alpha=0.3)
    fig.suptitle("scale curve, synthetic 384-dim chunks, 3-node local cluster (shared 2-core machine)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[10_000, 100_000])
    ap.add_argument("--es-url", help="comma-separated node URLs (default: ops/es-local.sh cluster url)")
    ap.add_argument("--prefix", default="scale", help="index prefix; each size gets <prefix>-<N>")
    ap.add_argument("--out", type=Path, help="write the report (JSON and PNG) into this folder instead of reports/")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=10.0, help="per latency level")
    ap.add_argument("--queries", type=int, default=200, help="query vectors for recall and latency")
    ap.add_argument("--batch", type=int, default=5000, help="chunks generated per step")
    ap.add_argument("--include", type=Path, action="append", default=[],
                    help="an earlier run's reports/bench-scale-*.json whose sizes join this table and plot")
    ap.add_argument("--keep", action="store_true", help="keep the indices (default: delete each after measuring)")
    ap.add_argument("--reuse", action="store_true",
                    help="measure a kept index of the same size (--keep) instead of writing it again")
    ap.add_argument("--num-candidates", type=lambda s: [int(x) for x in s.split(",")], default=[],
                    help="comma-separated num_candidates to measure (default: the client's)")
    ap.add_argument("--knn-k", type=int, default=10,
                    help="k of the recall searches (the client asks knn_k x knn_overfetch = 200 with collapse)")
    ap.add_argument("--oversample", type=lambda s: [float(x) for x in s.split(",")], default=[],
                    help="rescore_vector oversample factors to measure too (Elasticsearch, quantized vectors)")
    args = ap.parse_args(argv)
    if max(args.sizes) > 2_000_000 or args.seconds > 120:
        ap.error("bounded runs only: sizes <= 2,000,000, --seconds <= 120")

    from hybridsearch.engine import EngineClient
    from hybridsearch.query.build import auto_candidates, knn_size, knn_width
    from hybridsearch.settings import load_settings

    urls = args.es_url or subprocess.run([str(ES_LOCAL), "cluster", "url"], check=True, capture_output=True,
                                         text=True).stdout.strip()
    rows = []
    for n in args.sizes:
        # the synthetic vectors' width, whatever model the environment names (no model is loaded)
        settings = load_settings(es_url=urls, index={"prefix": f"{args.prefix}-{n}", "shards": args.shards,
                                                     "replicas": args.replicas}, query={"log_queries": False},
                                 embedding={"dims": DIMS})
        es = EngineClient(settings.es, request_timeout=600)
        syn = Synthetic(seed=n)
        existing = f"{args.prefix}-{n}-chunks-v1"
        seconds: float | None = None  # indexing time; None for a kept index measured again
        if args.reuse and es.send(request.index_exists(existing)) and es.send(request.count(existing))["count"] == n:
            stored, index = regenerate(n, syn, args.batch), existing
            size = store_bytes(es, index)
        else:
            stored, built_in, index = build(es, settings, n, syn, args.batch)
            seconds = round(built_in, 1)
            size = store_bytes(es, index)
        qv = syn.vectors(args.queries)
        table = dict(zip(syn.texts(args.queries), qv, strict=False))
        queries = np.array(list(table.values()))
        # default: what the client chooses for this index (the largest shard's chunks; hashing spreads them evenly)
        auto = settings.query.num_candidates or auto_candidates(knn_size(settings.query), -(-n // args.shards))
        for nc in args.num_candidates or [auto]:
            for over in [None, *args.oversample]:
                # these knobs as the client applies them (an oversample of 0 turns rescoring off)
                tuned = settings.model_copy(update={"query": settings.query.model_copy(
                    update={"num_candidates": nc, "rescore_oversample": over or 0.0})})
                width = knn_width(tuned.query, args.knn_k, None, quantized=True,
                                  can_rescore=es.engine.rescores_vectors)
                rec, rec_k, knn_p50 = recall(es, index, stored, queries, width, args.knn_k)
                row: dict[str, Any] = {
                    "chunks": n, "index_seconds": seconds, "chunks_per_s": seconds and round(n / seconds, 1),
                    "store_bytes": size, "bytes_per_chunk": round(size / n, 1), "knn_recall_at_10": round(rec, 4),
                    "knn_recall_at_k": round(rec_k, 4), "num_candidates": width.num_candidates,
                    "oversample": width.oversample, "knn_k": args.knn_k,
                    "knn_p50_c1_ms": round(knn_p50, 2),
                    "shards": args.shards, "replicas": args.replicas}
                # the client's hybrid latency with the same knobs
                for c, st in asyncio.run(latency(tuned, table, [1, 16], args.seconds)).items():
                    row.update({f"p50_c{c}_ms": st["p50_ms"], f"p99_c{c}_ms": st["p99_ms"],
                                f"qps_c{c}": st["qps"], f"errors_c{c}": st["errors"]})
                rows.append(row)
                print(json.dumps(row), flush=True)
        if not args.keep:
            es.send(request.delete_index(f"{args.prefix}-{n}-*", expand_wildcards="all"))  # every index it made
        es.close()
    for earlier in args.include:
        rows += [r for r in json.loads(earlier.read_text(encoding="utf-8")) if r["chunks"] not in args.sizes]
    rows.sort(key=lambda r: r["chunks"])
    print(f"\nscale curve ({args.shards} primaries, {args.replicas} replicas; shared 2-core machine, 3 nodes x 512 MB)")
    print(f"{'chunks':>9} {'index s':>8} {'B/chunk':>8} {'n_cand':>6} {'oversmp':>7} {'recall@10':>9} {'@knn_k':>7} "
          f"{'kNN p50':>7} {'p50 c1':>7} {'p99 c1':>7} {'p50 c16':>8} {'p99 c16':>8} {'q/s c16':>8}")
    for r in rows:
        cells = [r.get(key, "-") for key in ("p50_c1_ms", "p99_c1_ms", "p50_c16_ms", "p99_c16_ms", "qps_c16")]
        built = r["index_seconds"] or "-"  # None: a kept index measured again (--reuse)
        print(f"{r['chunks']:>9,} {built:>8} {r['bytes_per_chunk']:>8} {r.get('num_candidates', '-'):>6} "
              f"{r.get('oversample') or '-':>7} {r['knn_recall_at_10']:>9} {r.get('knn_recall_at_k', '-'):>7} "
              f"{r.get('knn_p50_c1_ms', '-'):>7} "
              f"{cells[0]:>7} {cells[1]:>7} {cells[2]:>8} {cells[3]:>8} {cells[4]:>8}")
    save_report("bench-scale", rows, lambda png: plot(rows, png), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
