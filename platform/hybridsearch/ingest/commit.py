"""Staged writes: a document becomes searchable only when every chunk of it is in the index.

Elasticsearch cannot write several documents atomically, so ingestion stages each new or changed
document (see :mod:`hybridsearch.pending` for the reader's side):

1. **Look up** every stored chunk of the document (:func:`stored_chunks`): its ids, which are visible,
   and which already hold this version (same ``content_hash``; the chunk ``_id`` names the position and
   chunker, so such a chunk is exactly what would be written again).
2. **Hide** the visible ones (:func:`hide`, partial updates setting ``pending_run``), so an old version
   never shows half-overwritten: a changed document is invisible while it is rewritten.
3. **Write** the chunks that are missing, with ``pending_run`` set. Chunks an earlier, stopped run wrote
   with the same content are reused, not embedded again (the run's ``reused`` count).
4. **Commit** once every chunk is acknowledged (:func:`commit`): delete the old version's surplus chunks
   (already hidden), then flip the others visible (partial updates setting ``pending_run`` to null) in
   *one* ``_bulk`` request for all the documents of a write batch, chunk 0 of each last.

One request, because a request the node has received is carried out even if the client dies a moment
later: a run killed (SIGKILL) or stopped while committing leaves each document all hidden or all visible.
(With two requests, a kill between them was seen to leave 89 of 90 chunks searchable.) What Elasticsearch
itself does not make atomic remains: a refresh in the middle of applying that request can show part of it
for one refresh interval, and items rejected (429) and retried, or a node lost mid-request, can leave part
of a document visible. A document whose flip fails gets chunk 0 hidden again. Chunk 0 visible with the
document's hash therefore means "done"; anything else is not done, and the next run hides, reuses and
commits it again, which repairs it. Surplus chunks are hidden before they are deleted, so a failed delete
leaves garbage, never duplicates.

Cost: each new chunk is written twice (once staged, once flipped; a partial update re-indexes the chunk,
vector included), and a changed document's old chunks are updated once more to hide them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hybridsearch.access import chunk_names, require_privileges
from hybridsearch.engine import EngineClient, connect, engine_errors
from hybridsearch.errors import ClusterError
from hybridsearch.indices import alias_targets
from hybridsearch.ingest.writer import WriteReport, write_actions
from hybridsearch.pending import PENDING_FIELD
from hybridsearch.settings import IngestSettings, Settings


@dataclass
class Stored:
    """The chunks of one document already in the index."""

    ids: set[str] = field(default_factory=set)
    visible: set[str] = field(default_factory=set)
    same: set[str] = field(default_factory=set)  # ids holding the version being ingested (same content_hash)


@dataclass
class Staged:
    """A document whose chunks are all written (pending): ``ids`` of its version in position order."""

    doc_id: str
    ids: list[str]
    stored: Stored


def _doc_filter(doc_ids: list[str], tenant: str | None) -> list[dict[str, Any]]:
    flt: list[dict[str, Any]] = [{"terms": {"doc_id": doc_ids}}]
    if tenant:
        flt.append({"term": {"tenant": tenant}})
    return flt


def stored_chunks(es: EngineClient, index: str, hashes: dict[str, str], tenant: str | None) -> dict[str, Stored]:
    """``{doc_id: Stored}`` for the documents of ``hashes`` (``doc_id → content_hash`` being ingested);
    documents with no chunk are left out. Sees what is searchable: the index is refreshed when a run starts."""
    found: dict[str, Stored] = {}
    if not hashes:
        return found
    query = {"query": {"bool": {"filter": _doc_filter(list(hashes), tenant)}},
             "_source": ["doc_id", "content_hash", PENDING_FIELD]}
    with engine_errors("look up stored chunks"):
        for h in es.scan(index=index, query=query, size=1000):
            src = h["_source"]
            s = found.setdefault(src["doc_id"], Stored())
            s.ids.add(h["_id"])
            if not src.get(PENDING_FIELD):
                s.visible.add(h["_id"])
            if src.get("content_hash") == hashes.get(src["doc_id"]):
                s.same.add(h["_id"])
    return found


def hide(es: EngineClient, index: str, run_id: str, chunks: Iterable[tuple[str, str]], cfg: IngestSettings
         ) -> WriteReport:
    """Set ``pending_run`` on ``chunks`` (``(_id, doc_id)`` pairs), taking them out of every search."""
    actions = [{"_op_type": "update", "_index": index, "_id": i, "_doc_id": d, "doc": {PENDING_FIELD: run_id}}
               for i, d in chunks]
    return write_actions(es, actions, cfg) if actions else WriteReport()


def commit(es: EngineClient, index: str, run_id: str, docs: list[Staged], cfg: IngestSettings
           ) -> tuple[WriteReport, WriteReport]:
    """Delete the surplus chunks of ``docs``, then make the rest visible in one request, chunk 0 of each last.

    Returns ``(deletes, flips)``; a document with a failed flip is among ``flips.failures`` and gets chunk 0
    hidden again (so it is not done and the next run commits it again)."""
    surplus = [(i, s.doc_id) for s in docs for i in sorted(s.stored.ids - set(s.ids))]
    deletes = write_actions(es, [{"_op_type": "delete", "_index": index, "_id": i, "_doc_id": d}
                                 for i, d in surplus], cfg) if surplus else WriteReport()
    actions = [{"_op_type": "update", "_index": index, "_id": i, "_doc_id": s.doc_id, "doc": {PENDING_FIELD: None}}
               for s in docs for i in [*s.ids[1:], *s.ids[:1]]]
    flips = write_actions(es, actions, cfg, chunk_size=max(cfg.bulk_chunk_size, len(actions))) if actions \
        else WriteReport()  # one request: chunk 0 (last) must not become visible before the others
    broken = {f.doc_id for f in flips.failures}
    hide(es, index, run_id, [(s.ids[0], s.doc_id) for s in docs if s.doc_id in broken and s.ids], cfg)
    return deletes, flips


def existing_chunk_ids(es: EngineClient, index: str, doc_ids: list[str], tenant: str | None = None
                       ) -> list[tuple[str, str]]:
    """``(_id, doc_id)`` of every chunk of ``doc_ids`` in ``index`` (searchable ones; refresh first)."""
    with engine_errors("list chunks"):
        query = {"query": {"bool": {"filter": _doc_filter(doc_ids, tenant)}}, "_source": ["doc_id"]}
        return [(h["_id"], h["_source"]["doc_id"]) for h in es.scan(index=index, query=query, size=1000)]


def delete_documents(doc_ids: Iterable[str], settings: Settings, es: EngineClient | None = None) -> int:
    """Delete every chunk of ``doc_ids`` (visible or pending) from the indices behind the read alias;
    returns chunks deleted. Unknown ids delete nothing. Raises PermissionDenied before deleting anything
    when the credentials may not, ClusterError otherwise."""
    es = es or connect(settings.es)
    require_privileges(es, chunk_names(settings), ("read", "delete"),
                       f"delete documents of prefix {settings.index.prefix}")
    ids = list(dict.fromkeys(doc_ids))
    targets = alias_targets(es, settings.index.alias)
    if not ids or not targets:
        return 0
    deleted = 0
    for index in targets:
        with engine_errors(f"refresh {index}"):
            es.indices.refresh(index=index)
        for start in range(0, len(ids), 500):
            found = existing_chunk_ids(es, index, ids[start:start + 500], settings.index.tenant)
            rep = write_actions(es, [{"_op_type": "delete", "_index": index, "_id": i, "_doc_id": d}
                                     for i, d in found], settings.ingest)
            if rep.failures:
                raise ClusterError(f"{len(rep.failures)} chunks could not be deleted: {rep.failures[0].reason}")
            deleted += rep.deleted
        with engine_errors(f"refresh {index}"):
            es.indices.refresh(index=index)
    return deleted
