"""Typed search filters and their one translation to the engine's DSL. Build them as objects
(``Term("source", "pubmed")``, ``AllOf([...])``) or as dicts: ``{"source": "pubmed"}`` (a list value: any of),
``{"term"|"terms"|"range": {field: ...}}``, ``{"exists": field}``, ``{"all_of"|"any_of"|"none_of": [...]}``. Only
:data:`FIELD_TYPES` and ``metadata.<key>`` may be named, values checked against the field's type (declared metadata
keys by the typed copy ``meta.<key>``). Anything else raises QueryError before any request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from types import MappingProxyType
from typing import Annotated, Any, Literal, Self, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from hybridsearch.errors import QueryError
from hybridsearch.index.metadata import TYPED_METADATA, MetadataFields, Scalar, parse_date, typed_value

#: Keyword, date and number fields of the chunk mapping that filters may name, with their types.
FIELD_TYPES: dict[str, str] = {
    "doc_id": "keyword", "chunk_id": "keyword", "parent_id": "keyword", "source": "keyword",
    "content_hash": "keyword", "tenant": "keyword", "ingested_at": "date", "position": "integer",
    "title.raw": "keyword",
}
NUMERIC_FIELDS = frozenset(f for f, t in FIELD_TYPES.items() if t == "integer")
_METADATA_KEY = re.compile(r"^metadata\.[A-Za-z0-9_@$-][A-Za-z0-9_.@$-]{0,200}$")
#: what free-form metadata is to the checks: every value indexed as text
FREE_FORM = "free-form"
#: a metadata key whose type is not known yet (the index is not checked): no conversion, no refusal
UNCHECKED = "unchecked"
#: ``metadata=`` for a check before the index is known: every metadata key is :data:`UNCHECKED`
NOT_YET_KNOWN: Mapping[str, str] = MappingProxyType({})
MAX_DEPTH = 8
MAX_CLAUSES = 256
MAX_TERMS = 1024
Bound = str | int | float | date | datetime


def check_field(field: str) -> str:
    """``field`` when filters may name it; raises QueryError naming the allowed fields otherwise."""
    if field in FIELD_TYPES or _METADATA_KEY.match(field):
        return field
    allowed = ", ".join(sorted(FIELD_TYPES))
    raise QueryError(f"cannot filter on unknown field {field!r}: use one of {allowed}, or metadata.<key>")


def field_type(field: str, metadata: MetadataFields | None = None) -> tuple[str, str]:
    """``(field the DSL names, its type)``: a fixed field, a declared metadata key or :data:`FREE_FORM`."""
    if field in FIELD_TYPES:
        return field, FIELD_TYPES[field]
    key = field.removeprefix("metadata.")
    if metadata is NOT_YET_KNOWN:
        return field, UNCHECKED
    if metadata and key in metadata:
        return f"{TYPED_METADATA}.{key}", metadata[key]
    return field, FREE_FORM


class _Base(BaseModel):
    """Every filter is built through here: bad arguments raise QueryError, never pydantic's ValidationError."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _error(exc) from None


class _FieldFilter(_Base):
    field: Annotated[str, AfterValidator(check_field)]

    @model_validator(mode="after")
    def _typed(self) -> Self:
        _dsl(cast("Filter", self), NOT_YET_KNOWN)  # metadata keys are checked again once the index is known
        return self


class Term(_FieldFilter):
    """``field`` equals ``value`` exactly."""

    kind: Literal["term"] = "term"
    value: Scalar

    def __init__(self, field: str, value: Scalar, **kw: Any) -> None:
        super().__init__(**kw, **{"field": field, "value": value})

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

    def __init__(self, field: str, values: list[Scalar], **kw: Any) -> None:
        super().__init__(**kw, **{"field": field, "values": values})

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

    def __init__(self, field: str, **kw: Any) -> None:
        super().__init__(field=field, **kw)

    @field_validator("gte", "gt", "lte", "lt", mode="before")
    @classmethod
    def _not_bool(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, bool):  # pydantic would read True as 1: epoch + 1 ms on a date
            raise ValueError(f"range on {info.data.get('field')}: {v!r} is not a valid bound "
                             "(give a number, date or string)")
        return v


class Exists(_FieldFilter):
    """``field`` has a value."""

    kind: Literal["exists"] = "exists"

    def __init__(self, field: str, **kw: Any) -> None:
        super().__init__(field=field, **kw)


