"""The evaluation report: :class:`EvalReport` holds every number (JSON, compared against a baseline); Markdown, chart
and terminal tables are views of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pydantic import BaseModel, Field, ValidationError

from hybridsearch.errors import ConfigError
from hybridsearch.eval.metrics import METRICS, PRIMARY

SCHEMA = "hybridsearch.eval/1"
STAGES = ("embed", "search", "fusion", "rerank", "total")
LATENCY_KEYS = (*STAGES, "wall")
SWEEP_METRICS = ("ndcg@10", "recall@100")  # what ``--sweep`` measures per mode


class Latency(BaseModel):
    """Milliseconds over the queries of one mode for one stage."""

    p50: float
    p95: float
    mean: float


def latency_stats(values: list[float]) -> Latency:
    """p50/p95/mean of ``values`` (zeros when empty)."""
    if not values:
        return Latency(p50=0.0, p95=0.0, mean=0.0)
    arr = np.asarray(values, dtype=float)
    return Latency(p50=float(np.percentile(arr, 50)), p95=float(np.percentile(arr, 95)), mean=float(arr.mean()))


class ModeReport(BaseModel):
    """Quality and latency of one mode, or why it was skipped."""

    mode: str
    status: str = Field(description="'ok' or 'skipped'")
    reason: str | None = None
    queries: int = 0
    failed_queries: int = 0
    reranked_queries: int | None = Field(None, description="hybrid+rerank: queries the reranker actually reordered")
    rerank_reasons: dict[str, int] = Field(default_factory=dict, description="the other queries by rerank outcome "
                                           "(disabled, skipped, failed, timed_out)")
    rerank_blend: float | None = Field(None, description="hybrid+rerank: reranker share in the final order "
                                                         "(1 = reranker order only), when one value was used")
    metrics: dict[str, float] = Field(default_factory=dict)
    latency_ms: dict[str, Latency] = Field(default_factory=dict)
    per_query: dict[str, dict[str, float]] = Field(default_factory=dict, description="metric -> query id -> value")


class RelevantRanks(BaseModel):
    """Where one relevant document stood in each ranking (None: not retrieved in the top k)."""

    doc_id: str
    grade: int
    bm25: int | None = None
    knn: int | None = None
    fusion: int | None = None
    rerank: int | None = None


class WorstQuery(BaseModel):
    """A query where hybrid lost nDCG@10 to the better single retriever."""

    qid: str
    query: str
    hybrid: float
    best_single_mode: str
    best_single: float
    loss: float
    relevant: list[RelevantRanks]


class Check(BaseModel):
    """A quality rule the run either meets or not (informational; ``--baseline`` is the gate)."""

    name: str
    passed: bool
    detail: str


class EvalReport(BaseModel):
    """Everything one ``hsp eval`` run measured, and the context needed to reproduce it."""

    schema_id: str = Field(SCHEMA, alias="schema")
    created_at: str
    dataset: dict[str, Any]
    index: dict[str, Any]
    ingest: dict[str, Any] | None = None
    model: str
    chunker: str
    cluster: dict[str, Any]
    git: dict[str, Any]
    settings: dict[str, Any]
    k: int
    modes: list[ModeReport]
    checks: list[Check] = Field(default_factory=list)
    worst: list[WorstQuery] = Field(default_factory=list)
    sweep: list[dict[str, Any]] = Field(default_factory=list, description="--sweep trials: knob, value, metrics")

    model_config = {"populate_by_name": True}

    def mode(self, name: str) -> ModeReport | None:
        return next((m for m in self.modes if m.mode == name and m.status == "ok"), None)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2, by_alias=True)


def load_report(path: str | Path) -> EvalReport:
    """Read a JSON report written by ``hsp eval``. Raises ConfigError when it is missing or not one."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        return EvalReport.model_validate(data)
    except FileNotFoundError:
        raise ConfigError(f"baseline {p} does not exist") from None
    except (json.JSONDecodeError, ValidationError) as exc:
        raise ConfigError(f"{p} is not an hsp eval report: {str(exc).splitlines()[0]}") from None


def quality_checks(modes: dict[str, ModeReport], slack: float = 0.01) -> list[Check]:
    """Hybrid (and hybrid+rerank) must not fall below the better single retriever by more than ``slack``."""
    checks: list[Check] = []
    modes = {k: m for k, m in modes.items() if m.status == "ok"}
    singles = [modes[m] for m in ("bm25", "dense") if m in modes]
    if len(singles) < 2:
        return checks
    best = max(singles, key=lambda m: m.metrics[PRIMARY])
    for name in ("hybrid", "hybrid+rerank"):
        if name not in modes:
            continue
        value, floor = modes[name].metrics[PRIMARY], best.metrics[PRIMARY] - slack
        checks.append(Check(
            name=f"{name} nDCG@10 ≥ best single retriever − {slack:g}",
            passed=value >= floor,
            detail=f"{name} {value:.4f} vs {best.mode} {best.metrics[PRIMARY]:.4f} (floor {floor:.4f})",
        ))
    return checks


