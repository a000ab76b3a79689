"""``EngineClient`` and ``AsyncEngineClient``: the calls the platform makes, the same on every engine.

Each method takes the platform's arguments, sends them to whichever library serves the engine in the one
form both accept (a ``body`` plus query-string parameters) and returns plain JSON (``dict``/``list``). The
engine is detected on the first call (:func:`~hybridsearch.engine.connect.detect`). Errors are the libraries'
own: wrap calls in :func:`~hybridsearch.engine.errors.engine_errors` to get hybridsearch errors.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import elasticsearch
import elasticsearch.helpers
import opensearchpy
import opensearchpy.helpers

from hybridsearch.engine.connect import (
    EngineInfo,
    detect,
    es_async_client,
    es_client,
    os_async_client,
    os_client,
)
from hybridsearch.engine.dialect import Dialect
from hybridsearch.engine.errors import API_ERRORS, error_type_of, status_of
from hybridsearch.engine.privileges import NO_API, SECURITY_OFF, IndexPrivileges
from hybridsearch.settings import ClusterSettings

Json = dict[str, Any]
log = logging.getLogger(__name__)
#: analyzers every node has without the analysis-common module
BUILT_IN_ANALYZERS = frozenset({"standard", "simple", "whitespace", "stop", "keyword", "pattern"})


def _plain(resp: Any) -> Any:
    """The JSON of a response: ``elasticsearch`` wraps it (``.body``), ``opensearchpy`` does not."""
    return resp.body if hasattr(resp, "body") else resp


def _body(**fields: Any) -> Json:
    """A request body from keyword fields, None values dropped; ``source`` is ``_source``."""
    return {("_source" if k == "source" else k): v for k, v in fields.items() if v is not None}


def _answered(results: Iterable[tuple[bool, Json]]) -> Iterator[tuple[bool, Json]]:
    """Bulk results in one shape on every engine: each item the engine answered, with its HTTP status. A request
    that got no answer raises the library's error, as ``elasticsearch``'s helper does; ``opensearchpy``'s helper
    (with ``raise_on_exception=False``) instead yields each of its items with status ``"N/A"`` and the error
    under ``exception``, and goes on with the next request."""
    for ok, result in results:
        item = next(iter(result.values()), None) if result else None
        if isinstance(item, Mapping) and not isinstance(item.get("status"), int) \
                and isinstance(exc := item.get("exception"), Exception):
            raise exc
        yield ok, result


def _query(kind: str, **params: Any) -> dict[str, Any]:
    """Query-string parameters as the library takes them: keywords for ``elasticsearch``, one ``params`` dict
    for ``opensearchpy`` (whose keywords ``timeout`` and ``request_timeout`` mean the HTTP timeout)."""
    given = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items() if v is not None}
    if kind == "opensearch":
        return {"params": given} if given else {}
    return given


class EngineClient:
    """One cluster, any engine: see the module docstring. ``close()`` when done (or use ``with``)."""

    def __init__(self, cfg: ClusterSettings, *, max_retries: int | None = None,
                 request_timeout: float | None = None) -> None:
        self.cfg = cfg
        self._retries, self._timeout = max_retries, request_timeout
        self._es = es_client(cfg, max_retries, request_timeout)  # also asks which engine it is
        self._os: opensearchpy.OpenSearch | None = None
        self._engine: EngineInfo | None = None
        self._lock = threading.Lock()
        self._analyzers: dict[str, bool] = {}
        self.indices = _Indices(self)
        self.cluster = _Cluster(self)
        self.nodes = _Nodes(self)
        self.cat = _Cat(self)

    # ---- which engine

    @property
    def engine(self) -> EngineInfo:
        """The engine serving the cluster (asked once). Raises ClusterError."""
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = detect(self.cfg, self._es)
        return self._engine

    @property
    def dialect(self) -> Dialect:
        return self.engine.dialect

    @property
    def raw(self) -> Any:
        """The library's client for this engine (``Elasticsearch`` or ``OpenSearch``)."""
        if self.engine.kind == "elasticsearch":
            return self._es
        if self._os is None:
            self._os = os_client(self.cfg, self._retries, self._timeout)
        return self._os

    def _q(self, **params: Any) -> dict[str, Any]:
        return _query(self.engine.kind, **params)

    def has_analyzer(self, name: str) -> bool:
        """Whether the cluster knows analyzer ``name`` (asked once per name). ``_analyze`` answers exactly but
        needs the cluster privilege ``manage``; credentials without it (a team's role) are answered from the
        nodes' modules (``monitor``): the language analyzers come with ``analysis-common``."""
        if name not in self._analyzers:
            try:
                self.raw.indices.analyze(body={"analyzer": name, "text": "probe"})
                self._analyzers[name] = True
            except API_ERRORS as exc:
                if status_of(exc) not in (400, 403):
                    raise
                # 400: "failed to find global analyzer [english]"
                self._analyzers[name] = status_of(exc) == 403 and self._modules_have(name)
        return self._analyzers[name]

    def _modules_have(self, name: str) -> bool:
        if name in BUILT_IN_ANALYZERS:
            return True
        try:
            nodes = self.nodes.info(filter_path="nodes.*.modules.name").get("nodes", {})
        except API_ERRORS as exc:
            if status_of(exc) != 403:
                raise
            log.warning("cannot tell whether the cluster has analyzer %s: these credentials may neither _analyze "
                        "nor read the nodes' modules; taking it as absent", name)
            return False
        return bool(nodes) and all("analysis-common" in {m.get("name") for m in n.get("modules", [])}
                                   for n in nodes.values())

    # ---- documents and searches

    def search(self, *, index: str, query: Json | None = None, knn: Json | None = None, size: int | None = None,
               source: Any = None, sort: list[Any] | None = None, aggs: Json | None = None,
               track_total_hits: bool | None = None, filter_path: str | None = None) -> Json:
        """``POST <index>/_search`` with the given body fields (``knn``: Elasticsearch's top-level kNN, as
        :meth:`Dialect.knn_search` renders it; ``source``: ``_source``)."""
        body = _body(query=query, knn=knn, size=size, source=source, sort=sort, aggs=aggs,
                     track_total_hits=track_total_hits)
        resp: Json = _plain(self.raw.search(index=index, body=body, **self._q(filter_path=filter_path)))
        return resp

    def count(self, *, index: str, query: Mapping[str, Any] | None = None, min_score: float | None = None) -> Json:
        body = _body(query=query) or None
        resp: Json = _plain(self.raw.count(index=index, body=body, **self._q(min_score=min_score)))
        return resp

    def msearch(self, *, searches: list[Json]) -> Json:
        """``POST _msearch`` with header/body lines."""
        resp: Json = _plain(self.raw.msearch(body=searches))
        return resp

    def index(self, *, index: str, id: str, document: Mapping[str, Any], refresh: bool | str | None = None,
              if_seq_no: int | None = None, if_primary_term: int | None = None, op_type: str | None = None) -> Json:
        """``PUT <index>/_doc/<id>``; with ``if_seq_no``/``if_primary_term`` (or ``op_type="create"``) only when the
        document is still the one read (or absent): a 409 otherwise, read with :func:`status_of`."""
        resp: Json = _plain(self.raw.index(index=index, id=id, body=dict(document), **self._q(
            refresh=refresh, if_seq_no=if_seq_no, if_primary_term=if_primary_term, op_type=op_type)))
        return resp

    def get(self, *, index: str, id: str) -> Json | None:
        """``GET <index>/_doc/<id>`` (real time: ``_source``, ``_seq_no``, ``_primary_term``), or None when the
        document is absent. A missing index raises as usual."""
        try:
            resp: Json = _plain(self.raw.get(index=index, id=id))
        except API_ERRORS as exc:
            if status_of(exc) == 404 and error_type_of(exc) in (None, ""):
                return None
            raise
        return resp if resp.get("found") else None

    def update(self, *, index: str, id: str, doc: Mapping[str, Any], refresh: bool | str | None = None,
               retry_on_conflict: int | None = None) -> Json:
        resp: Json = _plain(self.raw.update(index=index, id=id, body={"doc": dict(doc)},
                                            **self._q(refresh=refresh, retry_on_conflict=retry_on_conflict)))
        return resp

    # ---- bulk helpers (each library's own, on its own client)

    def streaming_bulk(self, actions: Iterable[Json], **kwargs: Any) -> Iterator[tuple[bool, Json]]:
        """The library's ``helpers.streaming_bulk`` (same keyword arguments), its results in one shape: every item
        has an integer ``status``; a request that got no answer raises (:data:`~hybridsearch.engine.UNREACHABLE`)
        on every engine, even with ``raise_on_exception=False``."""
        helpers = opensearchpy.helpers if self.engine.kind == "opensearch" else elasticsearch.helpers
        yield from _answered(helpers.streaming_bulk(self.raw, actions, **kwargs))

    def bulk(self, actions: Iterable[Json], *, stats_only: bool = False, **kwargs: Any) -> tuple[int, Any]:
        """What the libraries' ``helpers.bulk`` returns (``(succeeded, failed items)``, or the failed count with
        ``stats_only``), read from :meth:`streaming_bulk`, so that its items have the same shape."""
        succeeded, failed = 0, []
        for ok, item in self.streaming_bulk(actions, **kwargs):
            if ok:
                succeeded += 1
            else:
                failed.append(item)
        return succeeded, len(failed) if stats_only else failed

    def index_privileges(self, names: list[str], privileges: list[str]) -> IndexPrivileges:
        """Whether the credentials hold each of ``privileges`` on each of ``names``, where the engine can say
        (:mod:`.privileges`). Raises the library's errors for 401, 403 and no answer."""
        if self.engine.kind == "opensearch":
            return IndexPrivileges.unchecked(NO_API)
        try:
            body = _plain(self.raw.security.has_privileges(index=[{"names": names, "privileges": privileges}]))
        except API_ERRORS as exc:
            if status_of(exc) in (401, 403) or status_of(exc) is None:
                raise
            log.debug("privileges not checked (HTTP %s): security looks off", status_of(exc))
            return IndexPrivileges.unchecked(SECURITY_OFF)
        return IndexPrivileges.from_answer(body)

    def scan(self, *, index: str, query: Json | None = None, size: int = 1000, scroll: str = "5m",
             preserve_order: bool = False) -> Iterator[Json]:
        """Every hit of ``query`` (a search body) on ``index``, by scroll (in ``query``'s sort order when
        ``preserve_order``)."""
        helpers = opensearchpy.helpers if self.engine.kind == "opensearch" else elasticsearch.helpers
        yield from helpers.scan(self.raw, index=index, query=query, size=size, scroll=scroll,
                                preserve_order=preserve_order)

    # ---- lifetime

    def close(self) -> None:
        self._es.close()
        if self._os is not None:
            self._os.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Namespace:
    def __init__(self, client: EngineClient) -> None:
        self._c = client