class _Group(_Base):
    filters: list[Filter] = Field(min_length=1, max_length=MAX_CLAUSES)


class AllOf(_Group):
    """Every filter matches."""

    kind: Literal["all_of"] = "all_of"

    def __init__(self, filters: list[Any], **kw: Any) -> None:
        super().__init__(filters=filters, **kw)


class AnyOf(_Group):
    """At least one filter matches."""

    kind: Literal["any_of"] = "any_of"

    def __init__(self, filters: list[Any], **kw: Any) -> None:
        super().__init__(filters=filters, **kw)


class NoneOf(_Group):
    """No filter matches."""

    kind: Literal["none_of"] = "none_of"

    def __init__(self, filters: list[Any], **kw: Any) -> None:
        super().__init__(filters=filters, **kw)


Filter = Term | Terms | Range | Exists | AllOf | AnyOf | NoneOf
_GROUPS: dict[str, type[AllOf] | type[AnyOf] | type[NoneOf]] = {"all_of": AllOf, "any_of": AnyOf, "none_of": NoneOf}
for _cls in (AllOf, AnyOf, NoneOf):
    _cls.model_rebuild()


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
        return spec  # its depth is checked as it becomes DSL
    if not isinstance(spec, Mapping):
        raise QueryError(f"invalid filter: expected a mapping or a Filter object, got {type(spec).__name__}")
    if _depth > MAX_DEPTH:
        raise QueryError(f"invalid filter: nested deeper than {MAX_DEPTH} levels")
    key, val = next(iter(spec.items()), (None, None))
    if len(spec) == 1 and key in _GROUPS:
        if not isinstance(val, list | tuple):
            raise QueryError(f"invalid filter: {key} takes a list of filters")
        subs = [parse_filter(v, _depth + 1) for v in val]
        return _GROUPS[key]([s for s in subs if s is not None])
    if len(spec) == 1 and key == "exists":
        field = val.get("field") if isinstance(val, Mapping) else val
        if not isinstance(field, str):
            raise QueryError("invalid filter: exists takes a field name")
        return Exists(field)
    if len(spec) == 1 and key in ("term", "terms", "range"):
        if not isinstance(val, Mapping) or len(val) != 1:
            raise QueryError(f"invalid filter: {key} takes exactly one {{field: value}} pair")
        return _leaf(*next(iter(val.items())), kind=key)
    if not spec:
        return None
    parts = [_leaf(field, value) for field, value in spec.items()]
    return parts[0] if len(parts) == 1 else AllOf(parts)


def _leaf(field: Any, value: Any, kind: str | None = None) -> Filter:
    """The filter ``{field: value}`` makes as ``kind``; without, by its value: a list is terms, a mapping a range."""
    if not isinstance(field, str):
        raise QueryError(f"invalid filter: field names are strings, got {field!r}")
    kind = kind or ("terms" if isinstance(value, list | tuple) else "range" if isinstance(value, Mapping) else "term")
    if kind == "term":
        return Term(field, value)
    if kind == "terms":
        if not isinstance(value, list | tuple):
            raise QueryError(f"invalid filter: terms on {field} takes a list of values")
        return Terms(field, list(value))
    if not isinstance(value, Mapping):
        raise QueryError(f"invalid filter: range on {field} takes {{gte|gt|lte|lt: value}}")
    return Range(field, **dict(value))


def _value(kind: str, field: str, ftype: str, value: Any) -> Scalar:
    """A term's value as ``field`` (of type ``ftype``) holds it; ValueError saying what it holds otherwise."""
    if ftype in (FREE_FORM, UNCHECKED):
        return value  # type: ignore[no-any-return]  # checked as a Scalar by the model
    try:
        return typed_value(ftype, value, "the field")
    except ValueError as exc:
        raise ValueError(f"{kind} on {field}: {exc}") from None


