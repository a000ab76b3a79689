"""What ``hsp index status`` shows, read-only: the chunk index versions of a prefix, where the read alias points,
per version its counts, size, health, ``_meta`` and vector options, and the prefix's log indices. The operations
that create, migrate and move the alias live in :mod:`hybridsearch.lifecycle`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hybridsearch.engine import EngineClient, engine_errors
from hybridsearch.errors import IndexNotFound
from hybridsearch.index_spec.names import parse_version
from hybridsearch.indices import alias_targets
from hybridsearch.ingest.lease import hidden_documents
from hybridsearch.settings import IndexSettings
from hybridsearch.visibility import state_index_for, state_index_of, visible_query


def list_versions(es: EngineClient, index: IndexSettings) -> dict[int, str]:
    """``{N: index}`` for every ``<prefix>-chunks-v<N>`` in the cluster, sorted by N."""
    with engine_errors("list chunk indices"):
        body = es.indices.get(index=f"{index.alias}-v*", expand_wildcards="open,closed",
                              allow_no_indices=True, filter_path="*.settings.index.provided_name")
    found = {v: name for name in body if (v := parse_version(name, index.alias)) is not None}
    return dict(sorted(found.items()))



@dataclass
class IndexStatus:
    """One chunk index as ``hsp index status`` shows it."""

    name: str
    version: int | None
    live: bool
    health: str
    status: str
    chunks: int
    documents: int | None
    store_bytes: int
    model: str | None
    dims: int | None
    chunker: str | None
    index_options: dict[str, Any] = field(default_factory=dict)
    created: str | None = None
    pending: int = 0  # documents hidden: being written, or left half written by a stopped run (not searchable)


@dataclass
class ClusterStatus:
    """Everything ``hsp index status`` reports for one prefix."""

    prefix: str
    alias: str
    alias_targets: list[str]
    indices: list[IndexStatus]
    logs: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def doc_count(es: EngineClient, index: str) -> int | None:
    """Distinct documents in a chunk index (cardinality of doc_id; approximate above 40k)."""
    try:
        with engine_errors(f"count documents in {index}"):
            body = es.search(index=index, size=0, query=visible_query(state_index_of(es, state_index_for(index))),
                             track_total_hits=True,
                             aggs={"docs": {"cardinality": {"field": "doc_id", "precision_threshold": 40000}}})
        return int(body["aggregations"]["docs"]["value"])
    except IndexNotFound:
        return None


def pending_documents(es: EngineClient, index: str) -> int:
    """Documents hidden in the prefix of ``index``: being written, or left half written by a stopped run."""
    return len({d for ids in hidden_documents(es, state_index_for(index)).values() for d in ids})


def index_status(es: EngineClient, index: IndexSettings) -> ClusterStatus:
    """Aliases, versions, counts, ``_meta``, size, health and vector options for the prefix."""
    prefix = index.prefix
    live = set(alias_targets(es, index.alias))
    versions = list_versions(es, index)
    rows: list[IndexStatus] = []
    if versions:
        names = ",".join(versions.values())
        with engine_errors("cat indices"):
            rows_json: list[dict[str, Any]] = es.cat.indices(
                index=names, bytes="b",
                h="index,health,status,docs.count,store.size,creation.date.string")  # type: ignore[assignment]
            cat = {r["index"]: r for r in rows_json}
            mappings = es.indices.get_mapping(index=names)
        for version, name in versions.items():
            row = cat.get(name, {})
            mapping = mappings.get(name, {}).get("mappings", {})
            meta = mapping.get("_meta", {})
            vec = es.dialect.vector_summary(mapping.get("properties", {}).get("embedding", {}))
            rows.append(IndexStatus(
                name=name, version=version, live=name in live, health=str(row.get("health", "?")),
                status=str(row.get("status", "?")), chunks=int(row.get("docs.count") or 0),
                documents=doc_count(es, name) if row.get("status") == "open" else None,
                store_bytes=int(row.get("store.size") or 0), model=meta.get("embedding_model"),
                dims=vec.dims or meta.get("embedding_dims"), chunker=meta.get("chunker_version"),
                index_options=vec.options, created=row.get("creation.date.string"),
                pending=pending_documents(es, name) if row.get("status") == "open" else 0,
            ))
    logs: dict[str, int] = {}
    for name in (index.query_log, index.ingest_runs):
        with engine_errors(f"count {name}"):
            if es.indices.exists(index=name):
                logs[name] = int(es.count(index=name)["count"])
    return ClusterStatus(prefix=prefix, alias=index.alias, alias_targets=sorted(live), indices=rows,
                         logs=logs)
