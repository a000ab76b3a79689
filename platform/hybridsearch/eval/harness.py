"""``hsp eval`` end to end: the collection's own index under its prefix (a version that fits the settings is reused,
else one is created and the alias swapped to it), each mode's queries, ranx scores, the report (remarks go to the
progress sink as notes; nothing is printed)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from hybridsearch.cluster_url import redact_url
from hybridsearch.engine import EngineClient, cluster_info, engine_errors, request
from hybridsearch.errors import ConfigError, HybridSearchError, IndexNotFound, IngestError, QueryError
from hybridsearch.eval.datasets import Collection
from hybridsearch.eval.metrics import PRIMARY, evaluate
from hybridsearch.eval.report import (
    LATENCY_KEYS,
    STAGES,
    SWEEP_METRICS,
    Diff,
    EvalReport,
    ModeReport,
    RelevantRanks,
    WorstQuery,
    compare,
    ingest_checks,
    latency_stats,
    load_report,
    quality_checks,
    to_markdown,
    write_chart,
)
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
from hybridsearch.progress import ProgressSink, Task, note
from hybridsearch.query.fusion import unique
from hybridsearch.query.results import Mode, SearchResult
from hybridsearch.settings import QuerySettings, RerankerSettings, Settings

if TYPE_CHECKING:
    from hybridsearch.embedding.cache import CachedEmbedder
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.ingest.sources import Document
    from hybridsearch.rerank.base import Reranker
    from hybridsearch.settings import IngestSettings

EVAL_K = 100  # Recall@100 needs 100 ranked documents
# eval mode -> (query-layer mode, rerank?)
MODES: dict[str, tuple[Mode, bool]] = {
    "bm25": ("bm25", False), "dense": ("dense", False), "hybrid": ("hybrid", False), "hybrid+rerank": ("hybrid", True),
}
DEFAULT_MODES = tuple(MODES)
PAIR_MODES = ("bm25", "dense", "hybrid")  # what --worst compares
NOTE = "eval"  # the task name of the workflow's notes

SearchFn = Callable[[str, Mode, bool], SearchResult]


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


def parse_modes(text: str) -> list[str]:
    """``"bm25,hybrid"`` → ``["bm25", "hybrid"]`` (order kept, duplicates dropped). Raises QueryError."""
    modes = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise QueryError(f"unknown mode(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(MODES)}")
    return modes


def parse_sweep(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``["query.rrf_k=20,60"]`` → ``[("rrf_k", ["20", "60"])]``. Raises ConfigError on other keys or syntax."""
    out: list[tuple[str, list[str]]] = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        name = key.strip().removeprefix("query.")
        if not sep or not values.strip():
            raise ConfigError(f"--sweep {spec!r}: expected query.NAME=V1,V2,…")
        if "." in name or name not in QuerySettings.model_fields:
            raise ConfigError(f"--sweep {key!r}: only query settings can be swept "
                              f"({', '.join(sorted(QuerySettings.model_fields))})")
        out.append((name, [v.strip() for v in values.split(",") if v.strip()]))
    return out


def with_query(query: QuerySettings, name: str, value: str) -> QuerySettings:
    """``query`` with ``name`` set to ``value``; a swept RRF knob selects RRF over ``fusion=auto`` (else the index's
    recorded fusion would be used). Raises ConfigError."""
    update: dict[str, str] = {name: value}
    if query.fusion == "auto" and name in ("rrf_k", "knn_share"):
        update["fusion"] = "rrf"
    try:
        return QuerySettings.model_validate({**query.model_dump(), **update})
    except ValidationError as exc:
        raise ConfigError(f"--sweep query.{name}={value}: {exc.errors()[0]['msg']}") from None


@dataclass
class ModeRun:
    """What one mode returned for every query: document rankings and per-stage latencies (ms)."""

    mode: str
    rankings: dict[str, list[str]] = field(default_factory=dict)
    latency: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in LATENCY_KEYS})
    failed: dict[str, str] = field(default_factory=dict)
    reranked: int = 0
    rerank_reasons: Counter[str] = field(default_factory=Counter)  # by RerankOutcome value
    rerank_blends: Counter[float] = field(default_factory=Counter)

    def rank_of(self, qid: str, doc_id: str) -> int | None:
        """1-based rank of ``doc_id`` for ``qid`` in this mode, None when it was not retrieved."""
        ranking = self.rankings.get(qid, [])
        return ranking.index(doc_id) + 1 if doc_id in ranking else None


