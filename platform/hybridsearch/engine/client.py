"""``EngineClient``: the calls the platform makes, the same on every engine.

Each method takes the platform's arguments, sends them to whichever library serves the engine in the one
form both accept (a ``body`` plus query-string parameters, :mod:`.wire`) and returns plain JSON (``dict``/``list``).
The engine is detected on the first call (:func:`~hybridsearch.engine.connect.detect`). Errors are the libraries'
own: wrap calls in :func:`~hybridsearch.engine.errors.engine_errors` to get hybridsearch errors. The namespaced
calls (``es.indices``, ``es.cluster``, ``es.nodes``, ``es.cat``) are in :mod:`.namespaces`; the asyncio client of
the search path is :mod:`.async_client`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import elasticsearch
import elasticsearch.helpers
import opensearchpy
import opensearchpy.helpers

from hybridsearch.engine.connect import EngineInfo, detect, es_client, os_client
from hybridsearch.engine.dialect import Dialect
from hybridsearch.engine.errors import API_ERRORS, error_type_of, status_of
from hybridsearch.engine.namespaces import Cat, Cluster, Indices, Nodes
from hybridsearch.engine.privileges import NO_API, SECURITY_OFF, IndexPrivileges
from hybridsearch.engine.wire import Json, plain, query_params, request_body
from hybridsearch.settings import ClusterSettings

log = logging.getLogger(__name__)
#: analyzers every node has without the analysis-common module
BUILT_IN_ANALYZERS = frozenset({"standard", "simple", "whitespace", "stop", "keyword", "pattern"})


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
        self.indices = Indices(self)
        self.cluster = Cluster(self)
        self.nodes = Nodes(self)
        self.cat = Cat(self)

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
        return query_params(self.engine.kind, **params)

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
        body = request_body(query=query, knn=knn, size=size, source=source, sort=sort, aggs=aggs,
                     track_total_hits=track_total_hits)
        resp: Json = plain(self.raw.search(index=index, body=body, **self._q(filter_path=filter_path)))
        return resp

    def count(self, *, index: str, query: Mapping[str, Any] | None = None, min_score: float | None = None) -> Json:
        body = request_body(query=query) or None
        resp: Json = plain(self.raw.count(index=index, body=body, **self._q(min_score=min_score)))
        return resp

    def msearch(self, *, searches: list[Json]) -> Json:
        """``POST _msearch`` with header/body lines."""
        resp: Json = plain(self.raw.msearch(body=searches))
        return resp

    def index(self, *, index: str, id: str, document: Mapping[str, Any], refresh: bool | str | None = None,
              if_seq_no: int | None = None, if_primary_term: int | None = None, op_type: str | None = None) -> Json:
        """``PUT <index>/_doc/<id>``; with ``if_seq_no``/``if_primary_term`` (or ``op_type="create"``) only when the
        document is still the one read (or absent): a 409 otherwise, read with :func:`status_of`."""
        resp: Json = plain(self.raw.index(index=index, id=id, body=dict(document), **self._q(
            refresh=refresh, if_seq_no=if_seq_no, if_primary_term=if_primary_term, op_type=op_type)))
        return resp

    def get(self, *, index: str, id: str) -> Json | None:
        """``GET <index>/_doc/<id>`` (real time: ``_source``, ``_seq_no``, ``_primary_term``), or None when the
        document is absent. A missing index raises as usual."""
        try:
            resp: Json = plain(self.raw.get(index=index, id=id))
        except API_ERRORS as exc:
            if status_of(exc) == 404 and error_type_of(exc) in (None, ""):
                return None
            raise
        return resp if resp.get("found") else None

    def update(self, *, index: str, id: str, doc: Mapping[str, Any], refresh: bool | str | None = None,
               retry_on_conflict: int | None = None) -> Json:
        resp: Json = plain(self.raw.update(index=index, id=id, body={"doc": dict(doc)},
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
            body = plain(self.raw.security.has_privileges(index=[{"names": names, "privileges": privileges}]))
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
