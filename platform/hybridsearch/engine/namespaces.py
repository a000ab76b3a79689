"""The namespaced calls of :class:`~hybridsearch.engine.client.EngineClient`: ``es.indices``, ``es.cluster``,
``es.nodes`` and ``es.cat``, each sent in the one form both libraries accept and answered with plain JSON."""

from __future__ import annotations

import warnings
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from hybridsearch.engine.connect import EngineInfo
from hybridsearch.engine.errors import API_ERRORS, status_of
from hybridsearch.engine.wire import Json, plain, request_body


class ClientCore(Protocol):
    """What a namespace needs of its client (an :class:`~hybridsearch.engine.client.EngineClient`)."""

    @property
    def engine(self) -> EngineInfo: ...

    @property
    def raw(self) -> Any: ...

    def _q(self, **params: Any) -> dict[str, Any]: ...


class Namespace:
    def __init__(self, client: ClientCore) -> None:
        self._c = client


class Indices(Namespace):
    def create(self, *, index: str, settings: Json | None = None, mappings: Json | None = None,
               aliases: Json | None = None) -> Json:
        resp: Json = plain(self._c.raw.indices.create(
            index=index, body=request_body(settings=settings, mappings=mappings, aliases=aliases)))
        return resp

    def put_settings(self, *, index: str, settings: Json) -> None:
        self._c.raw.indices.put_settings(index=index, body=settings)

    def get_settings(self, *, index: str, flat_settings: bool = False) -> Json:
        resp: Json = plain(self._c.raw.indices.get_settings(index=index, flat_settings=flat_settings))
        return resp

    def get_index_template(self, *, name: str | None = None) -> Json:
        """Composable index templates (``name`` may be a pattern; ``{"index_templates": []}`` when none)."""
        try:
            resp: Json = plain(self._c.raw.indices.get_index_template(name=name))
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
        resp: Json = plain(self._c.raw.indices.get(index=index, **self._c._q(
            expand_wildcards=expand_wildcards, allow_no_indices=allow_no_indices, filter_path=filter_path)))
        return resp

    def get_mapping(self, *, index: str, allow_no_indices: bool | None = None,
                    ignore_unavailable: bool | None = None) -> Json:
        """``GET <index>/_mapping`` (``index`` may list several, comma-separated; ``ignore_unavailable`` leaves
        out those that do not exist)."""
        resp: Json = plain(self._c.raw.indices.get_mapping(index=index, **self._c._q(
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
            resp: Json = plain(self._c.raw.indices.get_alias(name=name))
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
        resp: Json = plain(self._c.raw.indices.stats(
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
            resp: Json = plain(self._c.raw.indices.disk_usage(index=index, run_expensive_tasks=True))
        return resp


class Cluster(Namespace):
    def health(self, *, index: str | None = None, wait_for_status: str | None = None,
               timeout: str | None = None) -> Json:
        if self._c.engine.kind == "opensearch" and timeout is not None:
            # opensearch-py takes a ``timeout`` parameter for the HTTP timeout: send it in the URL itself
            query = urlencode({k: v for k, v in (("wait_for_status", wait_for_status), ("timeout", timeout)) if v})
            path = f"/_cluster/health/{quote(index)}" if index else "/_cluster/health"
            resp: Json = self._c.raw.transport.perform_request("GET", f"{path}?{query}")
            return resp
        resp = plain(self._c.raw.cluster.health(index=index, **self._c._q(wait_for_status=wait_for_status,
                                                                            timeout=timeout)))
        return resp

    def get_settings(self, *, include_defaults: bool = False, flat_settings: bool = False) -> Json:
        resp: Json = plain(self._c.raw.cluster.get_settings(**self._c._q(include_defaults=include_defaults,
                                                                       flat_settings=flat_settings)))
        return resp


class Nodes(Namespace):
    def info(self, *, filter_path: str | None = None) -> Json:
        resp: Json = plain(self._c.raw.nodes.info(**self._c._q(filter_path=filter_path)))
        return resp

    def stats(self, *, metric: str | None = None, filter_path: str | None = None) -> Json:
        resp: Json = plain(self._c.raw.nodes.stats(metric=metric, **self._c._q(filter_path=filter_path)))
        return resp


class Cat(Namespace):
    def indices(self, *, index: str, h: str, bytes: str = "b") -> list[Json]:
        resp: list[Json] = plain(self._c.raw.cat.indices(index=index, **self._c._q(format="json", bytes=bytes, h=h)))
        return resp
