#!/usr/bin/env python
"""Peers side by side: hybridsearch, Haystack and LangChain on one cluster, one corpus, one model.

Each stack builds its own index its own way from the same BEIR corpus (default SciFact) with the
same embedding model (the packaged all-MiniLM-L6-v2), answers the same judged queries, and is
scored by the same code (``hybridsearch.eval.metrics``, ranx). Printed per stack and mode:
nDCG@10, Recall@100, per-query latency p50/p95 (wall clock around the stack's own query call,
query embedding included), and our ratios to each peer.

  (a) Haystack: ``ElasticsearchBM25Retriever`` + ``ElasticsearchEmbeddingRetriever`` joined by
      ``DocumentJoiner(join_mode="reciprocal_rank_fusion")`` (plus each retriever alone).
  (b) LangChain: ``ElasticsearchStore`` with ``BM25Strategy``, ``DenseVectorStrategy`` and
      ``DenseVectorStrategy(hybrid=True)`` (server-side ``rrf``: refused by this distribution; the
      refusal is recorded as the result).
  (c) hybridsearch: ``run_ingest`` + ``SearchClient`` (bm25, dense, hybrid).

Peer packages never enter the project's dependencies: they live in their own virtualenv,
``~/.cache/hybridsearch/peers-venv``, layered on the project venv (torch and sentence-transformers are
reused through a ``.pth`` line) and created by ``--setup`` from ``ops/requirements-peers.txt``. Their
workers run there as subprocesses; this script itself runs with the project venv::

    $V/bin/python ops/bench/bench_peers.py --setup
    $V/bin/python ops/bench/bench_peers.py --limit-docs 600 --limit-queries 40     # quick trial
    $V/bin/python ops/bench/bench_peers.py --hsp-prefix eval-scifact                # full run, reuse hsp eval's index

With ``--limit-docs N`` the corpus is the relevant documents of the chosen queries plus the first
documents of the corpus up to N, so the scores stay meaningful. Writes ``reports/bench-peers-*.json/.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hybridsearch.eval.datasets import Collection
    from hybridsearch.query.results import Mode

ROOT = Path(__file__).resolve().parents[2]
PEERS_VENV = Path(os.environ.get("HSP_PEERS_VENV", Path.home() / ".cache" / "hybridsearch" / "peers-venv"))
PEERS = ("haystack", "langchain")
MODES: tuple[Mode, ...] = ("bm25", "dense", "hybrid")


# --------------------------------------------------------------------------------------------------
# setup


def setup_venv() -> Path:
    """Create the peers venv (if absent), layer it on this interpreter's venv, install the peers."""
    py = PEERS_VENV / "bin" / "python"
    if not py.exists():
        base = Path(getattr(sys, "_base_executable", sys.executable))
        subprocess.run([str(base), "-m", "venv", str(PEERS_VENV)], check=True)
    import sysconfig

    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # appended after the peers venv's own site-packages: peers' pins (e.g. the 8.x ES client) win there
    Path(site, "_hsp_project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", str(ROOT / "ops" / "requirements-peers.txt")],
                   check=True)
    return py


# --------------------------------------------------------------------------------------------------
# peer workers (run inside the peers venv)


def _timed(fn: Any, queries: dict[str, str]) -> tuple[dict[str, list[str]], list[float]]:
    rankings: dict[str, list[str]] = {}
    latency: list[float] = []
    fn("warm up the model and the connection")
    for qid, text in queries.items():
        t0 = time.perf_counter()
        ids = fn(text)
        latency.append((time.perf_counter() - t0) * 1000.0)
        rankings[qid] = ids
    return rankings, latency


