"""docker-compose's reranker services and the Dockerfile they build, each read with a parser, agree with the CLI,
with each other and with what ``pip install .`` reads."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker.utils.build import exclude_paths
from dockerfile_parse import DockerfileParser

from hybridsearch.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "ops" / "docker" / "Dockerfile"


def services() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    svc: dict[str, Any] = compose["services"]
    return svc


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    return DockerfileParser(path=str(DOCKERFILE))


def instructions(df: DockerfileParser, name: str) -> list[str]:
    return [i["value"] for i in df.structure if i["instruction"] == name]


def test_reranker_is_a_cpu_default_built_from_the_repo_dockerfile() -> None:
    cpu = services()["reranker"]
    assert "profiles" not in cpu  # starts with a plain `docker compose up`
    assert (ROOT / cpu["build"]["context"] / cpu["build"]["dockerfile"]).resolve() == DOCKERFILE
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


def test_compose_build_args_are_the_dockerfiles(dockerfile: DockerfileParser) -> None:
    for svc in ("reranker", "reranker-gpu"):
        assert set(services()[svc]["build"]["args"]) <= set(dockerfile.args), svc
    assert {services()[s]["build"]["args"]["TORCH_INDEX_URL"].rsplit("/", 1)[1] for s in ("reranker", "reranker-gpu")
            } == {"cpu", "cu126"}


def test_image_serves_the_reranker_on_the_port_it_exposes_and_checks(dockerfile: DockerfileParser) -> None:
    python, tag = dockerfile.baseimage.split(":")
    assert python == "python" and tuple(map(int, tag.split("-")[0].split("."))) >= (3, 11)
    assert instructions(dockerfile, "USER") not in ([], ["root"])  # the service does not run as root
    cmd = json.loads(dockerfile.cmd)
    args = build_parser().parse_args(cmd[1:])
    assert cmd[0] == "hsp" and args.command == "serve-reranker" and args.host == "0.0.0.0"
    assert instructions(dockerfile, "EXPOSE") == [str(args.port)]
    (check,) = instructions(dockerfile, "HEALTHCHECK")
    probe = json.loads(check.split(" CMD ", 1)[1])
    assert probe == services()["reranker"]["healthcheck"]["test"][1:]  # compose repeats the image's own check
    assert f"http://127.0.0.1:{args.port}/readyz" in probe[-1]


def test_the_build_context_holds_what_pip_install_reads(dockerfile: DockerfileParser) -> None:
    """Every file the wheel is built from (pyproject's readme, packages, force-include) is copied into the image,
    and the Dockerfile's own .dockerignore lets it into the build context."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", pyproject["project"]["readme"], *wheel["packages"], *wheel["force-include"]}
    copied = {src for value in instructions(dockerfile, "COPY") for src in value.split()[:-1]}
    for path in needed:
        assert any(path == src or path.startswith(src + "/") for src in copied), f"{path} is not copied"
    ignore = (DOCKERFILE.parent / f"{DOCKERFILE.name}.dockerignore").read_text().splitlines()
    patterns = [line for line in ignore if line.strip() and not line.startswith("#")]
    context = set(exclude_paths(str(ROOT), patterns, dockerfile=str(DOCKERFILE.relative_to(ROOT))))
    for path in needed:
        top = ROOT / path
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        assert files and {str(p.relative_to(ROOT)) for p in files} <= context, path
    assert not any(p.startswith(("tests/", "docs/", ".git/")) for p in context)  # a small context
