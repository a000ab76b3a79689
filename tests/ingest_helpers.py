"""Test helpers for ingestion: a model-free tokenizer and a dead-letter file reader."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


class WhitespaceTokenizer:
    """Words and single punctuation marks as tokens: a model-free chunking tokenizer."""

    _TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in self._TOKEN.finditer(text)]


def read_dead_letter(path: Path | str) -> list[dict[str, Any]]:
    """Records of a dead-letter file (``[]`` when it does not exist)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
