"""Kibana saved objects for hybridsearch: load, validate, re-prefix and import them. ``ops/kibana/hybridsearch.ndjson``
(or a wheel's ``hybridsearch/_kibana``) holds data views, Lens panels and a dashboard for the prefix ``hsp``;
:func:`rewrite_prefix` renames them, so several teams can import their own copy into one Kibana."""

from __future__ import annotations

import copy
import json
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import httpx

from hybridsearch.engine import ELASTICSEARCH
from hybridsearch.errors import ClusterError, ClusterUnavailable, ConfigError
from hybridsearch.index.spec import load_template
from hybridsearch.jsonl import BadLine, parse_lines
from hybridsearch.settings import Settings

DEFAULT_PREFIX = "hsp"
FILE_NAME = "hybridsearch.ndjson"
RECORDS = "___records___"  # Lens' "count of records": not a field


def saved_objects_path() -> Path:
    """The NDJSON file: packaged copy first, else the repository's ``ops/kibana/``."""
    packaged = Path(str(resources.files("hybridsearch"))) / "_kibana" / FILE_NAME
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[2] / "ops" / "kibana" / FILE_NAME


def load_objects(path: Path | None = None) -> list[dict[str, Any]]:
    """Parse the NDJSON saved objects. Raises ConfigError naming the bad line."""
    path = path or saved_objects_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read Kibana saved objects {path}: {exc}. They ship in the repository's "
                          f"ops/kibana/{FILE_NAME}: pass its path with --file") from None
    objects: list[dict[str, Any]] = []
    for item in parse_lines(lines):
        if isinstance(item, BadLine):
            raise ConfigError(f"{path}:{item.lineno}: not JSON ({item.reason})")
        no, obj = item
        if not isinstance(obj, dict) or not {"type", "id", "attributes"} <= obj.keys():
            raise ConfigError(f"{path}:{no}: a saved object needs type, id and attributes")
        objects.append(obj)
    return objects


def to_ndjson(objects: list[dict[str, Any]]) -> bytes:
    """One compact JSON object per line."""
    return b"".join(json.dumps(o, separators=(",", ":")).encode() + b"\n" for o in objects)


def _swap(value: str, prefix: str) -> str:
    """``hsp-rest`` → ``prefix-rest``; ``... (hsp)`` → ``... (prefix)``; anything else unchanged."""
    if value.startswith(f"{DEFAULT_PREFIX}-"):
        return f"{prefix}-{value[len(DEFAULT_PREFIX) + 1:]}"
    if value.endswith(f"({DEFAULT_PREFIX})"):
        return f"{value[:-len(DEFAULT_PREFIX) - 2]}({prefix})"
    return value


