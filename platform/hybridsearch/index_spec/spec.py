"""What an index is created with (:class:`IndexSpec`): name, settings and mappings rendered from its template
for the engine's dialect and, for a log index, the write alias; and the analyzer a new chunk index gets on a
cluster (:func:`with_analyzer`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hybridsearch.engine import EngineClient, engine_errors
from hybridsearch.engine.dialect import Dialect
from hybridsearch.index_spec.names import log_index_name, write_alias_name
from hybridsearch.mappings import load_template
from hybridsearch.settings import IndexSettings, Settings

#: what ``HSP_INDEX__ANALYZER=auto`` picks where the cluster has it (analysis-common: Elasticsearch's full
#: distribution, OpenSearch's zips), and otherwise
PREFERRED_ANALYZER, FALLBACK_ANALYZER = "english", "standard"


@dataclass(frozen=True)
class IndexSpec:
    """What one index is created with. ``write_alias``: the alias its writers use (log indices only)."""

    kind: str  # "chunks" or one of LOG_KINDS
    name: str
    settings: dict[str, Any]
    mappings: dict[str, Any]
    write_alias: str | None = None

    @property
    def body(self) -> dict[str, Any]:
        """The ``PUT <name>`` body: settings, mappings and (log indices) the write alias."""
        body: dict[str, Any] = {"settings": self.settings, "mappings": self.mappings}
        if self.write_alias:
            body["aliases"] = {self.write_alias: {"is_write_index": True}}
        return body

    @property
    def dynamic_settings(self) -> dict[str, Any]:
        """The settings that may be put on an existing index (the engine's extras; flat names)."""
        return {k: v for k, v in self.settings.items() if k.startswith("index.")}


def chunk_spec(settings: Settings, version: int | None = None, *, dialect: Dialect,
               engine_settings: Mapping[str, Any] | None = None) -> IndexSpec:
    """The spec of ``<prefix>-chunks-v<N>`` for ``settings`` (analyzer already resolved: :func:`with_analyzer`) on
    the engine of ``dialect``, with ``engine_settings`` (``EngineInfo.chunk_index_settings``) added. Pure."""
    body = load_template("chunks", settings, dialect)["template"]
    return IndexSpec("chunks", settings.index.versioned(version), {**body["settings"], **(engine_settings or {})},
                     body["mappings"])


def log_spec(settings: Settings, kind: str, dialect: Dialect) -> IndexSpec:
    """The spec of log index ``kind`` (one of :data:`LOG_KINDS`) of ``settings``' prefix. Pure."""
    name = log_index_name(settings.index, kind)
    body = load_template(kind, settings, dialect)["template"]
    return IndexSpec(kind, name, body["settings"], body["mappings"], write_alias_name(settings.index, kind))


def resolve_analyzer(es: EngineClient, index: IndexSettings) -> str:
    """The analyzer a new chunk index of ``index`` gets on this cluster: ``auto`` becomes ``english`` where the
    cluster offers it, else ``standard``; a named analyzer is kept."""
    if index.analyzer != "auto":
        return index.analyzer
    with engine_errors("check the english analyzer"):
        return PREFERRED_ANALYZER if es.has_analyzer(PREFERRED_ANALYZER) else FALLBACK_ANALYZER


def with_analyzer(es: EngineClient, settings: Settings) -> Settings:
    """``settings`` with ``index.analyzer`` resolved for this cluster (:func:`resolve_analyzer`): what a new chunk
    index is built with, and what its mapping is compared against."""
    if settings.index.analyzer != "auto":
        return settings
    name = resolve_analyzer(es, settings.index)
    return settings.model_copy(update={"index": settings.index.model_copy(update={"analyzer": name})})


def chunk_spec_for(es: EngineClient, settings: Settings, version: int | None = None) -> IndexSpec:
    """:func:`chunk_spec` for this cluster: its analyzer, dialect and engine settings."""
    return chunk_spec(with_analyzer(es, settings), version, dialect=es.dialect,
                      engine_settings=es.engine.chunk_index_settings)

