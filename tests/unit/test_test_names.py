"""The suite runs unit and integration tests in one pytest session (README's test command), and the test folders
are not packages: two test files with one basename make pytest stop at collection."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_basename() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
