"""A request to an engine as data (:class:`Request`), and the pure builders of the requests the platform sends:
a new engine call is one builder here, sent unchanged by either client's ``send`` (a HEAD answers True/False)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

Json = dict[str, Any]
RAISE: Any = object()  # Request.absent when a 404 is an error like any other


@dataclass(frozen=True)
class Request:
    """One HTTP request; ``body`` is a list of NDJSON lines for ``_msearch`` and ``_bulk``; ``absent`` the answer
    when the thing asked for (not an index) does not exist (by default that 404 raises)."""

    method: Literal["GET", "HEAD", "POST", "PUT", "DELETE"]
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    body: Json | list[Json] | None = None
    absent: Any = RAISE


def _path(*parts: str | None) -> str:
    """``/a/b`` from the name parts given (not None or empty), each escaped (``,`` and ``*`` kept: patterns)."""
    return "/" + "/".join(quote(p, safe=",*") for p in parts if p)


def params(**given: Any) -> dict[str, str]:
    """Query-string parameters as text, None values left out, booleans as ``true``/``false``."""
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in given.items() if v is not None}


def body(**fields: Any) -> Json:
    """A request body from keyword fields, None values dropped; ``source`` is ``_source``."""
    return {("_source" if k == "source" else k): v for k, v in fields.items() if v is not None}


def search(index: str, query: Json, *, scroll: str | None = None, size: int | None = None) -> Request:
    """A search; with ``scroll``, the first page of a scroll kept open that long (``5m``)."""
    return Request("POST", _path(index, "_search"), params(scroll=scroll, size=size), query)


def scroll(scroll_id: str, keep: str) -> Request:
    """The next page of a scroll, kept open ``keep`` longer."""
    return Request("POST", "/_search/scroll", body={"scroll": keep, "scroll_id": scroll_id})


def clear_scroll(scroll_id: str) -> Request:
    return Request("DELETE", "/_search/scroll", body={"scroll_id": scroll_id}, absent={})


def count(index: str, query: Json | None = None) -> Request:
    return Request("POST", _path(index, "_count"), body=body(query=query) or None)


def msearch(lines: list[Json], *, filter_path: str | None = None) -> Request:
    return Request("POST", "/_msearch", params(filter_path=filter_path), lines)


def get_doc(index: str, doc_id: str) -> Request:
    """The document in real time (``_source``, ``_seq_no``, ``_primary_term``); None when absent."""
    return Request("GET", f"{_path(index, '_doc')}/{quote(doc_id, safe='')}", absent=None)


def put_doc(index: str, doc_id: str, document: Mapping[str, Any], *, refresh: bool | str | None = None,
            if_seq_no: int | None = None, if_primary_term: int | None = None,
            op_type: str | None = None, require_alias: bool | None = None) -> Request:
    """Write the document; a 409 unless it is still the one read (``if_seq_no``/``if_primary_term``) or absent
    (``op_type="create"``); a 404 when ``require_alias`` and ``index`` is not an alias."""
    return Request("PUT", f"{_path(index, '_doc')}/{quote(doc_id, safe='')}", params(
        refresh=refresh, if_seq_no=if_seq_no, if_primary_term=if_primary_term, op_type=op_type,
        require_alias=require_alias), dict(document))


def bulk(actions: list[Json], *, refresh: bool | str | None = None, require_alias: bool | None = None) -> Request:
    """``_bulk`` of actions (``_op_type``, ``_index``, ``_id``, the document as ``_source`` or the other fields)."""
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
    """How many items of a ``_bulk`` answer succeeded, and the failed ones (``{op: item}``)."""
    failed = [entry for entry in answer.get("items", [])
              if not 200 <= int(next(iter(entry.values())).get("status", 500)) < 300]
    return len(answer.get("items", [])) - len(failed), failed


def analyze(text: str, *, analyzer: str | None = None, index: str | None = None, field: str | None = None) -> Request:
    return Request("POST", _path(index, "_analyze"), body=body(analyzer=analyzer, field=field, text=text))


def create_index(index: str, *, settings: Json | None = None, mappings: Json | None = None,
                 aliases: Json | None = None) -> Request:
    return Request("PUT", _path(index), body=body(settings=settings, mappings=mappings, aliases=aliases))


def delete_index(index: str, *, expand_wildcards: str | None = None) -> Request:
    return Request("DELETE", _path(index), params(expand_wildcards=expand_wildcards))


def index_exists(index: str) -> Request:
    return Request("HEAD", _path(index), absent=False)


def get_index(index: str, *, expand_wildcards: str | None = None, allow_no_indices: bool | None = None,
              filter_path: str | None = None) -> Request:
    return Request("GET", _path(index), params(expand_wildcards=expand_wildcards,
                                               allow_no_indices=allow_no_indices, filter_path=filter_path))


def refresh(index: str, *, expand_wildcards: str | None = None) -> Request:
    return Request("POST", _path(index, "_refresh"), params(expand_wildcards=expand_wildcards))


def get_settings(index: str, *, flat_settings: bool = False) -> Request:
    return Request("GET", _path(index, "_settings"), params(flat_settings=flat_settings or None))


def put_settings(index: str, settings: Json) -> Request:
    return Request("PUT", _path(index, "_settings"), body=settings)


def get_mapping(index: str, *, allow_no_indices: bool | None = None, ignore_unavailable: bool | None = None) -> Request:
    return Request("GET", _path(index, "_mapping"),
                   params(allow_no_indices=allow_no_indices, ignore_unavailable=ignore_unavailable))


def put_mapping(index: str, *, properties: Json | None = None, meta: Json | None = None) -> Request:
    """Add ``properties`` and/or replace the whole ``_meta`` (``meta``) of ``index``."""
    return Request("PUT", _path(index, "_mapping"), body=body(properties=properties, _meta=meta))


def get_alias(name: str) -> Request:
    return Request("GET", _path("_alias", name), absent={})


def alias_exists(name: str) -> Request:
    return Request("HEAD", _path("_alias", name), absent=False)


def update_aliases(actions: list[Json]) -> Request:
    return Request("POST", "/_aliases", body={"actions": actions})


def index_stats(index: str, *, metric: str | None = None, include_segment_file_sizes: bool | None = None) -> Request:
    return Request("GET", _path(index, "_stats", metric), params(include_segment_file_sizes=include_segment_file_sizes))


def cluster_health(index: str | None = None, *, wait_for_status: str | None = None,
                   timeout: str | None = None) -> Request:
    return Request("GET", _path("_cluster", "health", index), params(wait_for_status=wait_for_status, timeout=timeout))


def nodes_info(*, filter_path: str | None = None) -> Request:
    return Request("GET", "/_nodes", params(filter_path=filter_path))
