"""Functions take the settings section they read, not the root ``Settings`` (docs/architecture.md, rule 8).

The package's source is read with ``ast``: every function with a parameter annotated ``Settings`` (or
``Settings | None``), command handlers aside, must need the whole tree: it reads at least two sections of it
(``settings.index``, ``settings.embedding``...), itself or through the package functions it hands it to, or hands it
on whole (stores, returns or copies it, or gives it to another library). A function that reads one section, or
none, takes that section (or nothing) instead.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from hybridsearch.settings import Settings

PACKAGE = Path(__file__).resolve().parents[2] / "platform" / "hybridsearch"
SECTIONS = frozenset(Settings.model_fields)

@dataclass
class Use:
    """How one function uses its root-Settings parameter."""

    sections: set[str] = field(default_factory=set)  # settings.<section> read
    callees: set[str] = field(default_factory=set)  # names of what it is handed to whole (functions, classes)
    whole: bool = False  # handed on whole otherwise: stored, returned, copied, dumped, to another library


def _is_root_settings(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation).replace("'", "").replace('"', "")
    return "Settings" in {part.strip() for part in text.split("|")}


def _uses(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> Use:
    use = Use()
    parents = {child: node for node in ast.walk(func) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(func):
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in SECTIONS:
            use.sections.add(parent.attr)
        elif (callee := _callee(node, parent, parents)) is not None:
            use.callees.add(callee)
        else:  # stored, returned, settings.model_copy(...), settings.model_dump(): the whole tree
            use.whole = True
    return use


def _callee(node: ast.AST, parent: ast.AST | None, parents: dict[ast.AST, ast.AST]) -> str | None:
    """The name of the function or class ``node`` is an argument of (``f(settings)``, ``m.f(x=settings)``)."""
    call = parents.get(parent) if isinstance(parent, ast.keyword) else parent
    if not isinstance(call, ast.Call) or node is call.func:
        return None
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and func.attr != "__init__":  # super().__init__(settings): stays opaque
        return func.attr
    return None


def _functions() -> dict[str, dict[str, Use]]:
    """``{module:qualname: {param: Use}}`` for every function with a root-Settings parameter."""
    found: dict[str, dict[str, Use]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)  # a package by its own name
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def visit(node: ast.AST, prefix: str, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = [*child.args.posonlyargs, *child.args.args, *child.args.kwonlyargs]
                    params = {a.arg: _uses(child, a.arg) for a in args if _is_root_settings(a.annotation)}
                    if params:
                        found[f"{module}:{prefix}{child.name}"] = params
                    visit(child, f"{prefix}{child.name}.")

        visit(tree, "")
    return found


def _is_command_handler(key: str) -> bool:
    """``hsp`` subcommands are dispatched as ``handler(args, settings)``: the command line is the composition
    root, so its handlers take the whole tree whatever they read (hybridsearch/cli/)."""
    return key.startswith("cli.")


FOUND = _functions()


def _reads(key: str, seen: frozenset[str] = frozenset()) -> tuple[set[str], bool]:
    """Sections ``key`` reads of its root Settings, itself or through the package functions it hands it to, and
    whether it or one of those hands it anywhere else (stores, returns or copies it, or gives it to another
    library: then it needs the whole tree whatever the sections say)."""
    sections: set[str] = set()
    whole = False
    for use in FOUND[key].values():
        sections |= use.sections
        whole |= use.whole
        for name in use.callees:
            if name == "getattr":  # getattr(settings, group): reads sections by name, the loop around says which
                continue
            targets = [k for k in FOUND if k.rsplit(":", 1)[1] in (name, f"{name}.__init__")]
            if not targets:
                whole = True  # another library, or a package function that takes a section: not ours to judge
            for target in targets:
                if target not in seen:
                    more, opaque = _reads(target, seen | {key})
                    sections |= more
                    whole |= opaque
    return sections, whole


def test_the_scan_sees_the_package() -> None:
    assert any(k.endswith(":run_ingest") for k in FOUND) and not any(k.endswith(":make_reranker") for k in FOUND)
    assert len(FOUND) > 40


def test_a_function_given_the_root_settings_needs_the_whole_tree() -> None:
    narrow = {}
    for key in FOUND:
        sections, whole = _reads(key)
        if not whole and len(sections) <= 1 and not _is_command_handler(key):
            narrow[key] = sorted(sections) or "nothing"
    assert not narrow, (
        f"these take the root Settings but read one section of it or none (key: what they read): {narrow}. "
        "Hand each the section it reads (IndexSettings, EmbeddingSettings...) or nothing")


def test_the_rule_catches_a_single_section_function(tmp_path: Path) -> None:
    tree = ast.parse("def f(settings: Settings) -> str:\n    return settings.index.alias\n"
                     "def g(settings: Settings | None) -> object:\n    return h(settings, settings.index)\n"
                     "def k(s: Settings) -> int:\n    return s.index.shards + s.embedding.dims\n")
    uses = {fn.name: _uses(fn, fn.args.args[0].arg) for fn in tree.body if isinstance(fn, ast.FunctionDef)}
    assert (uses["f"].sections, uses["f"].whole) == ({"index"}, False)  # one section: not a root
    assert uses["g"].callees == {"h"} and not uses["g"].whole  # handed to h: judged by what h reads
    assert (uses["k"].sections, uses["k"].whole) == ({"index", "embedding"}, False)
    assert all(_is_root_settings(fn.args.args[0].annotation) for fn in tree.body if isinstance(fn, ast.FunctionDef))
