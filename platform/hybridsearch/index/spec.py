"""What a chunk index and a log index are made of: their names, the templates in ``mappings/`` rendered from the
settings for one engine, and the :class:`IndexSpec` an index is created with.

**Names.** Chunk index versions are ``<prefix>-chunks-v<N>`` (read by :func:`parse_version` only) behind the read
alias ``<prefix>-chunks``; the log indices of a prefix are :data:`LOG_KINDS`, each written through a write alias
(:func:`write_alias_name`).

**Templates.** Each file in ``mappings/`` holds the ``settings`` and ``mappings`` (under ``template``) an index is
created with explicitly; none is installed as an index template. A string value of the exact form ``"${name}"`` is
replaced by the value of ``name`` in the render context, keeping its type (``"${embedding.dims}"`` becomes ``384``);
placeholders inside longer strings are interpolated as text. A template renders for one engine
(:func:`load_template` takes its :class:`~hybridsearch.engine.Dialect`, with no default); the ``_meta`` a chunk index
records is the same on every engine (:func:`chunk_meta`). ``_meta.schema_version`` names the format the template
makes: an index of another format is refused (:mod:`.fit`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.embedding.prompts import resolve_prompts
from hybridsearch.engine import API_ERRORS, EngineClient, Sender, engine_errors, error_type_of, request, status_of
from hybridsearch.engine.dialect import Dialect
from hybridsearch.errors import ConfigError
from hybridsearch.index.metadata import metadata_mapping
from hybridsearch.settings import IndexSettings, Settings

# ------------------------------------------------------------------------------------------------------ names

LogKind = Literal["query_log", "ingest_runs", "ingest_state"]
#: the log-type indices of a prefix, in the order they are created and checked
LOG_KINDS: tuple[LogKind, ...] = ("query_log", "ingest_runs", "ingest_state")

_VERSION = re.compile(r"-v([1-9][0-9]*)$")


def parse_version(index: str, alias: str | None = None) -> int | None:
    """N of ``<alias>-v<N>`` (of any ``...-v<N>`` when ``alias`` is None); None for every other name, including
    non-canonical ones such as ``-v01`` or ``-v0`` that ``IndexSettings.versioned`` never makes."""
    if alias is not None and not index.startswith(f"{alias}-v"):
        return None
    m = _VERSION.search(index)
    if m is None or (alias is not None and m.start() != len(alias)):
        return None
    return int(m.group(1))


def log_index_name(index: IndexSettings, kind: str) -> str:
    """The concrete name of log index ``kind`` (one of :data:`LOG_KINDS`). Raises ConfigError for another."""
    names = {"query_log": index.query_log, "ingest_runs": index.ingest_runs, "ingest_state": index.ingest_state}
    if kind not in names:
        raise ConfigError(f"no log index of kind {kind!r}: one of {', '.join(names)}")
    return names[kind]


def write_alias_name(index: IndexSettings, kind: str) -> str | None:
    """The write alias of log index ``kind`` (``<prefix>-write-query-log``, written with ``require_alias``), None for
    another index."""
    return f"{index.prefix}-write-{kind.replace('_', '-')}" if kind in LOG_KINDS else None


# -------------------------------------------------------------------------------------------------- templates

_PLACEHOLDER = re.compile(r"\$\{([a-z0-9_.]+)\}")
TEMPLATES = ("chunks", "query_log", "ingest_runs", "ingest_state")


def mappings_dir() -> Path:
    """Folder holding the JSON templates: packaged copy first, else the repository's ``mappings/``."""
    packaged = Path(str(resources.files("hybridsearch"))) / "_mappings"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "mappings"


@cache
def _raw(name: str) -> str:
    path = mappings_dir() / f"{name}.json"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no mapping template {name!r} at {path}") from None


