"""One specification for every index the platform creates: chunk versions and the log indices.

An :class:`IndexSpec` is what an index is created with: its name, settings (the template's plus what the engine
needs: ``EngineInfo.chunk_index_settings`` and the dialect's own) and mappings, and, for a log index, the write
alias its writers go through. Everything that makes a chunk index version (``indices.ensure_index``, ``hsp index
create`` and ``migrate`` through ``lifecycle.create_version``, the evaluation's ``choose_index``) calls
:func:`create_chunk_version`; everything that asks whether an index fits the settings calls
:func:`chunk_differences` (or :func:`log_differences`); version names are read by :func:`parse_version` only.

**The log indices** (``<prefix>-query-log``, ``<prefix>-ingest-runs``, ``<prefix>-ingest-state``) must never be
made by a write: an index the engine creates for a document guesses its mappings (``query`` and ``mode`` as
``text``, no ``query.raw``) and takes the cluster's default replicas. A team's role holds index privileges on its
prefix only, so neither ``action.auto_create_index`` nor an index template can forbid that. Instead the query log
and the ingest runs are written through a *write alias* (``<prefix>-write-query-log``, ``<prefix>-write-ingest-runs``:
names that a role's ``<prefix>-*query-log`` pattern still covers) with ``require_alias=true``. A deleted index
takes its alias with it, so the next write fails with ``index_not_found`` instead of creating anything;
:class:`LogWriter` then creates the index with its own mappings and alias and writes again. Where the credentials
may not add the alias to an existing index (a search-only role), writes go to the index by name after checking
that it exists, as before. A write refused by a block (``index.blocks.write``, the disk flood stage, a read-only
cluster) is reported as :class:`~hybridsearch.errors.IndexBlocked`, naming the index and the fix.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from hybridsearch.access import require_privileges
from hybridsearch.engine import API_ERRORS, EngineClient, engine_errors, error_type_of, status_of, translate
from hybridsearch.engine.dialect import Dialect
from hybridsearch.errors import (
    AccessDenied,
    ClusterError,
    ConfigError,
    HybridSearchError,
    IndexBlocked,
    IndexNotFound,
)
from hybridsearch.mappings import chunk_meta, index_options, load_template
from hybridsearch.settings import IndexSettings, Settings

log = logging.getLogger(__name__)

LogKind = Literal["query_log", "ingest_runs", "ingest_state"]
#: the log-type indices of a prefix, in the order they are created and checked
LOG_KINDS: tuple[LogKind, ...] = ("query_log", "ingest_runs", "ingest_state")
#: log indices whose writers go through a write alias with ``require_alias`` (see the module docstring); the
#: ingest state is written by :mod:`hybridsearch.visibility` by name
ALIASED_LOGS: tuple[LogKind, ...] = ("query_log", "ingest_runs")

#: what ``HSP_INDEX__ANALYZER=auto`` picks where the cluster has it (analysis-common: Elasticsearch's full
#: distribution, OpenSearch's zips), and otherwise
PREFERRED_ANALYZER, FALLBACK_ANALYZER = "english", "standard"

# _meta keys that must agree between an index and the settings that write to or query it. ``passage_prompt``: the
# text every chunk was embedded after (embedding.prompts); a vector made with another prompt must not be written
# beside them.
CHECKED_META = ("embedding_model", "embedding_dims", "passage_prompt")
# what a _meta key added after indices were first built means when an index lacks it: indices built before
# prompts were applied embedded every passage without one.
META_DEFAULTS: dict[str, object] = {"passage_prompt": "", "metadata_fields": {}}
# vector parameters that must agree (read by the engine's dialect, ``VectorSummary``): a vector of other dims
# cannot be written or compared, and another similarity ranks (and, for dot_product, accepts) vectors differently.
CHECKED_VECTOR = ("dims", "similarity")
# Chunk fields added after indices were first built: an index without them is still served (reads treat the
# missing field as absent) and ``indices.ensure_index`` adds them before an ingest writes. ``section_all`` is only
# searched where both section fields copy into it (``query.build.has_joined_field``).
ADDABLE_FIELDS = ("pending_run", "section_title", "section_text", "section_all", "doc_chunks", "title_cut")
# Typed metadata (``meta.<key>``, ``index.metadata_fields``): optional too, but never added to an existing index
# (its documents would lack the typed copies and ranges would miss them silently). An index without a declared key
# is still served and written (ingestion writes the keys the index has; filters refuse ranges on the others); a
# key the index types otherwise than the settings is a difference.
TYPED_METADATA = "meta"
# _meta keys that decide whether an existing index holds what the settings would build (reuse, level "build").
BUILD_META = ("embedding_model", "embedding_dims", "chunker", "chunker_version", "prepend_title", "bm25_unit",
              "section_words", "metadata_fields")

Difference = tuple[str, object, object]  # (field, expected, actual); actual None = the index lacks it
Level = Literal["serve", "build"]

_VERSION = re.compile(r"-v([1-9][0-9]*)$")


# --------------------------------------------------------------------------------------------- names

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
    """The write alias of log index ``kind`` (``<prefix>-write-query-log``), None for one written by name."""
    return f"{index.prefix}-write-{kind.replace('_', '-')}" if kind in ALIASED_LOGS else None


# --------------------------------------------------------------------------------------------- the spec

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


# --------------------------------------------------------------------------------------------- errors

_BLOCKED_INDEX = re.compile(r"index \[([^\]]+)\] blocked by")


FLOOD_STAGE = "index.blocks.read_only_allow_delete"


def unblock_fix(index: str, block: str) -> str:
    """How block ``block`` (an index setting such as ``index.blocks.write``, or ``cluster.blocks.read_only``) on
    ``index`` is lifted."""
    if block.startswith(FLOOD_STAGE):
        return ("free disk space on the data nodes (`hsp doctor` shows their use): the engine lifts the block once "
                f"use drops below the high watermark; or, after freeing space, PUT {index}/_settings "
                f"{{\"{FLOOD_STAGE}\": null}}")
    if block.startswith("cluster."):
        return ("a cluster administrator lifts it: PUT _cluster/settings {\"persistent\": "
                "{\"cluster.blocks.read_only\": null, \"cluster.blocks.read_only_allow_delete\": null}}")
    setting = block.split(" ", 1)[0]
    return (f"PUT {index}/_settings {{\"{setting}\": null}} (first ask whoever set it: an operator, or a resize, "
            "clone or snapshot step)")


def blocked(reason: str, index: str, doing: str) -> IndexBlocked:
    """IndexBlocked for a ``cluster_block_exception`` whose engine ``reason`` is e.g. ``index [x] blocked by:
    [FORBIDDEN/8/index write (api)];``, with the fix for that block."""
    m = _BLOCKED_INDEX.search(reason)
    index = m.group(1) if m else index
    low = reason.lower()
    if "cluster read-only" in low:
        block, index = "cluster.blocks.read_only", "the cluster"
    elif "flood-stage" in low or "allow-delete" in low or "allow delete" in low:
        block = f"{FLOOD_STAGE} (the disk flood-stage watermark)"
    elif "read-only" in low or "read_only" in low:
        block = "index.blocks.read_only"
    else:  # "index write (api)" and anything newer
        block = "index.blocks.write"
    return IndexBlocked(f"{doing}: {index} refuses writes, it is blocked by {block} ({reason.strip(' ;')})",
                        fix=unblock_fix(index, block), index=index, block=block)


def _reason(err: Any) -> str:
    if isinstance(err, Mapping):
        root = (err.get("root_cause") or [err])[0]
        return str(root.get("reason") or err.get("reason") or err)
    return str(err)


def _error_type(err: Any) -> str | None:
    return str(err.get("type")) if isinstance(err, Mapping) and err.get("type") else None


def item_error(item: Mapping[str, Any], index: str, doing: str) -> HybridSearchError:
    """The error of one failed bulk item (``{"error": ..., "status": ...}``; ``exception`` when the whole request
    failed), as a typed error: a block as IndexBlocked, anything else as the engine's error would be."""
    exc = item.get("exception")
    if isinstance(exc, Exception):
        return translate_write(exc, index, doing)
    err = item.get("error")
    if _error_type(err) == "cluster_block_exception":
        return blocked(_reason(err), index, doing)
    return ClusterError(f"{doing} failed with HTTP {item.get('status')}: {_error_type(err) or 'error'}: "
                        f"{_reason(err)}")


