"""The senders: :class:`EngineClient` and :class:`AsyncEngineClient` send a :class:`~.request.Request` through the
public request interface of the engine's official client, prepared (:func:`_call`) and answered (plain JSON; True
or False for HEAD) the same way. Errors are the libraries' own: wrap calls in :func:`.errors.engine_errors`.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlencode

import elasticsearch.helpers
import opensearchpy.helpers

from hybridsearch.engine.connect import detect, detect_async, es_client, os_client
from hybridsearch.engine.dialect import Dialect, EngineInfo
from hybridsearch.engine.errors import API_ERRORS, error_type_of, status_of
from hybridsearch.engine.request import RAISE, Json, Request
from hybridsearch.settings import ClusterSettings


def _call(request: Request, engine: EngineInfo) -> tuple[str, dict[str, Any]]:
    """The path and keyword arguments that send ``request`` through the engine's library. opensearch-py reads
    ``timeout``, ``request_timeout`` and ``ignore`` out of the parameters as its own, so for OpenSearch every
    parameter goes in the path's query string."""
    headers = {"accept": "application/json"}
    if request.body is not None:
        headers["content-type"] = "application/x-ndjson" if isinstance(request.body, list) else "application/json"
    if engine.kind == "elasticsearch":  # the client writes NDJSON lines itself
        return request.path, {"params": request.params or None, "headers": headers, "body": request.body}
    body: Any = request.body
    if isinstance(body, list):
        body = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in body)
    path = f"{request.path}?{urlencode(request.params)}" if request.params else request.path
    return path, {"params": {}, "headers": headers, "body": body, "timeout": request.timeout_s}


def _absent(request: Request, exc: Exception) -> Any:
    """``request.absent`` when ``exc`` says the thing asked for does not exist; raises ``exc`` otherwise."""
    if request.absent is RAISE or status_of(exc) != 404 or error_type_of(exc) == "index_not_found_exception":
        raise exc
    return copy.deepcopy(request.absent)


def _answered(results: Iterable[tuple[bool, Json]]) -> Iterator[tuple[bool, Json]]:
    """Bulk results in one shape on every engine: a request that got no answer raises the library's error, as
    ``elasticsearch``'s helper does (``opensearchpy``'s yields its items with status ``"N/A"`` and goes on)."""
    for ok, result in results:
        item = next(iter(result.values()), None) if result else None
        if isinstance(item, Mapping) and not isinstance(item.get("status"), int) \
                and isinstance(exc := item.get("exception"), Exception):
            raise exc
        yield ok, result


class Sender(Protocol):
    """What sends requests synchronously: an :class:`EngineClient`, or the query log's sender."""

    @property
    def engine(self) -> EngineInfo: ...

    @property
    def dialect(self) -> Dialect: ...

    def send(self, request: Request) -> Any: ...


class EngineClient:
    """One cluster, any engine, detected on the first call. ``close()`` when done."""

    def __init__(self, cfg: ClusterSettings, *, max_retries: int | None = None,
                 request_timeout: float | None = None) -> None:
        self.cfg = cfg
        self._retries, self._timeout = max_retries, request_timeout
        self._es = es_client(cfg, max_retries, request_timeout)  # also asks which engine it is
        self._os: Any = None
        self._engine: EngineInfo | None = None
        self._lock = threading.Lock()

    @property
    def engine(self) -> EngineInfo:
        """The engine serving the cluster (asked once). Raises the library's errors."""
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = detect(self.cfg, self._es)
        return self._engine

    @property
    def dialect(self) -> Dialect:
        return self.engine.dialect

    def _raw(self) -> Any:
        """The library's client for this engine (``Elasticsearch`` or ``OpenSearch``)."""
        if self.engine.kind == "elasticsearch":
            return self._es
        if self._os is None:
            self._os = os_client(self.cfg, self._retries, self._timeout)
        return self._os

    def send(self, request: Request) -> Any:
        """Send ``request``; its answer as plain JSON."""
        client, (path, call) = self._raw(), _call(request, self.engine)
        try:
            if self.engine.kind == "opensearch":
                return client.transport.perform_request(request.method, path, **call)
            if request.timeout_s is not None:
                client = client.options(request_timeout=request.timeout_s, max_retries=0)
            return client.perform_request(request.method, path, **call).body
        except API_ERRORS as exc:
            return _absent(request, exc)

    def _helpers(self) -> Any:
        return opensearchpy.helpers if self.engine.kind == "opensearch" else elasticsearch.helpers

    def streaming_bulk(self, actions: Iterable[Json], **kwargs: Any) -> Iterator[tuple[bool, Json]]:
        """The library's ``helpers.streaming_bulk``; a request that got no answer raises on every engine."""
        yield from _answered(self._helpers().streaming_bulk(self._raw(), actions, **kwargs))

    def scan(self, *, index: str, query: Json | None = None, size: int = 1000, scroll: str = "5m",
             preserve_order: bool = False) -> Iterator[Json]:
        """Every hit of ``query`` (a search body) on ``index``, by scroll."""
        yield from self._helpers().scan(self._raw(), index=index, query=query, size=size, scroll=scroll,
                                        preserve_order=preserve_order)

    def close(self) -> None:
        self._es.close()
        if self._os is not None:
            self._os.close()


class AsyncEngineClient:
    """:meth:`EngineClient.send` on asyncio (the engine detected on the first call unless given)."""

    def __init__(self, cfg: ClusterSettings, engine: EngineInfo | None = None) -> None:
        self.cfg = cfg
        self._engine = engine
        self._es: Any = None
        self._os: Any = None

    async def detect(self) -> EngineInfo:
        """The engine (asked once)."""
        if self._es is None:
            self._es = es_client(self.cfg, asyncio=True)
        if self._engine is None:
            self._engine = await detect_async(self.cfg, self._es)
        return self._engine

    @property
    def engine(self) -> EngineInfo:
        if self._engine is None:
            raise RuntimeError("await detect() first")
        return self._engine

    @property
    def dialect(self) -> Dialect:
        return self.engine.dialect

    async def send(self, request: Request) -> Any:
        """:meth:`EngineClient.send`, awaited."""
        engine = await self.detect()
        path, call = _call(request, engine)
        try:
            if engine.kind == "opensearch":
                if self._os is None:
                    self._os = os_client(self.cfg, asyncio=True)
                return await self._os.transport.perform_request(request.method, path, **call)
            client = self._es if request.timeout_s is None else \
                self._es.options(request_timeout=request.timeout_s, max_retries=0)
            return (await client.perform_request(request.method, path, **call)).body
        except API_ERRORS as exc:
            return _absent(request, exc)

    async def close(self) -> None:
        for client in (self._es, self._os):
            if client is not None:
                await client.close()
