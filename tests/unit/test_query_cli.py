"""`hsp search`: matched terms, highlighted snippets, and the query checked before any model loads."""

from __future__ import annotations

import pytest

from hybridsearch.cli.search import HIGHLIGHT, query_terms, snippet


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