def translate_write(exc: Exception, index: str, doing: str) -> HybridSearchError:
    """``engine.translate`` that reads a block as a block: the engine answers a write block with HTTP 403, which
    would otherwise read as missing privileges."""
    if error_type_of(exc) == "cluster_block_exception":
        from hybridsearch.engine.errors import reason_of

        return blocked(reason_of(exc).removeprefix("cluster_block_exception: "), index, doing)
    return translate(exc, doing)


@contextmanager
def write_errors(index: str, doing: str) -> Iterator[None]:
    """``engine_errors`` for requests that change ``index``: a block becomes IndexBlocked."""
    try:
        yield
    except API_ERRORS as exc:
        raise translate_write(exc, index, doing) from exc


# --------------------------------------------------------------------------------------------- creation

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


# --------------------------------------------------------------------------------------------- fit checks

def _walk(want: Mapping[str, Any], have: Mapping[str, Any], path: str = "", optional: tuple[str, ...] = (),
          *, deep: bool = True) -> Iterator[Difference]:
    """Field types of ``want`` (a ``properties`` block) against ``have``; with ``deep``, nested objects and
    multi-fields too. Fields in ``optional`` may be missing."""
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
    """Where a chunk index's ``_meta`` disagrees with what ``settings`` would record, on ``keys`` (as
    ``_meta.<key>``; a key an older index lacks counts as :data:`META_DEFAULTS` says). The same on every engine."""
    want = chunk_meta(settings)
    return [(f"_meta.{k}", want[k], meta.get(k)) for k in keys if meta.get(k, META_DEFAULTS.get(k)) != want[k]]


