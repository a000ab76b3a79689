"""The doctor's cluster checks: reachable, version, health, and disk use against the cluster's own
watermarks."""

from __future__ import annotations

import re

from hybridsearch.doctor.check import Check, problem
from hybridsearch.engine import EngineClient, EngineInfo, cluster_info, engine_errors, request
from hybridsearch.errors import HybridSearchError

_SIZE = re.compile(r"^\s*([0-9.]+)\s*([kmgtp]?b)?\s*$", re.I)
_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4, "pb": 1024**5}


def watermark_used_fraction(value: str, total_bytes: int) -> float:
    """A disk watermark (``"85%"``, ``"0.85"`` or free space like ``"1gb"``) as a used-space fraction."""
    value = value.strip().lower()
    if value.endswith("%"):
        return float(value[:-1]) / 100
    m = _SIZE.match(value)
    if m and m.group(2) is None and float(m.group(1)) <= 1.0:
        return float(m.group(1))
    if m:
        free = float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()]
        return max(0.0, 1 - free / total_bytes) if total_bytes else 1.0
    raise ValueError(f"unreadable disk watermark {value!r}")


def _watermarks(es: EngineClient) -> dict[str, str]:
    with engine_errors("cluster settings"):
        body = es.send(request.Request("GET", "/_cluster/settings",
                                       request.params(include_defaults=True, flat_settings=True)))
    merged: dict[str, str] = {}
    for scope in ("defaults", "persistent", "transient"):
        for key, value in body.get(scope, {}).items():
            if key.startswith("cluster.routing.allocation.disk.watermark.") and isinstance(value, str):
                merged[key.rsplit(".", 1)[-1]] = value
    return merged


def check_cluster(es: EngineClient) -> list[Check]:
    """Reachable, version, health, disk. The first check FAILs when no node answers or refuses us."""
    try:
        info = cluster_info(es)
    except HybridSearchError as exc:
        return [Check("cluster", "reachable", "FAIL", *problem(exc))]
    checks = [Check("cluster", "reachable", "OK", f"{info['cluster_name']}, {info['number_of_nodes']} node(s)")]
    versions = info["versions"]
    engine = es.engine
    oldest = EngineInfo(engine.kind, min(versions, key=lambda v: EngineInfo(engine.kind, v).version_tuple or ()))
    label = f"{engine.kind} {', '.join(versions)}"
    if (why := oldest.support_problem()) is not None:
        checks.append(Check("cluster", "version", "FAIL", label, why + "; upgrade the cluster"))
    else:
        checks.append(Check("cluster", "version", "OK" if len(versions) == 1 else "WARN", label,
                            None if len(versions) == 1 else "finish the rolling upgrade"))
    status = info["status"]
    fixes = {"yellow": "replicas cannot be allocated: on a single node set HSP_INDEX__REPLICAS=0 "
                       "(and `PUT <index>/_settings {\"number_of_replicas\": 0}` for existing indices)",
             "red": "a primary shard is unassigned: see `GET _cluster/allocation/explain`"}
    checks.append(Check("cluster", "health", {"green": "OK", "yellow": "WARN"}.get(status, "FAIL"),  # type: ignore[arg-type]
                        status, fixes.get(status)))
    checks.append(_check_disk(es))
    return checks


def _check_disk(es: EngineClient) -> Check:
    try:
        with engine_errors("node disk stats"):
            nodes = es.send(request.Request("GET", "/_nodes/stats/fs",
                                            request.params(filter_path="nodes.*.name,nodes.*.fs.total")))
            nodes = nodes.get("nodes", {})
        marks = _watermarks(es)
    except HybridSearchError as exc:
        detail, fix = problem(exc)
        return Check("cluster", "disk", "WARN", f"cannot read disk usage: {detail}", fix)
    worst: tuple[float, str, int, int] | None = None
    for node in nodes.values():
        total = int(node["fs"]["total"].get("total_in_bytes", 0))
        avail = int(node["fs"]["total"].get("available_in_bytes", 0))
        used = 1 - avail / total if total else 0.0
        if worst is None or used > worst[0]:
            worst = (used, node.get("name", "?"), avail, total)
    if worst is None:
        return Check("cluster", "disk", "WARN", "no node reported disk usage")
    used, name, avail, total = worst
    detail = f"{name}: {used:.0%} used, {avail / 1024**3:.1f} GiB free of {total / 1024**3:.1f} GiB"
    levels = {k: watermark_used_fraction(v, total) for k, v in marks.items() if k in ("low", "high", "flood_stage")}
    if used >= levels.get("high", 0.90):
        return Check("cluster", "disk", "FAIL", detail + " (over the high watermark: shards move away; at the "
                     "flood stage indices turn read-only)", "free disk space or add a node")
    if used >= levels.get("low", 0.85):
        return Check("cluster", "disk", "WARN", detail + " (over the low watermark: no new replicas here)",
                     "free disk space before the high watermark is reached")
    return Check("cluster", "disk", "OK", detail)
