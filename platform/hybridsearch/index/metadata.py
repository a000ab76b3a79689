"""Typed metadata of a chunk index: the ``meta`` object holding each key ``HSP_INDEX__METADATA_FIELDS`` declares
as a field of its type (``{"n": "long", "published": "date"}``), what an index declares (:func:`metadata_fields_of`),
and the one conversion of a value to a field's type (:func:`typed_value`), used by ingestion and by filters alike."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

#: the object holding the typed copy of declared metadata keys (``meta.<key>``, ``index.metadata_fields``)
TYPED_METADATA = "meta"
#: ``{key: type}`` of the typed metadata an index holds
MetadataFields = Mapping[str, str]
Scalar = str | int | float | bool

#: mapping of each type ``index.metadata_fields`` may declare (dates: ISO 8601, as the query layer writes them)
METADATA_MAPPINGS: dict[str, dict[str, Any]] = {
    "long": {"type": "long"}, "double": {"type": "double"}, "keyword": {"type": "keyword", "ignore_above": 1024},
    "date": {"type": "date", "format": "strict_date_optional_time"}, "boolean": {"type": "boolean"},
}
_INT_LIMITS = {"integer": 2**31, "long": 2**63}
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_DECIMAL = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")
# ISO 8601 dates that both Python and the engines' strict_date_optional_time read the same way
_ISO_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}"
                       r"(T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?$")
_MATH = r"([+-][0-9]+[yMwdhHms])*(/[yMwdhHms])?"
_DATE_MATH = re.compile(rf"^(now{_MATH}|(?P<anchor>[^|]+)\|\|{_MATH})$")


def metadata_mapping(fields: Mapping[str, str]) -> dict[str, Any]:
    """The chunk template's ``meta`` object: one typed field per declared metadata key (``{}`` declares none)."""
    return {"type": "object", "properties": {k: dict(METADATA_MAPPINGS[t]) for k, t in sorted(fields.items())}}


def metadata_fields_of(mapping: Mapping[str, Any]) -> dict[str, str]:
    """``{key: type}`` of the typed metadata a chunk index's mapping declares (``{}`` for none)."""
    props = ((mapping.get("properties") or {}).get(TYPED_METADATA) or {}).get("properties") or {}
    return {k: str(v.get("type")) for k, v in props.items() if isinstance(v, Mapping) and v.get("type")}


def parse_date(value: str) -> datetime | None:
    """``value`` as an aware datetime (no offset: UTC) when it is an ISO 8601 date Python and the engines read
    alike (``2024-05-01``, ``2024-05-01T10:30:00Z``), else None."""
    if not _ISO_DATE.match(value):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def typed_value(ftype: str, value: Any, what: str, *, bound: bool = False) -> Scalar:
    """``value`` as the DSL value a field of type ``ftype`` takes; ``bound``: a range bound (numbers need not be whole,
    dates may be date math such as ``now-7d``). Raises ValueError saying what ``what`` holds."""
    if ftype in ("integer", "long", "double"):
        number: int | float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _INTEGER.match(value.strip()):
            number = int(value.strip())
        elif isinstance(value, str) and _DECIMAL.match(value.strip()):
            number = float(value.strip())
        whole = ftype != "double" and not bound
        kind = "whole numbers" if whole else "numbers"
        if number is None or (isinstance(number, float) and not math.isfinite(number)):
            raise ValueError(f"{what} holds {kind} ({ftype}), got {value!r}")
        if whole and isinstance(number, float):
            if not number.is_integer():
                raise ValueError(f"{what} holds whole numbers ({ftype}), got {value!r}")
            number = int(number)
        limit = _INT_LIMITS.get(ftype)
        if limit is not None and not -limit <= number < limit:
            raise ValueError(f"{what} holds {ftype} numbers (below 2^{limit.bit_length() - 1} in size), got {value!r}")
        return float(number) if ftype == "double" else number
    if ftype == "date":
        if isinstance(value, datetime | date):
            return value.isoformat()
        if isinstance(value, str):
            text = value.strip()
            if parse_date(text) is not None:
                return text
            m = _DATE_MATH.match(text) if bound else None
            if m is not None and (m["anchor"] is None or parse_date(m["anchor"]) is not None):
                return text
        math_ = ", or date math such as now-7d" if bound else ""
        raise ValueError(f"{what} holds dates: give an ISO 8601 date (2024-05-01, 2024-05-01T10:30:00Z), a date or "
                         f"datetime{math_}; got {value!r}")
    if ftype == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip() in ("true", "false"):
            return value.strip() == "true"
        raise ValueError(f"{what} holds booleans (true or false), got {value!r}")
    if ftype == "keyword":
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str | int | float):
            return str(value)
        raise ValueError(f"{what} holds text, got {value!r}")
    raise ValueError(f"{what}: unknown field type {ftype!r}")


def typed_metadata(metadata: Mapping[str, Any] | None, fields: MetadataFields) -> dict[str, Any]:
    """The ``meta`` object of a chunk: each key of ``fields`` that ``metadata`` holds, converted (a list: each of
    its values). Raises ValueError naming the key, its value and type when one does not convert."""
    typed: dict[str, Any] = {}
    for key, ftype in fields.items():
        value = (metadata or {}).get(key)
        if value is None:
            continue
        what = f"metadata.{key} (declared {ftype} in HSP_INDEX__METADATA_FIELDS)"
        try:
            if isinstance(value, list | tuple):
                typed[key] = [typed_value(ftype, v, what) for v in value if v is not None]
            else:
                typed[key] = typed_value(ftype, value, what)
        except ValueError:
            raise ValueError(f"metadata.{key} is {value!r}, not a {ftype} as HSP_INDEX__METADATA_FIELDS declares; "
                             "fix the value or the declaration") from None
        if ftype == "keyword" and any(len(v) > 1024 for v in (typed[key] if isinstance(typed[key], list)
                                                             else [typed[key]])):
            raise ValueError(f"metadata.{key} holds a value longer than 1024 characters, which a keyword does not "
                             "index; shorten it or leave the key undeclared")
    return typed