class _Indices(_Namespace):
    def create(self, *, index: str, settings: Json | None = None, mappings: Json | None = None,
               aliases: Json | None = None) -> Json:
        resp: Json = _plain(self._c.raw.indices.create(
            index=index, body=_body(settings=settings, mappings=mappings, aliases=aliases)))
        return resp

    def put_settings(self, *, index: str, settings: Json) -> None:
        self._c.raw.indices.put_settings(index=index, body=settings)

    def get_settings(self, *, index: str, flat_settings: bool = False) -> Json:
        resp: Json = _plain(self._c.raw.indices.get_settings(index=index, flat_settings=flat_settings))
        return resp

    def get_index_template(self, *, name: str | None = None) -> Json:
        """Composable index templates (``name`` may be a pattern; ``{"index_templates": []}`` when none)."""
        try:
            resp: Json = _plain(self._c.raw.indices.get_index_template(name=name))
        except API_ERRORS as exc:  # Elasticsearch answers a pattern that matches none with 404
            if status_of(exc) != 404:
                raise
            return {"index_templates": []}
        return resp

    def delete(self, *, index: str, expand_wildcards: str | None = None) -> None:
        """Delete ``index`` (a name or pattern; a pattern that matches nothing is no error)."""
        self._c.raw.indices.delete(index=index, **self._c._q(expand_wildcards=expand_wildcards))

    def exists(self, *, index: str) -> bool:
        return bool(self._c.raw.indices.exists(index=index))

    def refresh(self, *, index: str, expand_wildcards: str | None = None) -> None:
        self._c.raw.indices.refresh(index=index, **self._c._q(expand_wildcards=expand_wildcards))

    def get(self, *, index: str, expand_wildcards: str | None = None, allow_no_indices: bool | None = None,
            filter_path: str | None = None) -> Json:
        resp: Json = _plain(self._c.raw.indices.get(index=index, **self._c._q(
            expand_wildcards=expand_wildcards, allow_no_indices=allow_no_indices, filter_path=filter_path)))
        return resp

    def get_mapping(self, *, index: str, allow_no_indices: bool | None = None,
                    ignore_unavailable: bool | None = None) -> Json:
        """``GET <index>/_mapping`` (``index`` may list several, comma-separated; ``ignore_unavailable`` leaves
        out those that do not exist)."""
        resp: Json = _plain(self._c.raw.indices.get_mapping(index=index, **self._c._q(
            allow_no_indices=allow_no_indices, ignore_unavailable=ignore_unavailable)))
        return resp

    def put_mapping(self, *, index: str, properties: Json | None = None, meta: Json | None = None) -> None:
        """Add ``properties`` and/or replace the whole ``_meta`` (``meta``) of ``index``."""
        body: Json = {"properties": properties} if properties is not None else {}
        if meta is not None:
            body["_meta"] = meta
        self._c.raw.indices.put_mapping(index=index, body=body)

    def get_alias(self, *, name: str) -> Json:
        """``GET _alias/<name>``; ``{}`` when the alias does not exist (one request either way)."""
        try:
            resp: Json = _plain(self._c.raw.indices.get_alias(name=name))
        except API_ERRORS as exc:
            if status_of(exc) != 404:
                raise
            return {}
        return resp

    def exists_alias(self, *, name: str) -> bool:
        return bool(self._c.raw.indices.exists_alias(name=name))

    def update_aliases(self, *, actions: list[Json]) -> None:
        self._c.raw.indices.update_aliases(body={"actions": actions})

    def stats(self, *, index: str, metric: str | None = None, include_segment_file_sizes: bool | None = None) -> Json:
        """``GET <index>/_stats[/<metric>]``; ``include_segment_file_sizes`` adds bytes per Lucene file extension
        (``segments.file_sizes``: ``vec``, ``vex``, ``veq``, ...; one ``cfs`` for compound segments)."""
        resp: Json = _plain(self._c.raw.indices.stats(
            index=index, metric=metric, **self._c._q(include_segment_file_sizes=include_segment_file_sizes)))
        return resp

    def forcemerge(self, *, index: str, max_num_segments: int | None = None, only_expunge_deletes: bool | None = None,
                   wait_s: float | None = None) -> None:
        """``POST <index>/_forcemerge`` and wait for it: up to ``wait_s`` seconds when given, else the client's
        ``request_timeout`` (the merge goes on in the engine when the wait ends)."""
        params = self._c._q(max_num_segments=max_num_segments, only_expunge_deletes=only_expunge_deletes)
        if wait_s is None:
            self._c.raw.indices.forcemerge(index=index, **params)
        elif self._c.engine.kind == "opensearch":
            self._c.raw.indices.forcemerge(index=index, params={**params.get("params", {}), "request_timeout": wait_s})
        else:
            self._c.raw.options(request_timeout=wait_s, max_retries=0).indices.forcemerge(index=index, **params)

    def flush(self, *, index: str) -> None:
        self._c.raw.indices.flush(index=index)

    def disk_usage(self, *, index: str) -> Json | None:
        """Bytes per field and data structure (Elasticsearch's ``_disk_usage?run_expensive_tasks=true``, which reads
        every file of the index); None on OpenSearch, which has no such API."""
        if self._c.engine.kind == "opensearch":
            return None
        with warnings.catch_warnings():  # the client marks the API as a technical preview on every call
            warnings.simplefilter("ignore")
            resp: Json = _plain(self._c.raw.indices.disk_usage(index=index, run_expensive_tasks=True))
        return resp


