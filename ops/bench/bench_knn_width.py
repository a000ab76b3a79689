#!/usr/bin/env python
"""How much of the kNN list matches exact search, per rescoring factor, on an index you already have.

Fusion reads the kNN list to its end (k = ``knn_k`` × ``knn_overfetch`` chunks, 200 by default), not only its
top 10. For each ``--oversample`` factor (0: rescoring off) this sends the list's own kNN search, k and
``num_candidates`` as the query layer chooses them for that factor (``hybridsearch.query.build.knn_width``),
to the live index behind ``<prefix>-chunks`` and reports its recall at 10, 100 and k against exact cosine search
in numpy over every chunk vector the index holds (read back from the embedding cache by the text each chunk
embedded, as ``bench_vectors.py`` does), with the raw request's p50. Chunk level, no collapse, no filters; a hit
tied with the k-th exact neighbour counts as found (``knn.py``). Judgments are not used: only the queries' text.

    export HSP_ES_URL=http://127.0.0.1:9270
    $V/bin/python ops/bench/bench_knn_width.py --prefix eval-scifact-bge-small-en-v1.5 \\
        --queries ../shared/datasets/scifact/queries.jsonl --limit 300 --oversample 0,1,2,3,5

Queries are embedded by the model the index records (its ``_meta``), as every client does when
``HSP_EMBEDDING__MODEL`` is unset; one set explicitly must match it. Chunk texts missing from the embedding cache
are embedded again. Writes reports/bench-knn-width-<time>.json (``--out DIR``: into DIR instead; docs/scale.md shows
runs). Exit 0; numbers only, no gate.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vectors import stored_vectors
from hybridsearch.embedding.cache import CachedEmbedder
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import HybridSearchError
from hybridsearch.eval.datasets import read_queries
from hybridsearch.index.spec import follow_index
from hybridsearch.index.versions import checked_live_index, index_meta, live_index
from hybridsearch.query.build import knn_size, knn_width
from hybridsearch.settings import QuerySettings, load_settings
from knn import exact_top_k, knn_recall, unit
from loadgen import pct, save_report

DEPTHS = (10, 100)


def measure(es: EngineClient, index: str, ids: dict[str, int], vectors: np.ndarray, queries: np.ndarray,
            exact: np.ndarray, q: QuerySettings, shard_chunks: int) -> dict[str, Any]:
    """Recall at each depth (and at k) of the list ``q`` asks for, against the exact scores ``exact``."""
    k = knn_size(q)
    width = knn_width(q, k, shard_chunks, quantized=True, can_rescore=es.engine.rescores_vectors)
    deepest = min(k, exact.shape[1])  # an index of fewer chunks than k: its whole list
    depths = [d for d in DEPTHS if d < deepest] + [deepest]
    found = {d: 0.0 for d in depths}
    took: list[float] = []
    for vec, scores in zip(queries, exact, strict=True):
        body = es.dialect.knn_search("embedding", vec.tolist(), k, width.num_candidates, [], width.oversample)
        t0 = time.perf_counter()
        hits = es.send(request.search(index, request.body(size=k, source=["chunk_id"], **body)))["hits"]["hits"]
        took.append((time.perf_counter() - t0) * 1000)
        got = [ids.get(h["_source"]["chunk_id"], -1) for h in hits]
        for d in depths:
            found[d] += knn_recall(vectors, vec, float(scores[d - 1]), got, d)
    return {"oversample": width.oversample, "num_candidates": width.num_candidates, "k": k,
            **{f"recall_at_{d}": round(found[d] / len(queries), 4) for d in depths},
            "knn_p50_ms": round(pct(took, 50), 2), "width": width.reason}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", required=True, help="index prefix: the index behind <prefix>-chunks is measured")
    ap.add_argument("--queries", type=Path, required=True, help="a BEIR queries.jsonl[.gz]")
    ap.add_argument("--limit", type=int, default=300, help="the first N queries (default 300)")
    ap.add_argument("--oversample", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 1.0, 3.0],
                    help="comma-separated rescoring factors (0: off; default 0,1,3)")
    ap.add_argument("--out", type=Path, help="write the report into this folder instead of reports/")
    args = ap.parse_args(argv)
    if args.limit < 1 or any(f < 0 or f > 10 for f in args.oversample):
        ap.error("--limit must be ≥ 1 and each --oversample 0..10")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    base = load_settings(index={"prefix": args.prefix})
    es = EngineClient(base.es, request_timeout=120)
    try:  # the index's own model, as every client follows it (a model set explicitly is checked against it)
        live = live_index(es, base.index)
        settings = base.model_copy(update={"embedding": follow_index(base.embedding, index_meta(es, live))})
        index = checked_live_index(es, settings)
    except HybridSearchError as exc:
        es.close()
        ap.error(str(exc))
    cache = CachedEmbedder(Embedder(settings.embedding, settings.models))
    try:
        ids, vectors = stored_vectors(es, index, settings, cache)
        texts = list(read_queries(args.queries).values())[:args.limit]
        queries = unit(np.stack([cache.encode_query(t) for t in texts]))
        k = knn_size(settings.query)
        _, exact = exact_top_k(vectors, queries, k)
        rows = [measure(es, index, ids, vectors, queries, exact,
                        settings.query.model_copy(update={"rescore_oversample": f}), len(ids))
                for f in args.oversample]
    finally:
        cache.close()
        es.close()
    print(f"{index}: {len(ids):,} chunks, {len(texts)} queries, k {k}, {settings.embedding.model}")
    for r in rows:
        recalls = "  ".join(f"@{key.removeprefix('recall_at_')} {v:.4f}" for key, v in r.items()
                            if key.startswith("recall_at_"))
        print(f"oversample {r['oversample'] or 'off':>4}  num_candidates {r['num_candidates']:>5}  recall {recalls}  "
              f"kNN p50 {r['knn_p50_ms']} ms")
    save_report("bench-knn-width", {"index": index, "chunks": len(ids), "queries": len(texts),
                                    "model": settings.embedding.model, "rows": rows}, None, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
