"""``hsp eval``'s workflow, callable from Python: :func:`run_evaluation` decides the modes, the embedding cache
and the report names, builds (or reuses) the collection's index, measures, sweeps, compares with a baseline and
writes the reports; it returns an :class:`EvalRun` and prints nothing (its remarks go to the progress sink as
notes, its counts as events).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsearch.errors import ConfigError
from hybridsearch.eval.report import Diff, EvalReport, compare, load_report, to_markdown, write_chart
from hybridsearch.eval.runner import DEFAULT_MODES, parse_modes
from hybridsearch.progress import ProgressSink, note

if TYPE_CHECKING:
    from hybridsearch.embedding.cache import CachedEmbedder
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.settings import IngestSettings, Settings

PAIR_MODES = ("bm25", "dense", "hybrid")  # what --worst compares
NOTE = "eval"  # the task name of the workflow's notes


@dataclass
class EvalRun:
    """What :func:`run_evaluation` measured and wrote."""

    report: EvalReport
    modes: list[str]
    prefix: str
    diffs: list[Diff] | None
    tolerance: float
    paths: list[Path]
    cache_stats: dict[str, Any] | None = None  # the embedding cache's counts, when it was used
    notes: list[str] = field(default_factory=list)  # the remarks also sent to the progress sink

    @property
    def gate_failed(self) -> bool:
        """A metric fell by more than the tolerance against the baseline."""
        return bool(self.diffs) and any(d.regressed for d in self.diffs or ())


def plan_modes(modes: str | Sequence[str], worst: int) -> tuple[list[str], str | None]:
    """The modes to run, with bm25, dense and hybrid added when ``worst`` needs them; and the remark saying so."""
    chosen = parse_modes(modes) if isinstance(modes, str) else list(modes)
    missing = [m for m in PAIR_MODES if m not in chosen] if worst else []
    if not missing:
        return chosen, None
    return ([m for m in PAIR_MODES if m in chosen or m in missing] + [m for m in chosen if m not in PAIR_MODES],
            f"--worst needs {', '.join(missing)} too: adding them")


def embedding_cache(embedder: Embedder, ingest: IngestSettings, *, enabled: bool = True, build: bool = True,
                    cache_dir: Path | None = None) -> tuple[CachedEmbedder | None, str | None]:
    """The cache in front of ``embedder`` for building the index (``cache_dir``, default
    ``$HSP_CACHE/embeddings``), or None (off, nothing to build, or worker processes that embed without it) with
    the reason when it is not obvious."""
    from hybridsearch.embedding.cache import CachedEmbedder, default_cache_dir

    if not enabled or not build:
        return None, None
    if ingest.workers > 1:
        return None, "embedding cache off: with HSP_INGEST__WORKERS > 1 the worker processes embed without it"
    return CachedEmbedder(embedder, cache_dir or default_cache_dir()), None


def report_stem(report: EvalReport, out: Path, when: dt.datetime | None = None) -> Path:
    """``<out>/eval-<dataset>-<split>-<UTC time>[-n]``: never an earlier report's name (same second: ``-2`` …)."""
    stamp = (when or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    base = f"eval-{report.dataset['name']}-{report.dataset['split']}-{stamp}"
    stem, n = out / base, 1
    while stem.with_suffix(".json").exists():
        n += 1
        stem = out / f"{base}-{n}"
    return stem


def write_reports(report: EvalReport, out: Path, diffs: list[Diff] | None, tolerance: float) -> list[Path]:
    """Write ``eval-<dataset>-<split>-<UTC time>[-n].json/.md/.png`` under ``out``; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    stem = report_stem(report, out)
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(report.to_json() + "\n", encoding="utf-8")
    md_path.write_text(to_markdown(report, diffs, tolerance) + "\n", encoding="utf-8")
    return [json_path, md_path, write_chart(report, stem.with_suffix(".png"))]


def run_evaluation(dataset: Path, settings: Settings, *, split: str = "test",
                   modes: str | Sequence[str] = DEFAULT_MODES, out: Path = Path("reports"),
                   baseline: Path | None = None, tolerance: float = 0.01, worst: int = 0,
                   limit_queries: int | None = None, keep_identical_ids: bool = False, prefix: str | None = None,
                   sweep: list[str] | None = None, ingest: bool = True, use_embedding_cache: bool = True,
                   embedding_cache_dir: Path | None = None, progress: ProgressSink | None = None) -> EvalRun:
    """Evaluate ``dataset``'s ``split`` on its own index (prefix ``prefix``, default ``eval-<name>``; built or
    reused unless ``ingest`` is False) and write the reports under ``out``; see ``hsp eval --help``.

    Raises ConfigError (bad arguments, collection or baseline), IndexNotFound, IndexMismatch, ClusterError,
    ModelError."""
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.engine import connect
    from hybridsearch.eval.datasets import load_collection
    from hybridsearch.eval.harness import evaluate_collection
    from hybridsearch.eval.prepare import eval_settings
    from hybridsearch.eval.sweep import parse_sweep, run_sweep

    if tolerance < 0:
        raise ConfigError("--tolerance must be ≥ 0")
    if worst < 0 or (limit_queries is not None and limit_queries < 1):
        raise ConfigError("--worst must be ≥ 0 and --limit-queries ≥ 1")
    notes: list[str] = []

    def remark(text: str | None) -> None:
        if text:
            notes.append(text)
            note(progress, NOTE, text)

    chosen, why = plan_modes(modes, worst)
    remark(why)
    knobs = parse_sweep(sweep or [])
    base = load_report(baseline) if baseline else None
    collection = load_collection(dataset, split).limit(limit_queries)
    s = eval_settings(settings, prefix or f"eval-{collection.name}")
    remark(f"{collection.name} {collection.split}: {len(collection)} judged queries · index prefix "
           f"{s.index.prefix} · modes {', '.join(chosen)}")
    es = connect(s.es)
    embedder: Embedder = Embedder(s.embedding)
    cache, why = embedding_cache(embedder, s.ingest, enabled=use_embedding_cache, build=ingest,
                                 cache_dir=embedding_cache_dir)
    remark(why)
    embedder = cache or embedder  # queries pass through it uncached
    try:
        evaluation = evaluate_collection(es, s, collection, chosen, embedder=embedder, ingest=ingest, worst=worst,
                                         progress=progress, ignore_identical_ids=not keep_identical_ids)
        if knobs:
            remark(f"sweeping {', '.join(f'{n}={v}' for n, vs in knobs for v in vs)}")
            trials = run_sweep(es, s, collection, chosen, knobs, embedder=embedder, k=evaluation.report.k,
                               ignore_identical_ids=not keep_identical_ids)
            evaluation.report.sweep = [t.model_dump() for t in trials]
    finally:
        es.close()
        if cache is not None:
            cache.close()
    report = evaluation.report
    stats = cache.stats() if cache is not None else None
    if stats is not None and report.ingest is not None:
        report.ingest["embedding_cache"] = stats
    diffs = compare(report, base, tolerance) if base else None
    paths = write_reports(report, out, diffs, tolerance)
    return EvalRun(report=report, modes=chosen, prefix=s.index.prefix, diffs=diffs, tolerance=tolerance,
                   paths=paths, cache_stats=stats, notes=notes)