def _range_bounds(f: Range, ftype: str) -> dict[str, Scalar]:
    """The bounds of ``f`` as a field of type ``ftype`` compares them; ValueError when that cannot match anything."""
    given: dict[str, Scalar] = {k: v for k in ("gte", "gt", "lte", "lt") if (v := getattr(f, k)) is not None}
    if not given:
        raise ValueError(f"range on {f.field} needs at least one of gte, gt, lte, lt")
    if {"gte", "gt"} <= given.keys() or {"lte", "lt"} <= given.keys():
        raise ValueError(f"range on {f.field}: give at most one lower (gte/gt) and one upper (lte/lt) bound")
    if ftype == UNCHECKED:  # checked again once the index's typed fields are known
        return given
    if ftype == FREE_FORM:
        example = '{"' + f.field.removeprefix("metadata.") + '": "long"}'
        raise ValueError(f"range on {f.field}: this index has no typed field for it, and free-form metadata "
                         "compares values as text (25 sorts after 100); declare it, e.g. "
                         f"HSP_INDEX__METADATA_FIELDS='{example}' (long, double, date, keyword or boolean), and "
                         "ingest into a new index version")
    if ftype == "boolean":
        raise ValueError(f"range on {f.field}: booleans have no order; use a term filter")
    bounds: dict[str, Scalar] = {}
    for k, v in given.items():
        if ftype == "keyword" and not isinstance(v, str):
            raise ValueError(f"range on {f.field}: the field holds text, compared letter by letter; give strings, "
                             f"got {v!r}")
        try:
            bounds[k] = typed_value(ftype, v, "the field", bound=True)
        except ValueError as exc:
            raise ValueError(f"range on {f.field}: {exc}") from None
    _check_order(f.field, ftype, bounds)
    return bounds


def _check_order(field: str, ftype: str, bounds: Mapping[str, Scalar]) -> None:
    lo_key = next((k for k in ("gte", "gt") if k in bounds), None)
    hi_key = next((k for k in ("lte", "lt") if k in bounds), None)
    if lo_key is None or hi_key is None:
        return
    lo: Any = bounds[lo_key]
    hi: Any = bounds[hi_key]
    if ftype == "date":  # date math (now-7d) is resolved by the engine: not compared here
        first, last = _date_span(str(lo), lo_key), _date_span(str(hi), hi_key)
        empty = above = first is not None and last is not None and first > last
    else:
        above = lo > hi
        empty = above or (lo == hi and (lo_key == "gt" or hi_key == "lt"))
    if empty:
        raise ValueError(f"range on {field} can match nothing: {lo_key} {lo!r} is {'above' if above else 'at'} "
                         f"{hi_key} {hi!r} (swapped bounds?)")


_MS = timedelta(milliseconds=1)


def _date_span(text: str, key: str) -> datetime | None:
    """The first (``gte``, ``gt``) or last (``lte``, ``lt``) millisecond a date bound admits, as the engines round
    it (``lte 2024-05-01``: the day's last); None for date math."""
    start = parse_date(text)
    if start is None:
        return None
    clock = text[11:].split("Z")[0].split("+")[0].split("-")[0]
    fraction = clock.split(".")[1] if "." in clock else ""
    span = (timedelta(days=1) if len(text) == 10 else timedelta(minutes=1) if clock.count(":") == 1
            else timedelta(seconds=10.0 ** -len(fraction)) if len(fraction) < 3 else _MS)
    up = start + span - _MS
    return {"gte": start, "gt": up + _MS, "lte": up, "lt": start - _MS}[key]


def _dsl(f: Filter, metadata: MetadataFields | None, depth: int = 0) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(f, Term):
        target, ftype = field_type(f.field, metadata)
        return {"term": {target: _value("term", f.field, ftype, f.value)}}
    if isinstance(f, Terms):
        target, ftype = field_type(f.field, metadata)
        return {"terms": {target: [_value("terms", f.field, ftype, v) for v in f.values]}}
    if isinstance(f, Range):
        target, ftype = field_type(f.field, metadata)
        return {"range": {target: _range_bounds(f, ftype)}}
    if isinstance(f, Exists):  # the free-form copy holds every value, typed or not
        return {"exists": {"field": f.field}}
    subs = [_dsl(s, metadata, depth + 1) for s in f.filters]
    if isinstance(f, AllOf):
        return {"bool": {"filter": subs}}
    if isinstance(f, AnyOf):
        return {"bool": {"should": subs, "minimum_should_match": 1}}
    return {"bool": {"must_not": subs}}


def filter_dsl(spec: Filter | Mapping[str, Any] | None,
               metadata: MetadataFields | None = None) -> dict[str, Any] | None:
    """The query clause of ``spec`` (None: no filter), typed ``metadata`` keys on ``meta.<key>``. Raises QueryError."""
    parsed = parse_filter(spec)
    try:
        return None if parsed is None else _dsl(parsed, metadata)
    except ValueError as exc:
        raise QueryError(f"invalid filter: {exc}") from None
