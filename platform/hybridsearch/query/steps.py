"""Steps are generators without I/O: each ``yield``s one request and is sent its answer (or has its error raised at
the ``yield``), so the sync and async clients differ only in how they perform a request. Here: the requests,
:class:`Run`, and the steps that send a plan's lists."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from hybridsearch.engine import request as engine_request
from hybridsearch.engine.request import Request as EngineRequest
from hybridsearch.query.build import Plan
from hybridsearch.query.results import Timings

if TYPE_CHECKING:
    import numpy as np

    from hybridsearch.rerank.base import Reranker

T = TypeVar("T")
Json = dict[str, Any]


@dataclass(frozen=True)
class Detect:
    """Which engine serves the cluster. Answer: its :class:`~hybridsearch.engine.EngineInfo`."""

    what: str


@dataclass(frozen=True)
class Send:
    """Send ``request`` to the engine; its errors are reported under ``what`` (``engine_errors``). Answer: the body."""

    request: EngineRequest
    what: str


@dataclass(frozen=True)
class Embed:
    """The query vector of ``text`` (off the event loop for the async client)."""

    text: str


@dataclass(frozen=True)
class Rerank:
    """``reranker.score(query, passages)`` within ``timeout`` seconds (else TimeoutError at the ``yield``)."""

    reranker: Reranker
    query: str
    passages: Sequence[str]
    timeout: float


@dataclass(frozen=True)
class Spawn:
    """Start ``request`` and go on without waiting. Answer: a handle for :class:`Join` or :class:`Drop`."""

    request: Send


@dataclass(frozen=True)
class Join:
    """Wait for a spawned request. Answer: its answer (its error raised at the ``yield``)."""

    handle: Any


@dataclass(frozen=True)
class Drop:
    """A spawned request's answer is no longer wanted: cancel it if it can be. Answer: None."""

    handle: Any


Request: TypeAlias = Detect | Send | Embed | Rerank | Spawn | Join | Drop
Steps: TypeAlias = Generator[Request, Any, T]
KnnLines = Callable[["np.ndarray"], list[Json]]  # the kNN list's ``_msearch`` lines for the query vector


class Run(Generic[T]):
    """Iterating gives the steps' requests; answer each (:meth:`answer`, :meth:`fail`); then :attr:`result`."""

    def __init__(self, steps: Steps[T]) -> None:
        self._steps = steps
        self._next: Callable[[], Request] = functools.partial(steps.send, None)
        self.result: T

    def __iter__(self) -> Iterator[Request]:
        while True:
            try:
                request = self._next()
            except StopIteration as stop:
                self.result = stop.value
                return
            self._next = functools.partial(self._steps.send, None)
            yield request

    def answer(self, value: Any) -> None:
        self._next = functools.partial(self._steps.send, value)

    def fail(self, error: BaseException) -> None:
        self._next = functools.partial(self._steps.throw, error)


def msearch(lines: list[Json], what: str) -> Send:
    """The :class:`Send` of an ``_msearch`` of these header/body lines."""
    return Send(engine_request.msearch(lines), what)


def ms_since(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


def embed_steps(text: str, t: Timings) -> Steps[np.ndarray]:
    """The query vector of ``text``, with ``t.embed_ms``."""
    t0 = time.perf_counter()
    vector: np.ndarray = yield Embed(text)
    t.embed_ms = ms_since(t0)
    return vector


def send_steps(p: Plan, t: Timings, text: list[Json], knn: KnnLines, what: str,
               overlap: bool = True) -> Steps[list[Json]]:
    """The ``_msearch`` items of ``p``'s lists, timed into ``t``; hybrid with ``overlap`` sends BM25 while embedding."""
    if p.mode != "hybrid" or not overlap:
        body = [*text, *(knn((yield from embed_steps(p.query, t))) if p.wants_vector else [])]
        t0 = time.perf_counter()
        answer: Json = yield msearch(body, what)
        t.search_ms = ms_since(t0)
        responses: list[Json] = answer["responses"]
        return responses
    bm25 = yield Spawn(msearch(text, what))
    try:
        body = knn((yield from embed_steps(p.query, t)))
        t0 = time.perf_counter()
        try:
            knn_answer: Any = yield msearch(body, what)
        except Exception as exc:  # noqa: BLE001 - raised below, after BM25's outcome
            knn_answer = exc
    except GeneratorExit:
        raise
    except BaseException:
        yield Drop(bm25)  # most likely in flight already: its answer or error is dropped
        raise
    try:
        bm25_answer: Any = yield Join(bm25)
    except Exception as exc:  # noqa: BLE001 - raised below, first
        bm25_answer = exc
    t.search_ms = ms_since(t0)
    for outcome in (bm25_answer, knn_answer):
        if isinstance(outcome, BaseException):
            raise outcome
    return [*bm25_answer["responses"], *knn_answer["responses"]]
