"""Query-time knob sweeps (``hsp eval --sweep query.rrf_k=20,60``): the query phase re-run once per value on the
same index, nDCG@10 and Recall@100 per mode. Only ``query.*`` settings: anything else changes the index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ValidationError

from hybridsearch.engine import EngineClient
from hybridsearch.errors import ConfigError
from hybridsearch.eval.datasets import Collection
from hybridsearch.eval.harness import run_mode
from hybridsearch.eval.metrics import METRICS, evaluate
from hybridsearch.query.results import Mode, SearchResult
from hybridsearch.settings import QuerySettings, Settings

if TYPE_CHECKING:
    from hybridsearch.embedding.encoder import Embedder

SWEEP_METRICS = ("ndcg@10", "recall@100")


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


# fusion knobs: swept with ``fusion=auto``, they select their fusion (else the index's recorded one would be used)
FUSION_OF_KNOB = {"rrf_k": "rrf", "knn_share": "rrf"}


def with_query(query: QuerySettings, name: str, value: str) -> QuerySettings:
    """``query`` with ``<name>`` set to ``value`` (validated; see :data:`FUSION_OF_KNOB`). Raises ConfigError."""
    update: dict[str, str] = {name: value}
    if query.fusion == "auto" and name in FUSION_OF_KNOB:
        update["fusion"] = FUSION_OF_KNOB[name]
    try:
        return QuerySettings.model_validate({**query.model_dump(), **update})
    except ValidationError as exc:
        raise ConfigError(f"--sweep query.{name}={value}: {exc.errors()[0]['msg']}") from None


class Trial(BaseModel):
    """One knob value: metrics per mode."""
    knob: str
    value: str
    metrics: dict[str, dict[str, float]]  # mode -> metric -> mean


def run_sweep(
    es: EngineClient, settings: Settings, collection: Collection, modes: Sequence[str],
    knobs: list[tuple[str, list[str]]], *, embedder: Embedder | None = None, k: int = 100,
    ignore_identical_ids: bool = True,
) -> list[Trial]:
    """Run ``modes`` (without rerank) once per knob value on the index behind ``settings.index.alias``."""
    from hybridsearch.query.client import SearchClient

    modes = [m for m in modes if m != "hybrid+rerank"]
    trials: list[Trial] = []
    for name, values in knobs:
        for value in values:
            knobs_now = with_query(settings.query, name, value)
            client = SearchClient(es, settings, embedder=embedder, query=knobs_now, log_queries=False)

            def search(query: str, mode: Mode, rerank: bool, client: SearchClient = client) -> SearchResult:
                return client.search(query, k=min(k, client.query.max_k), mode=mode, rerank=False)

            metrics: dict[str, dict[str, float]] = {}
            try:
                for mode in modes:
                    run = run_mode(search, collection.queries, mode, ignore_identical_ids=ignore_identical_ids)
                    means, _ = evaluate(collection.qrels, run.rankings, SWEEP_METRICS)
                    metrics[mode] = means
            finally:
                client.close()
            trials.append(Trial(knob=name, value=value, metrics=metrics))
    return trials


def sweep_markdown(trials: list[Trial], modes: Sequence[str]) -> str:
    """A Markdown table: one row per knob value, nDCG@10 and Recall@100 per mode."""
    modes = [m for m in modes if m != "hybrid+rerank"]
    head = "| knob | value | " + " | ".join(f"{m} {METRICS[x]}" for m in modes for x in SWEEP_METRICS) + " |"
    lines = [head, "|---|---|" + "---:|" * (len(modes) * len(SWEEP_METRICS))]
    for t in trials:
        cells = [f"{t.metrics[m][x]:.4f}" if m in t.metrics else "—" for m in modes for x in SWEEP_METRICS]
        lines.append(f"| {t.knob} | {t.value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
