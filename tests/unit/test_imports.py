"""`platform/` must stay a plain folder: the stdlib `platform` module has to win."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_platform_folder_has_no_init() -> None:
    assert not (ROOT / "platform" / "__init__.py").exists()


def test_stdlib_platform_elasticsearch_and_hybridsearch_import_together_from_repo_root() -> None:
    code = (
        "import platform, elasticsearch, hybridsearch, uuid;"
        "assert hasattr(platform, 'system'), platform.__file__;"
        "print(platform.system(), uuid.uuid4().version)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [__import__("platform").system(), "4"]
