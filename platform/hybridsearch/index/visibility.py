"""The one read path for chunks: a document is seen whole or not at all.

Neither Elasticsearch nor OpenSearch can make several documents visible at once, so ingestion hides a
document while it writes it (:mod:`hybridsearch.ingest.lease`): before the first chunk of a new or changed
document is written, its ``doc_id`` joins the ``hidden`` list of the prefix's state document
(``<prefix>-ingest-state``, id :data:`STATE_ID`); it leaves the list only once every chunk is written and the
index refreshed. Every reader excludes that list with a *terms lookup* (:func:`visible_filter`), which the
engine resolves with a real-time GET of the state document on every search, kNN filters included, on
Elasticsearch 8/9 and OpenSearch alike. Each chunk is therefore written once, and nothing has to be flipped,
re-written or merged away for a document to appear.

The lookup cannot live in a filtered alias (engines refuse terms lookups in alias filters: "async actions are
left after rewrite"), so it lives here: the query layer adds :func:`visible_filter` to both lists, and every
other reader (re-chunking, migration copies, training data, eval counts, the doctor) reads chunks through
:func:`scan_visible` or :func:`count_visible`. Only the writer's own look-ups (``ingest/``) see hidden chunks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from hybridsearch.engine import request
from hybridsearch.errors import ClusterError

if TYPE_CHECKING:
    from hybridsearch.engine import EngineClient

#: the id of the one state document in ``<prefix>-ingest-state``
STATE_ID = "state"
#: the field that lists the hidden ``doc_id`` s in the state document (the terms lookup's ``path``)
HIDDEN_PATH = "hidden"
_CHUNK_INDEX = re.compile(r"^(?P<prefix>.+)-chunks(?:-v\d+)?$")


def state_index_for(index: str) -> str:
    """The ingest-state index of the prefix a chunk index or read alias belongs to (``<prefix>-chunks[-vN]`` →
    ``<prefix>-ingest-state``, as ``IndexSettings.ingest_state`` names it). Raises ValueError for another name."""
    m = _CHUNK_INDEX.match(index)
    if m is None:
        raise ValueError(f"{index} is not a chunk index (<prefix>-chunks or <prefix>-chunks-v<N>)")
    return f"{m.group('prefix')}-ingest-state"


def hidden_lookup(state_index: str) -> dict[str, Any]:
    """The terms-lookup clause matching chunks of hidden documents."""
    return {"terms": {"doc_id": {"index": state_index, "id": STATE_ID, "path": HIDDEN_PATH}}}


def visible_filter(state_index: str | None) -> dict[str, Any]:
    """Filter clause keeping chunks of whole documents only. ``state_index`` None (a prefix that has no state
    index yet: nothing was ever hidden) excludes nothing."""
    return {"bool": {"must_not": [hidden_lookup(state_index)] if state_index else []}}


def visible_query(state_index: str | None, filters: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """A query matching the visible chunks that pass every one of ``filters``."""
    return {"bool": {"filter": [*filters, visible_filter(state_index)]}}


def hidden_count(es: EngineClient, state_index: str) -> int:
    """How many documents the prefix of ``state_index`` hides: being written, or left half written by a stopped
    run (``0`` without a state document)."""
    from hybridsearch.engine import engine_errors

    with engine_errors(f"read {state_index}"):
        if not es.send(request.index_exists(state_index)):
            return 0
        got = es.send(request.get_doc(state_index, STATE_ID))
    return len(set((got or {}).get("_source", {}).get(HIDDEN_PATH) or []))


def state_index_of(es: EngineClient, state_index: str) -> str | None:
    """``state_index`` when it exists, else None (nothing can be hidden without it)."""
    from hybridsearch.engine import engine_errors

    with engine_errors(f"look for {state_index}"):
        return state_index if es.send(request.index_exists(state_index)) else None


def scan_visible(es: EngineClient, index: str, *, filters: Sequence[dict[str, Any]] = (),
                 source: Any = None, sort: list[Any] | None = None, size: int = 1000, scroll: str = "5m",
                 preserve_order: bool = False) -> Iterator[dict[str, Any]]:
    """Every visible chunk of ``index`` (an index or the alias) passing ``filters``, by scroll: the hits with
    ``_id`` and ``_source`` (``source``: the fields to return, a list or ``{"excludes": [...]}``)."""
    body: dict[str, Any] = {"query": visible_query(state_index_of(es, state_index_for(index)), filters)}
    if source is not None:
        body["_source"] = source
    if sort is not None:
        body["sort"] = sort
    yield from es.scan(index=index, query=body, size=size, scroll=scroll, preserve_order=preserve_order)


def count_visible(es: EngineClient, index: str, filters: Sequence[dict[str, Any]] = ()) -> int:
    """How many visible chunks of ``index`` (a chunk index or the alias) pass ``filters``."""
    query = visible_query(state_index_of(es, state_index_for(index)), filters)
    answer = es.send(request.count(index, query))
    if "count" not in answer:
        raise ClusterError(f"count on {index} gave no count")
    return int(answer["count"])
