"""The fields search filters may name, their types, and the one conversion of a value to a field's type.

**Values are checked against the field's type** (:data:`FIELD_TYPES`; ``metadata.<key>`` by the index's typed
metadata, below): ``position`` takes whole numbers, ``ingested_at`` ISO 8601 dates, ``date``/``datetime`` or date
math (never booleans or numbers), keyword fields strings; a range whose lower bound lies above its upper bound (or
meets it with an exclusive bound) matches nothing and is refused too.

**Metadata.** ``metadata`` is free-form (``flattened`` / ``flat_object``): every value is indexed as text, so
``metadata.<key>`` takes term, terms and exists filters, and a range on it is refused (text compares 25 after
100). Keys declared in ``HSP_INDEX__METADATA_FIELDS`` (``{"n": "long", "published": "date"}``) are also indexed
as ``meta.<key>`` of their type; given the index's declared keys (``metadata=``, :func:`~hybridsearch.mappings.
metadata_fields_of` of its mapping), term, terms and range filters on ``metadata.<key>`` go to that typed field,
values checked against the type. Without them (an index built before typed metadata) ranges on metadata are
refused with the fix. :func:`typed_value` is the one conversion, used by ingestion for ``meta`` as well.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from types import MappingProxyType
from typing import Any

from hybridsearch.errors import QueryError

#: Keyword, date and number fields of the chunk mapping that filters may name, with their types.
FIELD_TYPES: dict[str, str] = {
    "doc_id": "keyword", "chunk_id": "keyword", "parent_id": "keyword", "source": "keyword",
    "content_hash": "keyword", "tenant": "keyword", "ingested_at": "date", "position": "integer",
    "title.raw": "keyword",
}
ALLOWED_FIELDS = frozenset(FIELD_TYPES)
NUMERIC_FIELDS = frozenset(f for f, t in FIELD_TYPES.items() if t == "integer")
DATE_FIELDS = frozenset(f for f, t in FIELD_TYPES.items() if t == "date")
_METADATA_KEY = re.compile(r"^metadata\.[A-Za-z0-9_@$-][A-Za-z0-9_.@$-]{0,200}$")
#: the typed copy of declared metadata keys (``meta.<key>``, ``index.metadata_fields``)
TYPED_METADATA = "meta"
#: what free-form metadata is to the checks: every value indexed as text
FREE_FORM = "free-form"
#: a metadata key whose type is not known yet (the index is not checked): no conversion, no refusal
UNCHECKED = "unchecked"
#: ``metadata=`` for a check before the index is known: every metadata key is :data:`UNCHECKED`
NOT_YET_KNOWN: Mapping[str, str] = MappingProxyType({})
MetadataFields = Mapping[str, str]
_INT_LIMITS = {"integer": 2**31, "long": 2**63}
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_DECIMAL = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")
# ISO 8601 dates that both Python and the engines' strict_date_optional_time read the same way
_ISO_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}"
                       r"(T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?$")
_MATH = r"([+-][0-9]+[yMwdhHms])*(/[yMwdhHms])?"
_DATE_MATH = re.compile(rf"^(now{_MATH}|(?P<anchor>[^|]+)\|\|{_MATH})$")

Scalar = str | int | float | bool


def check_field(field: str) -> str:
    """``field`` when filters may name it; raises QueryError naming the allowed fields otherwise."""
    if field in ALLOWED_FIELDS or _METADATA_KEY.match(field):
        return field
    allowed = ", ".join(sorted(ALLOWED_FIELDS))
    raise QueryError(f"cannot filter on unknown field {field!r}: use one of {allowed}, or metadata.<key>")


def parse_date(value: str) -> datetime | None:
    """``value`` as an aware datetime (a date alone: its midnight, no offset: UTC) when it is an ISO 8601 date both
    Python and the engines read alike (``2024-05-01``, ``2024-05-01T10:30:00Z``), else None."""
    if not _ISO_DATE.match(value):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def typed_value(ftype: str, value: Any, what: str, *, bound: bool = False) -> Scalar:
    """``value`` as a field of type ``ftype`` holds it (``integer``, ``long``, ``double``, ``date``, ``keyword``,
    ``boolean``), as the DSL value to send (dates as ISO strings); ``what`` names it in the error. ``bound``: a
    range bound (numbers need not be whole, dates may be date math such as ``now-7d``). Raises ValueError with one
    line saying what the field holds. Ingestion writes typed metadata through this too, so what is compared is
    what was written."""
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
            return value if isinstance(value, str) else str(value)
        raise ValueError(f"{what} holds text, got {value!r}")
    raise ValueError(f"{what}: unknown field type {ftype!r}")


def typed_metadata(metadata: Mapping[str, Any] | None, fields: MetadataFields) -> dict[str, Any]:
    """The ``meta`` object of a chunk: each key of ``fields`` (``{key: type}``, the index's typed metadata) that
    ``metadata`` holds, as :func:`typed_value` converts it (a list: each of its values; None: left out). Raises
    ValueError naming the key, its value and declared type when one does not convert: the document fails."""
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


def field_type(field: str, metadata: MetadataFields | None = None) -> tuple[str, str]:
    """``(field the DSL names, its type)`` for a filter's ``field``: a fixed field (:data:`FIELD_TYPES`), a
    declared metadata key (``meta.<key>`` and its type) or free-form metadata (``metadata.<key>``,
    :data:`FREE_FORM`)."""
    if field in FIELD_TYPES:
        return field, FIELD_TYPES[field]
    key = field.removeprefix("metadata.")
    if metadata is NOT_YET_KNOWN:
        return field, UNCHECKED
    if metadata and key in metadata:
        return f"{TYPED_METADATA}.{key}", metadata[key]
    return field, FREE_FORM

def free_form_range(field: str) -> str:
    """Why a range on free-form ``field`` is refused, and the fix."""
    key = field.removeprefix("metadata.")
    example = '{"' + key + '": "long"}'
    return (f"range on {field}: this index has no typed field for it, and free-form metadata compares values as text "
            f"(25 sorts after 100); declare it, e.g. HSP_INDEX__METADATA_FIELDS='{example}' (long, double, date, "
            "keyword or boolean), and ingest into a new index version")
