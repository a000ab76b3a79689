"""The requests a search's steps make, and :class:`Run`, which a client uses to answer them.

The query layer's logic (:mod:`.core`, :mod:`.send`) is written as generators that do no I/O: each ``yield``s
one request below and receives its answer (or has the request's error raised at the ``yield``), so that the
sync and the async client share every decision and differ only in how they perform a request::

    run = Run(core.search_steps(...))
    for request in run:
        try:
            run.answer(perform(request))          # or: await perform(request)
        except BaseException as exc:
            run.fail(exc)
    return run.result

Requests to the cluster carry ``what``, the words the engine's errors are reported under (``engine_errors``).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

if TYPE_CHECKING:
    from hybridsearch.rerank.base import Reranker

T = TypeVar("T")
Json = dict[str, Any]


@dataclass(frozen=True)
class Detect:
    """Which engine serves the cluster. Answer: its :class:`~hybridsearch.engine.EngineInfo`."""

    what: str


@dataclass(frozen=True)
class ResolveAlias:
    """``GET _alias/<alias>``. Answer: the body (``{}`` when no index carries it)."""

    alias: str
    what: str


@dataclass(frozen=True)
class GetMappings:
    """``GET <index>/_mapping`` with ``ignore_unavailable`` (``index``: comma-separated). Answer: the body."""

    index: str
    what: str


@dataclass(frozen=True)
class CountChunks:
    """``GET <index>/_count``: the chunks ``index`` holds and over how many shards (``_shards.total``).
    Answer: the body."""

    index: str
    what: str


@dataclass(frozen=True)
class Msearch:
    """``_msearch`` of these header/body lines. Answer: the body (``{"responses": [...]}``)."""

    lines: list[Json]
    what: str


@dataclass(frozen=True)
class Embed:
    """The query vector of ``text`` (the client's embedder, off the event loop for the async client)."""

    text: str


@dataclass(frozen=True)
class Rerank:
    """``reranker.score(query, passages)`` given at most ``timeout`` seconds. Answer: the scores; a slow
    reranker raises TimeoutError at the ``yield``."""

    reranker: Reranker
    query: str
    passages: Sequence[str]
    timeout: float


@dataclass(frozen=True)
class Spawn:
    """Start ``request`` and go on without waiting for it. Answer: a handle for :class:`Join` or :class:`Drop`."""

    request: Msearch


@dataclass(frozen=True)
class Join:
    """Wait for a spawned request. Answer: its answer (its error raised at the ``yield``)."""

    handle: Any


@dataclass(frozen=True)
class Drop:
    """A spawned request's answer is no longer wanted: cancel it if it can be, and let it end. Answer: None."""

    handle: Any


Request: TypeAlias = Detect | ResolveAlias | GetMappings | CountChunks | Msearch | Embed | Rerank | Spawn | Join | Drop
#: steps that end with a ``T``: they yield requests and are sent each one's answer
Steps: TypeAlias = Generator[Request, Any, T]


class Run(Generic[T]):
    """One run of some steps: iterating gives the requests in order; answer each one with :meth:`answer` or
    :meth:`fail` (its error, raised where the steps asked) before asking for the next; when the iteration ends,
    :attr:`result` holds what the steps returned. An error the steps do not handle ends the iteration by raising."""

    def __init__(self, steps: Steps[T]) -> None:
        self._steps = steps
        self._answer: Any = None
        self._error: BaseException | None = None
        self._result: tuple[T] | None = None

    def __iter__(self) -> Run[T]:
        return self

    def __next__(self) -> Request:
        answer, error = self._answer, self._error
        self._answer, self._error = None, None
        try:
            return self._steps.send(answer) if error is None else self._steps.throw(error)
        except StopIteration as stop:
            self._result = (stop.value,)
            raise StopIteration from None

    def answer(self, value: Any) -> None:
        """The answer to the last request."""
        self._answer = value

    def fail(self, error: BaseException) -> None:
        """The last request failed with ``error``."""
        self._error = error

    @property
    def result(self) -> T:
        """What the steps returned. Raises RuntimeError before they have ended."""
        if self._result is None:
            raise RuntimeError("the steps have not ended yet")
        return self._result[0]
