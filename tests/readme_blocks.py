"""The README's fenced code blocks, read with a Markdown parser (markdown-it-py), for the tests that run them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

README = Path(__file__).resolve().parents[1] / "README.md"


@dataclass(frozen=True)
class Block:
    language: str  #: the fence's info string (``bash``, ``python``; empty when none)
    line: int  #: 1-based line of the README where the code starts
    code: str


def blocks(language: str, path: Path = README) -> list[Block]:
    """Every fenced block of ``path`` whose info string is ``language``."""
    tokens = MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8"))
    return [Block(t.info.strip(), t.map[0] + 2, t.content) for t in tokens
            if t.type == "fence" and t.info.strip() == language and t.map is not None]
