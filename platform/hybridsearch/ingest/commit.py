"""The write protocol: each chunk written once, a document seen whole or not at all.

For every new or changed document, in order (:mod:`.prepare`, :mod:`.pipeline`):

1. **Look up** its stored chunks (:func:`stored_chunks`, the writer's own read, hidden chunks included): their
   ids, and which already hold this version (same ``content_hash``; a chunk ``_id`` names the document,
   position and chunker, so such a chunk is exactly what would be written again: an interrupted run's work,
   reused and not embedded again).
2. **Hide** the document once it is chunked (:meth:`.lease.Lease.hide`: its ``doc_id`` joins the state
   document's ``hidden`` list, which every reader excludes: :mod:`hybridsearch.index.visibility`). One
   compare-and-set per group of documents. A document that cannot be chunked (e.g. a typed metadata value that
   does not convert) is dead-lettered without being hidden: its old version stays visible.
3. **Write** each missing chunk once, an ordinary ``index`` action under its stable ``_id`` (a changed
   document's chunks are overwritten in place, unseen).
4. **Finish** it once every chunk is acknowledged (:func:`finish`): delete the chunks of the old version beyond
   the new one's end, refresh the index so every chunk is searchable, then show the documents of the batch in
   one compare-and-set. A document with a failed chunk or delete stays hidden, unless no chunk of its new
   version reached the index: then it is shown again as it was (its old version, or nothing).

Why this design (``docs/architecture.md`` weighs the others): no chunk is written twice and no deleted copies
are left for a merge to clean up (the earlier protocol wrote every chunk staged and again visible: 2 bulk items
per chunk, half the index deleted copies until a forced merge); the switch to visible is one real-time
document update, so a document appears at once on every shard, with no refresh window where part of it
shows; and a crash at any moment leaves the document hidden, never half shown: the lease's next holder adopts
it and repairs it (rewrites it from its source when the run has it, or shows it when every chunk is there:
:func:`whole_documents`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hybridsearch.engine import EngineClient, connect, engine_errors, request
from hybridsearch.errors import ClusterError
from hybridsearch.index.access import chunk_names, require_privileges
from hybridsearch.index.versions import read_alias
from hybridsearch.ingest.lease import Lease, forget_documents
from hybridsearch.ingest.writer import WriteReport, write_actions
from hybridsearch.settings import IngestSettings, Settings


@dataclass
class Stored:
    """The chunks of one document already in the index, hidden or not."""

    ids: set[str] = field(default_factory=set)
    same: set[str] = field(default_factory=set)  # ids holding the version being ingested (same content_hash)


@dataclass
class WrittenDocument:
    """A document whose new version's chunks are all written: their ``ids`` in position order, and the chunks the
    index held before (``stored``)."""

    doc_id: str
    ids: list[str]
    stored: Stored


def _doc_filter(doc_ids: list[str], tenant: str | None) -> list[dict[str, Any]]:
    flt: list[dict[str, Any]] = [{"terms": {"doc_id": doc_ids}}]
    if tenant:
        flt.append({"term": {"tenant": tenant}})
    return flt


def _scan_docs(es: EngineClient, index: str, doc_ids: list[str], tenant: str | None,
               fields: list[str]) -> Iterable[dict[str, Any]]:
    """Every chunk of ``doc_ids`` in ``index``, hidden ones included: the writer's own read (refresh first)."""
    query = {"query": {"bool": {"filter": _doc_filter(doc_ids, tenant)}}, "_source": fields}
    with engine_errors("look up stored chunks"):
        yield from es.scan(index=index, query=query, size=1000)


def stored_chunks(es: EngineClient, index: str, hashes: dict[str, str], tenant: str | None) -> dict[str, Stored]:
    """``{doc_id: Stored}`` for the documents of ``hashes`` (``doc_id → content_hash`` being ingested);
    documents with no chunk are left out."""
    found: dict[str, Stored] = {}
    if not hashes:
        return found
    for h in _scan_docs(es, index, list(hashes), tenant, ["doc_id", "content_hash"]):
        src = h["_source"]
        s = found.setdefault(src["doc_id"], Stored())
        s.ids.add(h["_id"])
        if src.get("content_hash") == hashes.get(src["doc_id"]):
            s.same.add(h["_id"])
    return found


