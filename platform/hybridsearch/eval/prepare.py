"""The evaluation index of a collection, under its own prefix: a version that fits the settings is reused, else a new
one is created and the alias swapped to it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.errors import ConfigError, IndexNotFound, IngestError
from hybridsearch.index.spec import (
    BUILD_META,
    chunk_differences,
    chunk_meta,
    index_options,
    parse_version,
    with_analyzer,
)
from hybridsearch.index.versions import ensure_index, live_target, read_alias, swap_alias
from hybridsearch.index.visibility import state_index_for, state_index_of, visible_query
from hybridsearch.progress import ProgressSink
from hybridsearch.settings import Settings

if TYPE_CHECKING:
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.ingest.sources import Document


def eval_settings(settings: Settings, prefix: str) -> Settings:
    """A copy of ``settings`` with index prefix ``prefix``. Raises ConfigError for an invalid prefix."""
    try:
        index = settings.index.model_validate({**settings.index.model_dump(), "prefix": prefix})
    except ValidationError:
        raise ConfigError(f"index prefix {prefix!r} is not valid: lowercase letters, digits, '_', '.', '-'") from None
    return settings.model_copy(update={"index": index})


def build_signature(settings: Settings) -> dict[str, Any]:
    """What an index built from ``settings`` must record to be reused: ``_meta`` keys and mapping options."""
    meta = chunk_meta(settings)
    sig = {k: meta.get(k) for k in BUILD_META}
    sig["analyzer"] = settings.index.analyzer
    sig["index_options"] = index_options(settings.index)["type"]
    return sig


@dataclass
class IndexChoice:
    """Which concrete index the evaluation uses and why."""
    index: str
    action: str  # "reused" | "switched" | "created"
    signature: dict[str, Any]


def choose_index(es: EngineClient, settings: Settings, *, create: bool = True) -> IndexChoice:
    """Point the alias at an index that fits ``settings``, creating one if none does. Raises IndexNotFound (no
    ``create``), ClusterError."""
    alias = settings.index.alias
    settings = with_analyzer(es, settings)  # "auto" is english or standard, as the index would be built
    want = build_signature(settings)
    with engine_errors(f"list indices {alias}-v*"):
        mappings = es.send(request.get_mapping(f"{alias}-v*", allow_no_indices=True))
    versions = {i: v for i in mappings if (v := parse_version(i, alias)) is not None}
    fitting = sorted((i for i in versions
                      if not chunk_differences(mappings[i]["mappings"], settings, dialect=es.dialect, level="build")),
                     key=versions.__getitem__)
    aliases = read_alias(es, alias)
    live = live_target(alias, aliases) if aliases else None
    if live is not None and live in fitting:
        return IndexChoice(live, "reused", want)
    if fitting:
        swap_alias(es, settings.index, fitting[-1])
        return IndexChoice(fitting[-1], "switched", want)
    if not create:
        raise IndexNotFound(f"no index under {alias}-v* was built with these settings ({want}); "
                            "run without --no-ingest to build one")
    version = max(versions.values(), default=0) + 1
    name = ensure_index(es, settings, version=version)
    swap_alias(es, settings.index, name)
    return IndexChoice(name, "created", want)


def index_counts(es: EngineClient, index: str) -> dict[str, int]:
    """Chunks and distinct documents in ``index`` (after a refresh)."""
    with engine_errors(f"count {index}"):
        es.send(request.refresh(index))
        body = es.send(request.search(index, request.body(
            size=0, track_total_hits=True, query=visible_query(state_index_of(es, state_index_for(index))),
            aggs={"docs": {"cardinality": {"field": "doc_id", "precision_threshold": 40000}}})))
    return {"chunks": int(body["hits"]["total"]["value"]), "documents": int(body["aggregations"]["docs"]["value"])}


def ingest_corpus(es: EngineClient, settings: Settings, corpus: Path | Iterable[Document], *,
                  embedder: Embedder | None = None, progress: ProgressSink | None = None) -> dict[str, Any]:
    """Ingest ``corpus`` through the alias; returns the run's counts. Raises IngestError unless the run completed."""
    from hybridsearch.ingest.pipeline import run_ingest

    result = run_ingest(corpus, settings, es=es, embedder=embedder, progress=progress)
    if result.status != "completed":
        raise IngestError(f"ingesting {corpus} ended {result.status}: the index is incomplete, so the "
                          "evaluation stops; re-run to resume")
    return dataclasses.asdict(result)
