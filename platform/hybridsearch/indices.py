"""Templates, versioned indices and the read alias.

Chunk indices are named ``<prefix>-chunks-v<N>`` and searched through the alias
``<prefix>-chunks``, so a new model or chunker is a new index and an atomic alias swap.
"""

from __future__ import annotations

from typing import Any

from elasticsearch import Elasticsearch

from hybridsearch.cluster import es_errors
from hybridsearch.errors import IndexMismatch, IndexNotFound
from hybridsearch.mappings import TEMPLATES, load_template, template_name
from hybridsearch.settings import Settings

# _meta keys that must agree between an index and the settings that write to or query it.
CHECKED_META = ("embedding_model", "embedding_dims")


def ensure_templates(es: Elasticsearch, settings: Settings) -> None:
    """Create or update the index templates for chunks, the query log and ingest runs.

    The query-log and ingest-runs indices are not versioned, so when they already exist their
    mappings are brought up to date too (new fields are added; a conflicting change raises
    ClusterError naming the index).
    """
    logs = {"query_log": settings.index.query_log, "ingest_runs": settings.index.ingest_runs}
    for name in TEMPLATES:
        body = load_template(name, settings)
        with es_errors(f"put index template {template_name(name, settings)}"):
            es.indices.put_index_template(name=template_name(name, settings), **body)
        if name in logs:
            with es_errors(f"update mapping of {logs[name]}"):
                if es.indices.exists(index=logs[name]):
                    es.indices.put_mapping(index=logs[name], properties=body["template"]["mappings"]["properties"])


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
    """Create ``<prefix>-chunks-v<N>`` from the template if absent and point the alias at it.

    Idempotent. When the alias already points at an index, that index is checked and returned
    (unless ``version`` names another one explicitly). Raises IndexMismatch when the index records
    another embedding model or dims, ClusterError for other cluster failures.
    """
    ensure_templates(es, settings)
    alias = settings.index.alias
    current = alias_targets(es, alias)
    name = current[-1] if current and version is None else settings.index.versioned(version)
    with es_errors(f"create index {name}"):
        if not es.indices.exists(index=name):
            es.indices.create(index=name)
    check_meta(name, index_meta(es, name), settings)
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
