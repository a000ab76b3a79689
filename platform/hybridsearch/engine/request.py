"""A request to an engine as data, and the builders of every request the platform sends.

A :class:`Request` is a method, a path, query-string parameters and a body (a list of lines for the NDJSON
bodies of ``_msearch`` and ``_bulk``), built by the pure functions below and sent unchanged by
:meth:`EngineClient.send <hybridsearch.engine.client.EngineClient.send>` or its asyncio twin, which answer with
plain JSON. A new engine call is one builder here; what differs between engines in a body comes from the
:class:`~hybridsearch.engine.dialect.Dialect`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

Json = dict[str, Any]
Method = Literal["GET", "HEAD", "POST", "PUT", "DELETE"]
#: :attr:`Request.absent` when a 404 is an error like any other
RAISE: Any = object()


@dataclass(frozen=True)
class Request:
    """One HTTP request to the engine.

    ``absent`` is the answer when the engine says the thing asked for does not exist (a 404 that is not about a
    missing index: a document, an alias, a template); by default such a 404 raises like any error.
    ``timeout_s`` replaces the client's request timeout (and sends it once, without retries)."""

    method: Method
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    body: Json | list[Json] | None = None
    absent: Any = RAISE
    timeout_s: float | None = None

    @property
    def ndjson(self) -> bool:
        """Whether the body is NDJSON lines (``_msearch``, ``_bulk``)."""
        return isinstance(self.body, list)


def _path(*parts: str) -> str:
    """``/a/b`` from name parts, each escaped (``,`` and ``*`` kept: lists and patterns of names)."""
    return "/" + "/".join(quote(p, safe=",*") for p in parts)


def _doc_path(index: str, endpoint: str, doc_id: str) -> str:
    """``/<index>/<endpoint>/<id>``, the id escaped whole (it may hold ``/``, ``,`` or ``*``)."""
    return f"{_path(index, endpoint)}/{quote(doc_id, safe='')}"


def params(**given: Any) -> dict[str, str]:
    """Query-string parameters as text, None values left out, booleans as ``true``/``false``."""
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in given.items() if v is not None}


def body(**fields: Any) -> Json:
    """A request body from keyword fields, None values dropped; ``source`` is ``_source``."""
    return {("_source" if k == "source" else k): v for k, v in fields.items() if v is not None}


# ------------------------------------------------------------------------------------------ documents, searches


def search(index: str, query: Json, *, filter_path: str | None = None) -> Request:
    """``POST <index>/_search`` with ``query``, a search body (:func:`body` builds one)."""
    return Request("POST", _path(index, "_search"), params(filter_path=filter_path), query)


def count(index: str, query: Json | None = None, *, min_score: float | None = None) -> Request:
    """``POST <index>/_count``: the count and ``_shards``."""
    return Request("POST", _path(index, "_count"), params(min_score=min_score), body(query=query) or None)


def msearch(lines: list[Json], *, filter_path: str | None = None) -> Request:
    """``POST _msearch`` with header/body lines."""
    return Request("POST", "/_msearch", params(filter_path=filter_path), lines)


def get_doc(index: str, doc_id: str) -> Request:
    """``GET <index>/_doc/<id>`` (real time: ``_source``, ``_seq_no``, ``_primary_term``); None when the document
    is absent (a missing index raises)."""
    return Request("GET", _doc_path(index, "_doc", doc_id), absent=None)


def put_doc(index: str, doc_id: str, document: Mapping[str, Any], *, refresh: bool | str | None = None,
            if_seq_no: int | None = None, if_primary_term: int | None = None,
            op_type: str | None = None, require_alias: bool | None = None) -> Request:
    """``PUT <index>/_doc/<id>``; with ``if_seq_no``/``if_primary_term`` (or ``op_type="create"``) only while
    the document is still the one read (or absent): a 409 otherwise. ``require_alias``: ``index`` must be an alias
    (a 404 otherwise, and no index is created)."""
    return Request("PUT", _doc_path(index, "_doc", doc_id), params(
        refresh=refresh, if_seq_no=if_seq_no, if_primary_term=if_primary_term, op_type=op_type,
        require_alias=require_alias), dict(document))


