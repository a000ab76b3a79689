"""Whether an index fits the settings, as ``(field, expected, actual)`` tuples (:func:`chunk_differences`,
:func:`log_differences`), and the refusal of a chunk index that does not (IndexMismatch; one of another format
with ``hsp index migrate`` as the fix)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from hybridsearch.engine.dialect import Dialect
from hybridsearch.errors import IndexMismatch
from hybridsearch.index.metadata import TYPED_METADATA
from hybridsearch.index.spec import chunk_meta, index_options, load_template, log_spec
from hybridsearch.settings import EmbeddingSettings, Settings

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