def ingest_checks(ingest: dict[str, Any] | None) -> list[Check]:
    """A failed check when ingestion could not index some documents (the scores then undercount)."""
    if ingest is None:
        return []
    failed = int(ingest.get("documents_failed") or 0)
    detail = (f"{failed} of {ingest.get('documents')} documents failed to index; see {ingest.get('dead_letter_path')}"
              if failed else f"{ingest.get('documents')} documents read, none failed")
    return [Check(name="every corpus document indexed", passed=failed == 0, detail=detail)]


class Diff(BaseModel):
    """One metric of one mode, now and in the baseline."""

    mode: str
    metric: str
    baseline: float
    current: float
    delta: float
    regressed: bool


def compare(current: EvalReport, baseline: EvalReport, tolerance: float) -> list[Diff]:
    """Per-metric differences for modes in both reports (``regressed``: fell by more than ``tolerance``). Raises
    ConfigError when they share no measured mode."""
    diffs: list[Diff] = []
    for mode in current.modes:
        old = baseline.mode(mode.mode)
        if mode.status != "ok" or old is None:
            continue
        for metric in METRICS:
            if metric in mode.metrics and metric in old.metrics:
                delta = mode.metrics[metric] - old.metrics[metric]
                diffs.append(Diff(mode=mode.mode, metric=metric, baseline=old.metrics[metric],
                                  current=mode.metrics[metric], delta=delta, regressed=delta < -tolerance - 1e-12))
    if not diffs:
        raise ConfigError("the baseline measured none of the modes measured now: nothing to compare")
    return diffs


def _fmt(v: float | int | None) -> str:
    if v is None:
        return "—"
    return f"{v:.4f}" if isinstance(v, float) else str(v)


REPORT_MD = Environment(loader=FileSystemLoader(Path(__file__).parent), undefined=StrictUndefined, trim_blocks=True,
                        lstrip_blocks=True, autoescape=False)
REPORT_MD.filters["fmt"] = _fmt


def to_markdown(report: EvalReport, diffs: list[Diff] | None = None, tolerance: float | None = None) -> str:
    """The report as Markdown (``report.md.j2``): metrics, latency, notes, checks, baseline, sweep, worst queries."""
    text = REPORT_MD.get_template("report.md.j2").render(r=report, diffs=diffs, tolerance=tolerance, metrics=METRICS,
                                                         latency_keys=LATENCY_KEYS, sweep_metrics=SWEEP_METRICS)
    return text.rstrip("\n") + "\n"


def write_chart(report: EvalReport, path: Path) -> Path:
    """Draw the chart of ``report`` to ``path`` (PNG, matplotlib's Agg backend); returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in report.modes if m.status == "ok"]
    fig, (ax_q, ax_l) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    metric_keys = list(METRICS)
    x = np.arange(len(metric_keys))
    width = 0.8 / max(len(modes), 1)
    for i, m in enumerate(modes):
        values = [m.metrics.get(k, 0.0) for k in metric_keys]
        bars = ax_q.bar(x + i * width - 0.4 + width / 2, values, width, label=m.mode)
        ax_q.bar_label(bars, fmt="%.3f", fontsize=6, rotation=90, padding=2)
    ax_q.set_xticks(x, [METRICS[k] for k in metric_keys])
    ax_q.set_ylim(0, 1.22)
    ax_q.set_ylabel("score")
    ax_q.set_title(f"{report.dataset['name']} {report.dataset['split']}: quality per mode")
    ax_q.legend(fontsize=8, loc="upper center", ncol=max(len(modes), 1))

    names = [m.mode for m in modes]
    bottom = np.zeros(len(modes))
    for stage in STAGES[:-1]:  # without the total
        p50 = np.array([m.latency_ms[stage].p50 for m in modes])
        ax_l.bar(names, p50, bottom=bottom, label=stage)
        bottom += p50
    for x_pos, total in enumerate(bottom):
        ax_l.annotate(f"{total:.1f}", (x_pos, total), ha="center", va="bottom", fontsize=7)
    p95 = [m.latency_ms["total"].p95 for m in modes]
    ax_l.scatter(names, p95, marker="_", s=400, color="black", label="total p95", zorder=3)
    ax_l.set_ylabel("ms (p50 per stage, stacked)")
    ax_l.set_title("latency per stage")
    ax_l.tick_params(axis="x", labelrotation=20)
    ax_l.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
