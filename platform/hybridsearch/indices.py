"""Versioned chunk indices, the read alias and the log indices, each created with explicit mappings.

Chunk indices are named ``<prefix>-chunks-v<N>`` and searched through the alias
``<prefix>-chunks``, so a new model or chunker is a new index and an atomic alias swap. No index
template is used: every index is created with its settings and mappings from ``mappings/``, so a
team needs index privileges on its own prefix only and can change nothing outside it.
"""

from __future__ import annotations

from typing import Any

import elasticsearch
from elasticsearch import Elasticsearch

from hybridsearch.access import INGEST, prefix_names, require_privileges
from hybridsearch.cluster import es_errors
from hybridsearch.errors import IndexMismatch, IndexNotFound
from hybridsearch.mappings import load_template
from hybridsearch.settings import Settings

# _meta keys that must agree between an index and the settings that write to or query it.
CHECKED_META = ("embedding_model", "embedding_dims")


def index_body(name: str, settings: Settings) -> dict[str, Any]:
    """``{"settings": …, "mappings": …}`` of index kind ``name`` (chunks, query_log, ingest_runs)."""
    body: dict[str, Any] = load_template(name, settings)["template"]
    return body


def ensure_log_index(es: Elasticsearch, settings: Settings, kind: str) -> str:
    """Create the query-log or ingest-runs index with its mappings, or bring an existing one's mappings up
    to date (new fields are added; a conflicting change raises ClusterError naming the index)."""
    name = {"query_log": settings.index.query_log, "ingest_runs": settings.index.ingest_runs}[kind]
    body = index_body(kind, settings)
    with es_errors(f"create or update {name}"):
        if es.indices.exists(index=name):
            es.indices.put_mapping(index=name, properties=body["mappings"]["properties"])
        else:
            create_index(es, name, body)
    return name


def create_index(es: Elasticsearch, name: str, body: dict[str, Any]) -> bool:
    """Create ``name`` with ``body``; False when it exists already (e.g. made meanwhile by a parallel run).
    Call inside ``es_errors``."""
    try:
        es.indices.create(index=name, **body)
        return True
    except elasticsearch.BadRequestError as exc:
        if isinstance(exc.body, dict) and exc.body.get("error", {}).get("type") == "resource_already_exists_exception":
            return False
        raise


def ensure_log_indices(es: Elasticsearch, settings: Settings) -> None:
    """:func:`ensure_log_index` for the query log and the ingest runs."""
    for kind in ("query_log", "ingest_runs"):
        ensure_log_index(es, settings, kind)


def expected_meta(settings: Settings) -> dict[str, Any]:
    """The ``_meta`` a chunk index built from ``settings`` carries."""
    meta: dict[str, Any] = load_template("chunks", settings)["template"]["mappings"]["_meta"]
    return meta


def index_meta(es: Elasticsearch, index: str) -> dict[str, Any]:
    """``_meta`` of one concrete index (``{}`` when it has none). Raises IndexNotFound."""
    with es_errors(f"get mapping of {index}"):
        body = es.indices.get_mapping(index=index).body
    mapping = next(iter(body.values()))["mappings"]
    meta: dict[str, Any] = mapping.get("_meta", {})
    return meta


def check_meta(index: str, meta: dict[str, Any], settings: Settings, keys: tuple[str, ...] = CHECKED_META) -> None:
    """Raise IndexMismatch when ``meta`` disagrees with ``settings`` on any of ``keys``."""
    want = expected_meta(settings)
    diffs = [f"{k}: index has {meta.get(k)!r}, settings say {want[k]!r}" for k in keys if meta.get(k) != want[k]]
    if diffs:
        raise IndexMismatch(
            f"index {index} was built for another model: " + "; ".join(diffs)
            + ". Use matching HSP_EMBEDDING__* settings, or build a new index version and migrate."
        )


def alias_targets(es: Elasticsearch, alias: str) -> list[str]:
    """Concrete indices behind ``alias`` (``[]`` when the alias does not exist)."""
    with es_errors(f"get alias {alias}"):
        if not es.indices.exists_alias(name=alias):
            return []
        return sorted(es.indices.get_alias(name=alias).body)


def resolve_index(es: Elasticsearch, settings: Settings) -> str:
    """The concrete index the read alias points at. Raises IndexNotFound."""
    targets = alias_targets(es, settings.index.alias)
    if not targets:
        raise IndexNotFound(
            f"alias {settings.index.alias} does not exist: run `hsp index create` or `hsp ingest` first"
        )
    return targets[-1]


def ensure_index(es: Elasticsearch, settings: Settings, version: int | None = None) -> str:
    """Create ``<prefix>-chunks-v<N>`` (explicit mappings) if absent, point the alias at it, and create
    the log indices.

    Idempotent. When the alias already points at an index, that index is checked and returned
    (unless ``version`` names another one explicitly). Checks first that the credentials may ingest into
    the prefix (PermissionDenied, nothing written). Raises IndexMismatch when the index records another
    embedding model or dims, ClusterError for other cluster failures.
    """
    require_privileges(es, prefix_names(settings), INGEST, f"write to prefix {settings.index.prefix}")
    alias = settings.index.alias
    current = alias_targets(es, alias)
    name = current[-1] if current and version is None else settings.index.versioned(version)
    with es_errors(f"create index {name}"):
        if not es.indices.exists(index=name):
            create_index(es, name, index_body("chunks", settings))
    check_meta(name, index_meta(es, name), settings)
    ensure_log_indices(es, settings)
    if not current:
        with es_errors(f"point alias {alias} at {name}"):
            es.indices.update_aliases(actions=[{"add": {"index": name, "alias": alias, "is_write_index": True}}])
    return name


def swap_alias(es: Elasticsearch, alias: str, new_index: str) -> list[str]:
    """Atomically point ``alias`` at ``new_index`` alone; returns the indices it left."""
    old = [i for i in alias_targets(es, alias) if i != new_index]
    actions: list[dict[str, Any]] = [{"remove": {"index": i, "alias": alias}} for i in old]
    actions.append({"add": {"index": new_index, "alias": alias, "is_write_index": True}})
    with es_errors(f"swap alias {alias} to {new_index}"):
        es.indices.update_aliases(actions=actions)
    return old