def run_mode(search: SearchFn, queries: Mapping[str, str], mode: str, *, on_query: Callable[[], None] | None = None,
             ignore_identical_ids: bool = True) -> ModeRun:
    """Search every query with ``mode``, hits collapsed to documents; a query the layer rejects scores 0.
    ``ignore_identical_ids`` (BEIR's protocol) drops a hit whose id equals the query id."""
    layer_mode, rerank = MODES[mode]
    out = ModeRun(mode)
    for qid, text in queries.items():
        t0 = time.perf_counter()
        try:
            result = search(text, layer_mode, rerank)
        except QueryError as exc:
            out.failed[qid] = str(exc)
            out.rankings[qid] = []
        else:
            wall = (time.perf_counter() - t0) * 1000.0
            ranking = unique(h.doc_id for h in sorted(result.hits, key=lambda h: h.rank))
            out.rankings[qid] = [d for d in ranking if d != qid] if ignore_identical_ids else ranking
            for stage in STAGES:
                out.latency[stage].append(getattr(result.timings, f"{stage}_ms"))
            out.latency["wall"].append(wall)
            if rerank and result.reranked:
                out.reranked += 1
                out.rerank_blends[result.rerank_blend if result.rerank_blend is not None else 1.0] += 1
            elif rerank:
                out.rerank_reasons[result.rerank_outcome.value] += 1
        if on_query:
            on_query()
    return out


def mode_report(run: ModeRun, means: dict[str, float], per_query: dict[str, dict[str, float]]) -> ModeReport:
    """:class:`ModeReport` of a finished :class:`ModeRun` and its ranx scores."""
    return ModeReport(
        mode=run.mode, status="ok", queries=len(run.rankings), failed_queries=len(run.failed),
        reranked_queries=run.reranked if run.mode.endswith("rerank") else None,
        rerank_reasons=dict(run.rerank_reasons),
        rerank_blend=next(iter(run.rerank_blends)) if len(run.rerank_blends) == 1 else None,
        metrics=means, latency_ms={k: latency_stats(run.latency[k]) for k in LATENCY_KEYS}, per_query=per_query,
    )


def worst_queries(report_modes: dict[str, ModeReport], runs: dict[str, ModeRun], queries: dict[str, str],
                  qrels: dict[str, dict[str, int]], n: int) -> list[WorstQuery]:
    """The ``n`` queries where hybrid's nDCG@10 trails the better of BM25 and dense the most (loss > 0)."""
    report_modes = {k: m for k, m in report_modes.items() if m.status == "ok"}
    hybrid = report_modes.get("hybrid")
    singles = [report_modes[m] for m in ("bm25", "dense") if m in report_modes]
    if hybrid is None or not singles or n <= 0:
        return []

    def rank(mode: str, qid: str, doc: str) -> int | None:
        return runs[mode].rank_of(qid, doc) if mode in runs else None

    rows: list[WorstQuery] = []
    for qid, value in hybrid.per_query[PRIMARY].items():
        best = max(singles, key=lambda m: m.per_query[PRIMARY][qid])
        loss = best.per_query[PRIMARY][qid] - value
        if loss <= 1e-9:
            continue
        relevant = [RelevantRanks(doc_id=doc, grade=grade, bm25=rank("bm25", qid, doc), knn=rank("dense", qid, doc),
                                  fusion=rank("hybrid", qid, doc), rerank=rank("hybrid+rerank", qid, doc))
                    for doc, grade in sorted(qrels[qid].items()) if grade > 0]
        rows.append(WorstQuery(qid=qid, query=queries[qid], hybrid=value, best_single_mode=best.mode,
                               best_single=best.per_query[PRIMARY][qid], loss=loss, relevant=relevant))
    rows.sort(key=lambda w: (-w.loss, w.qid))
    return rows[:n]


def redacted_settings(settings: Settings) -> dict[str, Any]:
    """Settings as JSON-ready data with secrets masked (SecretStr) and credentials cut from URLs."""
    data: dict[str, Any] = settings.model_dump(mode="json")
    data["es"]["url"] = ",".join(n.shown for n in settings.es.nodes)
    if data.get("es_url"):
        data["es_url"] = data["es"]["url"]
    if data.get("reranker", {}).get("url"):
        data["reranker"]["url"] = redact_url(data["reranker"]["url"])
    return data


def git_info(where: Path | None = None) -> dict[str, Any]:
    """Commit and dirty flag of the checkout holding this package (``commit: None`` outside git)."""
    cwd = where or Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(dirty)}


def probe_reranker(reranker: Reranker | None, cfg: RerankerSettings) -> str | None:
    """Why hybrid+rerank cannot run (no reranker, or it fails a one-pair score), else None."""
    if reranker is None:
        return "reranker disabled (HSP_RERANKER__ENABLED=false)" if not cfg.enabled else "no reranker configured"
    try:
        scores = reranker.score("probe query", ["probe passage"])
    except HybridSearchError as exc:
        return f"reranker unavailable: {exc}"
    except Exception as exc:  # noqa: BLE001 - any failure of a third-party model means "skip this mode"
        return f"reranker unavailable: {type(exc).__name__}: {exc}"
    return f"reranker answered {len(scores)} scores for 1 passage" if len(scores) != 1 else None


