"""Micro-batching: requests that arrive within a few milliseconds share one model call.

One asyncio queue and one worker task. The worker takes the first waiting request plus every request
already queued (they arrived while the model was busy), and, under concurrent load, keeps taking
requests until ``window_s`` has passed, up to ``max_pairs`` pairs; then it runs the model once for
all of them in a thread, so the event loop keeps accepting requests meanwhile. "Under load" means
the previous model call was shared by several requests: a lone client never waits for the window.
With ``enabled=False`` every request is its own model call (still one at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from hybridsearch.rerank.base import PairScorer
from hybridsearch.rerank.ranking import split_scores

log = logging.getLogger(__name__)


@dataclass
class Job:
    """One request waiting for scores."""

    query: str
    passages: list[str]
    future: asyncio.Future[list[float]]
    queued_at: float = field(default_factory=time.perf_counter)
    stats: dict[str, float] = field(default_factory=dict)


BatchHook = Callable[[int, int, float], None]


class MicroBatcher:
    """Queues requests and scores them in shared model calls. Exceptions of the model reach the caller."""

    def __init__(self, scorer: PairScorer, *, window_s: float = 0.005, max_pairs: int = 256, enabled: bool = True,
                 on_batch: BatchHook | None = None) -> None:
        self.scorer = scorer
        self.window_s = window_s
        self.max_pairs = max_pairs
        self.enabled = enabled
        self.on_batch = on_batch
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._held: Job | None = None
        self._busy = False  # the last model call was shared: wait the window for more
        self._executor: ThreadPoolExecutor | None = None  # one thread owns the model (warm thread pools, CUDA)

    @property
    def pending(self) -> int:
        """Requests queued and not yet taken by the worker."""
        return self._queue.qsize() + (self._held is not None)

    def start(self) -> None:
        if self._task is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rerank-model")
            self._task = asyncio.get_running_loop().create_task(self._run(), name="rerank-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def submit(self, query: str, passages: list[str], stats: dict[str, float] | None = None) -> list[float]:
        """Scores for ``passages`` in input order, once the worker got to them. Raises what the scorer raises.

        ``stats``, when given, receives ``queue_ms``, ``model_ms`` and ``batch_requests`` of this request.
        """
        job = Job(query, passages, asyncio.get_running_loop().create_future(), stats=stats if stats is not None else {})
        await self._queue.put(job)
        return await job.future

    async def _next(self, timeout: float | None) -> Job | None:
        if self._held is not None:
            job, self._held = self._held, None
            return job
        if timeout is None:
            return await self._queue.get()
        if timeout <= 0:
            try:
                return self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return None
        try:
            return await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            return None

    async def _gather(self) -> list[Job]:
        first = await self._next(None)
        assert first is not None
        jobs = [first]
        if not self.enabled:
            return jobs
        pairs = len(first.passages)
        deadline = time.perf_counter() + (self.window_s if self._busy else 0.0)
        while pairs < self.max_pairs:
            job = await self._next(deadline - time.perf_counter())
            if job is None:
                break
            if pairs + len(job.passages) > self.max_pairs:
                self._held = job  # first in line for the next batch
                break
            jobs.append(job)
            pairs += len(job.passages)
        self._busy = len(jobs) > 1
        return jobs

    async def _run(self) -> None:
        while True:
            jobs = [j for j in await self._gather() if not j.future.done()]  # drop requests whose client left
            if not jobs:
                continue
            started = time.perf_counter()
            outcome = await asyncio.get_running_loop().run_in_executor(self._executor, self._score, jobs)
            seconds = time.perf_counter() - started
            if self.on_batch is not None:
                self.on_batch(len(jobs), sum(len(j.passages) for j in jobs), seconds)
            for job, result in zip(jobs, outcome, strict=True):
                job.stats.update(queue_ms=(started - job.queued_at) * 1000, model_ms=seconds * 1000,
                                 batch_requests=len(jobs))
                if job.future.done():
                    continue
                if isinstance(result, BaseException):
                    job.future.set_exception(result)
                else:
                    job.future.set_result(result)

    def _score(self, jobs: list[Job]) -> list[list[float] | BaseException]:
        """Score all jobs in one call; when that fails and there were several, retry each alone so one bad
        request cannot fail its neighbours."""
        pairs = [(j.query, p) for j in jobs for p in j.passages]
        try:
            flat = self.scorer.score_pairs(pairs)
            return list(split_scores(flat, [len(j.passages) for j in jobs]))
        except Exception as exc:  # noqa: BLE001 - handed to the waiting request
            if len(jobs) == 1:
                return [exc]
            log.warning("batch of %d requests failed (%s); scoring them one by one", len(jobs), exc)
        out: list[list[float] | BaseException] = []
        for j in jobs:
            try:
                out.append(self.scorer.score_pairs([(j.query, p) for p in j.passages]))
            except Exception as exc:  # noqa: BLE001 - handed to the waiting request
                out.append(exc)
        return out
