"""The ASCII fast path of ``clean_query`` cleans a query exactly as the general (Unicode) path does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hybridsearch.errors import QueryError
from hybridsearch.query.build import clean_query

ZERO_WIDTH = "\u200b"  # a format character: the general path makes it a space, so the words stay the same


def _cleaned(text: str) -> str | None:
    try:
        return clean_query(text, 10_000)[0]
    except QueryError:
        return None


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=200))
def test_ascii_text_is_cleaned_as_the_unicode_path_cleans_it(text: str) -> None:
    assert text.isascii()
    assert _cleaned(text) == _cleaned(text + ZERO_WIDTH)  # the same text, sent down the general path


def test_ascii_controls_become_spaces() -> None:
    assert clean_query("a\x00b\x7fc\x1bd", 100) == ("a b c d", False)
