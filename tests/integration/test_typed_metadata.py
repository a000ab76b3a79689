"""Typed metadata on a real node: ranges compare numbers as numbers and dates as dates.

The chunk index is made by the one creator (``index.versions.create_version``) from settings declaring
``index.metadata_fields``; chunk documents come from ingestion's own layout (``ingest.chunking.document_chunks``, the
typed ``meta`` copy included); filters are rendered by ``query.filters.filter_dsl`` against the typed keys read
back from the index's real mapping (``index.metadata.metadata_fields_of``). The property test compares the engine's
answer with the answer computed in Python over the same documents.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import QueryError
from hybridsearch.index.metadata import metadata_fields_of, parse_date
from hybridsearch.index.spec import chunk_differences
from hybridsearch.index.versions import create_version
from hybridsearch.ingest.chunking import document_chunks
from hybridsearch.ingest.sources import Document
from hybridsearch.query.filters import Range, filter_dsl
from hybridsearch.settings import Settings
from ingest_helpers import WhitespaceTokenizer

FIELDS = {"n": "long", "x": "double", "d": "date", "s": "keyword"}
_runs = itertools.count()


def typed_settings(settings: Settings, fields: dict[str, str]) -> Settings:
    return settings.model_copy(update={"index": settings.index.model_copy(update={"metadata_fields": fields})})


def make_index(es: EngineClient, settings: Settings) -> tuple[str, dict[str, str]]:
    """A chunk index built from ``settings``; its name and the typed keys its real mapping holds."""
    index = create_version(es, settings)
    mapping = es.send(request.get_mapping(index))[index]["mappings"]
    assert chunk_differences(mapping, settings, dialect=es.dialect) == []
    return index, metadata_fields_of(mapping)


def write(es: EngineClient, settings: Settings, index: str, fields: dict[str, str], tenant: str,
          metadatas: list[dict[str, Any]]) -> None:
    """One single-chunk document per metadata dict, laid out as ingestion does, visible after a refresh."""
    actions = []
    for i, metadata in enumerate(metadatas):
        doc = Document.make(f"{tenant}-{i}", f"document {i}", "t", metadata)
        for src, _ in document_chunks(doc, settings.chunking, settings.embedding, tenant, WhitespaceTokenizer(), 256,
                                      metadata_fields=fields):
            actions.append({"_index": index, "_id": src["chunk_id"], "_source": src})
    assert request.bulk_failures(es.send(request.bulk(actions)))[1] == []
    es.send(request.refresh(index))


def engine_answer(es: EngineClient, index: str, tenant: str, spec: Any, fields: dict[str, str]) -> set[str]:
    clauses = [{"term": {"tenant": tenant}}, filter_dsl(spec, fields)]
    resp = es.send(request.search(index, request.body(query={"bool": {"filter": clauses}}, size=1000,
                                                      source=["doc_id"])))
    return {h["_source"]["doc_id"] for h in resp["hits"]["hits"]}


def test_numbers_compare_as_numbers(es: EngineClient, settings: Settings) -> None:
    s = typed_settings(settings, FIELDS)
    index, fields = make_index(es, s)
    assert fields == FIELDS
    write(es, s, index, fields, "issue", [{"n": 25}, {"n": 100}, {"n": "9"}, {"n": 101}, {"s": "x"}])
    # the case: as text "25" > "100", so only the document with 100 matched
    assert engine_answer(es, index, "issue", Range("metadata.n", gte=10, lte=100), fields) == {"issue-0", "issue-1"}
    assert engine_answer(es, index, "issue", {"range": {"metadata.n": {"gt": "9", "lt": "101"}}}, fields) == \
        {"issue-0", "issue-1"}
    assert engine_answer(es, index, "issue", {"metadata.n": "100"}, fields) == {"issue-1"}  # term on the typed copy


def test_an_index_without_typed_metadata_refuses_ranges_on_it(es: EngineClient, settings: Settings) -> None:
    index, fields = make_index(es, settings)  # no metadata_fields: what every index built before looks like
    assert fields == {}
    write(es, settings, index, fields, "old", [{"n": 25}, {"n": 100}])
    with pytest.raises(QueryError, match=r"no typed field for it.*HSP_INDEX__METADATA_FIELDS"):
        engine_answer(es, index, "old", Range("metadata.n", gte=10, lte=100), fields)
    assert engine_answer(es, index, "old", {"metadata.n": 25}, fields) == {"old-0"}  # terms still work


# ------------------------------------------------------------------------------------------ the property


def _day_or_second(v: datetime, as_date: bool) -> str:
    return v.date().isoformat() if as_date else v.strftime("%Y-%m-%dT%H:%M:%SZ")


_instants = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2040, 12, 31)).map(
    lambda v: v.replace(microsecond=0, tzinfo=UTC))
_dates = st.builds(_day_or_second, _instants, st.booleans())
_numbers = st.integers(-10**6, 10**6)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "n": st.one_of(_numbers, _numbers.map(str), st.sampled_from([9, 10, 25, 100, 1000, -1])),
    "x": st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    "d": _dates,
    "s": st.text(alphabet="0123456789abcXYZ-_ ", min_size=1, max_size=6),
}


def _typed(key: str, v: Any) -> Any:
    """``v`` as Python compares it for the field of ``key``: numbers, aware datetimes, strings."""
    if key in ("n", "x"):
        return float(v)
    if key == "d":
        return parse_date(v)
    return v


def _matches(key: str, value: Any, op: str, bound: Any) -> bool:
    """Python's answer for one bound. Dates: a bound given as a day compares the value's (UTC) day, as the engine
    reads ``gt``/``lte`` days rounded up to their last millisecond and ``gte``/``lt`` days from their first."""
    v, b = _typed(key, value), _typed(key, bound)
    if key == "d" and len(str(bound)) == 10:
        v, b = v.date(), b.date()
    return {"gte": v >= b, "gt": v > b, "lte": v <= b, "lt": v < b}[op]


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    docs = draw(st.lists(st.fixed_dictionaries({}, optional=VALUES), min_size=3, max_size=25))
    key = draw(st.sampled_from(sorted(VALUES)))
    seen = [d[key] for d in docs if key in d]
    bound = st.one_of(VALUES[key], st.sampled_from(seen)) if seen else VALUES[key]  # often on a stored value
    lower = draw(st.sampled_from(["gte", "gt", None]))
    upper = draw(st.sampled_from(["lte", "lt", None] if lower else ["lte", "lt"]))
    bounds = {op: draw(bound) for op in (lower, upper) if op}
    return docs, key, bounds


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
@given(case=cases())
def test_engine_ranges_equal_python_ranges(es: EngineClient, settings: Settings,
                                           case: tuple[list[dict[str, Any]], str, dict[str, Any]]) -> None:
    docs, key, bounds = case
    s = typed_settings(settings, FIELDS)
    index = s.index.versioned()
    fields = metadata_fields_of(es.send(request.get_mapping(index))[index]["mappings"]) \
        if es.send(request.index_exists(index)) else make_index(es, s)[1]
    tenant = f"run{next(_runs)}"  # each example's documents, in the one index
    write(es, s, index, fields, tenant, docs)
    expected = {f"{tenant}-{i}" for i, d in enumerate(docs)
                if key in d and all(_matches(key, d[key], op, b) for op, b in bounds.items())}
    spec = {"range": {f"metadata.{key}": bounds}}
    try:
        got = engine_answer(es, index, tenant, spec, fields)
    except QueryError as exc:  # refused before sending: only a range that can match nothing
        assert "can match nothing" in str(exc) and expected == set(), (str(exc), docs)
        return
    assert got == expected, (spec, docs)


def test_day_bounds_cover_the_whole_day(es: EngineClient, settings: Settings) -> None:
    s = typed_settings(settings, {"d": "date"})
    index, fields = make_index(es, s)
    write(es, s, index, fields, "days", [{"d": "2024-03-01T23:59:59Z"}, {"d": "2024-03-02"}, {"d": "2024-02-29"}])
    assert engine_answer(es, index, "days", Range("metadata.d", gte="2024-03-01", lte="2024-03-01"), fields) == \
        {"days-0"}
    assert engine_answer(es, index, "days", Range("metadata.d", gt="2024-02-29"), fields) == {"days-0", "days-1"}


def test_a_range_on_typed_metadata_through_ingest_and_the_search_client(es: EngineClient, settings: Settings,
                                                                        embedder: Any) -> None:
    """End to end: `run_ingest` writes the typed copy, `SearchClient` sends the range to it."""
    from hybridsearch.ingest.pipeline import run_ingest
    from hybridsearch.query.client import SearchClient

    s = typed_settings(settings, {"n": "long"})
    docs = [Document.make(f"d{n}", f"Enzyme study number {n}.", title=f"Study {n}", metadata={"n": n})
            for n in (5, 25, 100, 250)]
    run_ingest(docs, s, es=es, embedder=embedder)
    with SearchClient(es, s, embedder=embedder) as client:
        for mode in ("bm25", "dense", "hybrid"):
            hits = client.search("enzyme study", k=10, mode=mode, filters=Range("metadata.n", gte=10, lte=100)).hits
            assert sorted(h.doc_id for h in hits) == ["d100", "d25"], mode
        with pytest.raises(QueryError, match="can match nothing"):
            client.search("enzyme study", filters=Range("metadata.n", gte=100, lte=10))
    bad = run_ingest([Document.make("bad", "Enzyme text.", title="Bad", metadata={"n": "many"})], s, es=es,
                     embedder=embedder)
    assert bad.documents_failed == 1  # a value its declared type cannot hold: the document is dead-lettered