def chunk_differences(mapping: Mapping[str, Any], settings: Settings, keys: tuple[str, ...] = CHECKED_META, *,
                      dialect: Dialect, level: Level = "serve") -> list[Difference]:
    """Where a chunk index's ``mappings`` disagree with what ``settings`` would build: the ``_meta`` ``keys`` (as
    ``_meta.<key>``), the vector's dims and similarity (``embedding.dims``...) and the type of every field of the
    chunk template (``<field>.type``; ADDABLE_FIELDS may be missing). The one fit check.

    ``level="serve"``: can these settings search and write it. ``level="build"`` (reuse by the evaluation): does it
    hold exactly what these settings would build, so also chunker, title handling, BM25 unit (:data:`BUILD_META`),
    analyzer (``analyzer``) and vector ``index_options`` type (``embedding.index_options``); ``settings``' analyzer
    must be resolved (:func:`with_analyzer`) for that.
    """
    want = load_template("chunks", settings, dialect)["template"]["mappings"]
    if level == "build":
        keys = tuple(dict.fromkeys((*keys, *BUILD_META)))
    diffs = meta_differences(mapping.get("_meta") or {}, settings, keys)
    props: Mapping[str, Any] = mapping.get("properties") or {}
    diffs += _walk(want["properties"], props, optional=(*ADDABLE_FIELDS, TYPED_METADATA), deep=False)
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
    """Where a log index's ``mappings`` disagree with its spec: ``dynamic`` (``strict``: an index a write created
    guesses fields) and the type of every field, nested objects and multi-fields (``query.raw``) included."""
    want = log_spec(settings, kind, dialect).mappings
    diffs: list[Difference] = []
    if str(mapping.get("dynamic", "true")) != str(want.get("dynamic", "true")):
        diffs.append(("dynamic", want.get("dynamic"), mapping.get("dynamic")))
    return diffs + list(_walk(want.get("properties") or {}, mapping.get("properties") or {}))


def describe(diffs: Sequence[Difference]) -> str:
    """``mode.type: index has 'text', the spec says 'keyword'; query.raw.type: index lacks it, ...``."""
    return "; ".join(f"{f}: index has {a!r}, the spec says {e!r}" if a is not None else
                     f"{f}: index lacks it, the spec says {e!r}" for f, e, a in diffs)


# --------------------------------------------------------------------------------------------- log indices

_WRITE_BLOCKS = ("index.blocks.write", "index.blocks.read_only", "index.blocks.read_only_allow_delete")


@dataclass
class LogIndexState:
    """What ``hsp doctor`` reports on one log index (see :func:`inspect_log_index`)."""

    kind: str
    name: str
    exists: bool
    write_alias: str | None = None
    alias_ok: bool = True  # the write alias points at the index (True when the kind has none)
    differences: list[Difference] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)  # write blocks set on the index
    health: str | None = None
    replicas: int | None = None


def inspect_log_index(es: EngineClient, settings: Settings, kind: str) -> LogIndexState:
    """Exists, write alias, mapping against the spec, write blocks, health of log index ``kind``. Raises
    ClusterError when it cannot be read."""
    spec = log_spec(settings, kind, es.dialect)
    state = LogIndexState(kind, spec.name, exists=False, write_alias=spec.write_alias)
    with engine_errors(f"check {spec.name}"):
        if not es.indices.exists(index=spec.name):
            return state
        state.exists = True
        mapping = next(iter(es.indices.get_mapping(index=spec.name).values()))["mappings"]
        state.differences = log_differences(kind, mapping, settings, es.dialect)
        flat = es.indices.get_settings(index=spec.name, flat_settings=True).get(spec.name, {}).get("settings", {})
        state.blocks = [b for b in _WRITE_BLOCKS if str(flat.get(b)).lower() == "true"]
        state.replicas = int(flat.get("index.number_of_replicas", 0))
        state.health = str(es.cluster.health(index=spec.name)["status"])
        if spec.write_alias:
            state.alias_ok = spec.name in es.indices.get_alias(name=spec.write_alias)
    return state


