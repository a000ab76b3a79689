"""Typed filters: parsing, validation and the one translation to the DSL."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsearch.cli.search import parse_cli_filters
from hybridsearch.errors import QueryError
from hybridsearch.query.filters import (
    AllOf,
    AnyOf,
    Exists,
    NoneOf,
    Range,
    Term,
    Terms,
    filter_dsl,
    parse_filter,
)


def test_each_filter_translates_to_its_clause() -> None:
    assert filter_dsl(Term("source", "pubmed")) == {"term": {"source": "pubmed"}}
    assert filter_dsl(Terms("doc_id", ["a", "b"])) == {"terms": {"doc_id": ["a", "b"]}}
    assert filter_dsl(Range("ingested_at", gte=date(2024, 1, 1), lt="now")) == {
        "range": {"ingested_at": {"gte": "2024-01-01", "lt": "now"}}}
    assert filter_dsl(Exists("metadata.lang")) == {"exists": {"field": "metadata.lang"}}
    nested = AllOf([Term("tenant", "a"), AnyOf([Term("source", "x"), Range("position", lte=3)]),
                    NoneOf([Term("metadata.lang", "fr")])])
    assert filter_dsl(nested) == {"bool": {"filter": [
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
    assert filter_dsl(Term("source", evil)) == {"term": {"source": evil}}


@pytest.mark.parametrize("spec", [
    {"text": "x"}, {"term": {"embedding": 1}}, {"exists": "metadata"}, {"range": {"_id": {"gte": 1}}},
    {"any_of": [{"term": {"title": "x"}}]}, {"metadata.": "x"}, {"metadata.a b": "x"},
])
def test_unknown_fields_are_refused(spec: dict[str, object]) -> None:
    with pytest.raises(QueryError, match="unknown field"):
        parse_filter(spec)


@pytest.mark.parametrize(("spec", "message"), [
    ({"range": {"position": {}}}, "at least one"),
    ({"range": {"position": {"gte": "x"}}}, "holds numbers"),
    ({"range": {"position": {"gte": 1, "gt": 2}}}, "at most one lower"),
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


def test_no_filter_is_no_clause() -> None:
    assert filter_dsl({"source": "x"}) == {"term": {"source": "x"}}
    assert filter_dsl(None) is None and filter_dsl({}) is None


def test_cli_filters() -> None:
    assert parse_cli_filters([]) is None
    assert parse_cli_filters(["source=pubmed"]) == Term("source", "pubmed")
    got = parse_cli_filters(["source=a=b", "doc_id!=x", "position>=2", "position<5", "metadata.lang?"])
    assert got == AllOf([Term("source", "a=b"), NoneOf([Term("doc_id", "x")]), Exists("metadata.lang"),
                         Range("position", gte=2, lt=5)])
    assert parse_cli_filters(["ingested_at>2024-01-01"]) == Range("ingested_at", gt="2024-01-01")
    for bad, msg in (("source", "write field=value"), ("text=x", "unknown field"), ("position>=two", "number")):
        with pytest.raises(QueryError, match=msg):
            parse_cli_filters([bad])


TYPED_AND_DICT = [
    (lambda: Terms("doc_id", [str(i) for i in range(10_000)]), {"doc_id": [str(i) for i in range(10_000)]},
     "invalid filter: terms on doc_id takes at most 1024 values, got 10000"),
    (lambda: Range("position", gte="a"), {"range": {"position": {"gte": "a"}}},
     "invalid filter: range on position: the field holds numbers (integer), got 'a'"),
    (lambda: Term("position", "zero"), {"term": {"position": "zero"}},
     "invalid filter: term on position: the field holds whole numbers (integer), got 'zero'"),
    (lambda: Range("position", gte=100, lte=10), {"range": {"position": {"gte": 100, "lte": 10}}},
     "invalid filter: range on position can match nothing: gte 100 is above lte 10"),
    (lambda: Range("ingested_at", gte=True), {"range": {"ingested_at": {"gte": True}}},
     "invalid filter: range on ingested_at: True is not a valid bound"),
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
            try:  # metadata values are checked against the index's types here (none given: free-form)
                assert filter_dsl(built)
            except QueryError as exc:
                assert str(exc).startswith("invalid filter: ") and "\n" not in str(exc)


# ------------------------------------------------------------------------------------------ typed metadata

SCHEMA = {"n": "long", "x": "double", "published": "date", "lang": "keyword", "ok": "boolean"}


def test_declared_metadata_ranges_go_to_the_typed_field() -> None:
    # the issue's case: 25 and 100 within [10, 100]; as text "25" > "100", so only 100 matched
    assert filter_dsl(Range("metadata.n", gte=10, lte=100), SCHEMA) == {"range": {"meta.n": {"gte": 10, "lte": 100}}}
    assert filter_dsl(Range("metadata.x", gt="0.5"), SCHEMA) == {"range": {"meta.x": {"gt": 0.5}}}
    assert filter_dsl(Range("metadata.published", gte=date(2024, 1, 1), lt="now-1d"), SCHEMA) == {
        "range": {"meta.published": {"gte": "2024-01-01", "lt": "now-1d"}}}
    assert filter_dsl(Range("metadata.lang", gte="a", lt="m"), SCHEMA) == {
        "range": {"meta.lang": {"gte": "a", "lt": "m"}}}
    assert filter_dsl(Term("metadata.n", "25"), SCHEMA) == {"term": {"meta.n": 25}}  # CLI values arrive as strings
    assert filter_dsl(Terms("metadata.ok", ["true", False]), SCHEMA) == {"terms": {"meta.ok": [True, False]}}
    assert filter_dsl(Exists("metadata.n"), SCHEMA) == {"exists": {"field": "metadata.n"}}  # the free-form copy
    # an undeclared key stays free-form for terms; the fixed fields are unaffected
    assert filter_dsl(Term("metadata.other", 5), SCHEMA) == {"term": {"metadata.other": 5}}
    assert filter_dsl({"range": {"metadata.n": {"gte": "10", "lte": "100"}}}, SCHEMA) == {
        "range": {"meta.n": {"gte": 10, "lte": 100}}}


@pytest.mark.parametrize("metadata", [None, {}, {"other": "long"}])
def test_a_range_on_free_form_metadata_is_refused_with_the_fix(metadata: dict[str, str] | None) -> None:
    for spec in ({"range": {"metadata.n": {"gte": 10, "lte": 100}}}, {"range": {"metadata.n": {"gte": "a"}}}):
        with pytest.raises(QueryError) as err:
            filter_dsl(spec, metadata)
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith("invalid filter: range on metadata.n: this index has no typed field")
        assert "HSP_INDEX__METADATA_FIELDS='{\"n\": \"long\"}'" in msg and "new index version" in msg
    with pytest.raises(QueryError, match="no typed field"):  # nested too
        filter_dsl(AllOf([Term("source", "x"), NoneOf([Range("metadata.n", lt=3)])]), metadata)
    assert filter_dsl({"metadata.n": "25"}, metadata) == {"term": {"metadata.n": "25"}}


@pytest.mark.parametrize(("f", "message"), [
    (Term("metadata.n", "abc"), "term on metadata.n: the field holds whole numbers (long), got 'abc'"),
    (Term("metadata.n", 2.5), "whole numbers (long), got 2.5"),
    (Term("metadata.n", 2**63), "holds long numbers"),
    (Terms("metadata.x", [1, "nan"]), "terms on metadata.x: the field holds numbers (double), got 'nan'"),
    (Range("metadata.n", gte="ten"), "range on metadata.n: the field holds numbers (long), got 'ten'"),
    (Range("metadata.published", gte="2024-02-30"), "range on metadata.published: the field holds dates"),
    (Range("metadata.published", gte=20240101), "holds dates"),
    (Range("metadata.published", gte="yesterday"), "holds dates"),
    (Term("metadata.published", "01/02/2024"), "holds dates"),
    (Range("metadata.lang", gte=1), "holds text, compared letter by letter"),
    (Range("metadata.ok", gte="false"), "booleans have no order"),
    (Term("metadata.ok", "yes"), "holds booleans"),
    (Range("metadata.n", gte=100, lte=10), "range on metadata.n can match nothing: gte 100 is above lte 10"),
    (Range("metadata.n", gt=5, lt=5), "can match nothing: gt 5 is at lt 5"),
    (Range("metadata.published", gte="2024-06-01", lt="2024-01-01T10:00:00Z"), "can match nothing"),
    (Range("metadata.lang", gt="m", lte="a"), "can match nothing"),
])
def test_metadata_values_are_checked_against_the_declared_type(f: Any, message: str) -> None:
    with pytest.raises(QueryError) as err:
        filter_dsl(f, SCHEMA)
    assert str(err.value).startswith("invalid filter: ") and message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("build", "message"), [
    (lambda: Term("position", "zero"), "term on position: the field holds whole numbers (integer), got 'zero'"),
    (lambda: Terms("position", [1, "two"]), "terms on position"),
    (lambda: Term("position", 2**40), "holds integer numbers"),
    (lambda: Range("position", gte=5, lt=5), "can match nothing"),
    (lambda: Range("ingested_at", gte="2024-13-01"), "range on ingested_at: the field holds dates"),
    (lambda: Range("ingested_at", lte="2024-01-01", gte="2024-02-01"), "can match nothing: gte '2024-02-01' is above"),
    (lambda: Range("ingested_at", gte=False), "False is not a valid bound"),
    (lambda: Range("ingested_at", gte=1), "holds dates"),  # epoch milliseconds: 1970 + 1 ms, never meant
    (lambda: Term("ingested_at", True), "holds dates"),
    (lambda: Range("title.raw", gte=3), "holds text"),
    (lambda: Range("metadata.n", lte=True), "True is not a valid bound"),
])
def test_fixed_fields_are_checked_when_the_filter_is_built(build: Any, message: str) -> None:
    with pytest.raises(QueryError) as err:
        build()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_ranges_that_can_match_are_kept() -> None:
    assert filter_dsl(Range("position", gte=3, lte=3)) == {"range": {"position": {"gte": 3, "lte": 3}}}
    assert filter_dsl(Range("position", gt=1.5, lt=2.5)) == {"range": {"position": {"gt": 1.5, "lt": 2.5}}}
    same_day = Range("ingested_at", gte="2024-01-01", lte="2024-01-01")  # lte rounds up to the day's end
    assert filter_dsl(same_day) == {"range": {"ingested_at": {"gte": "2024-01-01", "lte": "2024-01-01"}}}
    assert filter_dsl(Range("ingested_at", gte="now-1d", lte="2000-01-01")) == {  # date math: left to the engine
        "range": {"ingested_at": {"gte": "now-1d", "lte": "2000-01-01"}}}
    assert filter_dsl(Range("ingested_at", gte="2024-01-01||+1M/d", lt="2024-05-01T10:30:00+02:00"))
    # a day as upper bound reaches its last millisecond, as the engines read it: not empty
    assert filter_dsl(Range("ingested_at", gte="2024-01-01T10:00:00Z", lte="2024-01-01"))
    assert filter_dsl(Range("ingested_at", gte="2024-01-01T10:00", lte="2024-01-01T10:00"))
    for empty in (dict(gt="2024-01-01", lt="2024-01-02"), dict(gt="2024-01-01", lte="2024-01-01"),
                  dict(gte="2024-01-01T10:00:01Z", lte="2024-01-01T10:00:00Z")):
        with pytest.raises(QueryError, match="can match nothing"):
            Range("ingested_at", **empty)


def test_typed_values_and_the_document_copy() -> None:
    from hybridsearch.index.metadata import typed_metadata, typed_value

    assert typed_value("long", "-7", "n") == -7 and typed_value("long", 3.0, "n") == 3
    assert typed_value("double", "1e3", "x") == 1000.0 and typed_value("double", 2, "x") == 2.0
    assert typed_value("date", date(2024, 2, 29), "d") == "2024-02-29"
    assert typed_value("keyword", 5, "k") == "5" and typed_value("keyword", True, "k") == "true"
    got = typed_metadata({"n": 25, "x": "0.5", "published": "2024-01-02T03:04:05Z", "lang": "en", "ok": "false",
                          "free": {"any": "thing"}, "tags": None}, SCHEMA)
    assert got == {"n": 25, "x": 0.5, "published": "2024-01-02T03:04:05Z", "lang": "en", "ok": False}
    assert typed_metadata({"n": [1, "2", None]}, SCHEMA) == {"n": [1, 2]}
    assert typed_metadata({}, SCHEMA) == {} and typed_metadata(None, SCHEMA) == {}
    for bad in ({"n": "25 apples"}, {"n": True}, {"published": "May 1"}, {"x": float("inf")}, {"lang": "x" * 1025}):
        with pytest.raises(ValueError, match=f"metadata.{next(iter(bad))}") as err:
            typed_metadata(bad, SCHEMA)
        assert "\n" not in str(err.value)


def test_ingestion_writes_the_typed_copy_or_fails_the_document() -> None:
    from hybridsearch.ingest.chunking import document_chunks
    from hybridsearch.ingest.sources import Document
    from hybridsearch.settings import load_settings
    from ingest_helpers import WhitespaceTokenizer

    s = load_settings()

    def chunks(metadata: dict[str, Any], fields: dict[str, str] | None) -> list[dict[str, Any]]:
        doc = Document.make("d1", "One sentence here. " * 3, "T", metadata)
        return [src for src, _ in document_chunks(doc, s.chunking, s.embedding, None, WhitespaceTokenizer(), 256,
                                                  metadata_fields=fields)]

    got = chunks({"n": "25", "lang": "en", "free": 1}, {"n": "long", "published": "date"})
    assert got and all(c["meta"] == {"n": 25} and c["metadata"] == {"n": "25", "lang": "en", "free": 1} for c in got)
    assert all("meta" not in c for c in chunks({"n": 25}, None))  # an index without typed metadata
    assert all("meta" not in c for c in chunks({"lang": "en"}, {"n": "long"}))
    with pytest.raises(ValueError, match=r"metadata.n is 'many', not a long"):
        chunks({"n": "many"}, {"n": "long"})


def test_the_chunk_template_types_declared_metadata() -> None:
    from hybridsearch.engine import ELASTICSEARCH as ES
    from hybridsearch.index.metadata import metadata_fields_of
    from hybridsearch.index.spec import chunk_differences, chunk_spec
    from hybridsearch.settings import load_settings

    s = load_settings(index={"analyzer": "standard", "metadata_fields": {"n": "long", "published": "date"}})
    mapping = chunk_spec(s, dialect=ES).mappings
    assert mapping["_meta"]["metadata_fields"] == {"n": "long", "published": "date"}
    assert mapping["properties"]["meta"]["properties"]["n"] == {"type": "long"}
    assert metadata_fields_of(mapping) == {"n": "long", "published": "date"}
    assert chunk_differences(mapping, s, dialect=ES) == [] == chunk_differences(mapping, s, dialect=ES, level="build")
    untyped = {**mapping, "properties": {k: v for k, v in mapping["properties"].items() if k != "meta"}}
    assert metadata_fields_of(untyped) == {} and ("meta.type", "object", None) in chunk_differences(untyped, s,
                                                                                                  dialect=ES)
    # a key the index types otherwise is a difference; a key it lacks is not (ranges on it are refused)
    other = load_settings(index={"analyzer": "standard", "metadata_fields": {"n": "date", "lang": "keyword"}})
    assert chunk_differences(mapping, other, dialect=ES) == [("meta.n.type", "date", "long")]
    assert ("_meta.metadata_fields", {"n": "date", "lang": "keyword"}, {"n": "long", "published": "date"}) in \
        chunk_differences(mapping, other, dialect=ES, level="build")


def test_metadata_fields_setting_is_checked() -> None:
    from hybridsearch.errors import ConfigError
    from hybridsearch.settings import load_settings

    for bad in ({"a.b": "long"}, {"n": "integer"}):
        with pytest.raises(ConfigError, match="METADATA_FIELDS"):
            load_settings(index={"metadata_fields": bad})