def update_doc(index: str, doc_id: str, doc: Mapping[str, Any], *, refresh: bool | str | None = None,
               retry_on_conflict: int | None = None) -> Request:
    """``POST <index>/_update/<id>`` with a partial document."""
    return Request("POST", _doc_path(index, "_update", doc_id),
                   params(refresh=refresh, retry_on_conflict=retry_on_conflict), {"doc": dict(doc)})


def bulk(actions: list[Json], *, refresh: bool | str | None = None, require_alias: bool | None = None) -> Request:
    """``POST _bulk`` of ``actions`` in the form of the libraries' bulk helpers: ``_op_type`` (``index``,
    ``create``, ``update``, ``delete``), ``_index``, ``_id``, and the document under ``_source`` or as the other
    fields (``doc`` for an update). Read the answer with :func:`bulk_failures`."""
    lines: list[Json] = []
    for action in actions:
        op = action.get("_op_type", "index")
        lines.append({op: {k: action[k] for k in ("_index", "_id") if k in action}})
        if op == "update":
            lines.append({"doc": action["doc"]})
        elif op != "delete":
            lines.append(action["_source"] if "_source" in action else
                         {k: v for k, v in action.items() if not k.startswith("_")})
    return Request("POST", "/_bulk", params(refresh=refresh, require_alias=require_alias), lines)


def bulk_failures(answer: Json) -> tuple[int, list[Json]]:
    """How many items of a ``_bulk`` answer succeeded, and the failed ones (``{op: item}``, as the helpers give)."""
    failed = [entry for entry in answer.get("items", [])
              if not 200 <= int(next(iter(entry.values())).get("status", 500)) < 300]
    return len(answer.get("items", [])) - len(failed), failed


def analyze(text: str, *, analyzer: str | None = None, index: str | None = None, field: str | None = None) -> Request:
    """The tokens of ``text`` by ``analyzer``, or by ``field``'s analyzer in ``index``."""
    return Request("POST", _path(index, "_analyze") if index else "/_analyze",
                   body=body(analyzer=analyzer, field=field, text=text))


def has_privileges(names: list[str], privileges: list[str]) -> Request:
    """Elasticsearch's ``_security/user/_has_privileges`` on indices ``names``."""
    return Request("POST", "/_security/user/_has_privileges",
                   body={"index": [{"names": names, "privileges": privileges}]})


# ------------------------------------------------------------------------------------------ indices


def create_index(index: str, *, settings: Json | None = None, mappings: Json | None = None,
                 aliases: Json | None = None) -> Request:
    return Request("PUT", _path(index), body=body(settings=settings, mappings=mappings, aliases=aliases))


def delete_index(index: str, *, expand_wildcards: str | None = None) -> Request:
    """Delete ``index`` (a name or pattern; a pattern that matches nothing is no error)."""
    return Request("DELETE", _path(index), params(expand_wildcards=expand_wildcards))


def index_exists(index: str) -> Request:
    """``HEAD <index>``: answered True or False."""
    return Request("HEAD", _path(index))


def get_index(index: str, *, expand_wildcards: str | None = None, allow_no_indices: bool | None = None,
              filter_path: str | None = None) -> Request:
    return Request("GET", _path(index), params(expand_wildcards=expand_wildcards,
                                               allow_no_indices=allow_no_indices, filter_path=filter_path))


def refresh(index: str, *, expand_wildcards: str | None = None) -> Request:
    return Request("POST", _path(index, "_refresh"), params(expand_wildcards=expand_wildcards))


def flush(index: str) -> Request:
    return Request("POST", _path(index, "_flush"))


def get_settings(index: str, *, flat_settings: bool = False) -> Request:
    return Request("GET", _path(index, "_settings"), params(flat_settings=flat_settings or None))


def put_settings(index: str, settings: Json) -> Request:
    return Request("PUT", _path(index, "_settings"), body=settings)


