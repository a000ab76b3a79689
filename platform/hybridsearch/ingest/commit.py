"""The write protocol, each chunk written once and a document seen whole or not at all: **look up** its stored
chunks (:func:`lookup`, those of this version are reused), **hide** it, **write** each missing chunk under its
stable ``_id``, and **finish** it (:func:`finish`: delete the old version's surplus, refresh, show it). A crash leaves
it hidden; the lease's next holder adopts and repairs it (:func:`show_whole`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.errors import ClusterError
from hybridsearch.index.access import chunk_names, require_privileges
from hybridsearch.index.versions import read_alias
from hybridsearch.index.visibility import visible_query
from hybridsearch.ingest.chunking import chunk_id
from hybridsearch.ingest.lease import Lease, forget_documents
from hybridsearch.ingest.sources import Document
from hybridsearch.ingest.writer import WorkDoc, WriteReport, write_actions
from hybridsearch.settings import IngestSettings, Settings


def refresh(es: EngineClient, index: str) -> None:
    with engine_errors(f"refresh {index}"):
        es.send(request.refresh(index))


def doc_filter(doc_ids: list[str], tenant: str | None) -> list[dict[str, Any]]:
    flt: list[dict[str, Any]] = [{"terms": {"doc_id": doc_ids}}]
    if tenant:
        flt.append({"term": {"tenant": tenant}})
    return flt


def _scan_docs(es: EngineClient, index: str, doc_ids: list[str], tenant: str | None,
               fields: list[str]) -> Iterable[dict[str, Any]]:
    """Every chunk of ``doc_ids`` in ``index``, hidden ones included: the writer's own read (refresh first)."""
    query = {"query": {"bool": {"filter": doc_filter(doc_ids, tenant)}}, "_source": fields}
    with engine_errors("look up stored chunks"):
        yield from es.scan(index=index, query=query, size=1000)


def stored_chunks(es: EngineClient, index: str, hashes: dict[str, str], tenant: str | None
                  ) -> dict[str, dict[str, bool]]:
    """``{doc_id: {chunk _id: whether it holds the content_hash of hashes[doc_id]}}``; documents with no chunk are
    left out."""
    found: dict[str, dict[str, bool]] = {}
    for h in _scan_docs(es, index, list(hashes), tenant, ["doc_id", "content_hash"]) if hashes else ():
        src = h["_source"]
        found.setdefault(src["doc_id"], {})[h["_id"]] = src.get("content_hash") == hashes.get(src["doc_id"])
    return found


def show_whole(es: EngineClient, index: str, lease: Lease, doc_ids: Iterable[str], tenant: str | None) -> set[str]:
    """Refresh and show those of ``doc_ids`` whose stored chunks form one whole version (one ``content_hash``,
    positions ``0..n-1`` with ``n`` the ``doc_chunks`` every chunk records); returns them. Raises LeaseLost."""
    refresh(es, index)
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
    lease.show(whole)
    return whole


def lookup(es: EngineClient, index: str, state_index: str, docs: list[Document], signature: str,
           tenant: str | None) -> tuple[list[WorkDoc], int, int]:
    """``docs`` to (re)write (new, changed, or hidden: left unfinished by a stopped run) with their stored chunks,
    and how many documents and visible chunks are unchanged (chunk 0 visible with their ``content_hash``)."""
    query = visible_query(state_index, [*doc_filter([d.doc_id for d in docs], tenant), {"term": {"position": 0}}])
    with engine_errors("look up existing chunks"):
        hits = es.send(request.search(index, request.body(
            query=query, size=len(docs) * 4, source=["doc_id", "content_hash"])))["hits"]["hits"]
    done = {(h["_id"], h["_source"].get("content_hash")) for h in hits}
    same = [d.doc_id for d in docs if (chunk_id(d.doc_id, 0, signature, tenant), d.content_hash) in done]
    unchanged = 0
    if same:
        with engine_errors("count unchanged chunks"):
            unchanged = int(es.send(request.count(index, visible_query(state_index, doc_filter(same, tenant))))
                            ["count"])
    rest = [d for d in docs if d.doc_id not in same]
    stored = stored_chunks(es, index, {d.doc_id: d.content_hash for d in rest}, tenant)
    return [WorkDoc(d, stored.get(d.doc_id, {})) for d in rest], len(same), unchanged


def finish(es: EngineClient, index: str, lease: Lease, docs: list[WorkDoc], cfg: IngestSettings, *,
           untouched: Sequence[str] = ()) -> tuple[WriteReport, set[str]]:
    """Delete the old versions' chunks beyond the new ends, refresh, and show ``docs`` and ``untouched`` (failed
    before any chunk of their new version was written) in one compare-and-set. Returns the deletes and the ids of
    documents that stay hidden (a surplus chunk not deleted). Raises LeaseLost."""
    surplus = [(i, s.doc.doc_id) for s in docs for i in sorted(set(s.stored) - set(s.ids))]
    deletes = write_actions(es, [{"_op_type": "delete", "_index": index, "_id": i, "_doc_id": d}
                                 for i, d in surplus], cfg) if surplus else WriteReport()
    broken = {f.doc_id for f in deletes.failures}
    done = [s.doc.doc_id for s in docs if s.doc.doc_id not in broken] + list(untouched)
    if done:
        refresh(es, index)
        lease.show(done)
    return deletes, broken


def delete_documents(doc_ids: Iterable[str], settings: Settings, es: EngineClient | None = None,
                     lease: Lease | None = None) -> int:
    """Delete every chunk of ``doc_ids`` (visible or hidden) from the indices behind the read alias and drop them
    from the ``unfinished`` hold; returns chunks deleted. Under an ingest ``lease`` (a sync) they are hidden first,
    so each disappears whole. Raises AccessDenied before deleting anything, LeaseLost, ClusterError."""
    es = es or EngineClient(settings.es)
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
        refresh(es, index)
        for start in range(0, len(ids), 500):
            found = stored_chunks(es, index, dict.fromkeys(ids[start:start + 500], ""), settings.index.tenant)
            rep = write_actions(es, [{"_op_type": "delete", "_index": index, "_id": i, "_doc_id": d}
                                     for d, s in found.items() for i in s], settings.ingest)
            if rep.failures:
                raise ClusterError(f"{len(rep.failures)} chunks could not be deleted: {rep.failures[0].reason}")
            deleted += rep.deleted
        refresh(es, index)
    forget_documents(es, settings.index, ids)
    if lease is not None:
        lease.show(ids)  # nothing is left of them: drop them from the lease's hidden list
    return deleted