def evaluate_collection(es: EngineClient, settings: Settings, collection: Collection, modes: Sequence[str], *,
                        embedder: Embedder | None = None, reranker: Reranker | None = None, ingest: bool = True,
                        worst: int = 0, progress: ProgressSink | None = None,
                        ignore_identical_ids: bool = True) -> EvalRun:
    """Index ``collection`` (reusing a fitting index; ``ingest=False``: as it is), run ``modes`` and score them;
    ``hybrid+rerank`` is skipped, with the reason, unless a reranker answers a probe."""
    from hybridsearch.query.client import SearchClient
    from hybridsearch.query.core import auto_reranker

    started = dt.datetime.now(dt.UTC)
    choice = choose_index(es, settings, create=ingest)
    ingest_result = (ingest_corpus(es, settings, collection.corpus_path, embedder=embedder,
                                   progress=progress) if ingest else None)
    counts = index_counts(es, choice.index)
    k = min(EVAL_K, settings.query.max_k)
    skip_reason: dict[str, str] = {}
    if "hybrid+rerank" in modes:
        why: str | None = None
        if reranker is None:
            reranker, why = auto_reranker(settings.reranker, settings.models)
        why = why or probe_reranker(reranker, settings.reranker)
        if why is not None:
            skip_reason["hybrid+rerank"] = why
    client = SearchClient(es, settings, embedder=embedder, reranker=reranker, log_queries=False)

    def search(query: str, mode: Mode, rerank: bool) -> SearchResult:
        return client.search(query, k=k, mode=mode, rerank=rerank)

    runs: dict[str, ModeRun] = {}
    reports: dict[str, ModeReport] = {}
    try:
        for mode in (m for m in modes if m not in skip_reason):
            tick = Task(progress, mode, len(collection.queries)).advance
            client.embedder.clear_cache()  # each mode pays for its own query embeddings: honest latency
            run = run_mode(search, collection.queries, mode, on_query=tick, ignore_identical_ids=ignore_identical_ids)
            means, per_query = evaluate(collection.qrels, run.rankings)
            runs[mode], reports[mode] = run, mode_report(run, means, per_query)
    finally:
        client.close()
    report = EvalReport(
        created_at=started.isoformat(timespec="seconds"),
        dataset={"name": collection.name, "path": str(collection.root), "split": collection.split,
                 "queries": len(collection.queries), "judgements": sum(len(j) for j in collection.qrels.values()),
                 "skipped_queries": collection.skipped_queries, "ignore_identical_ids": ignore_identical_ids},
        index={"name": choice.index, "alias": settings.index.alias, "action": choice.action,
               "signature": choice.signature, **counts},
        ingest=ingest_result, model=settings.embedding.model, chunker=str(choice.signature.get("chunker_version")),
        cluster=cluster_info(es), git=git_info(), settings=redacted_settings(settings), k=k,
        modes=[reports.get(m) or ModeReport(mode=m, status="skipped", reason=skip_reason[m]) for m in modes],
        checks=ingest_checks(ingest_result) + quality_checks(reports),
        worst=worst_queries(reports, runs, collection.queries, collection.qrels, worst),
    )
    return EvalRun(report, runs)


def run_sweep(es: EngineClient, settings: Settings, collection: Collection, modes: Sequence[str],
              knobs: list[tuple[str, list[str]]], *, embedder: Embedder | None = None, k: int = 100,
              ignore_identical_ids: bool = True) -> list[dict[str, Any]]:
    """Per knob value, the query phase of ``modes`` (without rerank) re-run on the same index: ``{knob, value,
    metrics: {mode: {metric: mean}}}``."""
    from hybridsearch.query.client import SearchClient

    trials: list[dict[str, Any]] = []
    for name, value in ((name, value) for name, values in knobs for value in values):
        query = with_query(settings.query, name, value)
        with contextlib.closing(SearchClient(es, settings, embedder=embedder, query=query, log_queries=False)) as c:

            def search(text: str, mode: Mode, rerank: bool, client: SearchClient = c) -> SearchResult:
                return client.search(text, k=min(k, client.query.max_k), mode=mode, rerank=False)

            metrics = {m: evaluate(collection.qrels, run_mode(search, collection.queries, m,
                                                              ignore_identical_ids=ignore_identical_ids).rankings,
                                   SWEEP_METRICS)[0] for m in modes if m != "hybrid+rerank"}
        trials.append({"knob": name, "value": value, "metrics": metrics})
    return trials