@dataclass
class LogWrite:
    """What :meth:`LogWriter.write` did: documents written, failed, and the first failure's error (typed)."""

    written: int = 0
    failed: int = 0
    error: HybridSearchError | None = None


class LogWriter:
    """Writes documents to one log index so that no write can create it with guessed mappings (module docstring).

    Thread-safe. ``write`` never raises for the documents' sake: the returned :class:`LogWrite` says what failed
    and why (IndexBlocked for a block, AccessDenied when the index is missing and may not be created)."""

    def __init__(self, es: EngineClient, settings: Settings, kind: str) -> None:
        self.es, self.settings, self.kind = es, settings, kind
        self.index = log_index_name(settings.index, kind)
        self.alias = write_alias_name(settings.index, kind)
        self._direct = self.alias is None  # write by name (after an existence check), not through the alias
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Create the index with its spec when it is missing (AccessDenied when these credentials may not);
        add the write alias to an index that lacks it, or fall back to writes by name where that is refused."""
        with self._lock:
            with engine_errors(f"check {self.index}"):
                exists = self.es.indices.exists(index=self.index)
            if not exists:
                names = [self.index, *([self.alias] if self.alias else [])]
                require_privileges(self.es, names, ("create_index", "manage"), f"create {self.index}")
                ensure_log_index(self.es, self.settings, self.kind)
                self._direct = self.alias is None
                return
            if self.alias is None:
                return
            try:
                with write_errors(self.index, f"add the write alias {self.alias} to {self.index}"):
                    if self.es.indices.exists_alias(name=self.alias):
                        self._direct = False
                        return
                    self.es.indices.update_aliases(actions=[{"add": {"index": self.index, "alias": self.alias,
                                                                     "is_write_index": True}}])
                self._direct = False
            except AccessDenied as exc:
                if not self._direct:
                    log.warning("%s: writing to %s by name (may not add the write alias %s: %s)", self.kind,
                                self.index, self.alias, exc.problem)
                self._direct = True

    def write(self, docs: Sequence[tuple[str | None, Mapping[str, Any]]], *, op_type: str = "create",
              refresh: str | None = None) -> LogWrite:
        """Write ``docs`` (``(id, document)``; id None: a new random one) with ``op_type`` (``create``, ``index``
        or ``update``, whose documents are partial). A write that finds the index gone creates it from its spec
        and writes again."""
        pending = [(i or uuid.uuid4().hex, d) for i, d in docs]
        result = LogWrite()
        errors: list[HybridSearchError] = []
        for attempt in (1, 2):
            if attempt == 2 or self._direct:
                try:
                    self.ensure()
                except HybridSearchError as exc:
                    result.failed += len(pending)
                    errors.append(exc)
                    break
            pending = self._send(pending, op_type, refresh, result, errors)
            if not pending:
                break
        else:
            result.failed += len(pending)
            errors.append(ClusterError(f"{self.index} disappeared again while it was being written",
                                       fix=f"find out who deletes {self.index}: the platform re-creates it"))
        result.error = errors[0] if errors else None
        return result

    def _send(self, docs: list[tuple[str, Mapping[str, Any]]], op_type: str, refresh: str | None,
              result: LogWrite, errors: list[HybridSearchError]) -> list[tuple[str, Mapping[str, Any]]]:
        """One bulk request; returns the documents refused because the index (its write alias) is missing, counts
        the others in ``result`` and adds their errors to ``errors``."""
        target = self.index if self._direct else str(self.alias)
        body_key = "doc" if op_type == "update" else "_source"
        actions = [{"_op_type": op_type, "_index": target, "_id": i, body_key: dict(d)} for i, d in docs]
        extra: dict[str, Any] = {} if self._direct else {"require_alias": True}
        if refresh:
            extra["refresh"] = refresh
        doing = f"write {len(docs)} document(s) to {self.index}"
        try:
            with write_errors(self.index, doing):
                ok, items = self.es.bulk(actions, raise_on_error=False, raise_on_exception=False, stats_only=False,
                                         **extra)
        except IndexNotFound:
            return list(docs)
        except HybridSearchError as exc:
            result.failed += len(docs)
            errors.append(exc)
            return []
        result.written += int(ok)
        by_id = dict(docs)
        missing: list[tuple[str, Mapping[str, Any]]] = []
        for entry in items if isinstance(items, list) else []:
            item = next(iter(entry.values())) if isinstance(entry, Mapping) and entry else {}
            error = item_error(item, self.index, doing)
            gone = _error_type(item.get("error")) == "index_not_found_exception" or isinstance(error, IndexNotFound)
            if gone and item.get("_id") in by_id:
                missing.append((item["_id"], by_id[item["_id"]]))
            else:
                result.failed += 1
                errors.append(error)
        return missing
