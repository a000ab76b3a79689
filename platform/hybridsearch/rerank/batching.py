"""Micro-batching: requests queued together share one model call of at most ``max_batch_pairs`` pairs. At most
``max_queue`` requests wait, each no longer than ``max_queue_wait`` or its own budget; the rest get QueueFull."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from hybridsearch.rerank.base import PairScorer
from hybridsearch.settings import RerankerSettings

log = logging.getLogger(__name__)


@dataclass
class Job:
    """One request waiting for scores."""

    query: str
    passages: list[str]
    future: asyncio.Future[list[float]]
    queued_at: float = field(default_factory=time.perf_counter)
    stats: dict[str, float] = field(default_factory=dict)
    taken: bool = False  # in a model call (or done): no longer waiting
    deadline: float | None = None  # perf_counter by which its client wants the answer (None: no budget)


def split_scores(scores: Sequence[float], sizes: Sequence[int]) -> list[list[float]]:
    """A flat score list cut back into consecutive pieces of ``sizes``. Raises ValueError on a length mismatch."""
    if sum(sizes) != len(scores):
        raise ValueError(f"{len(scores)} scores for {sum(sizes)} pairs")
    flat = iter(scores)
    return [[float(next(flat)) for _ in range(n)] for n in sizes]


class QueueFull(Exception):
    """A request refused or dropped (queue full, waited too long, budget unmet); ``retry_after_s``: drain time."""

    def __init__(self, waiting: int, retry_after_s: float, waited_s: float | None = None, *,
                 budget_s: float | None = None, needed_s: float | None = None) -> None:
        super().__init__(f"{waiting} requests wait; retry in {retry_after_s:.1f}s")
        self.waiting = waiting
        self.retry_after_s = retry_after_s
        self.waited_s = waited_s  # expired in the queue rather than refused at once
        self.budget_s = budget_s  # its budget (deadline) decided: seconds it had left
        self.needed_s = needed_s  # refused at once for its budget: the estimated queue wait plus model call

    @property
    def retry_after(self) -> int:
        """Whole seconds for a ``Retry-After`` header (at least 1, at most 30)."""
        return max(1, min(30, math.ceil(self.retry_after_s)))


class MicroBatcher:
    """Scores queued requests in shared model calls; ``on_batch`` gets (requests, pairs, seconds) of each call."""

    def __init__(self, scorer: PairScorer, cfg: RerankerSettings,
                 on_batch: Callable[[int, int, float], None] | None = None) -> None:
        self.scorer = scorer
        self.cfg = cfg
        self.on_batch = on_batch
        self.pending = 0  # requests waiting: submitted, neither taken into a model call nor expired
        # moving averages of the recent model calls: seconds and pairs per call
        self._call_s = 0.0
        self._call_pairs = 0.0
        self._queued_pairs = 0  # pairs of the requests waiting (queued or held, not expired)
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._held: Job | None = None
        self._busy = False  # the last model call was shared: wait the window for more
        self._executor: ThreadPoolExecutor | None = None  # one thread owns the model (warm thread pools, CUDA)
        self._call_started: float | None = None  # perf_counter when the model call under way began

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

    def estimate(self, n_pairs: int = 0) -> tuple[float, float]:
        """(seconds until ``n_pairs`` pairs submitted now enter a model call, seconds of that call); (0, 0) at first.
        Their sum for no pairs is the time the queue takes to drain."""
        if self._call_s <= 0:
            return 0.0, 0.0
        per_pair = self._per_pair()
        now = time.perf_counter()
        under_way = max(0.0, self._call_s - (now - self._call_started)) if self._call_started is not None else 0.0
        ahead = self._queued_pairs
        if not self.cfg.micro_batching:
            return under_way + ahead * per_pair, n_pairs * per_pair
        max_pairs = self.cfg.max_batch_pairs
        calls_ahead, in_call = divmod(ahead, max_pairs)
        if in_call and in_call + n_pairs > max_pairs:  # does not fit in the last call ahead: the next one
            calls_ahead, in_call = calls_ahead + 1, 0
        return under_way + calls_ahead * max_pairs * per_pair, (in_call + n_pairs) * per_pair

    def _per_pair(self) -> float:
        return self._call_s / max(1.0, self._call_pairs) if self._call_s > 0 else 0.0

    def _fits(self, jobs: list[Job], pairs: int) -> bool:
        """Whether a call of ``pairs`` pairs, starting now, is expected to end before every deadline of ``jobs``."""
        deadlines = [j.deadline for j in jobs if j.deadline is not None]
        return not deadlines or time.perf_counter() + pairs * self._per_pair() <= min(deadlines)

    def check_capacity(self) -> None:
        """Raise QueueFull when ``max_queue`` requests wait (checked before a body is read)."""
        if self.pending >= self.cfg.max_queue:
            raise QueueFull(self.pending, sum(self.estimate()))

    async def submit(self, query: str, passages: list[str], stats: dict[str, float] | None = None, *,
                     deadline: float | None = None) -> list[float]:
        """Scores for ``passages`` in input order by ``deadline`` (perf_counter); ``stats`` gets ``queue_ms``,
        ``model_ms`` and ``batch_requests``. Raises what the scorer raises, or QueueFull."""
        self.check_capacity()
        max_wait = self.cfg.max_queue_wait
        budget_left: float | None = None
        if deadline is not None:
            budget_left = deadline - time.perf_counter()
            wait, call = self.estimate(len(passages))
            if wait + call > budget_left:
                raise QueueFull(self.pending, sum(self.estimate()), budget_s=max(0.0, budget_left),
                                needed_s=wait + call)
            alone = len(passages) * self._per_pair()  # the least its own call takes (batches fit its deadline)
            max_wait = min(max_wait, budget_left - alone)
        job = Job(query, passages, asyncio.get_running_loop().create_future(), stats=stats if stats is not None else {},
                  deadline=deadline)
        self._queue.put_nowait(job)  # bounded by check_capacity (no await between)
        self.pending += 1
        self._queued_pairs += len(passages)
        try:
            return await asyncio.wait_for(asyncio.shield(job.future), max_wait)
        except TimeoutError:
            if job.taken:  # in a model call by now: its answer is on the way
                return await job.future
            self.pending -= 1
            self._queued_pairs -= len(passages)
            job.future.cancel()
            waited = time.perf_counter() - job.queued_at
            by_budget = budget_left if max_wait < self.cfg.max_queue_wait else None
            raise QueueFull(self.pending, sum(self.estimate()), waited_s=waited, budget_s=by_budget) from None

    async def _next(self, timeout: float | None) -> Job | None:
        """The next job that has not expired (None when none came within ``timeout``)."""
        while True:
            if self._held is not None:
                job, self._held = self._held, None
            elif not self._queue.empty():
                job = self._queue.get_nowait()
            elif timeout is not None and timeout <= 0:
                return None
            else:
                try:
                    job = await asyncio.wait_for(self._queue.get(), timeout)
                except TimeoutError:
                    return None
            if not job.future.cancelled():  # cancelled: gave up waiting
                return job

    async def _gather(self) -> list[Job]:
        first = await self._next(None)
        assert first is not None
        jobs = [first]
        if not self.cfg.micro_batching:
            return jobs
        pairs = len(first.passages)
        deadline = time.perf_counter() + (self.cfg.batch_window_ms / 1000 if self._busy else 0.0)
        max_pairs = self.cfg.max_batch_pairs
        while pairs < max_pairs:
            job = await self._next(deadline - time.perf_counter())
            if job is None:
                break
            if pairs + len(job.passages) > max_pairs or not self._fits([*jobs, job], pairs + len(job.passages)):
                self._held = job  # first in line for the next batch
                break
            jobs.append(job)
            pairs += len(job.passages)
        self._busy = len(jobs) > 1
        return jobs

    async def _run(self) -> None:
        while True:
            gathered = await self._gather()
            for j in gathered:
                j.taken = True
            self.pending -= len(gathered)
            self._queued_pairs -= sum(len(j.passages) for j in gathered)
            jobs = [j for j in gathered if not j.future.done()]  # drop requests whose client left
            if not jobs:
                continue
            started = self._call_started = time.perf_counter()
            try:
                outcome = await asyncio.get_running_loop().run_in_executor(self._executor, self._score, jobs)
            finally:
                self._call_started = None
            seconds = time.perf_counter() - started
            n_pairs = sum(len(j.passages) for j in jobs)
            first = self._call_s <= 0
            self._call_s = seconds if first else 0.8 * self._call_s + 0.2 * seconds
            self._call_pairs = n_pairs if first else 0.8 * self._call_pairs + 0.2 * n_pairs
            if self.on_batch is not None:
                self.on_batch(len(jobs), n_pairs, seconds)
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
        """Scores of all jobs in one call; when that fails, of each alone, so one bad request fails only itself."""
        try:
            flat = self.scorer.score_pairs([(j.query, p) for j in jobs for p in j.passages])
            return list(split_scores(flat, [len(j.passages) for j in jobs]))
        except Exception as exc:  # noqa: BLE001 - handed to the waiting request
            if len(jobs) == 1:
                return [exc]
            log.warning("batch of %d requests failed (%s); scoring them one by one", len(jobs), exc)
        return [self._score([j])[0] for j in jobs]
