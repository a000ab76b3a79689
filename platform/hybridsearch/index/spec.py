"""What chunk and log indices are made of: names, the templates in ``mappings/`` rendered for one engine (``"${name}"``
becomes the value of ``name``, keeping its type; inside a longer string, its text), the :class:`IndexSpec` an index is
created with, and whether an existing index fits the settings (:func:`chunk_differences`; else IndexMismatch)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.embedding.models import resolve_prompts
from hybridsearch.engine import API_ERRORS, EngineClient, Sender, engine_errors, error_type_of, request, status_of
from hybridsearch.engine.dialect import Dialect
from hybridsearch.errors import ConfigError, IndexMismatch
from hybridsearch.index.metadata import TYPED_METADATA, metadata_mapping
from hybridsearch.settings import EmbeddingSettings, IndexSettings, Settings

log = logging.getLogger(__name__)

#: the log-type indices of a prefix, in the order they are created and checked
LOG_KINDS = ("query_log", "ingest_runs", "ingest_state")

_VERSION = re.compile(r"-v([1-9][0-9]*)$")


def parse_version(index: str, alias: str | None = None) -> int | None:
    """N of ``<alias>-v<N>`` (of any ``...-v<N>`` when ``alias`` is None); None for every other name (``-v01``...)."""
    m = _VERSION.search(index) if alias is None else re.fullmatch(rf"{re.escape(alias)}{_VERSION.pattern}", index)
    return int(m.group(1)) if m else None


def write_alias_name(index: IndexSettings, kind: str) -> str:
    """The write alias of log index ``kind`` (``<prefix>-write-query-log``, written with ``require_alias``)."""
    return f"{index.prefix}-write-{kind.replace('_', '-')}"


_PLACEHOLDER = re.compile(r"\$\{([a-z0-9_.]+)\}")


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
    """Flat ``{dotted.name: value}`` context of the templates, the same on every engine."""
    ctx: dict[str, Any] = {
        "chunker": settings.chunking.strategy,
        "chunker_version": chunker_signature(settings.chunking),
        "metadata_mapping": metadata_mapping(settings.index.metadata_fields),
        "passage_prompt": resolve_prompts(settings.embedding, settings.models).passage,
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
    if isinstance(node, str) and (names := _PLACEHOLDER.findall(node)):
        if unknown := set(names) - ctx.keys():
            raise ConfigError(f"mapping template refers to unknown setting {min(unknown)!r}")
        if (whole := _PLACEHOLDER.fullmatch(node)) is not None:
            return ctx[whole.group(1)]
        return _PLACEHOLDER.sub(lambda m: str(ctx[m.group(1)]), node)
    return node


def load_template(name: str, settings: Settings, dialect: Dialect) -> dict[str, Any]:
    """Template ``name`` (``chunks`` or a log kind) for ``settings`` on ``dialect``'s engine. Raises ConfigError."""
    ctx = {**render_context(settings), "metadata_type": dialect.metadata_type}
    if name == "chunks":
        ctx["vector_field"] = dialect.vector_field(settings.embedding.dims, settings.index.similarity,
                                                  index_options(settings.index))
    rendered: dict[str, Any] = _substitute(json.loads(_raw(name)), ctx)
    if name == "chunks":
        rendered["template"]["settings"].update(dialect.index_settings)
    return rendered


def chunk_meta(settings: Settings) -> dict[str, Any]:
    """The ``_meta`` a chunk index built from ``settings`` records, the same on every engine."""
    return dict(_substitute(json.loads(_raw("chunks"))["template"]["mappings"]["_meta"], render_context(settings)))


def section_words_of(meta: Mapping[str, object]) -> int | None:
    """The section size (words) an index with ``_meta`` ``meta`` scores BM25 on, or None for chunk-level BM25."""
    words = meta.get("section_words")
    return int(words) if meta.get("bm25_unit") == "section" and isinstance(words, int) else None


