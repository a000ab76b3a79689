"""Load index definitions from the repository's ``mappings/`` folder and render them from settings.

Each file holds the ``settings`` and ``mappings`` (under ``template``) that the platform creates an index
with explicitly; none is installed as an index template. They are plain JSON. A string value of the
exact form ``"${name}"`` is replaced by the value of ``name`` in the render context, keeping its type
(``"${embedding.dims}"`` becomes ``384``); placeholders inside longer strings are interpolated as text
(``"${index.alias}-v*"``).

A template renders for one engine: :func:`load_template` takes its :class:`~hybridsearch.engine.Dialect` (the
engine's vector field, metadata field type and index settings), with no default. What a chunk index records in
its ``_meta`` is the same on every engine, and :func:`chunk_meta` renders it without one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.embedding.prompts import resolve_prompts
from hybridsearch.engine.dialect import Dialect
from hybridsearch.errors import ConfigError
from hybridsearch.settings import IndexSettings, Settings

_PLACEHOLDER = re.compile(r"\$\{([a-z0-9_.]+)\}")
TEMPLATES = ("chunks", "query_log", "ingest_runs", "ingest_state")


def mappings_dir() -> Path:
    """Folder holding the JSON templates: packaged copy first, else the repository's ``mappings/``."""
    packaged = Path(str(resources.files("hybridsearch"))) / "_mappings"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "mappings"


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


#: mapping of each type ``index.metadata_fields`` may declare (dates: ISO 8601, as the query layer writes them)
METADATA_MAPPINGS: dict[str, dict[str, Any]] = {
    "long": {"type": "long"}, "double": {"type": "double"}, "keyword": {"type": "keyword", "ignore_above": 1024},
    "date": {"type": "date", "format": "strict_date_optional_time"}, "boolean": {"type": "boolean"},
}


def metadata_mapping(fields: Mapping[str, str]) -> dict[str, Any]:
    """The chunk template's ``meta`` object: one typed field per declared metadata key (``{}`` declares none)."""
    return {"type": "object", "properties": {k: dict(METADATA_MAPPINGS[t]) for k, t in sorted(fields.items())}}


def metadata_fields_of(mapping: Mapping[str, Any]) -> dict[str, str]:
    """``{key: type}`` of the typed metadata a chunk index holds (its mapping's ``meta`` object, whose fields are
    the declared ones, :func:`metadata_mapping`): ``{}`` for an index built before typed metadata or without any.
    This, not the settings, is what filters compare against and what ingestion writes into that index."""
    props = ((mapping.get("properties") or {}).get("meta") or {}).get("properties") or {}
    return {k: str(v.get("type")) for k, v in props.items() if isinstance(v, Mapping) and v.get("type")}


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
    """The ``_meta`` a chunk index built from ``settings`` records (model, dims, chunker, prompt...): the same on
    every engine, so rendered without a dialect (a placeholder there that needs one raises ConfigError)."""
    meta: dict[str, Any] = _substitute(json.loads(_raw("chunks"))["template"]["mappings"]["_meta"],
                                       render_context(settings))
    return meta
