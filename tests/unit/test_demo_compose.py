"""docker-compose.yml parses, pins the same Elasticsearch as ops/es-local.sh and wires services sensibly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def es_local_version() -> str:
    m = re.search(r'^ES_VERSION="\$\{HSP_ES_VERSION:-([0-9.]+)\}"', (ROOT / "ops/es-local.sh").read_text(), re.M)
    assert m, "ops/es-local.sh no longer pins ES_VERSION"
    return m.group(1)


def test_images_pin_the_es_local_version(compose: dict[str, Any]) -> None:
    version = es_local_version()
    services = compose["services"]
    assert services["elasticsearch"]["image"] == f"docker.elastic.co/elasticsearch/elasticsearch:{version}"
    assert services["kibana"]["image"] == f"docker.elastic.co/kibana/kibana:{version}"
    conftest = (ROOT / "tests/conftest.py").read_text()
    assert f"elasticsearch:{version}" in conftest  # testcontainers uses the same node


def test_elasticsearch_service_is_a_local_single_node(compose: dict[str, Any]) -> None:
    es = compose["services"]["elasticsearch"]
    env = es["environment"]
    assert env["discovery.type"] == "single-node" and env["xpack.security.enabled"] == "false"
    assert "-Xms1g" in env["ES_JAVA_OPTS"] and "-Xmx1g" in env["ES_JAVA_OPTS"]
    assert "_cluster/health" in " ".join(es["healthcheck"]["test"])
    volume = es["volumes"][0].split(":")[0]
    assert volume in compose["volumes"]


def test_kibana_and_worker_wait_for_a_healthy_cluster(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("kibana", "worker"):
        assert services[name]["depends_on"]["elasticsearch"]["condition"] == "service_healthy"
    worker = services["worker"]
    assert worker["build"]["dockerfile"] == "ops/docker/Dockerfile"
    assert worker["command"][:3] == ["hsp", "ingest", "/data"]
    assert worker["environment"]["HSP_ES_URL"] == "http://elasticsearch:9200"
    assert worker["environment"]["HF_HUB_OFFLINE"] == "1"
