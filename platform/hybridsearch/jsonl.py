"""The one JSON Lines parser: each non-blank line is one JSON value, numbered from 1."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BadLine:
    """A line that is not JSON: its number and the parser's reason."""

    lineno: int
    reason: str


def parse_lines(lines: Iterable[str | bytes]) -> Iterator[tuple[int, Any] | BadLine]:
    """``(line number, value)`` for each non-blank line, or :class:`BadLine` where it is not JSON."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            yield BadLine(lineno, exc.msg)