class _Cluster(_Namespace):
    def health(self, *, index: str | None = None, wait_for_status: str | None = None,
               timeout: str | None = None) -> Json:
        if self._c.engine.kind == "opensearch" and timeout is not None:
            # opensearch-py takes a ``timeout`` parameter for the HTTP timeout: send it in the URL itself
            query = urlencode({k: v for k, v in (("wait_for_status", wait_for_status), ("timeout", timeout)) if v})
            path = f"/_cluster/health/{quote(index)}" if index else "/_cluster/health"
            resp: Json = self._c.raw.transport.perform_request("GET", f"{path}?{query}")
            return resp
        resp = _plain(self._c.raw.cluster.health(index=index, **self._c._q(wait_for_status=wait_for_status,
                                                                            timeout=timeout)))
        return resp

    def get_settings(self, *, include_defaults: bool = False, flat_settings: bool = False) -> Json:
        resp: Json = _plain(self._c.raw.cluster.get_settings(**self._c._q(include_defaults=include_defaults,
                                                                       flat_settings=flat_settings)))
        return resp


class _Nodes(_Namespace):
    def info(self, *, filter_path: str | None = None) -> Json:
        resp: Json = _plain(self._c.raw.nodes.info(**self._c._q(filter_path=filter_path)))
        return resp

    def stats(self, *, metric: str | None = None, filter_path: str | None = None) -> Json:
        resp: Json = _plain(self._c.raw.nodes.stats(metric=metric, **self._c._q(filter_path=filter_path)))
        return resp


