"""``hsp doctor``: is everything a search needs in place, and if not, how to fix it.

Each check returns a :class:`Check` (:mod:`.check`) with a status (OK, WARN, FAIL or SKIP), what it found and,
when something is wrong, the fix. :func:`run_checks` runs every area in order, each in its module:
:mod:`.cluster` (reachable, version, health, disk against the cluster's watermarks), :mod:`.index` (privileges,
alias, model, vectors, segments, BM25 and fusion, chunks, hidden documents, analyzer), :mod:`.logs` (the log
indices) and :mod:`.models` (the embedder, and the reranker: a problem there is a WARN, as searches then keep
the fused order).
"""
from __future__ import annotations

from collections.abc import Callable

from hybridsearch.doctor.check import Check, problem
from hybridsearch.doctor.cluster import check_cluster
from hybridsearch.doctor.index import check_index
from hybridsearch.doctor.logs import check_log_indices
from hybridsearch.doctor.models import check_embedder, check_reranker
from hybridsearch.engine import EngineClient, connect
from hybridsearch.errors import HybridSearchError
from hybridsearch.settings import Settings


def run_checks(settings: Settings, *, es: EngineClient | None = None, models: bool = True,
               reranker: bool = True, on_check: Callable[[Check], None] | None = None) -> list[Check]:
    """Every check, in order; index checks are skipped when the cluster does not answer."""
    es = es or connect(settings.es, max_retries=0, request_timeout=10.0)
    checks: list[Check] = []

    def add(new: list[Check]) -> None:
        for c in new:
            checks.append(c)
            if on_check:
                on_check(c)

    add(check_cluster(es))
    if checks[0].status == "FAIL":
        add([Check("index", "index", "SKIP", "cluster unreachable")])
    else:
        try:
            add(check_index(es, settings))
        except HybridSearchError as exc:
            add([Check("index", "index", "FAIL", *problem(exc))])
        add(check_log_indices(es, settings))
    add([check_embedder(settings.embedding)] if models else [Check("models", "embedder", "SKIP", "--no-models")])
    add([check_reranker(settings.reranker)] if reranker else [Check("reranker", "reranker", "SKIP", "--no-reranker")])
    return checks


def failed(checks: list[Check], strict: bool = False) -> bool:
    """True when any check FAILed (or, with ``strict``, WARNed)."""
    bad = {"FAIL", "WARN"} if strict else {"FAIL"}
    return any(c.status in bad for c in checks)
