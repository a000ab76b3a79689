"""`hsp search`: matched terms, highlighted snippets, and the query checked before any model loads."""

from __future__ import annotations

import pytest

from hybridsearch.cli.search import HIGHLIGHT, parse_cli_filters, query_terms, snippet


def test_query_terms_are_distinct_words() -> None:
    assert query_terms("Does a Vitamin-D pill help? vitamin!") == ["does", "vitamin", "pill", "help"]


def test_snippet_centres_on_the_first_match_and_highlights_whole_words() -> None:
    text = "filler " * 60 + "Vitamin D reduces fractures in the elderly. " + "more " * 60
    snip = snippet(text, ["vitamin", "fractures"], width=80)
    assert snip.plain.startswith("…") and snip.plain.endswith("…") and "Vitamin D reduces fractures" in snip.plain
    marked = {snip.plain[s.start:s.end] for s in snip.spans if s.style == HIGHLIGHT}
    assert marked == {"Vitamin", "fractures"}
    short = snippet("vitamins are not vitamin", ["vitamin"])
    assert [short.plain[s.start:s.end] for s in short.spans] == ["vitamin"] and short.plain[-1] != "…"
    assert snippet("no match here", []).plain == "no match here"


@pytest.mark.parametrize(("argv", "message"), [
    (["search", " \u200b "], "the query is empty"),
    (["search", "bees", "--k", "0"], "k must be an integer"),
    (["search", "bees", "--page", "0"], "page must"),
    (["search", "   ", "--why", "doc-1"], "the query is empty"),
])
def test_search_checks_the_query_before_loading_anything(argv: list[str], message: str,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.cli.main import main
    from hybridsearch.query.client import SearchClient

    def no_client(*args: object, **kwargs: object) -> SearchClient:
        raise AssertionError("a client (model load, cluster request) was made before the query was checked")

    monkeypatch.setattr(SearchClient, "from_settings", no_client)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ --filter

@pytest.mark.parametrize(("expr", "value"), [
    ('title.raw="What is this?"', "What is this?"),  # a trailing ? in quotes: a value, not an exists check
    ("title.raw=What is this?", "What is this?"),  # unquoted too: field? is only a bare field name
    ("title.raw='What is this?'", "What is this?"),
    ('source="  padded  "', "  padded  "),
    ('source=""', ""),
    (r'source="say \"hi\" \\ bye"', 'say "hi" \\ bye'),
    (r"source='it\'s'", "it's"),
    ('source="a=b>c<d!=e"', "a=b>c<d!=e"),
    ("source = spaced value ", "spaced value"),
    ('source="x"y"', None),
])
def test_filter_values_can_say_anything(expr: str, value: str | None) -> None:
    from hybridsearch.errors import QueryError
    from hybridsearch.query.filters import Term

    if value is None:
        with pytest.raises(QueryError, match="text after the closing"):
            parse_cli_filters([expr])
        return
    assert parse_cli_filters([expr]) == Term(expr.split("=")[0].strip(), value)


def test_exists_and_ranges_on_the_command_line() -> None:
    from hybridsearch.query.filters import AllOf, Exists, NoneOf, Range, Term

    assert parse_cli_filters(["title.raw?", " metadata.lang ? "]) == AllOf([Exists("title.raw"),
                                                                         Exists("metadata.lang")])
    assert parse_cli_filters(['source!="a b"', "metadata.n>=10", 'metadata.n<="100"']) == AllOf(
        [NoneOf([Term("source", "a b")]), Range("metadata.n", gte="10", lte="100")])


@pytest.mark.parametrize(("expr", "message"), [
    ('source="open', 'opens a " quote that does not close'),
    ("source=", "no value"),
    ("title.raw=What is this?x?", None),  # fine: a value
    ("position>=1", None),
    ("position>=1x", "position needs a number"),
    ("position>=5", None),
])
def test_bad_filter_syntax_says_how(expr: str, message: str | None) -> None:
    from hybridsearch.errors import QueryError

    if message is None:
        assert parse_cli_filters([expr]) is not None
        return
    with pytest.raises(QueryError, match=message) as err:
        parse_cli_filters([expr])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("filters", "message"), [
    (["metadata.n>=10", "metadata.n<=100"], "range on metadata.n: this index has no typed field for it"),
    (["position>=5", "position<=2"], "range on position can match nothing: gte 5 is above lte 2"),
    (["ingested_at>=2024-02-30"], "range on ingested_at: the field holds dates"),
    (["ingested_at>2024-02-01", "ingested_at<2024-01-01"], "can match nothing"),
    (["position=zero"], "position needs a number, got 'zero'"),
    (["position>=1", "position>=2"], "two >= bounds"),
    (['title.raw="open'], "does not close"),
])
def test_search_refuses_bad_filters_before_any_request(filters: list[str], message: str,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.cli.main import main
    from hybridsearch.query.client import SearchClient

    def no_client(*args: object, **kwargs: object) -> SearchClient:
        raise AssertionError("a client (model load, cluster request) was made before the filters were checked")

    monkeypatch.setattr(SearchClient, "from_settings", no_client)
    argv = ["search", "bees"] + [a for f in filters for a in ("--filter", f)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