def index_options(index: IndexSettings) -> dict[str, Any]:
    """The ``dense_vector`` ``index_options`` block, always explicit (ES 9.1+ would pick bbq_hnsw)."""
    opts: dict[str, Any] = {"type": index.index_options}
    if opts["type"].endswith("hnsw"):
        opts.update(m=index.hnsw_m, ef_construction=index.ef_construction)
    return opts


def render_context(settings: Settings) -> dict[str, Any]:
    """Flat ``{dotted.name: value}`` context every template may refer to, the same on every engine
    (:func:`load_template` adds the engine's ``metadata_type`` and, for the chunk template, ``vector_field``)."""
    ctx: dict[str, Any] = {
        "chunker": settings.chunking.strategy,
        "chunker_version": chunker_signature(settings.chunking),
        "index_options": index_options(settings.index),
        "index.alias": settings.index.alias,
        "index.query_log": settings.index.query_log,
        "index.ingest_runs": settings.index.ingest_runs,
        "index.ingest_state": settings.index.ingest_state,
        # typed metadata (index.metadata_fields): meta.<key> of its declared type beside the free-form metadata
        "metadata_mapping": metadata_mapping(settings.index.metadata_fields),
        # what every passage is embedded after (recorded in the chunk index's _meta; "" for none)
        "passage_prompt": resolve_prompts(settings.embedding).passage,
    }
    for group in ("index", "embedding"):
        for key, value in getattr(settings, group).model_dump().items():
            ctx[f"{group}.{key}"] = value
    return ctx


def _substitute(node: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        return {k: _substitute(v, ctx) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, ctx) for v in node]
    if isinstance(node, str) and _PLACEHOLDER.search(node):
        if (whole := _PLACEHOLDER.fullmatch(node)) is not None:
            return _lookup(whole.group(1), ctx)
        return _PLACEHOLDER.sub(lambda m: str(_lookup(m.group(1), ctx)), node)
    return node


def _lookup(name: str, ctx: dict[str, Any]) -> Any:
    if name not in ctx:
        raise ConfigError(f"mapping template refers to unknown setting {name!r}")
    return ctx[name]


def load_template(name: str, settings: Settings, dialect: Dialect) -> dict[str, Any]:
    """Render template ``name`` (one of TEMPLATES) for ``settings`` on the engine of ``dialect``. Raises
    ConfigError (e.g. vector options the engine cannot serve)."""
    ctx = {**render_context(settings), "metadata_type": dialect.metadata_type}
    if name == "chunks":
        ctx["vector_field"] = dialect.vector_field(settings.embedding.dims, settings.index.similarity,
                                                  index_options(settings.index))
    rendered: dict[str, Any] = _substitute(json.loads(_raw(name)), ctx)
    if name == "chunks":
        rendered["template"]["settings"].update(dialect.index_settings())
    return rendered


def chunk_meta(settings: Settings) -> dict[str, Any]:
    """The ``_meta`` a chunk index built from ``settings`` records (format, model, dims, chunker, prompt...): the
    same on every engine, so rendered without a dialect (a placeholder there that needs one raises ConfigError)."""
    meta: dict[str, Any] = _substitute(json.loads(_raw("chunks"))["template"]["mappings"]["_meta"],
                                       render_context(settings))
    return meta


def section_words_of(meta: Mapping[str, object]) -> int | None:
    """The section size (words) an index with ``_meta`` ``meta`` scores BM25 on, or None for chunk-level BM25."""
    words = meta.get("section_words")
    return int(words) if meta.get("bm25_unit") == "section" and isinstance(words, int) else None


# ------------------------------------------------------------------------------------------------------ specs

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


def create_index(es: Sender, spec: IndexSpec) -> bool:
    """Create the index of ``spec``; False when it exists already (e.g. made meanwhile by a parallel run). Call
    inside ``engine_errors`` (or ``access.write_errors``)."""
    try:
        es.send(request.create_index(spec.name, **spec.body))
        return True
    except API_ERRORS as exc:
        if status_of(exc) == 400 and error_type_of(exc) == "resource_already_exists_exception":
            return False
        raise


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
