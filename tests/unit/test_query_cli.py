"""Pure helpers of `hsp search`: matched terms and highlighted snippets."""

from __future__ import annotations

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
