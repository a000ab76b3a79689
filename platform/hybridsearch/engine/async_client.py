"""``AsyncEngineClient``: the asyncio calls of the search path (``msearch``, ``count``, aliases, mappings), the
same on every engine, answered with plain JSON like :class:`~hybridsearch.engine.client.EngineClient`'s."""

from __future__ import annotations

import asyncio
from typing import Any

from hybridsearch.engine.connect import EngineInfo, detect, es_async_client, es_client, os_async_client
from hybridsearch.engine.dialect import Dialect
from hybridsearch.engine.errors import API_ERRORS, status_of
from hybridsearch.engine.wire import Json, plain, query_params
from hybridsearch.settings import ClusterSettings


class AsyncEngineClient:
    """The asyncio calls of the search path (``msearch``, aliases, mappings) on any engine."""

    def __init__(self, cfg: ClusterSettings, engine: EngineInfo | None = None) -> None:
        self.cfg = cfg
        self._engine = engine
        self._raw: Any = None
        self.indices = _AsyncIndices(self)

    async def detect(self) -> EngineInfo:
        """The engine (asked once, on a short-lived sync client in a worker thread)."""
        if self._engine is None:
            def ask() -> EngineInfo:
                es = es_client(self.cfg)
                try:
                    return detect(self.cfg, es)
                finally:
                    es.close()
            self._engine = await asyncio.to_thread(ask)
        return self._engine

    @property
    def engine(self) -> EngineInfo:
        if self._engine is None:
            raise RuntimeError("await detect() first")
        return self._engine

    @property
    def dialect(self) -> Dialect:
        return self.engine.dialect

    async def raw(self) -> Any:
        if self._raw is None:
            engine = await self.detect()
            self._raw = os_async_client(self.cfg) if engine.kind == "opensearch" else es_async_client(self.cfg)
        return self._raw

    async def msearch(self, *, searches: list[Json]) -> Json:
        resp: Json = plain(await (await self.raw()).msearch(body=searches))
        return resp

    async def count(self, *, index: str) -> Json:
        """``GET <index>/_count`` (all documents): the count and ``_shards``."""
        resp: Json = plain(await (await self.raw()).count(index=index))
        return resp

    async def close(self) -> None:
        if self._raw is not None:
            await self._raw.close()


class _AsyncIndices:
    def __init__(self, client: AsyncEngineClient) -> None:
        self._c = client

    async def get_alias(self, *, name: str) -> Json:
        """See :meth:`hybridsearch.engine.namespaces.Indices.get_alias`."""
        try:
            resp: Json = plain(await (await self._c.raw()).indices.get_alias(name=name))
        except API_ERRORS as exc:
            if status_of(exc) != 404:
                raise
            return {}
        return resp

    async def get_mapping(self, *, index: str, ignore_unavailable: bool | None = None) -> Json:
        """See :meth:`hybridsearch.engine.namespaces.Indices.get_mapping`."""
        raw = await self._c.raw()
        engine = await self._c.detect()
        resp: Json = plain(await raw.indices.get_mapping(index=index, **query_params(
            engine.kind, ignore_unavailable=ignore_unavailable)))
        return resp
