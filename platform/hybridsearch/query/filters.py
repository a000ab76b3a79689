"""Typed search filters and their one translation to the Elasticsearch DSL.

Build filters as objects (``Term("source", "pubmed")``, ``AllOf([...])``) or pass a plain dict:

* ``{"source": "pubmed", "tenant": "a"}`` — shorthand: every key must match (a list value means any of);
* ``{"term": {"source": "pubmed"}}``, ``{"terms": {"source": ["a", "b"]}}``,
  ``{"range": {"ingested_at": {"gte": "2024-01-01"}}}``, ``{"exists": "metadata.lang"}``;
* ``{"all_of": [...]}``, ``{"any_of": [...]}``, ``{"none_of": [...]}`` nest any of these.

Only the fields in :data:`ALLOWED_FIELDS` and ``metadata.<key>`` may be filtered; anything else,
a malformed filter or a value of the wrong type raises :class:`~hybridsearch.errors.QueryError`
before any request is sent. Values are never pasted into JSON text: they become DSL values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from hybridsearch.errors import QueryError

#: Keyword, date and number fields of the chunk mapping that filters may name.
ALLOWED_FIELDS = frozenset({
    "doc_id", "chunk_id", "parent_id", "source", "content_hash", "tenant", "ingested_at", "position", "title.raw",
})
NUMERIC_FIELDS = frozenset({"position"})
DATE_FIELDS = frozenset({"ingested_at"})
_METADATA_KEY = re.compile(r"^metadata\.[A-Za-z0-9_@$-][A-Za-z0-9_.@$-]{0,200}$")
MAX_DEPTH = 8
MAX_CLAUSES = 256
MAX_TERMS = 1024

Scalar = str | int | float | bool
Bound = str | int | float | date | datetime
#: "Argument not given" in the positional constructors (None is a value, and a wrong one).
_UNSET: Any = object()


def check_field(field: str) -> str:
    """``field`` when filters may name it; raises QueryError naming the allowed fields otherwise."""
    if field in ALLOWED_FIELDS or _METADATA_KEY.match(field):
        return field
    allowed = ", ".join(sorted(ALLOWED_FIELDS))
    raise QueryError(f"cannot filter on unknown field {field!r}: use one of {allowed}, or metadata.<key>")


class _Base(BaseModel):
    """Every filter is built through here: bad arguments raise QueryError, never pydantic's ValidationError."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _error(exc) from None


class _FieldFilter(_Base):
    field: str

    @field_validator("field")
    @classmethod
    def _known(cls, v: str) -> str:
        return check_field(v)


