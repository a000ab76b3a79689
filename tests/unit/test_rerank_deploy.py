"""docker-compose's reranker services and the Dockerfile they build agree with the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hybridsearch.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]


def services() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    svc: dict[str, Any] = compose["services"]
    return svc


def test_reranker_is_a_cpu_default_built_from_the_repo_dockerfile() -> None:
    cpu = services()["reranker"]
    assert "profiles" not in cpu  # starts with a plain `docker compose up`
    assert (ROOT / cpu["build"]["context"] / cpu["build"]["dockerfile"]).is_file()
    assert cpu["environment"]["HSP_RERANKER__DEVICE"] == "cpu"
    assert "deploy" not in cpu


def test_gpu_profile_reserves_an_nvidia_device() -> None:
    gpu = services()["reranker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert gpu["environment"]["HSP_RERANKER__DEVICE"] == "cuda"
    assert gpu["ports"] != services()["reranker"]["ports"]  # both can run side by side


def test_compose_command_is_a_valid_hsp_command_line() -> None:
    for svc in ("reranker", "reranker-gpu"):
        cmd = services()[svc]["command"]
        assert cmd[0] == "hsp"
        args = build_parser().parse_args(cmd[1:])
        assert args.command == "serve-reranker" and args.host == "0.0.0.0" and args.port == 8088


def test_dockerfile_installs_the_package_and_serves_the_reranker() -> None:
    text = (ROOT / "ops" / "docker" / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert "pip install ." in text and "serve-reranker" in text
    ignore = (ROOT / "ops" / "docker" / "Dockerfile.dockerignore").read_text()
    for needed in ("pyproject.toml", "README.md", "mappings/", "platform/"):  # what `pip install .` reads
        assert f"!{needed}" in ignore
