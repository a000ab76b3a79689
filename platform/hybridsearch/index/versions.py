"""Chunk index versions ``<prefix>-chunks-v<N>`` behind the read alias ``<prefix>-chunks``: the live one
(:func:`live_target` without I/O for the search core, :func:`live_index` for everything else), their ``_meta``,
creation, alias moves, drop and ``hsp index status``."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.errors import AliasConflict, ConfigError, IndexNotFound
from hybridsearch.index.access import (
    CREATE,
    DROP,
    INGEST,
    MOVE_ALIAS,
    chunk_names,
    prefix_names,
    require_privileges,
    write_errors,
)
from hybridsearch.index.logs import ensure_log_indices
from hybridsearch.index.spec import add_alias_if_missing, check_mapping, chunk_spec_for, create_index, parse_version
from hybridsearch.index.visibility import hidden_count, state_index_for, state_index_of, visible_query
from hybridsearch.settings import IndexSettings, Settings

log = logging.getLogger(__name__)


def read_alias(es: EngineClient, alias: str) -> dict[str, Any]:
    """``GET _alias/<alias>``: ``{index: {"aliases": ...}}`` for every index carrying it (``{}`` when none does)."""
    with engine_errors(f"get alias {alias}"):
        body = es.send(request.get_alias(alias))
    return {i: v for i, v in body.items() if isinstance(v, dict) and "aliases" in v}


def live_target(alias: str, aliases: Mapping[str, Any]) -> str:
    """The one index behind ``alias`` in a ``GET _alias/<alias>`` answer. Pure. Raises IndexNotFound when no index
    carries the alias, AliasConflict when several do (reads would mix them while writes go to one)."""
    targets = sorted(i for i, v in aliases.items() if isinstance(v, dict) and "aliases" in v)
    if not targets:
        raise IndexNotFound(f"alias {alias} does not exist: run `hsp index create` or `hsp ingest` first")
    if len(targets) > 1:
        writers = [i for i in targets if (aliases[i]["aliases"].get(alias) or {}).get("is_write_index")]
        keep = writers[0] if len(writers) == 1 else targets[0]
        remove = ", ".join(json.dumps({"remove": {"index": i, "alias": alias}}) for i in targets if i != keep)
        version = parse_version(keep)
        raise AliasConflict(
            f"alias {alias} points at {len(targets)} indices ({', '.join(targets)}); searches and writes need "
            "exactly one",
            fix=f"Keep one with `hsp index rollback --to-version {version or 'N'}`"
            f" (keeps {keep}), or remove the others: POST _aliases {{\"actions\": [{remove}]}}",
            alias=alias, indices=tuple(targets),
        )
    return targets[0]


def live_index(es: EngineClient, index: IndexSettings) -> str:
    """The one index the read alias points at, unchecked. Raises IndexNotFound, AliasConflict."""
    return live_target(index.alias, read_alias(es, index.alias))


def checked_live_index(es: EngineClient, settings: Settings) -> str:
    """:func:`live_index`, its mapping checked. Raises IndexNotFound, AliasConflict, IndexMismatch."""
    index = live_index(es, settings.index)
    check_mapping(index, index_mapping(es, index), settings, es.dialect)
    return index


def index_mapping(es: EngineClient, index: str) -> dict[str, Any]:
    """The ``mappings`` of one concrete index. Raises IndexNotFound."""
    with engine_errors(f"get mapping of {index}"):
        body = es.send(request.get_mapping(index))
    return dict(next(iter(body.values()))["mappings"])


def index_meta(es: EngineClient, index: str) -> dict[str, Any]:
    """``_meta`` of one concrete index (``{}`` when it has none). Raises IndexNotFound."""
    return dict(index_mapping(es, index).get("_meta", {}))


def record_meta(es: EngineClient, index: str, **entries: Any) -> dict[str, Any]:
    """Set ``entries`` in ``index``'s ``_meta``, other keys kept. Returns the new ``_meta``. Raises ClusterError."""
    meta = {**index_meta(es, index), **entries}
    with engine_errors(f"record {', '.join(entries)} in the _meta of {index}"):
        es.send(request.put_mapping(index, meta=meta))
    return meta


