"""The ops/bench/ scripts start: each one's ``--help`` runs (so its imports resolve against the package), and
fault_ingest's clean-up and verification work on a stand-in client.

``--help`` loads no model and contacts no cluster: every script parses its arguments before it does either (the
node URL below answers nothing, so a script that did would fail). Type errors against the package are
``mypy platform/hybridsearch ops/bench/*.py`` (ops/check-deps.sh).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote

import elastic_transport
import elasticsearch
import pytest

from hybridsearch.engine import Request

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops" / "bench"
SCRIPTS = sorted(p.name for p in OPS.glob("*.py"))


def is_script(name: str) -> bool:
    """A script has a ``__main__`` entry; the others (loadgen.py) are modules the scripts import."""
    return 'if __name__ == "__main__":' in (OPS / name).read_text(encoding="utf-8")


def run_help(name: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "platform"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "HSP_ES_URL": "http://127.0.0.1:1"}
    env.pop("HSP_ES__URL", None)
    if is_script(name):
        cmd = [sys.executable, str(OPS / name), "--help"]
    else:  # a module: importing it (from ops/bench/, as the scripts do) is what can break
        env["PYTHONPATH"] += os.pathsep + str(OPS)
        cmd = [sys.executable, "-c", f"import {name.removesuffix('.py')}"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def helps() -> Iterator[dict[str, subprocess.CompletedProcess[str]]]:
    """Every script's ``--help``, run in parallel (each is an interpreter start and the package's imports)."""
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        yield dict(zip(SCRIPTS, pool.map(run_help, SCRIPTS), strict=True))


def test_there_are_scripts_to_check() -> None:
    assert {"fault_ingest.py", "bench_single_list.py", "loadgen.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_runs(name: str, helps: dict[str, subprocess.CompletedProcess[str]]) -> None:
    done = helps[name]
    assert done.returncode == 0, f"ops/bench/{name} --help exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    if is_script(name):
        assert done.stdout.startswith(f"usage: {name}"), done.stdout[:500]


# ---------------------------------------------------------------------------------- fault_ingest, no cluster


def load_ops(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"ops_{name}", OPS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refused(status: int, error: str) -> elasticsearch.ApiError:
    """The error the engine client raises for an answer with ``status``."""
    meta = elastic_transport.ApiResponseMeta(status, "1.1", elastic_transport.HttpHeaders(), 0.0,
                                             elastic_transport.NodeConfig("http", "localhost", 9200))
    return elasticsearch.exceptions.HTTP_EXCEPTIONS[status](message=error, meta=meta, body={})


class FakeIndices:
    """Indices by name; ``get`` resolves a trailing-``*`` pattern as the engine does with allow_no_indices."""

    def __init__(self, names: set[str], vanish: frozenset[str] = frozenset(), refuse: frozenset[str] = frozenset()
                 ) -> None:
        self.names, self.vanish, self.refuse = set(names), vanish, refuse
        self.deleted: list[str] = []

    def get(self, *, index: str, expand_wildcards: str | None = None, allow_no_indices: bool | None = None
            ) -> dict[str, Any]:
        assert allow_no_indices and expand_wildcards == "all"
        stem = index.removesuffix("*")
        return {n: {} for n in self.names if (n.startswith(stem) if index.endswith("*") else n == index)}

    def delete(self, *, index: str, expand_wildcards: str | None = None) -> None:
        assert "*" not in index and expand_wildcards is None, "delete by name only"
        if index in self.refuse:
            raise refused(403, "security_exception")
        if index in self.vanish or index not in self.names:  # deleted by someone else in between
            raise refused(404, "index_not_found_exception")
        self.names.discard(index)
        self.deleted.append(index)


class FakeEngine:
    def __init__(self, indices: FakeIndices) -> None:
        self.indices = indices

    def send(self, request: Request) -> Any:
        """``GET <pattern>`` and ``DELETE <name>``, answered by :class:`FakeIndices`."""
        index, params = unquote(request.path[1:]), request.params
        if request.method == "GET":
            return self.indices.get(index=index, expand_wildcards=params.get("expand_wildcards"),
                                    allow_no_indices=params.get("allow_no_indices") == "true")
        assert request.method == "DELETE", request
        return self.indices.delete(index=index, expand_wildcards=params.get("expand_wildcards"))


def test_fault_ingest_cleanup_deletes_by_name_and_tolerates_missing_indices() -> None:
    fi = load_ops("fault_ingest")
    ours = {"fault-node-chunks-v1", "fault-node-ingest-runs", "fault-node-ingest-state", "fault-node-query-log"}
    indices = FakeIndices(ours | {"fault-nodes-chunks-v1", "other-chunks-v1"},
                          vanish=frozenset({"fault-node-ingest-state"}))
    dropped = fi.drop_indices(FakeEngine(indices), fi.prefix_patterns("fault-node"))
    assert sorted(dropped) == sorted(ours - {"fault-node-ingest-state"})  # the vanished one is no error
    assert indices.names == {"fault-node-ingest-state", "fault-nodes-chunks-v1", "other-chunks-v1"}
    # a fresh cluster: nothing matches, nothing fails
    assert fi.drop_indices(FakeEngine(FakeIndices(set())), fi.prefix_patterns("fault-node")) == []


def test_fault_ingest_cleanup_raises_what_is_not_a_missing_index() -> None:
    fi = load_ops("fault_ingest")
    indices = FakeIndices({"fault-block-chunks-v1"}, refuse=frozenset({"fault-block-chunks-v1"}))
    with pytest.raises(elasticsearch.AuthorizationException):
        fi.drop_indices(FakeEngine(indices), fi.prefix_patterns("fault-block"))


def test_fault_ingest_verify_counts_lost_incomplete_and_duplicated_chunks() -> None:
    fi = load_ops("fault_ingest")
    want = {"a": {"a#0", "a#1"}, "b": {"b#0"}, "c": {"c#0"}}
    visible = [{"_id": "a#0", "doc_id": "a", "position": 0}, {"_id": "b#0", "doc_id": "b", "position": 0},
               {"_id": "b#0-old", "doc_id": "b", "position": 0}, {"_id": "x#0", "doc_id": "x", "position": 0}]
    out = fi.verify(want, (visible, {"c"}))
    assert (out["documents_lost"], out["documents_incomplete"], out["chunks_duplicated"]) == (1, 2, 1)
    assert (out["documents_hidden"], out["unexpected_documents"], out["chunks_expected"]) == (1, 1, 4)
    assert out["examples"] == {"lost": ["c"], "incomplete": ["a", "b"]}
