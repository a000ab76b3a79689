"""The one read path for chunks: a document is seen whole or not at all. Ingestion lists the documents it is
writing in the ``hidden`` list of the prefix's state document until every chunk is written; every reader excludes
them with a terms lookup (:func:`visible_filter`; engines refuse it in alias filters), see docs/architecture.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.errors import ClusterError

#: the id of the one state document in ``<prefix>-ingest-state``
STATE_ID = "state"
#: the field of the state document listing the hidden ``doc_id`` s
HIDDEN_PATH = "hidden"
_CHUNK_INDEX = re.compile(r"^(?P<prefix>.+)-chunks(?:-v\d+)?$")


def state_index_for(index: str) -> str:
    """``<prefix>-ingest-state`` for chunk index or alias ``<prefix>-chunks[-vN]``. Raises ValueError otherwise."""
    m = _CHUNK_INDEX.match(index)
    if m is None:
        raise ValueError(f"{index} is not a chunk index (<prefix>-chunks or <prefix>-chunks-v<N>)")
    return f"{m.group('prefix')}-ingest-state"


def hidden_lookup(state_index: str) -> dict[str, Any]:
    """The terms-lookup clause matching chunks of hidden documents."""
    return {"terms": {"doc_id": {"index": state_index, "id": STATE_ID, "path": HIDDEN_PATH}}}


def visible_filter(state_index: str | None) -> dict[str, Any]:
    """Filter clause keeping chunks of whole documents only (``state_index`` None: nothing was ever hidden)."""
    return {"bool": {"must_not": [hidden_lookup(state_index)] if state_index else []}}


def visible_query(state_index: str | None, filters: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """A query matching the visible chunks that pass every one of ``filters``."""
    return {"bool": {"filter": [*filters, visible_filter(state_index)]}}


def hidden_count(es: EngineClient, state_index: str) -> int:
    """How many documents ``state_index`` hides: being written, or left half written by a stopped run."""
    with engine_errors(f"read {state_index}"):
        if not es.send(request.index_exists(state_index)):
            return 0
        got = es.send(request.get_doc(state_index, STATE_ID))
    return len(set((got or {}).get("_source", {}).get(HIDDEN_PATH) or []))


def state_index_of(es: EngineClient, state_index: str) -> str | None:
    """``state_index`` when it exists, else None (nothing can be hidden without it)."""
    with engine_errors(f"look for {state_index}"):
        return state_index if es.send(request.index_exists(state_index)) else None


def scan_visible(es: EngineClient, index: str, *, filters: Sequence[dict[str, Any]] = (),
                 source: Any = None, sort: list[Any] | None = None, size: int = 1000, scroll: str = "5m",
                 preserve_order: bool = False) -> Iterator[dict[str, Any]]:
    """Every visible chunk hit of ``index`` (an index or the alias) passing ``filters``, by scroll."""
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
