"""The reranker service as a real uvicorn subprocess on loopback (`hsp serve-reranker`), used through
HttpReranker. Needs no Elasticsearch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hybridsearch.errors import RerankerError
from hybridsearch.rerank import HttpReranker, LocalReranker, make_reranker
from hybridsearch.settings import RerankerSettings, load_settings

MODELS = load_settings().models

QUERY = "does exercise lower blood pressure"
PASSAGES = ["Regular aerobic exercise reduces systolic blood pressure in adults with hypertension.",
            "The Eiffel Tower was completed in 1889.", "Salt intake raises blood pressure in some people.",
            "Exercise."]
HSP = [sys.executable, "-c", "from hybridsearch.cli.main import entry; entry()"]
TOKEN = "integration-s3cret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_service(model: Path, *extra: str, token: str | None = TOKEN) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HSP_RERANKER__DEVICE": "cpu", "HSP_RERANKER__MAX_LENGTH": "64",
           "TOKENIZERS_PARALLELISM": "false"}
    env.pop("HSP_RERANKER__TOKEN", None)
    if token:
        env["HSP_RERANKER__TOKEN"] = token
    proc = subprocess.Popen([*HSP, "serve-reranker", "--port", str(port), "--model", str(model), *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            raise AssertionError(f"serve-reranker exited with {proc.returncode}:\n{out}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("serve-reranker did not become ready within 120 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def service(tiny_cross_encoder: Path) -> Iterator[str]:
    proc, url = start_service(tiny_cross_encoder)
    yield url
    stop(proc)


def test_http_reranker_gets_the_same_scores_as_in_process(service: str, tiny_cross_encoder: Path) -> None:
    local = LocalReranker(RerankerSettings(model=str(tiny_cross_encoder), device="cpu", max_length=64), MODELS)
    settings = load_settings(reranker={"url": service, "token": TOKEN, "timeout": 10})
    remote = make_reranker(settings.reranker, settings.models)
    assert isinstance(remote, HttpReranker)
    with remote:
        assert remote.score(QUERY, PASSAGES) == pytest.approx(local.score(QUERY, PASSAGES), abs=1e-5)


def test_wrong_token_is_a_reranker_error_naming_401(service: str) -> None:
    with HttpReranker(service, timeout=10, token="wrong") as remote, pytest.raises(RerankerError, match="401"):
        remote.score(QUERY, PASSAGES)
    with HttpReranker(service, timeout=10) as anonymous, pytest.raises(RerankerError, match="missing bearer"):
        anonymous.score(QUERY, PASSAGES)


def test_probes_and_metrics_over_http(service: str) -> None:
    assert httpx.get(f"{service}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{service}/readyz").json()["status"] == "ready"
    with HttpReranker(service, timeout=10, token=TOKEN) as remote:
        remote.score(QUERY, PASSAGES)
    assert 'hsp_reranker_requests_total{status="200"}' in httpx.get(f"{service}/metrics").text


def test_bad_input_over_http_then_service_still_answers(service: str) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    bad = httpx.post(f"{service}/rerank", content=b'{"query": "q", "passages": ["\xff"]}', headers=auth)
    assert bad.status_code == 400 and "UTF-8" in bad.json()["detail"]
    many = httpx.post(f"{service}/rerank", json={"query": "q", "passages": ["p"] * 10_000}, headers=auth, timeout=30)
    assert many.status_code == 422 and "max_passages=256" in many.json()["detail"]
    huge = httpx.post(f"{service}/rerank", json={"query": "q", "passages": ["a" * 1_000_000]}, headers=auth,
                      timeout=30)
    assert huge.status_code == 422 and "max_passage_chars=20000" in huge.json()["detail"]
    with HttpReranker(service, timeout=10, token=TOKEN) as remote:
        assert len(remote.score(QUERY, PASSAGES)) == len(PASSAGES)


def test_rerank_check_cli_through_the_service(service: str) -> None:
    env = {**os.environ, "HSP_RERANKER__TOKEN": TOKEN, "COLUMNS": "200"}
    out = subprocess.run([*HSP, "rerank-check", "--url", service, QUERY, *PASSAGES], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "Eiffel Tower" in out.stdout and f"http:{service}" in out.stdout


def test_a_killed_service_makes_http_reranker_raise(tiny_cross_encoder: Path) -> None:
    proc, url = start_service(tiny_cross_encoder, "--no-batching", token=None)
    with HttpReranker(url, timeout=10) as remote:
        assert len(remote.score(QUERY, PASSAGES)) == len(PASSAGES)
        proc.kill()
        proc.wait(10)
        with pytest.raises(RerankerError, match="cannot reach the reranker service"):
            remote.score(QUERY, PASSAGES)


def test_unloadable_model_fails_start_up_with_exit_code_5(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([*HSP, "serve-reranker", "--port", str(free_port()), "--model", "cross-encoder/nope-v1"],
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 5
    assert "cross-encoder/nope-v1" in out.stderr and "HSP_RERANKER__MODEL" in out.stderr
