"""The public API: what ``hybridsearch.__all__`` lists, and nothing public besides it."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import hybridsearch

ROOT = Path(__file__).resolve().parents[2]
IMPLEMENTATION_NAMES = {"annotations", "TYPE_CHECKING", "Any"}


def test_every_listed_name_resolves() -> None:
    for name in hybridsearch.__all__:
        assert getattr(hybridsearch, name) is not None, name


def test_everything_public_is_listed() -> None:
    public = {n for n, v in vars(hybridsearch).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType) and n not in IMPLEMENTATION_NAMES}
    assert public - set(hybridsearch.__all__) == set()
    assert sorted(hybridsearch.__all__) == hybridsearch.__all__


def test_exported_names_say_where_they_belong() -> None:
    """Classes and functions come from the package (no re-exported third-party names)."""
    for name in hybridsearch.__all__:
        value = getattr(hybridsearch, name)
        module = getattr(value, "__module__", "hybridsearch")
        assert module.startswith("hybridsearch") or name in {"Mode", "Filter", "__version__"}, (name, module)


def test_readme_imports_only_the_public_api() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert blocks, "README has a Python example"
    imports = [line for b in blocks for line in b.splitlines() if re.match(r"\s*(from|import) hybridsearch", line)]
    assert imports
    for line in imports:
        match = re.match(r"\s*from hybridsearch import (.+?)(\s*#.*)?$", line)
        assert match, f"README imports from inside the package: {line.strip()}"
        names = [n.strip() for n in match.group(1).strip("()").split(",") if n.strip()]
        assert set(names) <= set(hybridsearch.__all__), line


def test_import_stays_light() -> None:
    """``import hybridsearch`` loads neither torch nor the Elasticsearch client (the clients are lazy)."""
    code = "import sys, hybridsearch; print(sorted(m for m in ('torch', 'elasticsearch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
