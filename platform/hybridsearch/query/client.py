"""``SearchClient`` and ``AsyncSearchClient``: thin shells that perform the requests of the core's steps."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, assert_never

from hybridsearch.engine import AsyncEngineClient, EngineClient, Sender, engine_errors
from hybridsearch.engine.dialect import Dialect, EngineInfo
from hybridsearch.engine.request import Request as EngineRequest
from hybridsearch.query.core import SearchCore
from hybridsearch.query.steps import Detect, Drop, Embed, Join, Request, Rerank, Run, Send, Spawn, Steps
from hybridsearch.settings import ClusterSettings

__all__ = ["AsyncSearchClient", "SearchClient"]

SEARCH_WORKERS = 64  # the sync client's threads for hybrid's BM25 requests (sent while the query is embedded)
RERANK_WORKERS = 4
T = TypeVar("T")
P = ParamSpec("P")


def blocking(steps: Callable[Concatenate[Any, P], Steps[T]]) -> Callable[Concatenate[SearchClient, P], T]:
    """The :class:`SearchClient` method that performs the requests of ``steps`` (a :class:`SearchCore` method)."""

    @functools.wraps(steps)
    def method(self: SearchClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        run = Run(steps(self, *args, **kwargs))
        for request in run:
            try:
                run.answer(self._perform(request))
            except BaseException as exc:  # noqa: BLE001 - raised where the steps asked; they decide
                run.fail(exc)
        return run.result

    return method


def awaitable(steps: Callable[Concatenate[Any, P], Steps[T]]) -> Callable[Concatenate[AsyncSearchClient, P],
                                                                           Coroutine[Any, Any, T]]:
    """The :class:`AsyncSearchClient` method that performs the requests of ``steps``, on the running loop."""

    @functools.wraps(steps)
    async def method(self: AsyncSearchClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        self._log_sender.loop = asyncio.get_running_loop()
        run = Run(steps(self, *args, **kwargs))
        for request in run:
            try:
                run.answer(await self._perform(request))
            except BaseException as exc:  # noqa: BLE001 - raised where the steps asked; they decide
                run.fail(exc)
        return run.result

    return method


class SearchClient(SearchCore[EngineClient]):
    """Hybrid search over the read alias ``<prefix>-chunks``, synchronous and thread-safe; close it (or use
    ``with``) to flush the query log. ``embedder``: default from ``settings.embedding``; ``reranker``: none."""

    @classmethod
    def _connect(cls, cfg: ClusterSettings) -> EngineClient:
        return EngineClient(cfg)

    def _open(self) -> Sender:
        self._pool = concurrent.futures.ThreadPoolExecutor(RERANK_WORKERS, thread_name_prefix="hsp-rerank")
        self._io = concurrent.futures.ThreadPoolExecutor(max_workers=SEARCH_WORKERS, thread_name_prefix="hsp-bm25")
        return self.es

    def _perform(self, request: Request) -> Any:
        match request:
            case Send(call, what):
                with engine_errors(what):
                    return self.es.send(call)
            case Embed(text):
                return self._encode(text)
            case Spawn(inner):
                return self._io.submit(self._perform, inner)
            case Join(future):
                return future.result()
            case Drop(future):
                return future.cancel()
            case Rerank(reranker, query, passages, timeout):
                scoring = self._pool.submit(reranker.score, query, passages)
                try:
                    return scoring.result(timeout=timeout)
                finally:
                    scoring.cancel()  # no-op once it ran; a slow one is left to finish
            case Detect(what):
                with engine_errors(what):
                    return self.es.engine
            case _:
                assert_never(request)

    index = blocking(SearchCore.index_steps)
    search = blocking(SearchCore.search_steps)
    why = blocking(SearchCore.why_steps)
    warm_up = blocking(SearchCore.warm_up_steps)

    def close(self) -> None:
        """Flush the query log, stop worker threads, close the ES client when this object made it."""
        if self.query_log is not None:
            self.query_log.close()
        for pool in (self._pool, self._io):
            pool.shutdown(wait=False, cancel_futures=True)
        if self._owns_es:
            self.es.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LoopSender:
    """:meth:`AsyncEngineClient.send` from the query log's thread, on the loop of the client's searches."""

    def __init__(self, client: AsyncEngineClient) -> None:
        self.client = client
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def engine(self) -> EngineInfo:
        return self.client.engine

    @property
    def dialect(self) -> Dialect:
        return self.client.dialect

    def send(self, request: EngineRequest) -> Any:
        if self.loop is None:
            raise RuntimeError("no event loop yet: the first search sets it")
        sent = asyncio.run_coroutine_threadsafe(self.client.send(request), self.loop)
        return sent.result(timeout=self.client.cfg.request_timeout * (self.client.cfg.max_retries + 2))


class AsyncSearchClient(SearchCore[AsyncEngineClient]):
    """The asyncio twin of :class:`SearchClient`: same arguments, same results; models run in worker threads."""

    @classmethod
    def _connect(cls, cfg: ClusterSettings) -> AsyncEngineClient:
        return AsyncEngineClient(cfg)

    def _open(self) -> Sender:
        self._log_sender = LoopSender(self.es)
        return self._log_sender

    async def _perform(self, request: Request) -> Any:
        match request:
            case Send(call, what):
                with engine_errors(what):
                    return await self.es.send(call)
            case Embed(text):
                return await asyncio.to_thread(self._encode, text)
            case Spawn(inner):
                return asyncio.ensure_future(self._perform(inner))
            case Join(task):
                return await task
            case Drop(task):
                task.cancel()
                return await asyncio.gather(task, return_exceptions=True)  # its answer or error is dropped
            case Rerank(reranker, query, passages, timeout):
                return await asyncio.wait_for(asyncio.to_thread(reranker.score, query, passages), timeout=timeout)
            case Detect(what):
                with engine_errors(what):
                    return await self.es.detect()
            case _:
                assert_never(request)

    index = awaitable(SearchCore.index_steps)
    search = awaitable(SearchCore.search_steps)
    why = awaitable(SearchCore.why_steps)
    warm_up = awaitable(SearchCore.warm_up_steps)

    async def close(self) -> None:
        """Flush the query log and close the clients this object made."""
        if self.query_log is not None:
            await asyncio.to_thread(self.query_log.close)
        if self._owns_es:
            await self.es.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