@dataclass
class EvalRun:
    """A finished evaluation: the report, the raw per-mode runs, and what :func:`run_evaluation` compared and wrote."""

    report: EvalReport
    runs: dict[str, ModeRun]
    diffs: list[Diff] | None = None
    tolerance: float = 0.0
    paths: list[Path] = field(default_factory=list)
    cache_stats: dict[str, Any] | None = None  # the embedding cache's counts, when it was used

    @property
    def gate_failed(self) -> bool:
        """A metric fell by more than the tolerance against the baseline."""
        return any(d.regressed for d in self.diffs or ())


def embedding_cache(embedder: Embedder, ingest: IngestSettings, *, enabled: bool = True, build: bool = True,
                    cache_dir: Path | None = None) -> tuple[CachedEmbedder | None, str | None]:
    """The embedding cache in front of ``embedder`` for building the index, or None and the reason when useful."""
    from hybridsearch.embedding.cache import CachedEmbedder

    if not enabled or not build:
        return None, None
    if ingest.workers > 1:
        return None, "embedding cache off: with HSP_INGEST__WORKERS > 1 the worker processes embed without it"
    return CachedEmbedder(embedder, cache_dir), None


def run_evaluation(dataset: Path, settings: Settings, *, split: str = "test",
                   modes: str | Sequence[str] = DEFAULT_MODES, out: Path = Path("reports"),
                   baseline: Path | None = None, tolerance: float = 0.01, worst: int = 0,
                   limit_queries: int | None = None, keep_identical_ids: bool = False, prefix: str | None = None,
                   sweep: list[str] | None = None, ingest: bool = True, use_embedding_cache: bool = True,
                   embedding_cache_dir: Path | None = None, progress: ProgressSink | None = None) -> EvalRun:
    """Evaluate ``dataset``'s ``split`` on its own index and write the reports (``hsp eval --help``). Raises
    ConfigError, IndexNotFound, IndexMismatch, ClusterError, ModelError."""
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.engine import EngineClient
    from hybridsearch.eval.datasets import load_collection

    if tolerance < 0:
        raise ConfigError("--tolerance must be ≥ 0")
    if worst < 0 or (limit_queries is not None and limit_queries < 1):
        raise ConfigError("--worst must be ≥ 0 and --limit-queries ≥ 1")

    def remark(text: str | None) -> None:
        if text:
            note(progress, NOTE, text)

    chosen = parse_modes(modes) if isinstance(modes, str) else list(modes)
    if missing := [m for m in PAIR_MODES if m not in chosen] if worst else []:
        remark(f"--worst needs {', '.join(missing)} too: adding them")
        chosen = [m for m in PAIR_MODES if m in chosen or m in missing] + [m for m in chosen if m not in PAIR_MODES]
    knobs = parse_sweep(sweep or [])
    base = load_report(baseline) if baseline else None
    collection = load_collection(dataset, split).limit(limit_queries)
    s = eval_settings(settings, prefix or f"eval-{collection.name}")
    remark(f"{collection.name} {collection.split}: {len(collection)} judged queries · index prefix "
           f"{s.index.prefix} · modes {', '.join(chosen)}")
    es = EngineClient(s.es)
    embedder: Embedder = Embedder(s.embedding, s.models)
    cache, why = embedding_cache(embedder, s.ingest, enabled=use_embedding_cache, build=ingest,
                                 cache_dir=embedding_cache_dir)
    remark(why)
    embedder = cache or embedder  # queries pass through it uncached
    try:
        run = evaluate_collection(es, s, collection, chosen, embedder=embedder, ingest=ingest, worst=worst,
                                  progress=progress, ignore_identical_ids=not keep_identical_ids)
        if knobs:
            remark(f"sweeping {', '.join(f'{n}={v}' for n, vs in knobs for v in vs)}")
            run.report.sweep = run_sweep(es, s, collection, chosen, knobs, embedder=embedder, k=run.report.k,
                                         ignore_identical_ids=not keep_identical_ids)
    finally:
        es.close()
        if cache is not None:
            cache.close()
    report = run.report
    run.cache_stats = cache.stats() if cache is not None else None
    if run.cache_stats is not None and report.ingest is not None:
        report.ingest["embedding_cache"] = run.cache_stats
    run.diffs, run.tolerance = (compare(report, base, tolerance) if base else None), tolerance
    out.mkdir(parents=True, exist_ok=True)
    name = f"eval-{report.dataset['name']}-{report.dataset['split']}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}"
    stem, n = out / name, 1
    while stem.with_suffix(".json").exists():
        n += 1
        stem = out / f"{name}-{n}"
    stem.with_suffix(".json").write_text(report.to_json() + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(to_markdown(report, run.diffs, tolerance) + "\n", encoding="utf-8")
    run.paths = [stem.with_suffix(".json"), stem.with_suffix(".md"), write_chart(report, stem.with_suffix(".png"))]
    return run