#: what ``HSP_INDEX__ANALYZER=auto`` picks where the cluster has it, and otherwise
PREFERRED_ANALYZER, FALLBACK_ANALYZER = "english", "standard"


@dataclass(frozen=True)
class IndexSpec:
    """What one index is created with; ``write_alias``: the alias its writers use (log indices only)."""

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
    """Create the index of ``spec``; False when it exists already. Call inside ``engine_errors``."""
    try:
        es.send(request.create_index(spec.name, **spec.body))
        return True
    except API_ERRORS as exc:
        if status_of(exc) == 400 and error_type_of(exc) == "resource_already_exists_exception":
            return False
        raise


def add_alias_if_missing(es: Sender, alias: str, index: str) -> None:
    """Point ``alias`` at ``index`` (its write index) unless the alias exists. Call inside ``engine_errors``."""
    if not es.send(request.alias_exists(alias)):
        es.send(request.update_aliases([{"add": {"index": index, "alias": alias, "is_write_index": True}}]))


def chunk_spec(settings: Settings, version: int | None = None, *, dialect: Dialect,
               engine_settings: Mapping[str, Any] | None = None) -> IndexSpec:
    """The spec of ``<prefix>-chunks-v<N>`` for ``settings`` on ``dialect``'s engine, ``engine_settings`` added."""
    body = load_template("chunks", settings, dialect)["template"]
    return IndexSpec(settings.index.versioned(version), {**body["settings"], **(engine_settings or {})},
                     body["mappings"])


def log_spec(settings: Settings, kind: str, dialect: Dialect) -> IndexSpec:
    """The spec of log index ``kind`` (one of :data:`LOG_KINDS`) of ``settings``' prefix. Pure."""
    body = load_template(kind, settings, dialect)["template"]
    return IndexSpec(getattr(settings.index, kind), body["settings"], body["mappings"],
                     write_alias_name(settings.index, kind))


#: analyzers every node has without the analysis-common module
BUILT_IN_ANALYZERS = frozenset({"standard", "simple", "whitespace", "stop", "keyword", "pattern"})


def has_analyzer(es: Sender, name: str) -> bool:
    """Whether the cluster knows analyzer ``name``. ``_analyze`` needs the cluster privilege ``manage``; without
    it the nodes' modules answer (``analysis-common`` has the language ones). Raises the library's errors."""
    try:
        es.send(request.analyze("probe", analyzer=name))
        return True
    except API_ERRORS as exc:
        if status_of(exc) not in (400, 403):  # 400: "failed to find global analyzer [english]"
            raise
        if status_of(exc) == 400:
            return False
    if name in BUILT_IN_ANALYZERS:
        return True
    try:
        nodes = es.send(request.nodes_info(filter_path="nodes.*.modules.name")).get("nodes", {})
    except API_ERRORS as exc:
        if status_of(exc) != 403:
            raise
        log.warning("cannot tell whether the cluster has analyzer %s: these credentials may neither _analyze "
                    "nor read the nodes' modules; taking it as absent", name)
        return False
    return bool(nodes) and all("analysis-common" in {m.get("name") for m in n.get("modules", [])}
                               for n in nodes.values())


def with_analyzer(es: EngineClient, settings: Settings) -> Settings:
    """``settings`` with analyzer ``auto`` resolved for this cluster: english where it has it, else standard."""
    if settings.index.analyzer != "auto":
        return settings
    with engine_errors("check the english analyzer"):
        name = PREFERRED_ANALYZER if has_analyzer(es, PREFERRED_ANALYZER) else FALLBACK_ANALYZER
    return settings.model_copy(update={"index": settings.index.model_copy(update={"analyzer": name})})


def chunk_spec_for(es: EngineClient, settings: Settings, version: int | None = None) -> IndexSpec:
    """:func:`chunk_spec` for this cluster: its analyzer, dialect and engine settings (creation-only ones too)."""
    return chunk_spec(with_analyzer(es, settings), version, dialect=es.dialect,
                      engine_settings={**es.engine.chunk_index_settings, **es.engine.chunk_index_creation_settings})


