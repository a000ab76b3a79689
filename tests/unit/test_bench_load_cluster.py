"""ops/bench/bench_load.py --kill: the node it kills and restarts belongs to the cluster --es-url names."""

from __future__ import annotations

import os

import pytest

from ops_modules import load_ops

pin_cluster_port = load_ops("bench_load").pin_cluster_port


def unset_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset HSP_ES_CLUSTER_PORT so that monkeypatch restores its state (pin_cluster_port sets it directly)."""
    monkeypatch.setenv("HSP_ES_CLUSTER_PORT", "0")
    monkeypatch.delenv("HSP_ES_CLUSTER_PORT")


def test_the_cluster_port_comes_from_the_first_url(monkeypatch: pytest.MonkeyPatch) -> None:
    unset_port(monkeypatch)
    assert pin_cluster_port("http://127.0.0.1:9220,http://127.0.0.1:9221/,http://127.0.0.1:9222") is None
    assert os.environ["HSP_ES_CLUSTER_PORT"] == "9220"


def test_the_same_port_already_set_is_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_ES_CLUSTER_PORT", "9220")
    assert pin_cluster_port("http://127.0.0.1:9220/") is None


def test_another_cluster_port_is_refused_not_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_ES_CLUSTER_PORT", "9210")
    why = pin_cluster_port("http://127.0.0.1:9220,http://127.0.0.1:9221")
    assert why is not None and "another cluster" in why
    assert os.environ["HSP_ES_CLUSTER_PORT"] == "9210"


def test_a_url_without_port_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    unset_port(monkeypatch)
    assert "no port" in (pin_cluster_port("http://localhost") or "")
