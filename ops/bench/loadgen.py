"""The bounded async load generator shared by ops/bench/bench_load.py and ops/bench/bench_rerank_overload.py.

Imports nothing of hybridsearch, so that it also runs inside the peers' virtualenv (ops/bench/bench_peers.py),
whose Elasticsearch client is another major version. Loopback targets only: the callers pass the
function to call; every run is bounded both in requests and in seconds.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import math
import re
import statistics
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# What one call returns: None for a full answer, a reason string for a degraded one (an exception: an error).
Call = Callable[[str], Awaitable[str | None]]


def reason_kind(reason: str) -> str:
    """A degraded answer's reason with its numbers (ports, seconds, counts) as ``#``, so that reasons of one
    kind are counted together: ``reranker timeout after #s``."""
    return re.sub(r"\d+(?:\.\d+)?", "#", reason)[:200]


def pct(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank), NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


@dataclass
class LevelResult:
    """One stack at one concurrency level."""

    stack: str
    concurrency: int
    seconds: float
    sent: int = 0
    ok: int = 0
    degraded: int = 0
    errors: int = 0
    latency_ms: list[float] = field(default_factory=list)  # of answers (full or degraded), not errors
    started_s: list[float] = field(default_factory=list)  # start of each answered request, from the level start
    error_examples: list[str] = field(default_factory=list)
    degraded_examples: list[str] = field(default_factory=list)
    degraded_reasons: dict[str, int] = field(default_factory=dict)  # reason_kind -> answers
    fault_at_s: float | None = None
    fault_note: str | None = None

    @property
    def qps(self) -> float:
        return (self.ok + self.degraded) / self.seconds if self.seconds else 0.0

    def during_fault(self) -> list[float]:
        """Latencies of requests started after the fault (until the level ended)."""
        if self.fault_at_s is None:
            return []
        return [lat for lat, t in zip(self.latency_ms, self.started_s, strict=True) if t >= self.fault_at_s]

    def summary(self) -> dict[str, Any]:
        lat = self.latency_ms
        out = {k: v for k, v in asdict(self).items() if k not in ("latency_ms", "started_s")}
        out.update(qps=round(self.qps, 2), p50_ms=round(pct(lat, 50), 1), p95_ms=round(pct(lat, 95), 1),
                   p99_ms=round(pct(lat, 99), 1), mean_ms=round(statistics.fmean(lat), 1) if lat else None)
        if self.fault_at_s is not None:
            during = self.during_fault()
            out.update(p99_during_fault_ms=round(pct(during, 99), 1), answered_during_fault=len(during))
        return out


async def drive(stack: str, call: Call, queries: Sequence[str], concurrency: int, seconds: float,
                max_requests: int = 100_000, fault: Callable[[], str] | None = None,
                fault_at: float | None = None) -> LevelResult:
    """``concurrency`` workers send ``queries`` (round robin) through ``call`` for ``seconds`` or until
    ``max_requests`` were sent, whichever comes first. With ``fault``, it is run (in a thread) ``fault_at``
    seconds in; its return value is recorded as the fault note."""
    res = LevelResult(stack, concurrency, seconds)
    order = itertools.cycle(queries)
    t0 = time.perf_counter()
    end = t0 + seconds

    async def worker() -> None:
        while time.perf_counter() < end and res.sent < max_requests:
            q = next(order)
            res.sent += 1
            s = time.perf_counter()
            try:
                reason = await asyncio.wait_for(call(q), timeout=max(1.0, end + 30 - s))
            except Exception as exc:  # noqa: BLE001 - counted and reported
                res.errors += 1
                if len(res.error_examples) < 5:
                    res.error_examples.append(f"{type(exc).__name__}: {str(exc)[:300]}")
                continue
            res.latency_ms.append((time.perf_counter() - s) * 1000)
            res.started_s.append(s - t0)
            if reason is None:
                res.ok += 1
            else:
                res.degraded += 1
                kind = reason_kind(reason)
                res.degraded_reasons[kind] = res.degraded_reasons.get(kind, 0) + 1
                if len(res.degraded_examples) < 3 and reason not in res.degraded_examples:
                    res.degraded_examples.append(reason[:300])

    async def inject() -> None:
        assert fault is not None and fault_at is not None
        await asyncio.sleep(fault_at)
        res.fault_at_s = time.perf_counter() - t0
        res.fault_note = await asyncio.to_thread(fault)

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    if fault is not None and fault_at is not None:
        tasks.append(asyncio.create_task(inject()))
    await asyncio.gather(*tasks)
    res.seconds = time.perf_counter() - t0
    return res


def threaded(fn: Callable[[str], str | None], pool: ThreadPoolExecutor) -> Call:
    """An async call running the blocking ``fn`` in ``pool`` (size it to the highest concurrency)."""

    async def call(q: str) -> str | None:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, q)

    return call


def shell_fault(cmd: list[str]) -> Callable[[], str]:
    """A fault that runs ``cmd`` (e.g. ``ops/es-local.sh cluster kill node-2``) and returns what it said."""

    def run() -> str:
        p = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        return f"{' '.join(cmd[-3:])}: exit {p.returncode} {(p.stdout + p.stderr).strip()[:200]}"

    return run


class RssSampler:
    """Samples the resident memory of one process every ``every_s`` seconds (psutil) in a thread."""

    def __init__(self, pid: int, every_s: float = 0.5) -> None:
        import psutil

        self.proc = psutil.Process(pid)
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []  # (seconds, MiB)
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.perf_counter() - self._t0, self.proc.memory_info().rss / 2**20))
            except Exception:  # noqa: BLE001 - the process ended
                return
            self._stop.wait(self.every_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def save_report(name: str, data: Any, plot: Callable[[Path], None] | None = None, folder: Path | None = None
                ) -> Path:
    """Write ``data`` to ``<folder>/<name>-<local time>.json`` (``folder``: default ``reports/``; the plot beside
    it as .png); prints and returns the JSON path. The one report writer of the load, scale and vector
    benchmarks."""
    root = Path(__file__).resolve().parents[2]
    out = (folder or root / "reports") / f"{name}-{dt.datetime.now():%Y%m%dT%H%M%S}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    if plot is not None:
        plot(out.with_suffix(".png"))
    shown = out.relative_to(root) if out.is_relative_to(root) else out
    print(f"wrote {shown}.json" + (" and .png" if plot is not None else ""))
    return out.with_suffix(".json")
