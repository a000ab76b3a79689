#!/usr/bin/env python
"""Where a single-list search (bm25, dense) spends its time, at concurrency 1 (our p50 against
the peers' in ops/bench/bench_peers.py).

For every query (SciFact test by default), interleaved per query in a rotating order so that every variant
sees the same machine, it times:

* ``search``: ``SearchClient.search(q, k, mode, rerank=False)`` with the query log off (as bench_peers), the
  query embedding not cached (``query_cache_size`` 0: each call embeds, like the peers);
* ``embed`` (dense): the query encoder alone;
* ``msearch``: the ``_msearch`` the search sends (same lines), alone: HTTP, the server, the JSON decode;
* server-side variants of the same request (``took`` and wall): without ``collapse``, without the visibility
  filter, ``_source`` limited to ``doc_id``/``chunk_id``, kNN without over-fetch (``k`` = ``knn_k``), and
  ``filter_path`` on the hit fields the query layer reads;
* client-side steps on the answer: building the plan and the lines, fusing and assembling the pydantic result
  (``fuse_window`` + ``build_result``), the JSON decode of the answer (stdlib ``json``, as the client does,
  against ``orjson``) and its size.

    HSP_ENGINE=elasticsearch HSP_ES_PORT=9254 ops/es-local.sh start
    hsp eval /work/shared/datasets/scifact --prefix peers-hsp --modes bm25        # builds the index once
    HSP_ES_URL=http://127.0.0.1:9254 $V/bin/python ops/bench/bench_single_list.py --prefix peers-hsp --queries 300

Numbers only (p50/p95 per row), no gate; a shared machine makes them noisy: compare rows of one run.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.eval.datasets import load_collection
from hybridsearch.eval.harness import eval_settings
from hybridsearch.index.spec import section_words_of
from hybridsearch.query.build import bm25_body, bm25_scope, knn_lines
from hybridsearch.query.client import SearchClient
from hybridsearch.query.core import build_result
from hybridsearch.query.fusion import fusion_for
from hybridsearch.query.results import Mode, Timings
from hybridsearch.query.window import fuse_window
from hybridsearch.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
FILTER_PATH = ("responses.status,responses.error,responses.hits.hits._id,responses.hits.hits._score,"
               "responses.hits.hits._source")


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))] if s else float("nan")


def knn_part(body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The kNN clause of a dense search body and its filter list (the visibility filter last), on either engine:
    Elasticsearch's top-level ``knn``, or OpenSearch's ``knn`` query on the vector field."""
    if "knn" in body:
        return body["knn"], body["knn"]["filter"]
    (clause,) = body["query"]["knn"].values()
    return clause, clause["filter"]["bool"]["filter"]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000.0, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", default="peers-hsp")
    ap.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "datasets" / "scifact")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--modes", default="bm25,dense")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    import orjson

    base = load_settings()
    s = eval_settings(base, args.prefix)
    s = s.model_copy(update={"embedding": s.embedding.model_copy(update={"query_cache_size": 0})})
    es = EngineClient(s.es)
    embedder = Embedder(s.embedding, s.models)
    client = SearchClient(es, s, embedder=embedder, log_queries=False)
    col = load_collection(args.dataset, "test").limit(args.queries)
    queries = list(col.queries.values())
    wanted = args.modes.split(",")
    modes: list[Mode] = [m for m in ("bm25", "dense") if m in wanted]
    client.warm_up("dense")
    index = client.index()
    q = client.query
    alias = s.index.alias
    # What BM25 scores and the fusion, read from the index as the client reads them (its _meta and mapping).
    mapping = es.send(request.get_mapping(index))[index]["mappings"]
    meta = mapping.get("_meta") or {}
    scope = bm25_scope(q, section_words_of(meta))
    fusion = fusion_for(q, meta)
    print(f"index {index}; BM25 on {scope.unit}s; {len(queries)} queries, k={args.k}")

    def lines_of(mode: Mode, text: str, vector: Any) -> list[dict[str, Any]]:
        p = client.check(text, k=args.k, mode=mode, rerank=False)  # the plan the search sends (visibility too)
        return [{"index": alias}, bm25_body(q, p, scope)] if mode == "bm25" else knn_lines(q, alias, p, vector,
                                                                                            es.dialect)

    def variants(mode: Mode, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {"msearch": body}
        b = copy.deepcopy(body)
        b.pop("collapse", None)
        out["no collapse"] = b
        b = copy.deepcopy(body)
        (b["query"]["bool"]["filter"] if mode == "bm25" else knn_part(b)[1]).pop()
        out["no visibility filter"] = b
        b = copy.deepcopy(body)
        b["_source"] = ["doc_id", "chunk_id"]
        out["_source doc_id+chunk_id"] = b
        if mode == "dense":
            b = copy.deepcopy(body)
            knn_part(b)[0]["k"] = q.knn_k
            out["kNN k=knn_k (no over-fetch)"] = b
        return out

    rows: dict[str, dict[str, list[float]]] = {m: {} for m in modes}

    def add(mode: str, name: str, ms: float) -> None:
        rows[mode].setdefault(name, []).append(ms)

    def one(i: int, text: str, mode: Mode) -> None:
        ms, res = timed(lambda: client.search(text, k=args.k, mode=mode, rerank=False))
        add(mode, "search (SearchClient, total)", ms)
        add(mode, "  its embed_ms", res.timings.embed_ms)
        add(mode, "  its search_ms", res.timings.search_ms)
        add(mode, "  its fusion_ms (fuse + assemble)", res.timings.fusion_ms)
        vector = None
        if mode == "dense":
            ms, vector = timed(lambda: embedder.encode_query(text))
            add(mode, "embed (encoder alone)", ms)
        ms, lines = timed(lambda: lines_of(mode, text, vector))
        add(mode, "plan + lines", ms)
        vs = list(variants(mode, lines[1]).items())
        answer: dict[str, Any] = {}
        for name, body in vs[i % len(vs):] + vs[:i % len(vs)]:
            ms, resp = timed(lambda b=body: es.send(request.msearch([lines[0], b])))  # type: ignore[misc]
            add(mode, name, ms)
            add(mode, f"{name} (server took)", float(resp["responses"][0].get("took", 0)))
            if name == "msearch":
                answer = resp
        ms, _ = timed(lambda: es.send(request.msearch(lines, filter_path=FILTER_PATH)))
        add(mode, "msearch filter_path", ms)
        ms, _ = timed(lambda: es.send(request.search(alias, lines[1])))
        add(mode, "_search (same body, not _msearch)", ms)
        raw = json.dumps(answer).encode()
        add(mode, "answer KiB", len(raw) / 1024)
        ms, _ = timed(lambda: json.loads(raw))
        add(mode, "json.loads of the answer", ms)
        ms, _ = timed(lambda: orjson.loads(raw))
        add(mode, "orjson.loads of the answer", ms)
        p = client.check(text, k=args.k, mode=mode, rerank=False)
        lst = "bm25" if mode == "bm25" else "knn"
        ms, window = timed(lambda: fuse_window({lst: answer["responses"][0]}, q.collapse, fusion))
        add(mode, "fuse_window", ms)
        ms, _ = timed(lambda: build_result(s.reranker.depth, p, index, window, Timings()))
        add(mode, "build_result (pydantic)", ms)

    for i, text in enumerate(queries):
        for mode in modes[i % len(modes):] + modes[:i % len(modes)]:
            one(i, text, mode)
    client.close()
    es.close()
    out: dict[str, Any] = {}
    for shown, by in rows.items():
        print(f"\n{shown}: p50 / p95 ms over {len(queries)} queries")
        for name, vals in by.items():
            print(f"  {name:<42} {statistics.median(vals):8.2f} {pct(vals, 95):8.2f}")
            out.setdefault(shown, {})[name] = {"p50": statistics.median(vals), "p95": pct(vals, 95)}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
