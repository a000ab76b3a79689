"""Typed filters: parsing, validation and the one translation to the DSL."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsearch.errors import QueryError
from hybridsearch.query.filters import (
    AllOf,
    AnyOf,
    Exists,
    NoneOf,
    Range,
    Term,
    Terms,
    filter_clauses,
    parse_cli_filters,
    parse_filter,
    to_dsl,
)


def test_each_filter_translates_to_its_clause() -> None:
    assert to_dsl(Term("source", "pubmed")) == {"term": {"source": "pubmed"}}
    assert to_dsl(Terms("doc_id", ["a", "b"])) == {"terms": {"doc_id": ["a", "b"]}}
    assert to_dsl(Range("ingested_at", gte=date(2024, 1, 1), lt="now")) == {
        "range": {"ingested_at": {"gte": "2024-01-01", "lt": "now"}}}
    assert to_dsl(Exists("metadata.lang")) == {"exists": {"field": "metadata.lang"}}
    nested = AllOf([Term("tenant", "a"), AnyOf([Term("source", "x"), Range("position", lte=3)]),
                    NoneOf([Term("metadata.lang", "fr")])])
    assert to_dsl(nested) == {"bool": {"filter": [
        {"term": {"tenant": "a"}},
        {"bool": {"should": [{"term": {"source": "x"}}, {"range": {"position": {"lte": 3}}}],
                  "minimum_should_match": 1}},
        {"bool": {"must_not": [{"term": {"metadata.lang": "fr"}}]}},
    ]}}


def test_dict_forms_parse_to_the_same_filters() -> None:
    assert parse_filter({"source": "x"}) == Term("source", "x")
    both = AllOf([Term("source", "x"), Terms("doc_id", ["a", "b"])])
    assert parse_filter({"source": "x", "doc_id": ["a", "b"]}) == both
    assert parse_filter({"term": {"source": "x"}}) == Term("source", "x")
    assert parse_filter({"terms": {"source": ["x"]}}) == Terms("source", ["x"])
    assert parse_filter({"range": {"position": {"gt": 1}}}) == Range("position", gt=1)
    assert parse_filter({"exists": "title.raw"}) == Exists("title.raw")
    assert parse_filter({"exists": {"field": "title.raw"}}) == Exists("title.raw")
    assert parse_filter({"none_of": [{"source": "x"}]}) == NoneOf([Term("source", "x")])
    assert parse_filter(None) is None and parse_filter({}) is None


def test_values_are_data_never_pasted_json() -> None:
    evil = '"}}, {"match_all": {}} //'
    assert to_dsl(Term("source", evil)) == {"term": {"source": evil}}


@pytest.mark.parametrize("spec", [
    {"text": "x"}, {"term": {"embedding": 1}}, {"exists": "metadata"}, {"range": {"_id": {"gte": 1}}},
    {"any_of": [{"term": {"title": "x"}}]}, {"metadata.": "x"}, {"metadata.a b": "x"},
])
def test_unknown_fields_are_refused(spec: dict[str, object]) -> None:
    with pytest.raises(QueryError, match="unknown field"):
        parse_filter(spec)


@pytest.mark.parametrize(("spec", "message"), [
    ({"range": {"position": {}}}, "at least one"),
    ({"range": {"position": {"gte": "x"}}}, "needs numbers"),
    ({"range": {"position": {"gte": 1, "gt": 2}}}, "at most one lower"),
    ({"range": {"metadata.year": {"gte": "2020"}}}, "both a lower and an upper"),
    ({"terms": {"source": []}}, "at least one value"),
    ({"terms": {"source": "x"}}, "list of values"),
    ({"all_of": "x"}, "list of filters"),
    ({"term": {"source": "x", "tenant": "y"}}, "exactly one"),
    ({"term": {"source": {"nested": 1}}}, "invalid filter"),
])
def test_malformed_filters_are_refused(spec: dict[str, object], message: str) -> None:
    with pytest.raises(QueryError, match=message):
        parse_filter(spec)


def test_deep_nesting_is_refused() -> None:
    spec: dict[str, object] = {"source": "x"}
    for _ in range(12):
        spec = {"all_of": [spec]}
    with pytest.raises(QueryError, match="deeper"):
        parse_filter(spec)
    with pytest.raises(QueryError, match="mapping"):
        parse_filter(["source"])  # type: ignore[arg-type]


def test_tenant_is_always_added() -> None:
    assert filter_clauses(None, "acme") == [{"term": {"tenant": "acme"}}]
    assert filter_clauses({"source": "x"}, None) == [{"term": {"source": "x"}}]
    assert filter_clauses(None, None) == []


def test_cli_filters() -> None:
    assert parse_cli_filters([]) is None
    assert parse_cli_filters(["source=pubmed"]) == Term("source", "pubmed")
    got = parse_cli_filters(["source=a=b", "doc_id!=x", "position>=2", "position<5", "metadata.lang?"])
    assert got == AllOf([Term("source", "a=b"), NoneOf([Term("doc_id", "x")]), Exists("metadata.lang"),
                         Range("position", gte=2, lt=5)])
    assert parse_cli_filters(["ingested_at>2024-01-01"]) == Range("ingested_at", gt="2024-01-01")
    for bad, msg in (("source", "write field=value"), ("text=x", "unknown field"), ("position>=two", "number"),
                     ("metadata.year>=2020", "both a lower")):
        with pytest.raises(QueryError, match=msg):
            parse_cli_filters([bad])


TYPED_AND_DICT = [
    (lambda: Terms("doc_id", [str(i) for i in range(10_000)]), {"doc_id": [str(i) for i in range(10_000)]},
     "invalid filter: terms on doc_id takes at most 1024 values, got 10000"),
    (lambda: Range("position", gte="a"), {"range": {"position": {"gte": "a"}}},
     "invalid filter: range on position needs numbers, got 'a'"),
    (lambda: Term("doc_id", None), {"doc_id": None},  # type: ignore[arg-type]  # what untyped callers do
     "invalid filter: term on doc_id needs a value (a string, number or boolean), got None"),
    (lambda: Terms("doc_id", []), {"terms": {"doc_id": []}},
     "invalid filter: terms on doc_id needs at least one value"),
    (lambda: Terms("doc_id", ["a", None]), {"doc_id": ["a", None]},  # type: ignore[list-item]
     "invalid filter: terms on doc_id: values[1] is None"),
    (lambda: AllOf([]), {"all_of": []}, "invalid filter: filters: List should have at least 1 item"),
]


@pytest.mark.parametrize(("typed", "spec", "message"), TYPED_AND_DICT)
def test_typed_constructors_raise_the_dict_forms_query_error(typed: Any, spec: dict[str, Any], message: str) -> None:
    with pytest.raises(QueryError) as from_typed:
        typed()
    with pytest.raises(QueryError) as from_dict:
        parse_filter(spec)
    assert str(from_typed.value).startswith(message)
    assert str(from_typed.value) == str(from_dict.value)


_ANY = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5),
                 st.dates(), st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=3)), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
_FIELDS = st.sampled_from(["doc_id", "position", "ingested_at", "metadata.lang", "title.raw", "nope", ""])


@settings(max_examples=300, deadline=None)
@given(field=_FIELDS, value=_ANY, bounds=st.dictionaries(st.sampled_from(["gte", "gt", "lte", "lt", "x"]), _ANY,
                                                         max_size=3))
def test_typed_filters_raise_only_query_error(field: str, value: Any, bounds: dict[str, Any]) -> None:
    for build in (lambda: Term(field, value), lambda: Terms(field, value), lambda: Range(field, **bounds),
                  lambda: Exists(value), lambda: AnyOf(value), lambda: NoneOf([Term(field, value)])):
        try:
            built = build()
        except QueryError as exc:
            assert str(exc) and "validation error" not in str(exc) and "pydantic" not in str(exc)
        else:
            assert to_dsl(built)
