"""docs/operations.md lists every setting, with the default the settings tree has."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from hybridsearch.settings import Settings

DOC = Path(__file__).parents[2] / "docs" / "operations.md"


def documented() -> dict[str, dict[str, str]]:
    """``{section: {field: default cell}}`` from the tables under "## Settings"."""
    tables: dict[str, dict[str, str]] = {}
    section: str | None = None
    for line in DOC.read_text(encoding="utf-8").split("\n## Settings\n", 1)[1].splitlines():
        if heading := re.match(r"\| `HSP_(\w+?)__…` \|", line):
            section = heading.group(1).lower()
            tables[section] = {}
        elif section is not None and (row := re.match(r"\| `(\w+)` \| ([^|]*) \|", line)):
            tables[section][row.group(1).lower()] = row.group(2).strip()
    return tables


def shown(default: Any) -> str:
    if default is None:
        return "unset"
    return str(default).lower() if isinstance(default, bool) else f"`{default}`"


SECTIONS = [(name, info.annotation) for name, info in Settings.model_fields.items()
            if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)]


@pytest.mark.parametrize(("section", "model"), SECTIONS, ids=[s for s, _ in SECTIONS])
def test_every_setting_is_documented_with_its_default(section: str, model: type[BaseModel]) -> None:
    table = documented().get(section)
    assert table is not None, f"docs/operations.md has no HSP_{section.upper()}__ table"
    assert sorted(set(model.model_fields) - set(table)) == [], "settings missing from the docs"
    assert sorted(set(table) - set(model.model_fields)) == [], "documented settings that do not exist"
    wrong = {name: (table[name], shown(info.default)) for name, info in model.model_fields.items()
             if info.default_factory is None and table[name] != shown(info.default)}
    assert wrong == {}, "documented default differs (docs, code)"
