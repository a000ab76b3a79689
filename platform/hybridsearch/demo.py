"""A real corpus that needs no download: the running interpreter's ``pydoc`` topics and standard-library docstrings,
as documents with stable ids (``py:topic:with``, ``py:json.loads``) and ``metadata`` ``{kind, module, python}``, the
most useful first. Modules are imported quietly; those with side effects or needing a display are skipped."""

from __future__ import annotations

import builtins
import contextlib
import importlib
import inspect
import io
import pkgutil
import sys
import warnings
from collections.abc import Iterator
from itertools import chain, islice, zip_longest
from types import ModuleType
from typing import Any

from hybridsearch.ingest.sources import Document

SKIP_MODULES = frozenset({
    "antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "lib2to3", "pydoc_data",
    "msvcrt", "winreg", "winsound", "nt", "ensurepip", "venv", "encodings", "__hello__", "__phello__",
    "xxsubtype", "xxlimited", "xxlimited_35", "_xxtestfuzz", "pydoc", "sre_compile", "sre_constants",
    "sre_parse", "crypt", "nis", "spwd", "ossaudiodev", "tabnanny", "webbrowser", "curses", "readline",
})
SKIP_PARTS = frozenset({"test", "tests", "idle_test", "__main__"})
MIN_DOC_CHARS = 20
PYTHON = ".".join(map(str, sys.version_info[:3]))
SAMPLE_QUERIES = (
    "how do I read a file line by line",
    "sort a list of dicts by key",
    "parse command line arguments",
    "run a shell command and capture its output",
    "format a date as a string",
)


def _doc(obj: Any) -> str | None:
    """The object's own docstring, cleaned (inherited docstrings are not repeated)."""
    raw = getattr(obj, "__doc__", None)
    if not isinstance(raw, str):
        return None
    text = inspect.cleandoc(raw).strip()
    return text if len(text) >= MIN_DOC_CHARS else None


class _Elided:
    """A default value shown as ``...``."""

    def __repr__(self) -> str:
        return "..."


def _signature(obj: Any) -> str:
    """``(a, b=1)``, with unstable or long default values shown as ``...`` so ids and hashes stay put."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    params = [p.replace(default=_Elided()) if p.default is not p.empty and (len(repr(p.default)) > 40 or " at 0x"
              in repr(p.default)) else p for p in sig.parameters.values()]
    return str(sig.replace(parameters=params))


def _import(name: str) -> ModuleType | None:
    """Import ``name`` quietly; None when it fails or writes to the terminal."""
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - SystemExit, ImportError, OSError...: all mean "skip it"
            return None


def stdlib_module_names() -> list[str]:
    """Public standard-library modules and their public submodules, sorted, skipping SKIP_MODULES."""
    top = sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in SKIP_MODULES)
    names: list[str] = []
    for name in top:
        module = _import(name)
        if module is None:
            continue
        names.append(name)
        path = getattr(module, "__path__", None)
        if path is None:
            continue
        for info in pkgutil.walk_packages(path, prefix=f"{name}.", onerror=lambda _n: None):
            parts = info.name.split(".")
            if any(p.startswith("_") or p in SKIP_PARTS for p in parts[1:]):
                continue
            if _import(info.name) is not None:
                names.append(info.name)
    return sorted(set(names))


def _public_members(module: ModuleType) -> list[tuple[str, Any]]:
    exported = getattr(module, "__all__", None)
    names = sorted(exported) if isinstance(exported, list | tuple) else sorted(vars(module))
    members = [(name, getattr(module, name, None)) for name in names if isinstance(name, str) and name[:1] != "_"]
    return [(name, obj) for name, obj in members if (inspect.isclass(obj) or inspect.isroutine(obj))
            and getattr(obj, "__module__", None) == module.__name__  # not defined elsewhere, documented there
            and getattr(obj, "__name__", name) == name]  # not an alias (array.ArrayType is array.array)


def _make(doc_id: str, title: str, text: str, kind: str, module: str) -> Document:
    return Document.make(doc_id=doc_id, title=title, text=text, source=f"python-{PYTHON}",
                         metadata={"kind": kind, "module": module, "python": PYTHON})


def topic_documents() -> list[Document]:
    """``pydoc`` help topics (language reference sections) of the running interpreter."""
    from pydoc_data.topics import topics

    return [_make(f"py:topic:{name}", f"{name} (Python language reference)", text.strip(), "topic", "topics")
            for name, text in sorted(topics.items()) if text.strip()]


def _module_docs(module: ModuleType) -> tuple[Document | None, list[Document], list[Document]]:
    """(module overview, its classes and functions, their methods)."""
    mod = module.__name__
    members = _public_members(module)
    overview = None
    if (doc := _doc(module)) is not None:
        listed = ", ".join(n for n, _ in members[:60])
        overview = _make(f"py:{mod}", f"{mod} module", doc + (f"\n\nDefines: {listed}." if listed else ""),
                         "module", mod)
    items: list[Document] = []
    methods: list[Document] = []
    for name, obj in members:
        qual = f"{mod}.{name}"
        if (doc := _doc(obj)) is not None:
            kind = "class" if inspect.isclass(obj) else "function"
            items.append(_make(f"py:{qual}", f"{qual}{_signature(obj)}", doc, kind, mod))
        if inspect.isclass(obj):
            for mname, member in sorted(vars(obj).items()):
                if mname.startswith("_") or (not inspect.isroutine(member) and not isinstance(
                        member, classmethod | staticmethod | property)):
                    continue
                target = member.__func__ if isinstance(member, classmethod | staticmethod) else member
                if (mdoc := _doc(target)) is not None:
                    mqual = f"{qual}.{mname}"
                    sig = "" if isinstance(member, property) else _signature(target)
                    methods.append(_make(f"py:{mqual}", f"{mqual}{sig}", mdoc, "method", mod))
    return overview, items, methods


def stdlib_documents(limit: int | None = None) -> Iterator[Document]:
    """Documents of the running interpreter's standard library, the same on every call; at most ``limit`` (0: all)."""
    docs = [_module_docs(m) for n in stdlib_module_names() if n != "builtins" and (m := _import(n)) is not None]
    b_overview, b_items, b_methods = _module_docs(builtins)
    overviews = [overview for overview, _, _ in docs if overview is not None]
    groups = ([items for _, items, _ in docs], [methods for _, _, methods in docs])
    round_robin = (d for lists in groups for row in zip_longest(*lists) for d in row if d is not None)
    first: dict[str, Document] = {}
    for doc in chain(topic_documents(), [d for d in [b_overview] if d], b_items, b_methods, overviews, round_robin):
        first.setdefault(doc.doc_id, doc)
    yield from islice(first.values(), limit or None)
