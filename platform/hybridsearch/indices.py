"""Versioned chunk indices, the read alias and the log indices, each created with explicit mappings.

Chunk indices are named ``<prefix>-chunks-v<N>`` and searched through the alias
``<prefix>-chunks``, so a new model or chunker is a new index and an atomic alias swap. No index
template is used: every index is created with its settings and mappings from ``mappings/``, so a
team needs index privileges on its own prefix only and can change nothing outside it. What an index is
created with, the one fit check and the one version parser live in :mod:`hybridsearch.index_spec`; the
names below that come from there are kept for their callers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hybridsearch.access import INGEST, prefix_names, require_privileges
from hybridsearch.engine import EngineClient, engine_errors
from hybridsearch.engine.dialect import Dialect
from hybridsearch.errors import AliasConflict, IndexMismatch, IndexNotFound
from hybridsearch.index_spec.create import create_chunk_version, create_index, ensure_index_settings
from hybridsearch.index_spec.create import ensure_log_index as _ensure_log_index
from hybridsearch.index_spec.fit import (
    ADDABLE_FIELDS,
    CHECKED_META,
    CHECKED_VECTOR,
    Difference,
    chunk_differences,
    meta_differences,
)
from hybridsearch.index_spec.spec import FALLBACK_ANALYZER, PREFERRED_ANALYZER, chunk_spec, log_spec, with_analyzer
from hybridsearch.mappings import chunk_meta
from hybridsearch.settings import IndexSettings, Settings

__all__ = [
    "ADDABLE_FIELDS", "CHECKED_META", "CHECKED_VECTOR", "FALLBACK_ANALYZER", "PREFERRED_ANALYZER", "Difference",
    "alias_targets", "check_mapping", "check_meta", "create_index", "ensure_index", "ensure_index_settings",
    "ensure_log_index", "ensure_log_indices", "expected_meta", "get_aliases", "index_body", "index_mapping",
    "index_meta", "live_index", "mapping_differences", "record_meta", "resolve_index", "section_words_of",
    "single_target", "swap_alias", "with_analyzer",
]


def section_words_of(meta: Mapping[str, object]) -> int | None:
    """The section size (words) an index with ``_meta`` ``meta`` scores BM25 on, or None for chunk-level BM25
    (``bm25_unit`` chunk, or an index built before sections existed)."""
    words = meta.get("section_words")
    return int(words) if meta.get("bm25_unit") == "section" and isinstance(words, int) else None


def index_body(name: str, settings: Settings, dialect: Dialect) -> dict[str, Any]:
    """``{"settings": …, "mappings": …}`` of index kind ``name`` (chunks, query_log, ingest_runs, ingest_state) on
    the engine of ``dialect``, from its :mod:`~hybridsearch.index_spec` spec (a chunk index: without the engine's
    chunk-index settings, which need the cluster: ``index_spec.spec.chunk_spec_for``)."""
    spec = chunk_spec(settings, dialect=dialect) if name == "chunks" else log_spec(settings, name, dialect)
    return {"settings": spec.settings, "mappings": spec.mappings}


def ensure_log_index(es: EngineClient, settings: Settings, kind: str) -> str:
    """Create the query-log, ingest-runs or ingest-state index from its spec (mappings, settings, write alias), or
    bring an existing one's mappings up to date (new fields are added; a conflicting change raises ClusterError
    naming the index): :func:`hybridsearch.index_spec.create.ensure_log_index`."""
    return _ensure_log_index(es, settings, kind)


def ensure_log_indices(es: EngineClient, settings: Settings) -> None:
    """:func:`ensure_log_index` for the query log, the ingest runs and the ingest state."""
    for kind in ("query_log", "ingest_runs", "ingest_state"):
        ensure_log_index(es, settings, kind)


def expected_meta(settings: Settings) -> dict[str, Any]:
    """The ``_meta`` a chunk index built from ``settings`` carries (the same on every engine)."""
    return chunk_meta(settings)


def index_mapping(es: EngineClient, index: str) -> dict[str, Any]:
    """The ``mappings`` of one concrete index (``_meta`` and ``properties``). Raises IndexNotFound."""
    with engine_errors(f"get mapping of {index}"):
        body = es.indices.get_mapping(index=index)
    mapping: dict[str, Any] = next(iter(body.values()))["mappings"]
    return mapping


def index_meta(es: EngineClient, index: str) -> dict[str, Any]:
    """``_meta`` of one concrete index (``{}`` when it has none). Raises IndexNotFound."""
    meta: dict[str, Any] = index_mapping(es, index).get("_meta", {})
    return meta


def mapping_differences(mapping: Mapping[str, Any], settings: Settings, keys: tuple[str, ...] = CHECKED_META, *,
                        dialect: Dialect) -> list[Difference]:
    """Where an index's ``mappings`` disagree with what ``settings`` would build: the ``_meta`` ``keys``
    (as ``_meta.<key>``), the vector's dims and similarity (``embedding.dims``...) and the type of every
    field of the chunk template (``<field>.type``; ADDABLE_FIELDS may be missing):
    :func:`hybridsearch.index_spec.fit.chunk_differences`."""
    return chunk_differences(mapping, settings, keys, dialect=dialect)


def _raise_mismatch(index: str, diffs: list[Difference]) -> None:
    if not diffs:
        return
    text = "; ".join(f"{f}: index has {a!r}, settings say {e!r}" if a is not None else
                     f"{f}: index lacks it, settings say {e!r}" for f, e, a in diffs)
    raise IndexMismatch(
        f"index {index} does not fit the settings (built for another model or by hand): {text}",
        fix="Use matching HSP_EMBEDDING__* / HSP_INDEX__* settings, or build a new index version and migrate "
        "(`hsp index migrate`).",
        index=index, differences=tuple(diffs),
    )


def check_meta(index: str, meta: dict[str, Any], settings: Settings, keys: tuple[str, ...] = CHECKED_META) -> None:
    """Raise IndexMismatch when ``meta`` disagrees with ``settings`` on any of ``keys`` (engine-independent)."""
    _raise_mismatch(index, meta_differences(meta, settings, keys))


def check_mapping(index: str, mapping: Mapping[str, Any], settings: Settings, dialect: Dialect) -> None:
    """Raise IndexMismatch (carrying the differences) when the index's real mapping, not only its ``_meta``,
    does not fit ``settings``: model and dims in ``_meta``, vector dims and similarity, field types."""
    _raise_mismatch(index, mapping_differences(mapping, settings, dialect=dialect))


def record_meta(es: EngineClient, index: str, **entries: Any) -> dict[str, Any]:
    """Set ``entries`` in ``index``'s ``_meta`` (other keys kept; an update replaces the whole ``_meta``, so it is
    read first). Returns the new ``_meta``. Raises IndexNotFound, ClusterError (e.g. AccessDenied)."""
    meta = {**index_meta(es, index), **entries}
    with engine_errors(f"record {', '.join(entries)} in the _meta of {index}"):
        es.indices.put_mapping(index=index, meta=meta)
    return meta


def alias_targets(es: EngineClient, alias: str) -> list[str]:
    """Concrete indices behind ``alias`` (``[]`` when the alias does not exist)."""
    with engine_errors(f"get alias {alias}"):
        if not es.indices.exists_alias(name=alias):
            return []
        return sorted(es.indices.get_alias(name=alias))


def single_target(alias: str, aliases: Mapping[str, Any]) -> str:
    """The one index behind ``alias`` in a ``GET _alias/<alias>`` answer (``{index: {"aliases": ...}}``).

    Raises IndexNotFound when no index carries the alias and AliasConflict when several do: reads through
    such an alias mix the indices (collapse keeps either copy of a document) while writes go to one of them,
    so searches would serve stale text under another index's name.
    """
    targets = sorted(i for i, v in aliases.items() if isinstance(v, dict) and "aliases" in v)
    if not targets:
        raise IndexNotFound(f"alias {alias} does not exist: run `hsp index create` or `hsp ingest` first")
    if len(targets) > 1:
        writers = [i for i in targets if (aliases[i]["aliases"].get(alias) or {}).get("is_write_index")]
        keep = writers[0] if len(writers) == 1 else targets[0]
        remove = ", ".join(json.dumps({"remove": {"index": i, "alias": alias}}) for i in targets if i != keep)
        version = keep.rsplit("-v", 1)[-1]
        raise AliasConflict(
            f"alias {alias} points at {len(targets)} indices ({', '.join(targets)}); searches and writes need "
            "exactly one",
            fix=f"Keep one with `hsp index rollback --to-version {version if version.isdigit() else 'N'}`"
            f" (keeps {keep}), or remove the others: POST _aliases {{\"actions\": [{remove}]}}",
            alias=alias, indices=tuple(targets),
        )
    return targets[0]


def get_aliases(es: EngineClient, alias: str) -> dict[str, Any]:
    """``GET _alias/<alias>`` (``{}`` when it does not exist)."""
    with engine_errors(f"resolve alias {alias}"):
        body = es.indices.get_alias(name=alias)
    return {i: v for i, v in body.items() if isinstance(v, dict) and "aliases" in v}


def live_index(es: EngineClient, index: IndexSettings) -> str:
    """The one concrete index the read alias of ``index`` points at, unchecked. Raises IndexNotFound (no alias),
    AliasConflict (several indices)."""
    return single_target(index.alias, get_aliases(es, index.alias))


def resolve_index(es: EngineClient, settings: Settings, *, check: bool = True) -> str:
    """The one concrete index the read alias points at; with ``check``, its real mapping is checked against
    ``settings`` (:func:`check_mapping`). Every reader and writer resolves the alias here (the async search
    client runs the same :func:`single_target` and :func:`check_mapping` on its own I/O).

    Raises IndexNotFound (no alias), AliasConflict (several indices), IndexMismatch.
    """
    index = live_index(es, settings.index)
    if check:
        check_mapping(index, index_mapping(es, index), settings, es.dialect)
    return index


def ensure_index(es: EngineClient, settings: Settings, version: int | None = None) -> str:
    """Create ``<prefix>-chunks-v<N>`` from its spec if absent (``index_spec.create.create_chunk_version``: explicit
    mappings, the cluster's analyzer, the engine's chunk-index settings), point the alias at it, and create the log
    indices.

    Idempotent. When the alias already points at an index, that index is checked and returned
    (unless ``version`` names another one explicitly); the engine's chunk-index settings it lacks are put on it.
    Checks first that the credentials may ingest into the prefix (AccessDenied, nothing written). Raises
    AliasConflict when the alias points at several indices, IndexMismatch when the index's mapping does not fit the
    settings (model, dims, similarity, field types), ClusterError for other cluster failures.
    """
    require_privileges(es, prefix_names(settings.index), INGEST, f"write to prefix {settings.index.prefix}")
    alias = settings.index.alias
    aliases = get_aliases(es, alias)
    current = [single_target(alias, aliases)] if aliases else []
    if current and version is None:
        name = current[0]
        with engine_errors(f"put the engine's settings on {name}"):
            ensure_index_settings(es, name, es.engine.chunk_index_settings)
    else:
        name, _ = create_chunk_version(es, settings, version, exist_ok=True, point_alias=False)
    mapping = index_mapping(es, name)
    check_mapping(name, mapping, settings, es.dialect)
    missing = {f: spec for f, spec in index_body("chunks", settings, es.dialect)["mappings"]["properties"].items()
               if f in ADDABLE_FIELDS and f not in mapping.get("properties", {})}
    if missing:  # an index built before these fields existed: add them so that writes carrying them pass
        with engine_errors(f"add fields {', '.join(missing)} to {name}"):
            es.indices.put_mapping(index=name, properties=missing)
    ensure_log_indices(es, settings)
    if not current:
        with engine_errors(f"point alias {alias} at {name}"):
            es.indices.update_aliases(actions=[{"add": {"index": name, "alias": alias, "is_write_index": True}}])
    return name


def swap_alias(es: EngineClient, alias: str, new_index: str) -> list[str]:
    """Atomically point ``alias`` at ``new_index`` alone; returns the indices it left."""
    old = [i for i in alias_targets(es, alias) if i != new_index]
    actions: list[dict[str, Any]] = [{"remove": {"index": i, "alias": alias}} for i in old]
    actions.append({"add": {"index": new_index, "alias": alias, "is_write_index": True}})
    with engine_errors(f"swap alias {alias} to {new_index}"):
        es.indices.update_aliases(actions=actions)
    return old
