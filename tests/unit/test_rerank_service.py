"""The reranker service in-process (FastAPI TestClient) with the tiny real cross-encoder.

Covers the answer shape, limits, auth, bad input, a model failing mid-request, readiness and
micro-batching; after every fault the next valid request must still succeed.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hybridsearch.rerank import LocalReranker
from hybridsearch.rerank.base import order_by_score
from hybridsearch.rerank.service import create_app
from hybridsearch.settings import RerankerSettings, load_settings

MODELS = load_settings().models

QUERY = "what causes tides"
PASSAGES = ["The moon's gravity pulls on the oceans.", "Bread rises because of yeast.",
            "Tides are the rise and fall of sea levels caused by the moon and the sun.", "Unrelated text."]
VALID = {"query": QUERY, "passages": PASSAGES}


def cfg(**kw: object) -> RerankerSettings:
    base: dict[str, object] = {"device": "cpu", "max_length": 64, "max_passages": 50, "max_passage_chars": 2000,
                               "max_body_bytes": 200_000, "batch_window_ms": 2.0}
    return RerankerSettings.model_validate({**base, **kw})


@pytest.fixture(scope="module")
def scorer(tiny_cross_encoder: Path) -> LocalReranker:
    s = LocalReranker(cfg(model=str(tiny_cross_encoder)), MODELS)
    s.load()
    return s


def wait_ready(client: TestClient) -> None:
    for _ in range(200):
        if client.get("/readyz").status_code == 200:
            return
        time.sleep(0.02)
    raise AssertionError(client.get("/readyz").json())


@pytest.fixture()
def client(scorer: LocalReranker) -> Iterator[TestClient]:
    with TestClient(create_app(cfg(model=scorer.name), scorer)) as c:
        wait_ready(c)
        yield c


def assert_still_serves(client: TestClient) -> None:
    ok = client.post("/rerank", json=VALID)
    assert ok.status_code == 200, ok.text
    assert len(ok.json()["scores"]) == len(PASSAGES)


def test_rerank_answers_scores_in_input_order_and_consistent_order(client: TestClient, scorer: LocalReranker) -> None:
    resp = client.post("/rerank", json=VALID)
    assert resp.status_code == 200
    body = resp.json()
    assert set(body) == {"scores", "order", "model", "took_ms", "blend"}
    assert body["blend"] is None  # a model without a training card recommends no blend
    assert body["scores"] == pytest.approx(scorer.score(QUERY, PASSAGES), abs=1e-5)
    assert body["order"] == order_by_score(body["scores"])
    assert body["model"] == scorer.name and body["took_ms"] >= 0
    again = client.post("/rerank", json=VALID).json()
    assert again["scores"] == body["scores"]  # deterministic


def test_top_n_cuts_the_order_not_the_scores(client: TestClient) -> None:
    body = client.post("/rerank", json={**VALID, "top_n": 2}).json()
    assert len(body["scores"]) == len(PASSAGES) and len(body["order"]) == 2
    assert body["order"] == order_by_score(body["scores"])[:2]


def test_health_ready_and_metrics(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    client.post("/rerank", json=VALID)
    client.post("/rerank", json={"query": QUERY})
    text = client.get("/metrics").text
    assert 'hsp_reranker_requests_total{status="200"}' in text
    assert 'hsp_reranker_requests_total{status="422"}' in text
    assert "hsp_reranker_request_seconds_bucket" in text and "hsp_reranker_batch_pairs_count" in text
    assert "hsp_reranker_ready 1.0" in text


@pytest.mark.parametrize(
    ("body", "status", "error", "needle"),
    [
        ({"query": QUERY, "passages": []}, 422, "no_passages", "at least one passage"),
        ({"query": QUERY, "passages": ["x" * 2001]}, 422, "passage_too_long", "max_passage_chars=2000"),
        ({"query": QUERY, "passages": ["p"] * 51}, 422, "too_many_passages", "max_passages=50"),
        ({"query": "q" * 2001, "passages": ["p"]}, 422, "query_too_long", "max_passage_chars=2000"),
        ({"passages": ["p"]}, 422, "invalid_request", "query: Field required"),
        ({"query": QUERY}, 422, "invalid_request", "passages: Field required"),
        ({"query": QUERY, "passages": "not a list"}, 422, "invalid_request", "passages"),
        ({"query": QUERY, "passages": [1, 2]}, 422, "invalid_request", "passages.0"),
        ({"query": QUERY, "passages": ["p"], "top_n": 0}, 422, "invalid_request", "top_n"),
        ({"query": "", "passages": ["p"]}, 422, "invalid_request", "query"),
        ({"query": QUERY, "passages": ["p"], "extra": 1}, 422, "invalid_request", "extra"),
    ],
)
def test_bad_requests_get_a_reason_and_the_service_stays_up(
    client: TestClient, body: dict[str, object], status: int, error: str, needle: str
) -> None:
    resp = client.post("/rerank", json=body)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"] == error
    assert needle in resp.json()["detail"]
    assert_still_serves(client)


def test_one_megabyte_passage_hits_the_body_limit(client: TestClient) -> None:
    resp = client.post("/rerank", json={"query": QUERY, "passages": ["a" * 1_000_000]})
    assert resp.status_code == 413
    assert "max_body_bytes=200000" in resp.json()["detail"]
    assert_still_serves(client)


def test_ten_thousand_passages_are_refused_by_count(scorer: LocalReranker) -> None:
    with TestClient(create_app(cfg(model=scorer.name, max_body_bytes=4_000_000), scorer)) as c:
        wait_ready(c)
        resp = c.post("/rerank", json={"query": QUERY, "passages": [f"passage {i}" for i in range(10_000)]})
        assert resp.status_code == 422
        assert resp.json()["error"] == "too_many_passages" and "10000 passages" in resp.json()["detail"]
        assert_still_serves(c)


def test_chunked_body_over_the_limit_is_cut_off(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"query": "q", "passages": ["'
        for _ in range(30):
            yield b"z" * 10_000
        yield b'"]}'

    resp = client.post("/rerank", content=chunks(), headers={"content-type": "application/json"})
    assert resp.status_code == 413
    assert_still_serves(client)


def test_non_utf8_and_non_json_bodies(client: TestClient) -> None:
    raw = json.dumps(VALID).encode().replace(b"moon", b"m\xff\xfen")
    resp = client.post("/rerank", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"] == "bad_encoding"
    assert "0xff" in resp.json()["detail"]
    resp = client.post("/rerank", content=b"{not json", headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"] == "bad_json"
    assert_still_serves(client)


def test_bearer_token(scorer: LocalReranker) -> None:
    with TestClient(create_app(cfg(model=scorer.name, token="s3cret"), scorer)) as c:
        wait_ready(c)
        missing = c.post("/rerank", json=VALID)
        assert missing.status_code == 401 and "missing bearer token" in missing.json()["detail"]
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = c.post("/rerank", json=VALID, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["detail"] == "wrong bearer token"
        basic = c.post("/rerank", json=VALID, headers={"Authorization": "Basic czNjcmV0"})
        assert basic.status_code == 401
        ok = c.post("/rerank", json=VALID, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert c.get("/healthz").status_code == 200  # probes need no token


class FlakyScorer:
    """The real model, except that it raises on any batch holding a passage that says BOOM."""

    def __init__(self, inner: LocalReranker) -> None:
        self.inner, self.name = inner, inner.name

    def load(self) -> None:
        self.inner.load()

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if any("BOOM" in p for _, p in pairs):
            raise RuntimeError("CUDA error: device-side assert triggered")
        return self.inner.score_pairs(pairs)


def test_model_failing_mid_request_is_a_500_with_reason_then_service_recovers(scorer: LocalReranker) -> None:
    with TestClient(create_app(cfg(model=scorer.name), FlakyScorer(scorer))) as c:
        wait_ready(c)
        resp = c.post("/rerank", json={"query": QUERY, "passages": ["fine", "BOOM"]})
        assert resp.status_code == 500
        assert resp.json()["error"] == "model_failed" and "device-side assert" in resp.json()["detail"]
        assert c.get("/healthz").status_code == 200
        assert_still_serves(c)


class GatedScorer:
    """Holds load() and the first model call until released; records the pairs of each call."""

    name = "gated"

    def __init__(self, fail_load: bool = False) -> None:
        self.loading, self.first_call, self.entered = threading.Event(), threading.Event(), threading.Event()
        self.fail_load = fail_load
        self.calls: list[int] = []

    def load(self) -> None:
        self.loading.wait(10)
        if self.fail_load:
            raise RuntimeError("weights file is corrupt")

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not self.calls:
            self.entered.set()
            self.first_call.wait(10)
        self.calls.append(len(pairs))
        if any(p == "BOOM" for _, p in pairs):
            raise RuntimeError("boom")
        return [float(len(p)) for _, p in pairs]


def test_readyz_is_503_until_the_model_is_loaded() -> None:
    gated = GatedScorer()
    with TestClient(create_app(cfg(), gated)) as c:
        assert c.get("/healthz").status_code == 200
        not_yet = c.get("/readyz")
        assert not_yet.status_code == 503 and not_yet.json()["status"] == "loading"
        early = c.post("/rerank", json=VALID)
        assert early.status_code == 503 and early.json()["error"] == "loading"
        gated.loading.set()
        gated.first_call.set()
        wait_ready(c)
        assert c.post("/rerank", json=VALID).status_code == 200


def test_failed_load_is_reported_by_readyz_and_rerank() -> None:
    gated = GatedScorer(fail_load=True)
    gated.loading.set()
    with TestClient(create_app(cfg(), gated)) as c:
        for _ in range(200):
            if c.get("/readyz").json()["status"] == "failed":
                break
            time.sleep(0.02)
        ready = c.get("/readyz")
        assert ready.status_code == 503 and "weights file is corrupt" in ready.json()["detail"]
        resp = c.post("/rerank", json=VALID)
        assert resp.status_code == 503 and "weights file is corrupt" in resp.json()["detail"]
        assert c.get("/healthz").status_code == 200


def _queued_while_first_call_blocks(micro_batching: bool, max_pairs: int = 256) -> list[int]:
    """Send one request that blocks inside the model, queue 4 more, release; return pairs per model call."""
    gated = GatedScorer()
    gated.loading.set()
    app = create_app(cfg(micro_batching=micro_batching, batch_window_ms=0, max_batch_pairs=max_pairs), gated)
    state = app.state.service
    with TestClient(app) as c:
        wait_ready(c)
        results: list[dict[str, list[float]]] = []
        bodies = [{"query": f"q{i}", "passages": ["a" * (i + 1)] * 3} for i in range(5)]
        threads = [threading.Thread(target=lambda b=b: results.append(c.post("/rerank", json=b).json()))
                   for b in bodies]
        threads[0].start()
        assert gated.entered.wait(10)  # the first request is inside the model now
        for t in threads[1:]:
            t.start()
        for _ in range(500):
            if state.batcher.pending == 4:
                break
            time.sleep(0.01)
        assert state.batcher.pending == 4
        gated.first_call.set()
        for t in threads:
            t.join(10)
        for body in results:  # each request got its own scores back
            assert len(body["scores"]) == 3 and len(set(body["scores"])) == 1
        assert sorted(b["scores"][0] for b in results) == [1.0, 2.0, 3.0, 4.0, 5.0]
        return gated.calls


def test_micro_batching_scores_queued_requests_in_one_model_call() -> None:
    assert _queued_while_first_call_blocks(micro_batching=True) == [3, 12]


def test_without_micro_batching_each_request_is_its_own_model_call() -> None:
    assert _queued_while_first_call_blocks(micro_batching=False) == [3, 3, 3, 3, 3]


def test_micro_batches_stop_at_max_batch_pairs() -> None:
    assert _queued_while_first_call_blocks(micro_batching=True, max_pairs=7) == [3, 6, 6]


def test_a_failing_request_does_not_fail_the_requests_batched_with_it() -> None:
    gated = GatedScorer()
    gated.loading.set()
    app = create_app(cfg(batch_window_ms=0), gated)
    with TestClient(app) as c:
        wait_ready(c)
        answers: dict[str, int] = {}

        def post(name: str, passages: list[str]) -> None:
            answers[name] = c.post("/rerank", json={"query": "q", "passages": passages}).status_code

        first = threading.Thread(target=post, args=("first", ["x"]))
        first.start()
        assert gated.entered.wait(10)
        later = [threading.Thread(target=post, args=(n, p)) for n, p in
                 (("good", ["aa", "bbb"]), ("bad", ["BOOM"]), ("also-good", ["c"]))]
        for t in later:
            t.start()
        for _ in range(500):
            if app.state.service.batcher.pending == 3:
                break
            time.sleep(0.01)
        gated.first_call.set()
        for t in [first, *later]:
            t.join(10)
        assert answers == {"first": 200, "good": 200, "bad": 500, "also-good": 200}
        assert gated.calls[:2] == [1, 4]  # the first alone, then the three queued ones together: that failed,
        assert sorted(gated.calls[2:]) == [1, 1, 2]  # so each was scored on its own


def test_a_lone_client_is_not_held_for_the_batching_window(scorer: LocalReranker) -> None:
    with TestClient(create_app(cfg(model=scorer.name, batch_window_ms=600_000), scorer)) as c:
        wait_ready(c)
        for _ in range(3):  # a ten-minute window would hang here if a lone request waited for company
            assert_still_serves(c)


def test_each_request_is_logged_with_its_timing(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="hybridsearch.rerank.service"):
        client.post("/rerank", json=VALID)
        client.post("/rerank", json={"query": QUERY, "passages": []})
    lines = [r.getMessage() for r in caplog.records if r.name == "hybridsearch.rerank.service"]
    assert any(m.startswith("rerank status=200 passages=4 took_ms=") and "model_ms=" in m and "batch_requests=1" in m
               for m in lines), lines
    assert any(m.startswith("rerank status=422 passages=0") for m in lines), lines


def test_rerank_passes_on_the_blend_the_model_recommends(client: TestClient, scorer: LocalReranker,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scorer, "blend", 0.25)
    assert client.post("/rerank", json=VALID).json()["blend"] == 0.25
    ready = client.get("/readyz").json()
    assert ready["blend"] == 0.25 and ready["max_length"] == scorer.max_length


def test_compressed_bodies_are_refused_with_415_not_misread_as_text(client: TestClient) -> None:
    body = gzip.compress(json.dumps(VALID).encode())
    declared = client.post("/rerank", content=body, headers={"content-type": "application/json",
                                                              "content-encoding": "gzip"})
    assert declared.status_code == 415 and declared.headers["accept-encoding"] == "identity"
    assert declared.json() == {"error": "unsupported_encoding", "detail": "Content-Encoding 'gzip' is not accepted: "
                               "send the JSON uncompressed (no Content-Encoding)"}
    undeclared = client.post("/rerank", content=body, headers={"content-type": "application/json"})
    assert undeclared.status_code == 415
    assert undeclared.json()["detail"].startswith("a gzip-compressed body is not accepted")
    assert_still_serves(client)


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x",
                                   "application/json; charset=latin-1"])
def test_non_json_content_types_are_415(client: TestClient, ctype: str) -> None:
    resp = client.post("/rerank", content=json.dumps(VALID).encode(), headers={"content-type": ctype})
    assert resp.status_code == 415, resp.text
    assert "not accepted" in resp.json()["detail"]
    assert_still_serves(client)


@pytest.mark.parametrize("ctype", ["application/json; charset=UTF-8", "application/vnd.api+json", None])
def test_json_content_types_and_none_are_read(client: TestClient, ctype: str | None) -> None:
    headers = {"content-type": ctype} if ctype else {}
    resp = client.post("/rerank", content=json.dumps(VALID).encode(), headers=headers)
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("query", ["   ", "\t\n", "\u3000\u2003"])
def test_whitespace_only_query_is_422(client: TestClient, query: str) -> None:
    resp = client.post("/rerank", json={"query": query, "passages": ["p"]})
    assert resp.status_code == 422
    assert resp.json()["error"] == "blank_query"
    assert_still_serves(client)
