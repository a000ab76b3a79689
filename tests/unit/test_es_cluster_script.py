"""ops/es-local.sh cluster: argument handling and the URL list clients are given (no node is started)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "ops" / "es-local.sh"


def run(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "HSP_CACHE": str(tmp_path), **env}
    full.pop("HSP_ES_SECURE", None)
    return subprocess.run(["bash", str(SCRIPT), "cluster", *args], capture_output=True, text=True, env=full,
                          timeout=30, check=False)


def test_url_lists_every_node_on_consecutive_loopback_ports(tmp_path: Path) -> None:
    out = run("url", tmp_path=tmp_path).stdout.strip()
    assert out == "http://127.0.0.1:9210,http://127.0.0.1:9211,http://127.0.0.1:9212"
    four = run("url", tmp_path=tmp_path, HSP_ES_NODES="4", HSP_ES_CLUSTER_PORT="9215").stdout.strip()
    assert four.split(",") == [f"http://127.0.0.1:{p}" for p in range(9215, 9219)]


@pytest.mark.parametrize("args", [("kill",), ("kill", "node-4"), ("kill", "node-0"), ("restart", "x"),
                                  ("stop", "node-9"), ("pid", "two")])
def test_a_node_outside_the_cluster_is_refused_with_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    res = run(*args, tmp_path=tmp_path)
    assert res.returncode == 2
    assert "name one of node-1 .. node-3" in res.stderr


def test_unknown_action_prints_usage(tmp_path: Path) -> None:
    res = run("explode", tmp_path=tmp_path)
    assert res.returncode == 2 and "usage:" in res.stderr and "kill NODE" in res.stderr


@pytest.mark.parametrize("name", ["node-2", "2"])
def test_kill_and_pid_of_a_node_that_does_not_run_do_nothing(tmp_path: Path, name: str) -> None:
    assert run("pid", name, tmp_path=tmp_path).stdout == ""
    res = run("kill", name, tmp_path=tmp_path)
    assert res.returncode == 0 and "node-2 is not running" in res.stderr


def test_status_without_nodes_fails(tmp_path: Path) -> None:
    # a port range no one uses: nothing answers
    res = run("status", tmp_path=tmp_path, HSP_ES_CLUSTER_PORT="9217", HSP_ES_NODES="1")
    assert res.returncode == 1 and "no node of the cluster answers" in res.stderr
