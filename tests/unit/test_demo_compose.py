"""docker-compose.yml, read as YAML: the same Elasticsearch as ops/es-local.sh, loopback-only ports, and services
that reach the cluster where its healthcheck and ports say it is."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from conftest import ES_IMAGE
from hybridsearch.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def es_local_version() -> str:
    """The Elasticsearch version ops/es-local.sh starts, as the script itself reports it."""
    done = subprocess.run([str(ROOT / "ops/es-local.sh"), "--engine", "elasticsearch", "version"],
                          capture_output=True, text=True, timeout=30, check=True)
    engine, version = done.stdout.split()
    assert engine == "elasticsearch"
    return version


def published(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host address, container port) of each ``HOST:HOST_PORT:CONTAINER_PORT`` entry of ``ports``."""
    out = []
    for entry in service.get("ports", []):
        host, _, rest = str(entry).partition(":")
        out.append((host, rest.rsplit(":", 1)[-1]))
    return out


def mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(source, target, mode) of each short-syntax volume; the source may hold ``${VAR:-default}``."""
    out = []
    for entry in service.get("volumes", []):
        rest, _, mode = entry.rpartition(":") if entry.endswith((":ro", ":rw")) else (entry, "", "rw")
        source, _, target = rest.rpartition(":")
        out.append((source, target, mode))
    return out


def test_images_pin_the_es_local_version(compose: dict[str, Any]) -> None:
    version = es_local_version()
    services = compose["services"]
    assert services["elasticsearch"]["image"] == f"docker.elastic.co/elasticsearch/elasticsearch:{version}"
    assert services["kibana"]["image"] == f"docker.elastic.co/kibana/kibana:{version}"
    assert services["elasticsearch"]["image"] == ES_IMAGE  # testcontainers uses the same node


def test_every_published_port_is_loopback_only(compose: dict[str, Any]) -> None:
    """Security is off in this stack: nothing may listen beyond this machine."""
    ports = {name: published(svc) for name, svc in compose["services"].items()}
    assert ports["elasticsearch"] and ports["kibana"] and ports["reranker"]
    assert {host for entries in ports.values() for host, _ in entries} == {"127.0.0.1"}


def test_elasticsearch_service_is_a_local_single_node(compose: dict[str, Any]) -> None:
    es = compose["services"]["elasticsearch"]
    env = es["environment"]
    assert env["discovery.type"] == "single-node" and env["xpack.security.enabled"] == "false"
    assert set(env["ES_JAVA_OPTS"].split()) >= {"-Xms1g", "-Xmx1g"}
    kind, command = es["healthcheck"]["test"]
    url = urlsplit(next(w for w in shlex.split(command) if w.startswith("http")))
    assert kind == "CMD-SHELL" and url.path == "/_cluster/health"
    assert [str(url.port)] == [port for _, port in published(es)]  # it asks the port the service publishes
    assert [source for source, _, _ in mounts(es)] == ["esdata"] and "esdata" in compose["volumes"]


def test_kibana_and_worker_wait_for_a_healthy_cluster_and_reach_it(compose: dict[str, Any]) -> None:
    services = compose["services"]
    (_, es_port), = published(services["elasticsearch"])
    for name in ("kibana", "worker"):
        assert services[name]["depends_on"]["elasticsearch"]["condition"] == "service_healthy"
    assert json.loads(services["kibana"]["environment"]["ELASTICSEARCH_HOSTS"]) == [f"http://elasticsearch:{es_port}"]
    worker = services["worker"]
    assert worker["build"]["dockerfile"] == "ops/docker/Dockerfile"
    assert worker["environment"]["HSP_ES_URL"] == f"http://elasticsearch:{es_port}"
    assert worker["environment"]["HF_HUB_OFFLINE"] == "1"
    assert worker["command"][0] == "hsp"
    args = build_parser().parse_args(worker["command"][1:])
    modes = {target: mode for _, target, mode in mounts(worker)}
    assert args.command == "ingest" and modes[str(args.path)] == "ro"  # ingests the mounted folder, read-only
    dead_letters = worker["environment"]["HSP_INGEST__DEAD_LETTER_DIR"]
    assert [s for s, t, _ in mounts(worker) if t == dead_letters] == ["deadletter"]  # the dead letters persist
    assert "deadletter" in compose["volumes"]