def _run_modes(searchers: dict[str, Any], queries: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, fn in searchers.items():
        try:
            rankings, latency = _timed(fn, queries)
            out[mode] = {"rankings": rankings, "latency_ms": latency}
        except Exception as exc:  # noqa: BLE001 - a peer's refusal is a result to report
            out[mode] = {"error": f"{type(exc).__name__}: {str(exc)[:400]}"}
    return out


def _count(es: Any, index: str) -> int:
    if not es.indices.exists(index=index):
        return -1
    es.indices.refresh(index=index)
    return int(es.count(index=index)["count"])


def _hosts(args: argparse.Namespace) -> list[str]:
    """Every node URL of ``--es-url`` (comma-separated), so the peers' clients fail over like ours."""
    return [u.strip() for u in str(args.es_url).split(",") if u.strip()]


def _index_settings(args: argparse.Namespace) -> dict[str, int]:
    """Shards and replicas of the peers' indices (default 1 and 0: a single-node cluster would turn yellow)."""
    return {"number_of_shards": getattr(args, "shards", 1), "number_of_replicas": getattr(args, "replicas", 0)}


def worker_haystack(args: argparse.Namespace, docs: list[dict[str, str]], queries: dict[str, str]) -> dict[str, Any]:
    searchers, info = haystack_searchers(args, docs)
    return {**info, "modes": _run_modes(searchers, queries)}


def haystack_searchers(args: argparse.Namespace, docs: list[dict[str, str]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Haystack's index over ``docs`` (built unless it already holds them) and one query function per mode
    (text → doc ids); plus what to report (indices, build seconds, reuse, notes). Also used by bench_load."""
    from elasticsearch import Elasticsearch
    from haystack import Document, Pipeline
    from haystack.components.joiners import DocumentJoiner
    from haystack.document_stores.types import DuplicatePolicy
    from haystack_integrations.components.embedders.sentence_transformers import (
        SentenceTransformersDocumentEmbedder,
        SentenceTransformersTextEmbedder,
    )
    from haystack_integrations.components.retrievers.elasticsearch import (
        ElasticsearchBM25Retriever,
        ElasticsearchEmbeddingRetriever,
    )
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    notes = ["ElasticsearchDocumentStore checks its connection with GET / (es.info()), which this "
             "distribution answers 405; the bench hands the store a client and creates the index with the "
             "store's own default mapping, the step it would have done itself."]
    index = f"{args.index_prefix}-haystack"
    store = ElasticsearchDocumentStore(hosts=_hosts(args), index=index)
    es = Elasticsearch(_hosts(args), request_timeout=120, retry_on_timeout=True, max_retries=3)
    store._client = es  # see the note above
    build_s, reused = 0.0, _count(es, index) == len(docs)
    if not reused:
        es.options(ignore_status=404).indices.delete(index=index)
        # the store's own mapping; shards and replicas from --shards/--replicas (default: no replica)
        es.indices.create(index=index, mappings=store._default_mappings, settings=_index_settings(args))
        t0 = time.perf_counter()
        embedder = SentenceTransformersDocumentEmbedder(model=args.model, normalize_embeddings=True,
                                                        local_files_only=True, progress_bar=False, batch_size=32)
        embedder.warm_up()
        hdocs = [Document(id=d["_id"], content=f"{d['title']}\n\n{d['text']}".strip()) for d in docs]
        for i in range(0, len(hdocs), 256):
            embedded = embedder.run(documents=hdocs[i:i + 256])["documents"]
            store.write_documents(embedded, policy=DuplicatePolicy.OVERWRITE)
        es.indices.refresh(index=index)
        build_s = time.perf_counter() - t0

    def text_embedder() -> Any:
        return SentenceTransformersTextEmbedder(model=args.model, normalize_embeddings=True, local_files_only=True,
                                                progress_bar=False)

    bm25 = Pipeline()
    bm25.add_component("bm25", ElasticsearchBM25Retriever(document_store=store, top_k=args.k))
    dense = Pipeline()
    dense.add_component("embed", text_embedder())
    dense.add_component("knn", ElasticsearchEmbeddingRetriever(document_store=store, top_k=args.k,
                                                               num_candidates=args.num_candidates))
    dense.connect("embed.embedding", "knn.query_embedding")
    hybrid = Pipeline()
    hybrid.add_component("embed", text_embedder())
    hybrid.add_component("bm25", ElasticsearchBM25Retriever(document_store=store, top_k=args.k))
    hybrid.add_component("knn", ElasticsearchEmbeddingRetriever(document_store=store, top_k=args.k,
                                                                num_candidates=args.num_candidates))
    hybrid.add_component("join", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=args.k))
    hybrid.connect("embed.embedding", "knn.query_embedding")
    hybrid.connect("bm25", "join")
    hybrid.connect("knn", "join")
    searchers = {
        "bm25": lambda q: [d.id for d in bm25.run({"bm25": {"query": q}})["bm25"]["documents"]],
        "dense": lambda q: [d.id for d in dense.run({"embed": {"text": q}})["knn"]["documents"]],
        "hybrid": lambda q: [d.id for d in
                             hybrid.run({"embed": {"text": q}, "bm25": {"query": q}})["join"]["documents"]],
    }
    return searchers, {"indices": [index], "build_seconds": build_s, "reused_index": reused, "notes": notes}


def worker_langchain(args: argparse.Namespace, docs: list[dict[str, str]], queries: dict[str, str]) -> dict[str, Any]:
    searchers, info = langchain_searchers(args, docs)
    return {**info, "modes": _run_modes(searchers, queries)}


def langchain_searchers(args: argparse.Namespace, docs: list[dict[str, str]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """LangChain's indices over ``docs`` (built unless they already hold them) and one query function per
    mode; plus what to report. Also used by bench_load."""
    from elasticsearch import Elasticsearch
    from langchain_elasticsearch import BM25Strategy, DenseVectorStrategy, ElasticsearchStore
    from langchain_huggingface import HuggingFaceEmbeddings

    notes = ["ElasticsearchStore is given a client (its es_url path calls GET /, answered 405 here). "
             "Dense and hybrid share the DenseVectorStrategy index; hybrid=True sends ES's server-side rrf."]
    es = Elasticsearch(_hosts(args), request_timeout=120, retry_on_timeout=True, max_retries=3)
    emb = HuggingFaceEmbeddings(model_name=args.model, model_kwargs={"local_files_only": True},
                                encode_kwargs={"normalize_embeddings": True, "batch_size": 32})
    texts = [f"{d['title']}\n\n{d['text']}".strip() for d in docs]
    metas = [{"doc_id": d["_id"]} for d in docs]
    ids = [d["_id"] for d in docs]
    no_replica = _index_settings(args)  # default: no replica (a single-node cluster would turn yellow)
    stores = {
        "bm25": ElasticsearchStore(index_name=f"{args.index_prefix}-langchain-bm25", client=es,
                                   strategy=BM25Strategy(), custom_index_settings=no_replica),
        "dense": ElasticsearchStore(index_name=f"{args.index_prefix}-langchain-dense", client=es, embedding=emb,
                                    strategy=DenseVectorStrategy(), custom_index_settings=no_replica),
    }
    build_s, reused = 0.0, True
    for name, store in stores.items():
        index = f"{args.index_prefix}-langchain-{name}"
        if _count(es, index) == len(docs):
            continue
        reused = False
        es.options(ignore_status=404).indices.delete(index=index)
        t0 = time.perf_counter()
        for i in range(0, len(texts), 256):
            store.add_texts(texts[i:i + 256], metadatas=metas[i:i + 256], ids=ids[i:i + 256], refresh_indices=False)
        es.indices.refresh(index=index)
        build_s += time.perf_counter() - t0
    hybrid = ElasticsearchStore(index_name=f"{args.index_prefix}-langchain-dense", client=es, embedding=emb,
                                strategy=DenseVectorStrategy(hybrid=True))

    def ids_of(store: Any) -> Any:
        return lambda q: [d.metadata["doc_id"] for d in store.similarity_search(q, k=args.k,
                                                                                fetch_k=args.num_candidates)]

    searchers = {"bm25": ids_of(stores["bm25"]), "dense": ids_of(stores["dense"]), "hybrid": ids_of(hybrid)}
    return searchers, {"indices": [f"{args.index_prefix}-langchain-{n}" for n in stores], "build_seconds": build_s,
                       "reused_index": reused, "notes": notes}


def _versions(peer: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    names = {"haystack": ["haystack-ai", "elasticsearch-haystack", "sentence-transformers-haystack"],
             "langchain": ["langchain-elasticsearch", "langchain-core", "langchain-huggingface"]}[peer]
    out = {}
    for n in [*names, "elasticsearch", "sentence-transformers"]:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = "absent"
    return out


def run_worker(args: argparse.Namespace) -> int:
    work = Path(args.work)
    docs = [json.loads(line) for line in (work / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    queries = json.loads((work / "queries.json").read_text(encoding="utf-8"))
    fn = {"haystack": worker_haystack, "langchain": worker_langchain}[args.worker]
    result = fn(args, docs, queries)
    result["versions"] = _versions(args.worker)
    (work / f"{args.worker}.json").write_text(json.dumps(result), encoding="utf-8")
    return 0


# --------------------------------------------------------------------------------------------------
# orchestrator (project venv)


def select(dataset: Path, split: str, limit_docs: int | None, limit_queries: int | None
           ) -> tuple[Collection, list[dict[str, str]]]:
    from hybridsearch.eval.datasets import iter_corpus, load_collection

    col = load_collection(dataset, split).limit(limit_queries)
    if limit_docs is None:
        return col, list(iter_corpus(col.corpus_path))
    wanted = {d for j in col.qrels.values() for d, g in j.items() if g > 0}
    docs = [d for d in iter_corpus(col.corpus_path) if d["_id"] in wanted]
    have = {d["_id"] for d in docs}
    for d in iter_corpus(col.corpus_path):
        if len(docs) >= max(limit_docs, len(wanted)):
            break
        if d["_id"] not in have:
            docs.append(d)
    return col, docs


def run_hybridsearch(args: argparse.Namespace, col: Collection, docs: list[dict[str, str]]) -> dict[str, Any]:
    from hybridsearch.cli.output import RichProgress
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.engine import EngineClient
    from hybridsearch.eval.harness import choose_index, eval_settings, index_counts, ingest_corpus
    from hybridsearch.ingest.sources import Document
    from hybridsearch.query.client import SearchClient
    from hybridsearch.settings import load_settings

    s = eval_settings(load_settings(es_url=args.es_url), args.hsp_prefix or f"{args.index_prefix}-hsp")
    es = EngineClient(s.es)
    embedder = Embedder(s.embedding, s.models)
    choice = choose_index(es, s)
    t0 = time.perf_counter()
    source: Any = col.corpus_path if args.limit_docs is None else [
        Document.make(d["_id"], d["text"], title=d["title"] or None, source="bench-peers") for d in docs]
    with RichProgress() as bar:
        ingest = ingest_corpus(es, s, source, embedder=embedder, progress=bar)
    build_s = time.perf_counter() - t0
    counts = index_counts(es, choice.index)
    notes = [f"index {choice.index} ({choice.action}; {counts['documents']} documents, {counts['chunks']} chunks)"]
    if counts["documents"] != len(docs):
        notes.append(f"the index holds {counts['documents']} documents, the peers {len(docs)}: not the same corpus")
    client = SearchClient(es, s, embedder=embedder, log_queries=False)
    k = min(args.k, s.query.max_k)

    def searcher(mode: Mode) -> Any:
        return lambda q: [h.doc_id for h in client.search(q, k=k, mode=mode, rerank=False).hits]

    modes: dict[str, Any] = {}
    for m in MODES:
        embedder.clear_cache()  # each mode embeds its queries itself, like the peers do
        modes.update(_run_modes({m: searcher(m)}, col.queries))
    client.close()
    es.close()
    from importlib.metadata import version

    return {"indices": [choice.index], "build_seconds": build_s, "reused_index": ingest.get("indexed", 0) == 0,
            "notes": notes, "modes": modes, "ingest": ingest,
            "versions": {"hybridsearch-platform": version("hybridsearch-platform"),
                         "elasticsearch": version("elasticsearch")}}


def run_peer(peer: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    py = PEERS_VENV / "bin" / "python"
    if not py.exists():
        return {"error": f"no peers venv at {PEERS_VENV}: run `{sys.executable} {__file__} --setup` first"}
    cmd = [str(py), __file__, "--worker", peer, "--work", str(work), "--es-url", args.es_url, "--model", args.model,
           "--index-prefix", args.index_prefix, "--k", str(args.k), "--num-candidates", str(args.num_candidates)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HAYSTACK_TELEMETRY_ENABLED": "False", "ANONYMIZED_TELEMETRY": "False"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not (work / f"{peer}.json").exists():
        return {"error": f"worker exited {proc.returncode}: {proc.stderr.strip()[-1500:]}"}
    result: dict[str, Any] = json.loads((work / f"{peer}.json").read_text(encoding="utf-8"))
    result["worker_seconds"] = time.perf_counter() - t0
    return result


def score(results: dict[str, dict[str, Any]], qrels: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    from hybridsearch.eval.metrics import evaluate

    rows = []
    for stack, res in results.items():
        if "error" in res:
            rows.append({"stack": stack, "mode": "*", "error": res["error"]})
            continue
        for mode, m in res["modes"].items():
            if "error" in m:
                rows.append({"stack": stack, "mode": mode, "error": m["error"]})
                continue
            means, _ = evaluate(qrels, m["rankings"], ["ndcg@10", "recall@100"])
            lat = m["latency_ms"]
            rows.append({"stack": stack, "mode": mode, "ndcg@10": means["ndcg@10"], "recall@100": means["recall@100"],
                         "p50_ms": statistics.median(lat), "p95_ms": float(_p95(lat)), "queries": len(lat)})
    ours = {r["mode"]: r for r in rows if r["stack"] == "hybridsearch" and "error" not in r}
    for r in rows:
        o = ours.get(r["mode"])
        if r["stack"] != "hybridsearch" and o and "error" not in r:
            r["ours_ndcg_ratio"] = o["ndcg@10"] / r["ndcg@10"] if r["ndcg@10"] else None
            r["peer_latency_ratio"] = r["p50_ms"] / o["p50_ms"] if o["p50_ms"] else None
    return rows


def _p95(values: list[float]) -> float:
    import numpy as np

    return float(np.percentile(values, 95))


def to_markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"# Peers on {meta['dataset']} ({meta['queries']} queries, {meta['documents']} documents)", "",
             f"- cluster {meta['cluster']} · model `{meta['model']}` · k = {meta['k']} · num_candidates = "
             f"{meta['num_candidates']}", "",
             "| stack | mode | nDCG@10 | Recall@100 | p50 ms | p95 ms | ours/peer nDCG@10 | peer/ours p50 |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['stack']} | {r['mode']} | refused / failed: {r['error'].replace('|', '/')[:200]} "
                         "| | | | | |")
            continue
        ratio = f"{r['ours_ndcg_ratio']:.3f}" if r.get("ours_ndcg_ratio") else ""
        lat = f"{r['peer_latency_ratio']:.2f}×" if r.get("peer_latency_ratio") else ""
        lines.append(f"| {r['stack']} | {r['mode']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | "
                     f"{r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {ratio} | {lat} |")
    lines.append("")
    for stack, info in meta["stacks"].items():
        lines.append(f"- **{stack}**: versions {info.get('versions')}; index {info.get('indices')}; build "
                     f"{info.get('build_seconds', 0):.0f} s{' (reused)' if info.get('reused_index') else ''}")
        lines += [f"  - {n}" for n in info.get("notes", [])]
    return "\n".join(lines) + "\n"


def print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=max(Console().width, 110))
    t = Table(title="peers side by side (same cluster, corpus, model, queries)")
    for col in ("stack", "mode", "nDCG@10", "Recall@100", "p50 ms", "p95 ms", "ours/peer nDCG", "peer/ours p50"):
        t.add_column(col, justify="left" if col in ("stack", "mode") else "right", no_wrap=True)
    errors = []
    for r in rows:
        if "error" in r:
            errors.append(f"[red]{r['stack']} {r['mode']}:[/] {escape(r['error'])}")
            t.add_row(r["stack"], r["mode"], "[red]refused/failed[/]", "", "", "", "", "")
            continue
        t.add_row(r["stack"], r["mode"], f"{r['ndcg@10']:.4f}", f"{r['recall@100']:.4f}", f"{r['p50_ms']:.1f}",
                  f"{r['p95_ms']:.1f}", f"{r['ours_ndcg_ratio']:.3f}" if r.get("ours_ndcg_ratio") else "",
                  f"{r['peer_latency_ratio']:.2f}×" if r.get("peer_latency_ratio") else "")
    console.print(t)
    for e in errors:
        console.print(e, highlight=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setup", action="store_true", help="create/refresh the peers venv and exit")
    p.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "datasets" / "scifact")
    p.add_argument("--split", default="test")
    p.add_argument("--limit-docs", type=int, help="corpus subset: judged documents + the first ones up to N")
    p.add_argument("--limit-queries", type=int, help="first N judged queries")
    p.add_argument("--peers", default="haystack,langchain,hybridsearch")
    p.add_argument("--es-url", default=os.environ.get("HSP_ES_URL", "http://127.0.0.1:9200"))
    p.add_argument("--model", help="embedding model folder (default: the packaged all-MiniLM-L6-v2)")
    p.add_argument("--index-prefix", default="bench-peers")
    p.add_argument("--hsp-prefix", help="hybridsearch index prefix (default <index-prefix>-hsp; eval-scifact reuses "
                                        "hsp eval's index)")
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--num-candidates", type=int, default=200, help="kNN num_candidates for every stack")
    p.add_argument("--out", type=Path, default=ROOT / "reports")
    p.add_argument("--worker", choices=PEERS, help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.setup:
        print(f"peers venv ready: {setup_venv()}")
        return 0
    if args.worker:
        return run_worker(args)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from hybridsearch.embedding.models import resolve_model
    from hybridsearch.engine import EngineClient, cluster_info
    from hybridsearch.settings import load_settings

    args.model = args.model or resolve_model(load_settings().embedding.model, load_settings().models)
    stacks = [s.strip() for s in args.peers.split(",") if s.strip()]
    col, docs = select(args.dataset, args.split, args.limit_docs, args.limit_queries)
    print(f"{col.name} {col.split}: {len(col.queries)} queries, {len(docs)} documents; stacks {', '.join(stacks)}")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        work = Path(tmp)
        (work / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n", encoding="utf-8")
        (work / "queries.json").write_text(json.dumps(col.queries), encoding="utf-8")
        for stack in stacks:
            print(f"--- {stack}", flush=True)
            t0 = time.perf_counter()
            results[stack] = (run_hybridsearch(args, col, docs) if stack == "hybridsearch"
                              else run_peer(stack, args, work))
            print(f"    done in {time.perf_counter() - t0:.0f} s"
                  + (f": {results[stack]['error'][:300]}" if "error" in results[stack] else ""), flush=True)
    rows = score(results, col.qrels)
    print_table(rows)
    es = EngineClient(load_settings(es_url=args.es_url).es)
    meta = {"dataset": f"{col.name} {col.split}", "queries": len(col.queries), "documents": len(docs),
            "cluster": ",".join(cluster_info(es)["versions"]), "model": args.model, "k": args.k,
            "num_candidates": args.num_candidates,
            "stacks": {k: {x: v for x, v in r.items() if x != "modes"} for k, r in results.items()}}
    es.close()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"bench-peers-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2), encoding="utf-8")
    stem.with_suffix(".md").write_text(to_markdown(rows, meta), encoding="utf-8")
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
