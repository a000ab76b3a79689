"""The one JSON Lines parser."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from hybridsearch.jsonl import BadLine, parse_lines


def test_blank_lines_are_skipped_and_numbers_are_the_files() -> None:
    assert list(parse_lines(['{"a": 1}', "", "  ", "[2]", b'"x"'])) == [(1, {"a": 1}), (4, [2]), (5, "x")]


def test_a_bad_line_is_reported_with_its_number_and_the_rest_still_parsed() -> None:
    got = list(parse_lines(['{"a": 1}', "{nope", "3"]))
    assert got[0] == (1, {"a": 1}) and got[2] == (3, 3)
    assert isinstance(got[1], BadLine) and got[1].lineno == 2 and got[1].reason


@given(st.lists(st.dictionaries(st.text(), st.integers() | st.text() | st.booleans(), max_size=3), max_size=5))
def test_round_trip(records: list[dict[str, object]]) -> None:
    lines = [json.dumps(r) for r in records]
    assert [value for _, value in parse_lines(lines)] == records  # type: ignore[misc]
