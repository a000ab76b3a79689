"""The engine seam holds: outside ``hybridsearch/engine/`` no module names an engine kind, and nothing defaults to
a dialect. (That only the seam imports the client libraries is an import-linter contract: ops/check-deps.sh.)

An engine kind written out as a string (``"opensearch"``, ``"elasticsearch"``) is how engine-specific branches
creep back in (``if es.engine.kind == "opensearch": ...``): such a branch belongs behind a method of the seam. A
dialect as a parameter default (``dialect: Dialect = ELASTICSEARCH``) silently renders Elasticsearch JSON for a
caller that forgot it. Sentences that mention an engine (docstrings, messages) are not engine kinds and pass.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from hybridsearch.engine import EngineKind
from hybridsearch.settings import ClusterSettings

PACKAGE = Path(__file__).resolve().parents[2] / "platform" / "hybridsearch"
KINDS = frozenset(get_args(EngineKind))
DIALECTS = frozenset({"ELASTICSEARCH", "OPENSEARCH"})

#: (module, the name that holds the string): the only places outside the seam that name an engine kind.
ALLOWED = {
    # the setting's own vocabulary (HSP_ES__ENGINE); settings.py is a leaf and may not import the seam
    ("settings.py", "ClusterSettings.engine"),
}


def _strings(node: ast.AST, owner: str = "") -> Iterator[tuple[str, ast.Constant]]:
    """Every string constant under ``node`` with its owner: the enclosing class, function or assigned name,
    dotted (``ClusterSettings.engine``)."""
    for child in ast.iter_child_nodes(node):
        name = owner
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{owner}.{child.name}".lstrip(".")
        elif isinstance(child, ast.Assign | ast.AnnAssign):
            target = child.targets[0] if isinstance(child, ast.Assign) else child.target
            name = f"{owner}.{ast.unparse(target)}".lstrip(".")
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
            yield name, child
        yield from _strings(child, name)


def engine_kinds_named(source: str) -> list[tuple[str, int]]:
    """``(owner, line)`` of each string in ``source`` that is an engine kind (any case)."""
    return [(owner, node.lineno) for owner, node in _strings(ast.parse(source))
            if node.value.strip().lower() in KINDS]


def dialect_defaults(source: str) -> list[tuple[str, int]]:
    """``(function, line)`` of each parameter whose default is a dialect constant."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                named = default.id if isinstance(default, ast.Name) else \
                    default.attr if isinstance(default, ast.Attribute) else None
                if named in DIALECTS:
                    found.append((getattr(node, "name", "<lambda>"), default.lineno))
    return found


def outside_the_seam() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] != "engine"]


def test_the_scan_sees_the_package() -> None:
    modules = {p.relative_to(PACKAGE).as_posix() for p in outside_the_seam()}
    assert {"index/access.py", "doctor.py", "index/versions.py", "query/build.py", "ingest/writer.py"} <= modules
    assert not any(m.startswith("engine/") for m in modules)


def test_no_module_outside_the_seam_names_an_engine_kind() -> None:
    found = {(p.relative_to(PACKAGE).as_posix(), owner, line) for p in outside_the_seam()
             for owner, line in engine_kinds_named(p.read_text(encoding="utf-8"))}
    assert {(m, o) for m, o, _ in found} - ALLOWED == set(), sorted(found)
    assert {(m, o) for m, o, _ in found} == ALLOWED, "an allowed name is gone: drop it from ALLOWED"


def test_no_parameter_outside_the_seam_defaults_to_a_dialect() -> None:
    found = [(p.relative_to(PACKAGE).as_posix(), *hit) for p in outside_the_seam()
             for hit in dialect_defaults(p.read_text(encoding="utf-8"))]
    assert found == []


@pytest.mark.parametrize("source", [
    'def f(es):\n    if es.engine.kind == "opensearch":\n        return 1\n',
    'def f(es):\n    return {"OpenSearch": 1}.get(es.engine.name)\n',
    'KIND = "elasticsearch"\n',
    'def f(es):\n    match es.engine.kind:\n        case "opensearch":\n            return 1\n',
])
def test_the_scan_finds_a_branch_on_an_engine_kind(source: str) -> None:
    assert engine_kinds_named(source)


def test_the_scan_lets_sentences_about_engines_pass() -> None:
    source = ('def f():\n    """Runs on Elasticsearch and OpenSearch."""\n'
              '    raise ValueError(f"OpenSearch has no API keys ({1})")\n')
    assert engine_kinds_named(source) == []


def test_the_scan_finds_a_dialect_default() -> None:
    assert dialect_defaults("def f(x, dialect=ELASTICSEARCH): ...\n") == [("f", 1)]
    assert dialect_defaults("def f(x, *, d: Dialect = engine.OPENSEARCH): ...\n") == [("f", 1)]
    assert dialect_defaults("def f(x, dialect: Dialect): ...\n") == []


def test_the_engine_setting_speaks_the_seams_vocabulary() -> None:
    # the one allowed naming of the kinds outside the seam must be exactly the seam's kinds (plus auto)
    assert set(get_args(ClusterSettings.model_fields["engine"].annotation)) == {"auto", *KINDS}