def get_mapping(index: str, *, allow_no_indices: bool | None = None, ignore_unavailable: bool | None = None) -> Request:
    """``GET <index>/_mapping`` (``index`` may list several, comma-separated; ``ignore_unavailable`` leaves out
    those that do not exist)."""
    return Request("GET", _path(index, "_mapping"),
                   params(allow_no_indices=allow_no_indices, ignore_unavailable=ignore_unavailable))


def put_mapping(index: str, *, properties: Json | None = None, meta: Json | None = None) -> Request:
    """Add ``properties`` and/or replace the whole ``_meta`` (``meta``) of ``index``."""
    mapping: Json = {"properties": properties} if properties is not None else {}
    if meta is not None:
        mapping["_meta"] = meta
    return Request("PUT", _path(index, "_mapping"), body=mapping)


def get_alias(name: str) -> Request:
    """``GET _alias/<name>``; ``{}`` when the alias does not exist."""
    return Request("GET", _path("_alias", name), absent={})


def alias_exists(name: str) -> Request:
    """``HEAD _alias/<name>``: answered True or False."""
    return Request("HEAD", _path("_alias", name))


def update_aliases(actions: list[Json]) -> Request:
    return Request("POST", "/_aliases", body={"actions": actions})


def get_index_template(name: str | None = None) -> Request:
    """Composable index templates (``name`` may be a pattern; ``{"index_templates": []}`` when none)."""
    return Request("GET", _path("_index_template", name) if name else "/_index_template",
                   absent={"index_templates": []})


def index_stats(index: str, *, metric: str | None = None, include_segment_file_sizes: bool | None = None) -> Request:
    """``GET <index>/_stats[/<metric>]``; ``include_segment_file_sizes`` adds bytes per Lucene file extension
    (``segments.file_sizes``: ``vec``, ``vex``, ``veq``, ...; one ``cfs`` for compound segments)."""
    path = _path(index, "_stats", metric) if metric else _path(index, "_stats")
    return Request("GET", path, params(include_segment_file_sizes=include_segment_file_sizes))


def forcemerge(index: str, *, max_num_segments: int | None = None, only_expunge_deletes: bool | None = None,
               wait_s: float | None = None) -> Request:
    """``POST <index>/_forcemerge`` and wait for it: up to ``wait_s`` seconds when given, else the client's
    request timeout (the merge goes on in the engine when the wait ends)."""
    return Request("POST", _path(index, "_forcemerge"), params(
        max_num_segments=max_num_segments, only_expunge_deletes=only_expunge_deletes), timeout_s=wait_s)


def disk_usage(index: str) -> Request:
    """Elasticsearch's ``_disk_usage?run_expensive_tasks=true``: bytes per field and data structure (reads every
    file of the index; OpenSearch has no such API)."""
    return Request("POST", _path(index, "_disk_usage"), params(run_expensive_tasks=True))


def cat_indices(index: str, *, h: str, bytes: str = "b") -> Request:
    return Request("GET", _path("_cat", "indices", index), params(format="json", bytes=bytes, h=h))


# ------------------------------------------------------------------------------------------ cluster, nodes


def cluster_health(index: str | None = None, *, wait_for_status: str | None = None,
                   timeout: str | None = None) -> Request:
    path = _path("_cluster", "health", index) if index else "/_cluster/health"
    return Request("GET", path, params(wait_for_status=wait_for_status, timeout=timeout))


def cluster_settings(*, include_defaults: bool = False, flat_settings: bool = False) -> Request:
    return Request("GET", "/_cluster/settings", params(include_defaults=include_defaults or None,
                                                       flat_settings=flat_settings or None))


def nodes_info(*, filter_path: str | None = None) -> Request:
    return Request("GET", "/_nodes", params(filter_path=filter_path))


def nodes_stats(*, metric: str | None = None, filter_path: str | None = None) -> Request:
    return Request("GET", _path("_nodes", "stats", metric) if metric else "/_nodes/stats",
                   params(filter_path=filter_path))
