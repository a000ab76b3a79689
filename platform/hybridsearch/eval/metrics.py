"""Document-level IR metrics, computed by ``ranx``: rankings (document ids, best first) become runs scored
``1/rank``, so ranx's own sort cannot reorder ties."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from hybridsearch.errors import ConfigError
from hybridsearch.query.fusion import unique

# ranx metric name -> name shown in tables and reports.
METRICS: dict[str, str] = {
    "ndcg@10": "nDCG@10",
    "recall@10": "Recall@10",
    "recall@100": "Recall@100",
    "mrr@10": "MRR@10",
    "precision@5": "P@5",
}
PRIMARY = "ndcg@10"

Rankings = Mapping[str, Sequence[str]]


def to_run(rankings: Rankings) -> dict[str, dict[str, float]]:
    """``{qid: {doc: 1/rank}}`` from rankings (chunk duplicates collapsed, best first)."""
    return {qid: {doc: 1.0 / r for r, doc in enumerate(unique(docs), 1)} for qid, docs in rankings.items()}


def evaluate(
    qrels: Mapping[str, Mapping[str, int]], rankings: Rankings, metrics: Sequence[str] = tuple(METRICS)
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """``({metric: mean}, {metric: {qid: value}})``; a judged query without a ranking scores 0. Raises ConfigError
    when ``qrels`` is empty."""
    if not qrels:
        raise ConfigError("no judged queries to evaluate")
    return evaluate_run(qrels, to_run({q: docs for q, docs in rankings.items() if q in qrels and docs}), metrics)


def evaluate_run(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
                 metrics: Sequence[str]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """:func:`evaluate` of a ranx run (``{qid: {doc: score}}``, ties ordered by ranx)."""
    from ranx import Qrels, Run
    from ranx import evaluate as ranx_evaluate

    if not run:  # nothing retrieved for any query: ranx cannot hold an empty run
        return dict.fromkeys(metrics, 0.0), {m: dict.fromkeys(qrels, 0.0) for m in metrics}
    ranx_qrels = Qrels({q: dict(j) for q, j in qrels.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's type-safety chatter
        # make_comparable: queries without a ranking score 0, rankings for unjudged queries are ignored
        scores: Any = ranx_evaluate(ranx_qrels, Run({q: dict(d) for q, d in run.items()}), list(metrics),
                                    return_mean=False, make_comparable=True)
    if len(metrics) == 1:
        scores = {metrics[0]: scores}
    order = ranx_qrels.get_query_ids()  # the order of ranx's per-query arrays
    per_query = {m: {q: float(v) for q, v in zip(order, scores[m], strict=True)} for m in metrics}
    return {m: sum(per_query[m].values()) / len(order) for m in metrics}, per_query