def whole_documents(es: EngineClient, index: str, doc_ids: Iterable[str], tenant: str | None) -> set[str]:
    """Those of ``doc_ids`` whose stored chunks form one whole version: one ``content_hash``, positions
    ``0..n-1`` with ``n`` the ``doc_chunks`` every chunk records. (A document an interrupted run left half
    written is not whole; neither is one whose chunks predate ``doc_chunks``.)"""
    ids = sorted(set(doc_ids))
    seen: dict[str, list[tuple[int, str, Any]]] = {d: [] for d in ids}
    for start in range(0, len(ids), 500):
        for h in _scan_docs(es, index, ids[start:start + 500], tenant,
                            ["doc_id", "position", "content_hash", "doc_chunks"]):
            src = h["_source"]
            seen[src["doc_id"]].append((src.get("position"), src.get("content_hash"), src.get("doc_chunks")))
    whole = set()
    for doc_id, chunks in seen.items():
        totals = {n for _, _, n in chunks}
        if (chunks and len({c for _, c, _ in chunks}) == 1 and len(totals) == 1 and isinstance(n := totals.pop(), int)
                and sorted(p for p, _, _ in chunks) == list(range(n))):
            whole.add(doc_id)
    return whole


def finish(es: EngineClient, index: str, lease: Lease, docs: list[WrittenDocument], cfg: IngestSettings, *,
           untouched: Sequence[str] = ()) -> tuple[WriteReport, set[str]]:
    """Delete the old versions' chunks beyond the new ends, refresh, and show ``docs`` (all written) and
    ``untouched`` (documents that failed before any chunk of their new version reached the index: what the index
    holds of them is their old version, whole, or nothing) in one compare-and-set. Returns the deletes and the ids
    of documents that stay hidden (a surplus chunk that could not be deleted would show next to the new version).
    Raises LeaseLost (the documents then stay hidden)."""
    surplus = [(i, s.doc_id) for s in docs for i in sorted(s.stored.ids - set(s.ids))]
    deletes = write_actions(es, [{"_op_type": "delete", "_index": index, "_id": i, "_doc_id": d}
                                 for i, d in surplus], cfg) if surplus else WriteReport()
    broken = {f.doc_id for f in deletes.failures}
    done = [s.doc_id for s in docs if s.doc_id not in broken] + list(untouched)
    if done:
        with engine_errors(f"refresh {index}"):
            es.send(request.refresh(index))
        lease.show(done)
    return deletes, broken


def existing_chunk_ids(es: EngineClient, index: str, doc_ids: list[str], tenant: str | None = None
                       ) -> list[tuple[str, str]]:
    """``(_id, doc_id)`` of every chunk of ``doc_ids`` in ``index``, hidden ones included (refresh first)."""
    return [(h["_id"], h["_source"]["doc_id"]) for h in _scan_docs(es, index, doc_ids, tenant, ["doc_id"])]


def delete_documents(doc_ids: Iterable[str], settings: Settings, es: EngineClient | None = None,
                     lease: Lease | None = None) -> int:
    """Delete every chunk of ``doc_ids`` (visible or hidden) from the indices behind the read alias, and drop them
    from the documents a stopped run left hidden; returns chunks deleted. Unknown ids delete nothing. Under an
    ingest ``lease`` (a sync) the documents are hidden first, so each disappears whole, and a run that stops
    part way leaves them hidden for the lease's next holder. Raises AccessDenied before deleting anything when
    the credentials may not, LeaseLost, ClusterError otherwise."""
    es = es or connect(settings.es)
    require_privileges(es, chunk_names(settings.index), ("read", "delete"),
                       f"delete documents of prefix {settings.index.prefix}")
    ids = list(dict.fromkeys(doc_ids))
    targets = sorted(read_alias(es, settings.index.alias))
    if not ids or not targets:
        return 0
    if lease is not None:
        lease.hide(ids)
    deleted = 0
    for index in targets:
        with engine_errors(f"refresh {index}"):
            es.send(request.refresh(index))
        for start in range(0, len(ids), 500):
            found = existing_chunk_ids(es, index, ids[start:start + 500], settings.index.tenant)
            rep = write_actions(es, [{"_op_type": "delete", "_index": index, "_id": i, "_doc_id": d}
                                     for i, d in found], settings.ingest)
            if rep.failures:
                raise ClusterError(f"{len(rep.failures)} chunks could not be deleted: {rep.failures[0].reason}")
            deleted += rep.deleted
        with engine_errors(f"refresh {index}"):
            es.send(request.refresh(index))
    forget_documents(es, settings.index.ingest_state, ids)
    if lease is not None:
        lease.show(ids)  # nothing is left of them: drop them from the lease's hidden list
    return deleted
