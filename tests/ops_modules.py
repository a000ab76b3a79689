"""Import an ops/bench/ script by its file path, as a module of its own, without putting ops/bench/ on ``sys.path``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

OPS = Path(__file__).resolve().parents[1] / "ops" / "bench"


def load_ops(name: str) -> ModuleType:
    """``ops/bench/<name>.py`` as module ``ops_<name>`` (once per session; registered so its dataclasses resolve).
    A script that itself imports a sibling (bench_load imports loadgen) still puts ops/bench/ on the path."""
    module_name = f"ops_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, OPS / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
