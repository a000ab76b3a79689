"""The report's chart: quality per mode (left) and p50 latency per stage (right), one PNG."""

from __future__ import annotations

from pathlib import Path

from hybridsearch.eval.metrics import METRICS
from hybridsearch.eval.report import EvalReport

PLOT_STAGES = ("embed", "search", "fusion", "rerank")


def write_chart(report: EvalReport, path: Path) -> Path:
    """Draw the chart of ``report`` to ``path`` (PNG, matplotlib's Agg backend); returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

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
    for stage in PLOT_STAGES:
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