#: the ``_meta`` key naming the format of a chunk index
FORMAT_KEY = "schema_version"
# _meta keys that must agree between an index and the settings that write to or query it
CHECKED_META = ("embedding_model", "embedding_dims", "passage_prompt")
# vector parameters that must agree (the dialect's ``VectorSummary``)
CHECKED_VECTOR = ("dims", "similarity")
# what an index of another format must agree on to be migrated: the model its vectors were made by
SOURCE_META = ("embedding_model", "embedding_dims")
# _meta keys that decide whether an existing index holds what the settings would build (reuse, level "build").
BUILD_META = ("embedding_model", "embedding_dims", "chunker", "chunker_version", "prepend_title", "bm25_unit",
              "section_words", "metadata_fields")

Difference = tuple[str, object, object]  # (field, expected, actual); actual None = the index lacks it
Level = Literal["serve", "build"]


def _walk(want: Mapping[str, Any], have: Mapping[str, Any], path: str = "", optional: tuple[str, ...] = (),
          *, deep: bool = True) -> Iterator[Difference]:
    """Field types of ``want`` (a ``properties`` block) against ``have``, nested objects and multi-fields too with
    ``deep``; fields in ``optional`` may be missing."""
    for name, spec in want.items():
        key = f"{path}{name}"
        got = have.get(name)
        want_type = spec.get("type", "object")
        if got is None:
            if key not in optional:
                yield (f"{key}.type", want_type, None)
            continue
        got_type = got.get("type", "object")
        if got_type != want_type:
            yield (f"{key}.type", want_type, got_type)
            continue
        if deep and "properties" in spec:
            yield from _walk(spec["properties"], got.get("properties") or {}, f"{key}.")
        if deep and "fields" in spec:
            yield from _walk(spec["fields"], got.get("fields") or {}, f"{key}.")


def meta_differences(meta: Mapping[str, Any], settings: Settings, keys: tuple[str, ...] = CHECKED_META
                     ) -> list[Difference]:
    """Where a chunk index's ``_meta`` disagrees with what ``settings`` would record, on ``keys``."""
    want = chunk_meta(settings)
    return [(f"_meta.{k}", want[k], meta.get(k)) for k in keys if meta.get(k) != want[k]]


def chunk_differences(mapping: Mapping[str, Any], settings: Settings, keys: tuple[str, ...] = CHECKED_META, *,
                      dialect: Dialect, level: Level = "serve") -> list[Difference]:
    """Where a chunk index's ``mappings`` disagree with ``settings``: its format (alone when it differs), ``_meta``
    ``keys``, vector dims and similarity, every template field's type. ``level="build"`` also checks
    :data:`BUILD_META`, analyzer (resolved in ``settings``) and ``index_options`` type: does it hold exactly that."""
    meta = mapping.get("_meta") or {}
    if formats := meta_differences(meta, settings, (FORMAT_KEY,)):
        return formats
    want = load_template("chunks", settings, dialect)["template"]["mappings"]
    if level == "build":
        keys = tuple(dict.fromkeys((*keys, *BUILD_META)))
    diffs = meta_differences(meta, settings, keys)
    props: Mapping[str, Any] = mapping.get("properties") or {}
    diffs += _walk(want["properties"], props, deep=False)
    have_typed = (props.get(TYPED_METADATA) or {}).get("properties") or {}
    diffs += _walk(want["properties"][TYPED_METADATA]["properties"], have_typed, f"{TYPED_METADATA}.",
                   optional=tuple(f"{TYPED_METADATA}.{k}" for k in settings.index.metadata_fields), deep=False)
    vector = dialect.vector_summary(want["properties"]["embedding"])
    have_vector = dialect.vector_summary(props.get("embedding") or {})
    if have_vector.is_vector:
        diffs += [(f"embedding.{k}", getattr(vector, k), getattr(have_vector, k)) for k in CHECKED_VECTOR
                  if getattr(have_vector, k) != getattr(vector, k)]
    if level == "build":
        analyzer = (props.get("text") or {}).get("analyzer", "standard")
        if analyzer != settings.index.analyzer:
            diffs.append(("analyzer", settings.index.analyzer, analyzer))
        options = have_vector.options.get("type") if have_vector.is_vector else None
        if options != index_options(settings.index)["type"]:
            diffs.append(("embedding.index_options", index_options(settings.index)["type"], options))
    return diffs