def list_versions(es: EngineClient, index: IndexSettings) -> dict[int, str]:
    """``{N: index}`` for every ``<prefix>-chunks-v<N>`` in the cluster, sorted by N."""
    with engine_errors("list chunk indices"):
        body = es.send(request.get_index(f"{index.alias}-v*", expand_wildcards="open,closed", allow_no_indices=True,
                                         filter_path="*.settings.index.provided_name"))
    return dict(sorted((v, name) for name in body if (v := parse_version(name, index.alias)) is not None))


def _create(es: EngineClient, settings: Settings, version: int | None, *, exist_ok: bool) -> str:
    """Create (``exist_ok``: or keep if it fits) version ``version``, the log indices, and the alias when unset."""
    spec = chunk_spec_for(es, settings, version)
    with write_errors(spec.name, f"create index {spec.name}"):
        created = not es.send(request.index_exists(spec.name)) and create_index(es, spec)
    if created:
        log.info("created %s", spec.name)
        ensure_log_indices(es, settings)
    elif not exist_ok:
        raise ConfigError(f"index {spec.name} already exists: pick another --version or drop it first")
    else:
        _prepare(es, settings, spec.name)
    with write_errors(spec.name, f"point alias {settings.index.alias} at {spec.name}"):
        add_alias_if_missing(es, settings.index.alias, spec.name)
    return spec.name


def _prepare(es: EngineClient, settings: Settings, index: str) -> None:
    """Put the engine's chunk-index settings ``index`` lacks, check its mapping, create or update the log indices."""
    if wanted := es.engine.chunk_index_settings:
        with write_errors(index, f"put the engine's settings on {index}"):
            have = es.send(request.get_settings(index, flat_settings=True)).get(index, {}).get("settings", {})
            if differ := {k: v for k, v in wanted.items() if str(have.get(k)) != str(v)}:
                es.send(request.put_settings(index, differ))
    check_mapping(index, index_mapping(es, index), settings, es.dialect)
    ensure_log_indices(es, settings)


def create_version(es: EngineClient, settings: Settings, version: int | None = None) -> str:
    """Create ``<prefix>-chunks-v<N>`` (default: the next N) and the log indices, the alias pointed at it when unset.
    Raises AccessDenied (before writing), ConfigError when the version exists."""
    require_privileges(es, prefix_names(settings.index), CREATE, f"create indices of prefix {settings.index.prefix}")
    version = version or max(list_versions(es, settings.index), default=0) + 1
    return _create(es, settings, version, exist_ok=False)


def ensure_index(es: EngineClient, settings: Settings, version: int | None = None) -> str:
    """The chunk index an ingest writes to, with the log indices: the live one, or version ``version`` (created when
    missing, the alias pointed at it when unset). Raises AccessDenied, AliasConflict, IndexMismatch, ClusterError."""
    require_privileges(es, prefix_names(settings.index), INGEST, f"write to prefix {settings.index.prefix}")
    aliases = read_alias(es, settings.index.alias)
    name = live_target(settings.index.alias, aliases) if aliases else None
    if name is None or version is not None:
        return _create(es, settings, version, exist_ok=True)
    _prepare(es, settings, name)
    return name


def swap_alias(es: EngineClient, cfg: IndexSettings, index: str) -> list[str]:
    """Point the read alias at ``index`` alone, atomically. Returns the indices it left. Raises IndexNotFound."""
    require_privileges(es, chunk_names(cfg), MOVE_ALIAS, f"move the alias {cfg.alias}")
    with engine_errors(f"check {index}"):
        if not es.send(request.index_exists(index)):
            raise IndexNotFound(f"index {index} does not exist")
    old = [i for i in sorted(read_alias(es, cfg.alias)) if i != index]
    actions: list[dict[str, Any]] = [{"remove": {"index": i, "alias": cfg.alias}} for i in old]
    actions.append({"add": {"index": index, "alias": cfg.alias, "is_write_index": True}})
    with engine_errors(f"swap alias {cfg.alias} to {index}"):
        es.send(request.update_aliases(actions))
    return old


