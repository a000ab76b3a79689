"""The reranker service under overload: a bounded queue, 503 + Retry-After at once, recovery without a
restart, and the query layer's degraded answer naming the overload."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from hybridsearch.errors import RerankerError
from hybridsearch.rerank import HttpReranker
from hybridsearch.rerank.batching import MicroBatcher, QueueFull
from hybridsearch.rerank.service import create_app
from hybridsearch.settings import RerankerSettings
from scorers import HeldScorer, cfg

VALID = {"query": "q", "passages": ["aa", "b"]}


def test_max_queue_is_a_setting_with_a_bounded_default() -> None:
    assert RerankerSettings().max_queue >= 1
    assert cfg(max_queue=3).max_queue == 3
    with pytest.raises(ValueError, match="max_queue"):
        cfg(max_queue=0)


def test_batcher_refuses_beyond_max_queue_then_accepts_again() -> None:
    async def scenario() -> None:
        scorer = HeldScorer()
        batcher = MicroBatcher(scorer, cfg(max_queue=2))
        batcher.start()
        try:
            first = asyncio.create_task(batcher.submit("q", ["x"]))
            while not scorer.entered.is_set():  # the first request is inside the model
                await asyncio.sleep(0.005)
            waiting = [asyncio.create_task(batcher.submit("q", ["y", "zz"])) for _ in range(2)]
            await asyncio.sleep(0.02)
            assert batcher.pending == 2
            with pytest.raises(QueueFull) as refused:
                await batcher.submit("q", ["w"])
            assert refused.value.waiting == 2 and refused.value.retry_after >= 1
            assert batcher.pending == 2  # the refused one was not queued
            scorer.release.set()
            assert await first == [1.0]
            assert [await w for w in waiting] == [[1.0, 2.0], [1.0, 2.0]]
            assert await batcher.submit("q", ["again"]) == [5.0]  # recovered, no restart
        finally:
            scorer.release.set()
            await batcher.stop()

    asyncio.run(scenario())


def test_retry_after_estimates_the_drain_time_from_recent_model_calls() -> None:
    async def scenario() -> None:
        scorer = HeldScorer(seconds=0.05, held=False)
        batcher = MicroBatcher(scorer, cfg(max_queue=1, micro_batching=False))
        batcher.start()
        try:
            assert batcher.estimate() == (0.0, 0.0)  # nothing measured yet
            await batcher.submit("q", ["a"])
            scorer.release.clear()
            scorer.entered.clear()
            under_way = asyncio.create_task(batcher.submit("q", ["b"]))
            while not scorer.entered.is_set():
                await asyncio.sleep(0.005)
            queued = asyncio.create_task(batcher.submit("q", ["c"]))
            await asyncio.sleep(0.02)
            with pytest.raises(QueueFull) as refused:
                await batcher.submit("q", ["d"])
            assert 0.04 < refused.value.retry_after_s < 1.0  # about one model call: the one that waits
            scorer.release.set()
            assert [await under_way, await queued] == [[1.0], [1.0]]
        finally:
            scorer.release.set()
            await batcher.stop()
        assert QueueFull(5, 0.2).retry_after == 1  # at least one whole second
        assert QueueFull(5, 2.1).retry_after == 3  # rounded up
        assert QueueFull(5, 900).retry_after == 30  # capped

    asyncio.run(scenario())


def test_overload_answers_503_with_retry_after_at_once_and_recovers() -> None:
    scorer = HeldScorer()
    app = create_app(cfg(max_queue=3), scorer)
    state = app.state.service
    with TestClient(app) as c:
        for _ in range(200):
            if c.get("/readyz").status_code == 200:
                break
            time.sleep(0.01)
        statuses: list[int] = []
        lock = threading.Lock()

        def post() -> None:
            status = c.post("/rerank", json=VALID).status_code
            with lock:
                statuses.append(status)

        held = [threading.Thread(target=post) for _ in range(4)]  # one in the model, three queued
        held[0].start()
        assert scorer.entered.wait(10)
        for t in held[1:]:
            t.start()
        for _ in range(500):
            if state.batcher.pending == 3:
                break
            time.sleep(0.01)
        assert state.batcher.pending == 3
        started = time.perf_counter()
        refused = [c.post("/rerank", json=VALID) for _ in range(5)]
        refused_within = time.perf_counter() - started
        for r in refused:
            assert r.status_code == 503
            assert r.json()["error"] == "overloaded" and "max_queue=3" in r.json()["detail"]
            assert int(r.headers["retry-after"]) >= 1
        assert refused_within < 5  # answered while the model is still held (a queued request would hang here)
        assert state.batcher.pending == 3  # refusals took no room in the queue
        assert 'hsp_reranker_refused_total 5.0' in c.get("/metrics").text
        assert "hsp_reranker_queued_requests 3.0" in c.get("/metrics").text
        scorer.release.set()
        for t in held:
            t.join(10)
        assert statuses == [200] * 4
        ok = c.post("/rerank", json=VALID)  # recovered without a restart
        assert ok.status_code == 200 and ok.json()["scores"] == [2.0, 1.0]
        assert c.get("/healthz").status_code == 200


def test_http_reranker_reports_the_overload_as_a_reason() -> None:
    detail = "overloaded: 32 requests already wait for the model (max_queue=32, HSP_RERANKER__MAX_QUEUE); " \
             "retry after 2s"
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503, headers={"Retry-After": "2"}, json={"error": "overloaded", "detail": detail})

    client = HttpReranker("http://reranker:8088", transport=httpx.MockTransport(handle))
    with pytest.raises(RerankerError) as err:
        client.score("q", ["a"])
    assert "503" in str(err.value) and "overloaded" in str(err.value) and "max_queue" in str(err.value)
    assert len(seen) <= 2  # at most the one retry of a 5xx, no loop


def test_a_request_that_waited_over_max_wait_is_answered_503_not_scored() -> None:
    async def scenario() -> None:
        scorer = HeldScorer()
        batcher = MicroBatcher(scorer, cfg(max_queue=8, max_queue_wait=0.05))
        batcher.start()
        try:
            first = asyncio.create_task(batcher.submit("q", ["x"]))
            while not scorer.entered.is_set():
                await asyncio.sleep(0.005)
            stale = asyncio.create_task(batcher.submit("q", ["stale"]))
            await asyncio.sleep(0.2)  # longer than max_wait_s, while the model is still busy
            scorer.release.set()
            assert await first == [1.0]
            with pytest.raises(QueueFull) as expired:
                await stale
            assert expired.value.waited_s is not None and expired.value.waited_s > 0.05
            assert scorer.calls == [1]  # the stale request never reached the model
            assert await batcher.submit("q", ["fresh"]) == [5.0]
        finally:
            scorer.release.set()
            await batcher.stop()

    asyncio.run(scenario())


def test_service_names_the_queue_wait_limit_in_its_503() -> None:
    scorer = HeldScorer()
    app = create_app(cfg(max_queue=8, max_queue_wait=0.05), scorer)
    with TestClient(app) as c:
        statuses: dict[str, Any] = {}
        first = threading.Thread(target=lambda: statuses.setdefault("first", c.post("/rerank", json=VALID)))
        first.start()
        assert scorer.entered.wait(10)
        stale = threading.Thread(target=lambda: statuses.setdefault("stale", c.post("/rerank", json=VALID)))
        stale.start()
        for _ in range(500):
            if app.state.service.batcher.pending == 1:
                break
            time.sleep(0.01)
        time.sleep(0.2)
        scorer.release.set()
        first.join(10)
        stale.join(10)
        assert statuses["first"].status_code == 200
        r = statuses["stale"]
        assert r.status_code == 503 and r.json()["error"] == "overloaded"
        assert "max_queue_wait=0.05s" in r.json()["detail"] and int(r.headers["retry-after"]) >= 1
        assert c.post("/rerank", json=VALID).status_code == 200
