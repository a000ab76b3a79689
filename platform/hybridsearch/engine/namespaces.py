"""Adapters of the earlier call forms (``es.indices.get_alias(...)``, ``es.search(...)``) onto
:meth:`EngineClient.send <hybridsearch.engine.client.EngineClient.send>` and the builders of :mod:`.request`,
for the modules not converted yet."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from hybridsearch.engine import request as rq
from hybridsearch.engine.client import EngineClient
from hybridsearch.engine.request import Json


class Namespace:
    def __init__(self, client: EngineClient) -> None:
        self._c = client


class Indices(Namespace):
    def create(self, *, index: str, settings: Json | None = None, mappings: Json | None = None,
               aliases: Json | None = None) -> Json:
        resp: Json = self._c.send(rq.create_index(index, settings=settings, mappings=mappings, aliases=aliases))
        return resp

    def put_settings(self, *, index: str, settings: Json) -> None:
        self._c.send(rq.put_settings(index, settings))

    def get_settings(self, *, index: str, flat_settings: bool = False) -> Json:
        resp: Json = self._c.send(rq.get_settings(index, flat_settings=flat_settings))
        return resp

    def get_index_template(self, *, name: str | None = None) -> Json:
        resp: Json = self._c.send(rq.get_index_template(name))
        return resp

    def delete(self, *, index: str, expand_wildcards: str | None = None) -> None:
        self._c.send(rq.delete_index(index, expand_wildcards=expand_wildcards))

    def exists(self, *, index: str) -> bool:
        return bool(self._c.send(rq.index_exists(index)))

    def refresh(self, *, index: str, expand_wildcards: str | None = None) -> None:
        self._c.send(rq.refresh(index, expand_wildcards=expand_wildcards))

    def get(self, *, index: str, expand_wildcards: str | None = None, allow_no_indices: bool | None = None,
            filter_path: str | None = None) -> Json:
        resp: Json = self._c.send(rq.get_index(index, expand_wildcards=expand_wildcards,
                                               allow_no_indices=allow_no_indices, filter_path=filter_path))
        return resp

    def get_mapping(self, *, index: str, allow_no_indices: bool | None = None,
                    ignore_unavailable: bool | None = None) -> Json:
        resp: Json = self._c.send(rq.get_mapping(index, allow_no_indices=allow_no_indices,
                                                 ignore_unavailable=ignore_unavailable))
        return resp

    def put_mapping(self, *, index: str, properties: Json | None = None, meta: Json | None = None) -> None:
        self._c.send(rq.put_mapping(index, properties=properties, meta=meta))

    def get_alias(self, *, name: str) -> Json:
        resp: Json = self._c.send(rq.get_alias(name))
        return resp

    def exists_alias(self, *, name: str) -> bool:
        return bool(self._c.send(rq.alias_exists(name)))

    def update_aliases(self, *, actions: list[Json]) -> None:
        self._c.send(rq.update_aliases(actions))

    def stats(self, *, index: str, metric: str | None = None, include_segment_file_sizes: bool | None = None) -> Json:
        resp: Json = self._c.send(rq.index_stats(index, metric=metric,
                                                 include_segment_file_sizes=include_segment_file_sizes))
        return resp

    def forcemerge(self, *, index: str, max_num_segments: int | None = None, only_expunge_deletes: bool | None = None,
                   wait_s: float | None = None) -> None:
        self._c.send(rq.forcemerge(index, max_num_segments=max_num_segments,
                                   only_expunge_deletes=only_expunge_deletes, wait_s=wait_s))

    def flush(self, *, index: str) -> None:
        self._c.send(rq.flush(index))

    def disk_usage(self, *, index: str) -> Json | None:
        if self._c.engine.kind == "opensearch":
            return None
        with warnings.catch_warnings():  # the engine marks the API as a technical preview on every call
            warnings.simplefilter("ignore")
            resp: Json = self._c.send(rq.disk_usage(index))
        return resp


class Cluster(Namespace):
    def health(self, *, index: str | None = None, wait_for_status: str | None = None,
               timeout: str | None = None) -> Json:
        resp: Json = self._c.send(rq.cluster_health(index, wait_for_status=wait_for_status, timeout=timeout))
        return resp

    def get_settings(self, *, include_defaults: bool = False, flat_settings: bool = False) -> Json:
        resp: Json = self._c.send(rq.cluster_settings(include_defaults=include_defaults, flat_settings=flat_settings))
        return resp


class Nodes(Namespace):
    def info(self, *, filter_path: str | None = None) -> Json:
        resp: Json = self._c.send(rq.nodes_info(filter_path=filter_path))
        return resp

    def stats(self, *, metric: str | None = None, filter_path: str | None = None) -> Json:
        resp: Json = self._c.send(rq.nodes_stats(metric=metric, filter_path=filter_path))
        return resp


class Cat(Namespace):
    def indices(self, *, index: str, h: str, bytes: str = "b") -> list[Json]:
        resp: list[Json] = self._c.send(rq.cat_indices(index, h=h, bytes=bytes))
        return resp


class AdaptedEngineClient(EngineClient):
    """:class:`EngineClient` with the earlier call forms on top of :meth:`~EngineClient.send`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.indices, self.cluster, self.nodes, self.cat = Indices(self), Cluster(self), Nodes(self), Cat(self)

    def search(self, *, index: str, query: Json | None = None, knn: Json | None = None, size: int | None = None,
               source: Any = None, sort: list[Any] | None = None, aggs: Json | None = None,
               track_total_hits: bool | None = None, filter_path: str | None = None) -> Json:
        resp: Json = self.send(rq.search(index, rq.body(query=query, knn=knn, size=size, source=source, sort=sort,
                                                        aggs=aggs, track_total_hits=track_total_hits),
                                         filter_path=filter_path))
        return resp

    def count(self, *, index: str, query: Mapping[str, Any] | None = None, min_score: float | None = None) -> Json:
        resp: Json = self.send(rq.count(index, dict(query) if query is not None else None, min_score=min_score))
        return resp

    def msearch(self, *, searches: list[Json]) -> Json:
        resp: Json = self.send(rq.msearch(searches))
        return resp

    def index(self, *, index: str, id: str, document: Mapping[str, Any], refresh: bool | str | None = None,
              if_seq_no: int | None = None, if_primary_term: int | None = None, op_type: str | None = None) -> Json:
        resp: Json = self.send(rq.put_doc(index, id, document, refresh=refresh, if_seq_no=if_seq_no,
                                          if_primary_term=if_primary_term, op_type=op_type))
        return resp

    def get(self, *, index: str, id: str) -> Json | None:
        resp: Json | None = self.send(rq.get_doc(index, id))
        return resp if resp and resp.get("found") else None

    def update(self, *, index: str, id: str, doc: Mapping[str, Any], refresh: bool | str | None = None,
               retry_on_conflict: int | None = None) -> Json:
        resp: Json = self.send(rq.update_doc(index, id, doc, refresh=refresh, retry_on_conflict=retry_on_conflict))
        return resp
