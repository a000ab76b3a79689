"""Query-time knob sweeps (``hsp eval --sweep query.rrf_k=20,60``): the query phase re-run per value on the same
index, nDCG@10 and Recall@100 per mode."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ValidationError

from hybridsearch.errors import ConfigError
from hybridsearch.eval.metrics import METRICS
from hybridsearch.settings import QuerySettings

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


def sweep_markdown(trials: list[Trial], modes: Sequence[str]) -> str:
    """A Markdown table: one row per knob value, nDCG@10 and Recall@100 per mode."""
    modes = [m for m in modes if m != "hybrid+rerank"]
    head = "| knob | value | " + " | ".join(f"{m} {METRICS[x]}" for m in modes for x in SWEEP_METRICS) + " |"
    lines = [head, "|---|---|" + "---:|" * (len(modes) * len(SWEEP_METRICS))]
    for t in trials:
        cells = [f"{t.metrics[m][x]:.4f}" if m in t.metrics else "—" for m in modes for x in SWEEP_METRICS]
        lines.append(f"| {t.knob} | {t.value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