def rewrite_prefix(objects: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """Copies of ``objects`` for ``prefix``: ids, references, data-view patterns and titles renamed."""
    out = copy.deepcopy(objects)
    for obj in out:
        obj["id"] = _swap(obj["id"], prefix)
        for ref in obj.get("references", []):
            ref["id"] = _swap(ref["id"], prefix)
        attrs = obj["attributes"]
        for key in ("title", "name"):
            if isinstance(attrs.get(key), str):
                attrs[key] = _swap(attrs[key], prefix)
    return out


def mapping_fields(properties: dict[str, Any], parent: str = "") -> dict[str, str]:
    """``{dotted field: type}`` for a mapping's properties, with sub-objects and multi-fields."""
    fields: dict[str, str] = {}
    for name, spec in properties.items():
        path = f"{parent}{name}"
        if "properties" in spec:
            fields[path] = "object"
            fields.update(mapping_fields(spec["properties"], f"{path}."))
        else:
            fields[path] = spec.get("type", "object")
        for sub, sub_spec in spec.get("fields", {}).items():
            fields[f"{path}.{sub}"] = sub_spec.get("type", "keyword")
    return fields


def data_view_fields(settings: Settings) -> dict[str, dict[str, str]]:
    """Index pattern (without ``*``) → its fields, from our templates rendered for ``settings``."""
    targets = {settings.index.alias: "chunks", settings.index.query_log: "query_log",
               settings.index.ingest_runs: "ingest_runs"}
    return {pattern: mapping_fields(  # Kibana reads Elasticsearch only (OpenSearch has its own Dashboards)
                load_template(name, settings, ELASTICSEARCH)["template"]["mappings"]["properties"])
            for pattern, name in targets.items()}


def validate(objects: list[dict[str, Any]], settings: Settings) -> list[str]:
    """Problems of ``objects`` for ``settings``' prefix: duplicate ids, dangling references, fields that do not fit."""
    problems = [f"duplicate id {i}" for i, n in Counter(obj["id"] for obj in objects).items() if n > 1]
    by_id = {obj["id"]: obj for obj in objects}
    views = data_view_fields(settings)
    view_fields: dict[str, dict[str, str]] = {}
    for obj in (o for o in objects if o["type"] == "index-pattern"):
        title = obj["attributes"].get("title", "")
        fields = views.get(title.rstrip("*"))
        if fields is None:
            problems.append(f"data view {obj['id']} targets {title!r}, not one of {sorted(views)}")
            continue
        view_fields[obj["id"]] = fields
        time_field = obj["attributes"].get("timeFieldName")
        if time_field and fields.get(time_field) != "date":
            problems.append(f"data view {obj['id']}: time field {time_field!r} is not a date in the mapping")
    for obj in objects:
        for ref in obj.get("references", []):
            target = by_id.get(ref["id"])
            if target is None or target["type"] != ref["type"]:
                problems.append(f"{obj['type']} {obj['id']} refers to missing {ref['type']} {ref['id']}")
        if obj["type"] == "lens":
            problems.extend(_check_lens(obj, view_fields))
        if obj["type"] == "dashboard":
            problems.extend(_check_dashboard(obj))
    return problems


_NUMERIC = {"integer", "long", "float", "double", "half_float", "scaled_float", "short", "byte", "unsigned_long"}
_NUMERIC_OPS = {"average", "sum", "median", "percentile", "min", "standard_deviation", "percentile_rank"}


def _check_lens(obj: dict[str, Any], view_fields: dict[str, dict[str, str]]) -> list[str]:
    problems = []
    refs = {r["name"]: r["id"] for r in obj.get("references", [])}
    state = obj["attributes"].get("state", {})
    for layer, spec in state.get("datasourceStates", {}).get("formBased", {}).get("layers", {}).items():
        columns: dict[str, dict[str, Any]] = spec.get("columns", {})
        view_id = refs.get(f"indexpattern-datasource-layer-{layer}")
        fields = view_fields.get(view_id or "")
        if fields is None:
            problems.append(f"lens {obj['id']} layer {layer} has no data view reference")
            continue
        for col_id, col in columns.items():
            field = col.get("sourceField")
            if field and field != RECORDS:
                kind = fields.get(field)
                if kind is None:
                    problems.append(f"lens {obj['id']} column {col_id} uses unknown field {field!r}")
                elif col.get("operationType") in _NUMERIC_OPS and kind not in _NUMERIC:
                    problems.append(f"lens {obj['id']} column {col_id}: {col['operationType']} of {kind} {field!r}")
                elif col.get("operationType") == "date_histogram" and kind != "date":
                    problems.append(f"lens {obj['id']} column {col_id}: date histogram on {kind} {field!r}")
            order = col.get("params", {}).get("orderBy", {})
            if order.get("type") == "column" and order.get("columnId") not in columns:
                problems.append(f"lens {obj['id']} column {col_id} orders by missing column {order.get('columnId')}")
    return problems


def _check_dashboard(obj: dict[str, Any]) -> list[str]:
    names = {r["name"] for r in obj.get("references", [])}
    try:
        panels = json.loads(obj["attributes"].get("panelsJSON", "[]"))
    except json.JSONDecodeError:
        return [f"dashboard {obj['id']}: panelsJSON is not JSON"]
    return [f"dashboard {obj['id']} panel {panel.get('panelIndex')} has no reference {ref}" for panel in panels
            if (ref := panel.get("panelRefName")) and f"{panel.get('panelIndex')}:{ref}" not in names]


def import_objects(url: str, objects: list[dict[str, Any]], *, space: str | None = None,
                   api_key: str | None = None, username: str | None = None, password: str | None = None,
                   timeout: float = 30.0, verify: bool = True) -> dict[str, Any]:
    """POST ``objects`` to Kibana's saved-objects import (overwriting); returns its answer. Raises
    ClusterUnavailable when Kibana does not answer, ClusterError when it refuses the request or an object."""
    base = url.rstrip("/") + (f"/s/{space}" if space else "")
    headers = {"kbn-xsrf": "hybridsearch"}
    auth: httpx.BasicAuth | None = None
    if api_key:
        headers["Authorization"] = f"ApiKey {api_key}"
    elif username:
        auth = httpx.BasicAuth(username, password or "")
    files = {"file": (FILE_NAME, to_ndjson(objects), "application/ndjson")}
    try:
        resp = httpx.post(f"{base}/api/saved_objects/_import", params={"overwrite": "true"}, files=files,
                          headers=headers, auth=auth, timeout=timeout, verify=verify)
    except httpx.HTTPError as exc:
        raise ClusterUnavailable(f"Kibana did not answer at {url}: {exc}",
                                 fix="Is it running (`docker compose up -d kibana`)?") from exc
    try:
        body: dict[str, Any] = resp.json()
    except ValueError:
        body = {"message": resp.text[:500]}
    if resp.status_code >= 400:
        raise ClusterError(f"Kibana refused the import with HTTP {resp.status_code}: "
                           f"{body.get('message') or body}")
    if not body.get("success", False):
        errors = "; ".join(f"{e.get('type')} {e.get('id')}: {e.get('error', {}).get('type')}"
                           for e in body.get("errors", []))
        raise ClusterError(f"Kibana imported {body.get('successCount', 0)} of {len(objects)} objects; "
                           f"errors: {errors or body}")
    return body
