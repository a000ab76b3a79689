"""Indices created from their specs: the one creator of chunk index versions (:func:`create_chunk_version`) and
of log indices (:func:`ensure_log_index`), and the engine's settings put on an existing index."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hybridsearch.engine import API_ERRORS, EngineClient, error_type_of, status_of
from hybridsearch.errors import ConfigError
from hybridsearch.index_spec.blocks import write_errors
from hybridsearch.index_spec.spec import chunk_spec_for, log_spec
from hybridsearch.settings import Settings

log = logging.getLogger(__name__)


def create_index(es: EngineClient, name: str, body: Mapping[str, Any]) -> bool:
    """Create ``name`` with ``body``; False when it exists already (e.g. made meanwhile by a parallel run).
    Call inside ``engine_errors``."""
    try:
        es.indices.create(index=name, **body)
        return True
    except API_ERRORS as exc:
        if status_of(exc) == 400 and error_type_of(exc) == "resource_already_exists_exception":
            return False
        raise


def ensure_index_settings(es: EngineClient, index: str, wanted: Mapping[str, Any]) -> None:
    """Put the dynamic ``wanted`` settings (flat names) that ``index`` lacks or holds otherwise. Call inside
    ``engine_errors``."""
    if not wanted:
        return
    have = es.indices.get_settings(index=index, flat_settings=True).get(index, {}).get("settings", {})
    differ = {k: v for k, v in wanted.items() if str(have.get(k)) != str(v)}
    if differ:
        es.indices.put_settings(index=index, settings=differ)


def create_chunk_version(es: EngineClient, settings: Settings, version: int | None = None, *,
                         exist_ok: bool = False, point_alias: bool = True) -> tuple[str, bool]:
    """Create ``<prefix>-chunks-v<N>`` (``version`` default: ``settings.index.version``) from its spec: the
    template's settings and mappings for the cluster's analyzer and dialect, plus the engine's chunk-index settings.

    The one creator of chunk indices. An existing index is refused (ConfigError) unless ``exist_ok``; then the
    engine's settings it lacks are put on it. With ``point_alias`` the read alias is pointed at the index when it
    points nowhere yet. Returns ``(name, created)``. Raises ClusterError (IndexBlocked for a blocked cluster).
    """
    spec = chunk_spec_for(es, settings, version)
    with write_errors(spec.name, f"create index {spec.name}"):
        created = not es.indices.exists(index=spec.name) and create_index(es, spec.name, spec.body)
        if not created:
            if not exist_ok:
                raise ConfigError(f"index {spec.name} already exists: pick another --version or drop it first")
            ensure_index_settings(es, spec.name, es.engine.chunk_index_settings)
    if point_alias:
        alias = settings.index.alias
        with write_errors(spec.name, f"point alias {alias} at {spec.name}"):
            if not es.indices.exists_alias(name=alias):
                es.indices.update_aliases(actions=[{"add": {"index": spec.name, "alias": alias,
                                                            "is_write_index": True}}])
    if created:
        log.info("created %s", spec.name)
    return spec.name, created


def ensure_log_index(es: EngineClient, settings: Settings, kind: str) -> str:
    """Create log index ``kind`` from its spec (mappings, settings, write alias), or bring an existing one up to
    date: new fields are added (a conflicting change raises ClusterError naming the index) and a missing write alias
    is added. Returns the index name."""
    spec = log_spec(settings, kind, es.dialect)
    with write_errors(spec.name, f"create or update {spec.name}"):
        if es.indices.exists(index=spec.name):
            es.indices.put_mapping(index=spec.name, properties=spec.mappings["properties"])
            if spec.write_alias and not es.indices.exists_alias(name=spec.write_alias):
                es.indices.update_aliases(actions=[{"add": {"index": spec.name, "alias": spec.write_alias,
                                                            "is_write_index": True}}])
        elif create_index(es, spec.name, spec.body):
            log.info("created %s", spec.name)
    return spec.name

