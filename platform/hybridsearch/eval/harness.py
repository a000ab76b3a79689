"""One evaluation end to end: index the collection, run each mode, score with ranx, build the report.

:func:`evaluate_collection` is what ``hsp eval`` calls; tests call it too. It raises our errors
(ConfigError for bad input, ClusterError when the node fails, IndexMismatch on a model clash).
"""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsearch.cluster_url import redact_url
from hybridsearch.engine import EngineClient, cluster_info
from hybridsearch.errors import HybridSearchError
from hybridsearch.eval.datasets import Collection
from hybridsearch.eval.metrics import evaluate
from hybridsearch.eval.prepare import choose_index, index_counts, ingest_corpus
from hybridsearch.eval.report import (
    EvalReport,
    ModeReport,
    ingest_checks,
    mode_report,
    quality_checks,
    worst_queries,
)
from hybridsearch.eval.runner import MODES, ModeRun, run_mode
from hybridsearch.progress import ProgressSink, Task
from hybridsearch.query.results import Mode, SearchResult
from hybridsearch.settings import RerankerSettings, Settings

if TYPE_CHECKING:
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.rerank.base import Reranker

EVAL_K = 100  # Recall@100 needs 100 ranked documents


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
        if not cfg.enabled:
            return "reranker disabled (HSP_RERANKER__ENABLED=false)"
        return "no reranker configured"
    try:
        scores = reranker.score("probe query", ["probe passage"])
    except HybridSearchError as exc:
        return f"reranker unavailable: {exc}"
    except Exception as exc:  # noqa: BLE001 - any failure of a third-party model means "skip this mode"
        return f"reranker unavailable: {type(exc).__name__}: {exc}"
    if len(scores) != 1:
        return f"reranker answered {len(scores)} scores for 1 passage"
    return None


@dataclass
class Evaluation:
    """A finished evaluation: the report and the raw per-mode runs (for failure analysis)."""

    report: EvalReport
    runs: dict[str, ModeRun]


def evaluate_collection(
    es: EngineClient,
    settings: Settings,
    collection: Collection,
    modes: Sequence[str],
    *,
    embedder: Embedder | None = None,
    reranker: Reranker | None = None,
    ingest: bool = True,
    worst: int = 0,
    progress: ProgressSink | None = None,
    ignore_identical_ids: bool = True,
) -> Evaluation:
    """Index ``collection`` under ``settings.index.prefix`` (reusing a fitting index), run ``modes``, score.

    ``settings`` should already carry the evaluation prefix (see :func:`eval_settings`). With
    ``ingest=False`` an existing fitting index is used as it is. ``hybrid+rerank`` runs only when
    ``reranker`` (default: the one ``settings.reranker`` configures) answers a one-pair probe;
    otherwise it is reported as skipped with the reason. ``ignore_identical_ids`` follows BEIR's
    protocol (a hit whose id equals the query id is dropped); the report says which was used. ``progress``
    receives the ingestion's counts (task ``ingest``) and each mode's queries (one task per mode).
    """
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
            reranker, why = auto_reranker(settings.reranker)
        why = why or probe_reranker(reranker, settings.reranker)
        if why is not None:
            skip_reason["hybrid+rerank"] = why
    client = SearchClient(es, settings, embedder=embedder, reranker=reranker, log_queries=False)

    def search(query: str, mode: Mode, rerank: bool) -> SearchResult:
        return client.search(query, k=k, mode=mode, rerank=rerank)

    runs: dict[str, ModeRun] = {}
    reports: dict[str, ModeReport] = {}
    try:
        for mode in modes:
            if mode in skip_reason:
                continue
            tick = Task(progress, mode, len(collection.queries)).advance
            client.embedder.clear_cache()  # each mode pays for its own query embeddings: honest latency
            run = run_mode(search, collection.queries, mode, on_query=tick, ignore_identical_ids=ignore_identical_ids)
            means, per_query = evaluate(collection.qrels, run.rankings)
            runs[mode], reports[mode] = run, mode_report(run, means, per_query)
    finally:
        client.close()

    mode_reports = [reports.get(m) or ModeReport(mode=m, status="skipped", reason=skip_reason[m]) for m in modes]
    report = EvalReport(
        created_at=started.isoformat(timespec="seconds"),
        dataset={"name": collection.name, "path": str(collection.root), "split": collection.split,
                 "queries": len(collection.queries), "judgements": sum(len(j) for j in collection.qrels.values()),
                 "skipped_queries": collection.skipped_queries, "ignore_identical_ids": ignore_identical_ids},
        index={"name": choice.index, "alias": settings.index.alias, "action": choice.action,
               "signature": choice.signature, **counts},
        ingest=ingest_result,
        model=settings.embedding.model,
        chunker=str(choice.signature.get("chunker_version")),
        cluster=cluster_info(es),
        git=git_info(),
        settings=redacted_settings(settings),
        k=k,
        modes=mode_reports,
        checks=ingest_checks(ingest_result) + quality_checks(reports),
        worst=worst_queries(reports, runs, collection.queries, collection.qrels, worst),
    )
    return Evaluation(report, runs)


__all__ = ["EVAL_K", "MODES", "Evaluation", "evaluate_collection", "git_info", "probe_reranker",
           "redacted_settings"]