class Term(_FieldFilter):
    """``field`` equals ``value`` exactly."""

    kind: Literal["term"] = "term"
    value: Scalar

    def __init__(self, field: str = _UNSET, value: Scalar = _UNSET, **kw: Any) -> None:
        super().__init__(**_positional(kw, field=field, value=value))

    @field_validator("value", mode="before")
    @classmethod
    def _not_none(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None:
            raise ValueError(f"term on {info.data.get('field')} needs a value (a string, number or boolean), "
                             "got None (documents without the field: NoneOf([Exists(field)]))")
        return v


class Terms(_FieldFilter):
    """``field`` equals any of ``values``."""

    kind: Literal["terms"] = "terms"
    values: list[Scalar] = Field(min_length=1, max_length=MAX_TERMS)

    def __init__(self, field: str = _UNSET, values: list[Scalar] = _UNSET, **kw: Any) -> None:
        super().__init__(**_positional(kw, field=field, values=values))

    @field_validator("values", mode="before")
    @classmethod
    def _sized(cls, v: Any, info: ValidationInfo) -> Any:
        on = f"terms on {info.data.get('field')}"
        if isinstance(v, list | tuple):
            if not v:
                raise ValueError(f"{on} needs at least one value")
            if len(v) > MAX_TERMS:
                raise ValueError(f"{on} takes at most {MAX_TERMS} values, got {len(v)}: split the search or "
                                 "filter on a field the values share")
            if None in v:
                raise ValueError(f"{on}: values[{list(v).index(None)}] is None; give strings, numbers or booleans")
        return v


class Range(_FieldFilter):
    """``field`` within bounds (dates as ISO strings, ``date``/``datetime`` or date math like ``now-7d``)."""

    kind: Literal["range"] = "range"
    gte: Bound | None = None
    gt: Bound | None = None
    lte: Bound | None = None
    lt: Bound | None = None

    def __init__(self, field: str = _UNSET, **kw: Any) -> None:
        super().__init__(**_positional(kw, field=field))

    @model_validator(mode="after")
    def _bounds(self) -> Range:
        lower = [b for b in (self.gte, self.gt) if b is not None]
        upper = [b for b in (self.lte, self.lt) if b is not None]
        if not lower and not upper:
            raise ValueError(f"range on {self.field} needs at least one of gte, gt, lte, lt")
        if len(lower) > 1 or len(upper) > 1:
            raise ValueError(f"range on {self.field}: give at most one lower (gte/gt) and one upper (lte/lt) bound")
        if self.field.startswith("metadata.") and not (lower and upper):
            raise ValueError(f"range on {self.field} (a metadata field) needs both a lower and an upper bound")
        for b in (*lower, *upper):
            if self.field in NUMERIC_FIELDS and (isinstance(b, bool) or not isinstance(b, int | float)):
                raise ValueError(f"range on {self.field} needs numbers, got {b!r}")
            if isinstance(b, bool):
                raise ValueError(f"range on {self.field}: {b!r} is not a valid bound")
        return self


class Exists(_FieldFilter):
    """``field`` has a value."""

    kind: Literal["exists"] = "exists"

    def __init__(self, field: str = _UNSET, **kw: Any) -> None:
        super().__init__(**_positional(kw, field=field))


class _Group(_Base):
    filters: list[Filter] = Field(min_length=1, max_length=MAX_CLAUSES)

    def __init__(self, filters: list[Any] = _UNSET, **kw: Any) -> None:
        super().__init__(**_positional(kw, filters=filters))


class AllOf(_Group):
    """Every filter matches."""

    kind: Literal["all_of"] = "all_of"

    def __init__(self, filters: list[Any] = _UNSET, **kw: Any) -> None:  # positional for type checkers too
        super().__init__(filters, **kw)


class AnyOf(_Group):
    """At least one filter matches."""

    kind: Literal["any_of"] = "any_of"

    def __init__(self, filters: list[Any] = _UNSET, **kw: Any) -> None:  # positional for type checkers too
        super().__init__(filters, **kw)


class NoneOf(_Group):
    """No filter matches."""

    kind: Literal["none_of"] = "none_of"

    def __init__(self, filters: list[Any] = _UNSET, **kw: Any) -> None:  # positional for type checkers too
        super().__init__(filters, **kw)


Filter = Term | Terms | Range | Exists | AllOf | AnyOf | NoneOf
_GROUPS: dict[str, type[_Group]] = {"all_of": AllOf, "any_of": AnyOf, "none_of": NoneOf}
for _cls in (AllOf, AnyOf, NoneOf):
    _cls.model_rebuild()


def _positional(kw: dict[str, Any], **named: Any) -> dict[str, Any]:
    return {**{k: v for k, v in named.items() if v is not _UNSET}, **kw}


_NAMES_ITSELF = re.compile(r"^(term|terms|range|exists) on ")


def _error(exc: ValidationError) -> QueryError:
    msgs = []
    for e in exc.errors():
        msg = str(e["msg"]).removeprefix("Value error, ")
        loc = ".".join(str(p) for p in e["loc"])
        msgs.append(f"{loc}: {msg}" if loc and not _NAMES_ITSELF.match(msg) else msg)
    return QueryError("invalid filter: " + "; ".join(msgs))


def parse_filter(spec: Filter | Mapping[str, Any] | None, _depth: int = 0) -> Filter | None:
    """A typed filter from an object or a dict (see the module docstring). Raises QueryError."""
    if spec is None or isinstance(spec, Term | Terms | Range | Exists | AllOf | AnyOf | NoneOf):
        if spec is not None:
            _check_depth(spec)
        return spec
    if not isinstance(spec, Mapping):
        raise QueryError(f"invalid filter: expected a mapping or a Filter object, got {type(spec).__name__}")
    if _depth > MAX_DEPTH:
        raise QueryError(f"invalid filter: nested deeper than {MAX_DEPTH} levels")
    if not spec:
        return None
    try:
        if len(spec) == 1:
            (key, val), = spec.items()
            if key in _GROUPS:
                if not isinstance(val, list | tuple):
                    raise QueryError(f"invalid filter: {key} takes a list of filters")
                subs = [parse_filter(v, _depth + 1) for v in val]
                group: Filter = _GROUPS[key](filters=[s for s in subs if s is not None])  # type: ignore[assignment]
                return group
            if key in ("term", "terms", "range", "exists"):
                return _parse_leaf(key, val)
        return _parse_shorthand(spec)
    except ValidationError as exc:
        raise _error(exc) from None


def _parse_leaf(kind: str, val: Any) -> Filter:
    if kind == "exists":
        field = val.get("field") if isinstance(val, Mapping) else val
        if not isinstance(field, str):
            raise QueryError("invalid filter: exists takes a field name")
        return Exists(field)
    if not isinstance(val, Mapping) or len(val) != 1:
        raise QueryError(f"invalid filter: {kind} takes exactly one {{field: value}} pair")
    (field, arg), = val.items()
    if kind == "term":
        return Term(field, arg)
    if kind == "terms":
        if not isinstance(arg, list | tuple):
            raise QueryError(f"invalid filter: terms on {field} takes a list of values")
        return Terms(field, list(arg))
    if not isinstance(arg, Mapping):
        raise QueryError(f"invalid filter: range on {field} takes {{gte|gt|lte|lt: value}}")
    return Range(field, **dict(arg))


def _parse_shorthand(spec: Mapping[str, Any]) -> Filter:
    parts: list[Filter] = []
    for field, value in spec.items():
        if not isinstance(field, str):
            raise QueryError(f"invalid filter: field names are strings, got {field!r}")
        if isinstance(value, list | tuple):
            parts.append(Terms(field, list(value)))
        elif isinstance(value, Mapping):
            parts.append(Range(field, **dict(value)))
        else:
            parts.append(Term(field, value))
    return parts[0] if len(parts) == 1 else AllOf(filters=parts)


def _check_depth(f: Filter, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise QueryError(f"invalid filter: nested deeper than {MAX_DEPTH} levels")
    if isinstance(f, _Group):
        for sub in f.filters:
            _check_depth(sub, depth + 1)


def _bound(v: Bound) -> str | int | float:
    return v.isoformat() if isinstance(v, date | datetime) else v


def to_dsl(f: Filter) -> dict[str, Any]:
    """The Elasticsearch query clause for ``f`` — the only place filters become DSL."""
    if isinstance(f, Term):
        return {"term": {f.field: f.value}}
    if isinstance(f, Terms):
        return {"terms": {f.field: list(f.values)}}
    if isinstance(f, Range):
        bounds = {k: _bound(v) for k in ("gte", "gt", "lte", "lt") if (v := getattr(f, k)) is not None}
        return {"range": {f.field: bounds}}
    if isinstance(f, Exists):
        return {"exists": {"field": f.field}}
    subs = [to_dsl(s) for s in f.filters]
    if isinstance(f, AllOf):
        return {"bool": {"filter": subs}}
    if isinstance(f, AnyOf):
        return {"bool": {"should": subs, "minimum_should_match": 1}}
    return {"bool": {"must_not": subs}}


def filter_clauses(spec: Filter | Mapping[str, Any] | None, tenant: str | None = None) -> list[dict[str, Any]]:
    """DSL ``filter`` clauses for ``spec``, plus a ``tenant`` term when ``tenant`` is set. Raises QueryError."""
    clauses: list[dict[str, Any]] = []
    if tenant is not None:
        clauses.append({"term": {"tenant": tenant}})
    parsed = parse_filter(spec)
    if parsed is not None:
        clauses.append(to_dsl(parsed))
    return clauses


def filter_summary(spec: Filter | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A JSON-able description of ``spec`` (for the query log), or None."""
    parsed = parse_filter(spec)
    return None if parsed is None else to_dsl(parsed)


_CLI = re.compile(r"^\s*(?P<field>[A-Za-z0-9_.@$-]+)\s*(?P<op>>=|<=|!=|=|>|<)\s*(?P<value>.*?)\s*$")
_CLI_RANGE = {">=": "gte", ">": "gt", "<=": "lte", "<": "lt"}


def _cli_value(field: str, raw: str) -> Scalar:
    if field in NUMERIC_FIELDS:
        try:
            return int(raw)
        except ValueError:
            try:
                return float(raw)
            except ValueError:
                raise QueryError(f"invalid filter: {field} needs a number, got {raw!r}") from None
    return raw


def parse_cli_filters(exprs: list[str]) -> Filter | None:
    """Filters from ``--filter`` arguments, all of which must match.

    Forms: ``field=value``, ``field!=value``, ``field>=x`` (also ``>``, ``<=``, ``<``; two bounds on one
    field combine into one range), ``field?`` (the field exists). Raises QueryError.
    """
    parts: list[Filter] = []
    ranges: dict[str, dict[str, Scalar]] = {}
    try:
        for expr in exprs:
            if expr.strip().endswith("?"):
                parts.append(Exists(expr.strip()[:-1].strip()))
                continue
            m = _CLI.match(expr)
            if m is None or not m["value"]:
                raise QueryError(f"invalid filter {expr!r}: write field=value, field!=value, field>=x or field?")
            field, op = check_field(m["field"]), m["op"]
            value = _cli_value(field, m["value"])
            if op == "=":
                parts.append(Term(field, value))
            elif op == "!=":
                parts.append(NoneOf(filters=[Term(field, value)]))
            else:
                ranges.setdefault(field, {})[_CLI_RANGE[op]] = value
        parts.extend(Range(field, **bounds) for field, bounds in ranges.items())  # type: ignore[arg-type]
    except ValidationError as exc:
        raise _error(exc) from None
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else AllOf(filters=parts)