def log_differences(kind: str, mapping: Mapping[str, Any], settings: Settings, dialect: Dialect) -> list[Difference]:
    """Where a log index's ``mappings`` disagree with its spec: ``dynamic`` and the type of every field."""
    want = log_spec(settings, kind, dialect).mappings
    diffs: list[Difference] = []
    if str(mapping.get("dynamic", "true")) != str(want.get("dynamic", "true")):
        diffs.append(("dynamic", want.get("dynamic"), mapping.get("dynamic")))
    return diffs + list(_walk(want.get("properties") or {}, mapping.get("properties") or {}))


def describe(diffs: Sequence[Difference], source: str = "the spec says") -> str:
    """``mode.type: index has 'text', the spec says 'keyword'; query.raw.type: index lacks it, ...``."""
    return "; ".join(f"{f}: index has {a!r}, {source} {e!r}" if a is not None else
                     f"{f}: index lacks it, {source} {e!r}" for f, e, a in diffs)


def refuse(index: str, diffs: Sequence[Difference]) -> None:
    """Raise IndexMismatch carrying ``diffs`` when there are any (for an index of another format, one saying so)."""
    if not diffs:
        return
    if diffs[0][0] == f"_meta.{FORMAT_KEY}":
        _, want, have = diffs[0]
        raise IndexMismatch(
            f"index {index} was made in another format ({FORMAT_KEY} {have!r}; this release reads {want!r})",
            fix="Build a new index version in this format from it: `hsp index migrate` (the alias moves once the "
                "copy is complete).", index=index, differences=tuple(diffs))
    raise IndexMismatch(f"index {index} does not fit the settings (built for another model or by hand): "
                        f"{describe(diffs, 'settings say')}",
                        fix="Use matching HSP_EMBEDDING__* / HSP_INDEX__* settings, or build a new index version "
                            "and migrate (`hsp index migrate`).", index=index, differences=tuple(diffs))


def follow_index(embedding: EmbeddingSettings, meta: Mapping[str, Any]) -> EmbeddingSettings:
    """The embedding settings a client of an index built with ``meta`` uses: with ``HSP_EMBEDDING__MODEL`` unset,
    the model and dims the index was built with; a model set explicitly is kept (and the index checked against it)."""
    model = meta.get("embedding_model")
    if "model" in embedding.model_fields_set or not model or model == embedding.model:
        return embedding
    dims = embedding.dims if "dims" in embedding.model_fields_set else int(meta.get("embedding_dims") or embedding.dims)
    return embedding.model_copy(update={"model": str(model), "dims": dims})


def check_mapping(index: str, mapping: Mapping[str, Any], settings: Settings, dialect: Dialect) -> None:
    """Raise IndexMismatch when the index's real mapping does not fit ``settings`` (:func:`chunk_differences`)."""
    refuse(index, chunk_differences(mapping, settings, dialect=dialect))


def check_source(index: str, mapping: Mapping[str, Any], settings: Settings, dialect: Dialect) -> None:
    """:func:`check_mapping` for the index a migration copies: one of another format is checked for its model
    only (:data:`SOURCE_META`)."""
    diffs = chunk_differences(mapping, settings, dialect=dialect)
    if diffs and diffs[0][0] == f"_meta.{FORMAT_KEY}":
        diffs = meta_differences(mapping.get("_meta") or {}, settings, SOURCE_META)
    refuse(index, diffs)