class _Cat(_Namespace):
    def indices(self, *, index: str, h: str, bytes: str = "b") -> list[Json]:
        resp: list[Json] = _plain(self._c.raw.cat.indices(index=index, **self._c._q(format="json", bytes=bytes, h=h)))
        return resp


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
        resp: Json = _plain(await (await self.raw()).msearch(body=searches))
        return resp

    async def count(self, *, index: str) -> Json:
        """``GET <index>/_count`` (all documents): the count and ``_shards``."""
        resp: Json = _plain(await (await self.raw()).count(index=index))
        return resp

    async def close(self) -> None:
        if self._raw is not None:
            await self._raw.close()


class _AsyncIndices:
    def __init__(self, client: AsyncEngineClient) -> None:
        self._c = client

    async def get_alias(self, *, name: str) -> Json:
        """See :meth:`_Indices.get_alias`."""
        try:
            resp: Json = _plain(await (await self._c.raw()).indices.get_alias(name=name))
        except API_ERRORS as exc:
            if status_of(exc) != 404:
                raise
            return {}
        return resp

    async def get_mapping(self, *, index: str, ignore_unavailable: bool | None = None) -> Json:
        """See :meth:`_Indices.get_mapping`."""
        raw = await self._c.raw()
        engine = await self._c.detect()
        resp: Json = _plain(await raw.indices.get_mapping(index=index, **_query(
            engine.kind, ignore_unavailable=ignore_unavailable)))
        return resp