def rollback(es: EngineClient, cfg: IndexSettings, version: int | None = None) -> tuple[str, str]:
    """Point the alias back at ``version`` (default: the highest below the live one; required when the alias
    points at several). Returns ``(from_index, to_index)``. Raises IndexNotFound, ConfigError."""
    require_privileges(es, chunk_names(cfg), MOVE_ALIAS, f"move the alias {cfg.alias}")
    targets = sorted(read_alias(es, cfg.alias))
    if not targets:
        raise IndexNotFound(f"alias {cfg.alias} does not exist: nothing to roll back")
    if len(targets) > 1 and version is None:
        raise ConfigError(f"alias {cfg.alias} points at {', '.join(targets)}: name the version to "
                          "keep with --to-version N")
    live = ", ".join(targets)
    live_v = parse_version(targets[-1]) or 0
    versions = list_versions(es, cfg)
    if version is None:
        earlier = [v for v in versions if v < live_v]
        if not earlier:
            raise ConfigError(f"no version older than {live} exists to roll back to")
        version = earlier[-1]
    if version not in versions:
        raise IndexNotFound(f"version {version} ({cfg.versioned(version)}) does not exist")
    target = versions[version]
    if targets == [target]:
        raise ConfigError(f"{target} is already live")
    swap_alias(es, cfg, target)
    return live, target


def drop_version(es: EngineClient, cfg: IndexSettings, version: int) -> str:
    """Delete ``<prefix>-chunks-v<N>``. Raises ConfigError for the live index, IndexNotFound."""
    require_privileges(es, chunk_names(cfg), DROP, f"delete indices of prefix {cfg.prefix}")
    name = cfg.versioned(version)
    if name in read_alias(es, cfg.alias):
        raise ConfigError(f"{name} is live behind {cfg.alias}: migrate or roll back before dropping it")
    with engine_errors(f"delete {name}"):
        if not es.send(request.index_exists(name)):
            raise IndexNotFound(f"index {name} does not exist")
        es.send(request.delete_index(name))
    return name


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
    pending: int = 0  # documents hidden: being written, or left half written by a stopped run


@dataclass
class ClusterStatus:
    """Everything ``hsp index status`` reports for one prefix."""

    prefix: str
    alias: str
    alias_targets: list[str]
    indices: list[IndexStatus]
    logs: dict[str, int]


def doc_count(es: EngineClient, index: str) -> int | None:
    """Distinct visible documents in a chunk index (approximate above 40k); None when it does not exist."""
    try:
        with engine_errors(f"count documents in {index}"):
            body = es.send(request.search(index, request.body(
                size=0, query=visible_query(state_index_of(es, state_index_for(index))), track_total_hits=True,
                aggs={"docs": {"cardinality": {"field": "doc_id", "precision_threshold": 40000}}})))
        return int(body["aggregations"]["docs"]["value"])
    except IndexNotFound:
        return None


def index_status(es: EngineClient, index: IndexSettings) -> ClusterStatus:
    """Aliases, versions, counts, ``_meta``, size, health and vector options for the prefix."""
    live = sorted(read_alias(es, index.alias))
    versions = list_versions(es, index)
    rows: list[IndexStatus] = []
    if versions:
        names = ",".join(versions.values())
        with engine_errors("cat indices"):
            rows_json: list[dict[str, Any]] = es.send(request.Request("GET", f"/_cat/indices/{names}", request.params(
                format="json", bytes="b", h="index,health,status,docs.count,store.size,creation.date.string")))
            cat = {r["index"]: r for r in rows_json}
            mappings = es.send(request.get_mapping(names))
        for version, name in versions.items():
            row = cat.get(name, {})
            mapping = mappings.get(name, {}).get("mappings", {})
            meta = mapping.get("_meta", {})
            vec = es.dialect.vector_summary(mapping.get("properties", {}).get("embedding", {}))
            is_open = row.get("status") == "open"
            rows.append(IndexStatus(
                name=name, version=version, live=name in live, health=str(row.get("health", "?")),
                status=str(row.get("status", "?")), chunks=int(row.get("docs.count") or 0),
                documents=doc_count(es, name) if is_open else None,
                store_bytes=int(row.get("store.size") or 0), model=meta.get("embedding_model"),
                dims=vec.dims or meta.get("embedding_dims"), chunker=meta.get("chunker_version"),
                index_options=vec.options, created=row.get("creation.date.string"),
                pending=hidden_count(es, index.ingest_state) if is_open else 0,
            ))
    logs: dict[str, int] = {}
    for name in (index.query_log, index.ingest_runs):
        with engine_errors(f"count {name}"):
            if es.send(request.index_exists(name)):
                logs[name] = int(es.send(request.count(name))["count"])
    return ClusterStatus(prefix=index.prefix, alias=index.alias, alias_targets=live, indices=rows, logs=logs)
