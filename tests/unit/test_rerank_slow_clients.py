"""The reranker service under slow clients and tight budgets.

A real uvicorn server on a loopback port (as ``hsp serve-reranker`` runs it, :func:`server`) for the
connection limits: a slowloris client (one header byte a second) is cut off after ``header_timeout``, a slow body
after ``body_timeout``, a connection over ``max_connections`` is answered 503 at once. The budget rules through the
app and the batcher: a request whose budget the queue cannot meet gets 503 quickly; an accepted one never waits in
the queue longer than its budget less the model call.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from hybridsearch.rerank import HttpReranker
from hybridsearch.rerank.batching import MicroBatcher, QueueFull
from hybridsearch.rerank.service import create_app, server
from scorers import HeldScorer, cfg

VALID = {"query": "q", "passages": ["aa", "b"]}


@contextmanager
def served(app: FastAPI) -> Iterator[int]:
    """``app`` served by uvicorn with the service's connection limits, on a free loopback port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    running = server(app, "127.0.0.1", port, log_level="warning")
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not running.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert running.started
    try:
        yield port
    finally:
        running.should_exit = True
        thread.join(10)
        sock.close()


def closed_within(sock: socket.socket, seconds: float, drip: bytes = b"") -> tuple[bool, bytes, float]:
    """Drip ``drip`` one byte a second (a slowloris) while waiting up to ``seconds`` for the server to close.
    Returns (closed by the server, what it sent, seconds until closed)."""
    started = time.monotonic()
    got = b""
    sock.settimeout(0.1)
    i = 0
    next_byte = started
    while time.monotonic() - started < seconds:
        if drip and time.monotonic() >= next_byte:
            try:
                sock.sendall(drip[i % len(drip):i % len(drip) + 1])
            except OSError:
                return True, got, time.monotonic() - started
            i += 1
            next_byte += 1.0
        try:
            part = sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            return True, got, time.monotonic() - started
        if not part:
            return True, got, time.monotonic() - started
        got += part
    return False, got, time.monotonic() - started


SLOW_HEADERS = b"POST /rerank HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Padding: " + b"x" * 200


def test_slowloris_is_cut_off_after_the_header_timeout() -> None:
    app = create_app(cfg(header_timeout=1.5), HeldScorer(held=False))
    with served(app) as port, socket.create_connection(("127.0.0.1", port)) as slow, \
            socket.create_connection(("127.0.0.1", port)) as silent:
        # a normal request is answered meanwhile
        assert httpx.post(f"http://127.0.0.1:{port}/rerank", json=VALID, timeout=10).status_code == 200
        closed, got, after = closed_within(slow, 8, drip=SLOW_HEADERS)
        assert closed and 1.2 < after < 4, (closed, after)
        assert got.startswith(b"HTTP/1.1 408")
        closed, _, after = closed_within(silent, 3)  # connected and never sent a byte: cut off too
        assert closed
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert "hsp_reranker_slow_clients_cut 2.0" in metrics
        assert httpx.post(f"http://127.0.0.1:{port}/rerank", json=VALID, timeout=10).status_code == 200


def test_keep_alive_connection_gets_a_header_timeout_per_request() -> None:
    app = create_app(cfg(header_timeout=1.0), HeldScorer(held=False))
    with served(app) as port, socket.create_connection(("127.0.0.1", port)) as conn:
        body = b'{"query": "q", "passages": ["aa"]}'
        conn.sendall(b"POST /rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        conn.settimeout(5)
        first = b""
        while b'"blend"' not in first:
            first += conn.recv(4096)
        assert first.startswith(b"HTTP/1.1 200")
        closed, got, after = closed_within(conn, 6, drip=SLOW_HEADERS)  # the next request's headers, dripped
        assert closed and b"HTTP/1.1 408" in got and after < 3


def test_a_slow_body_gets_408_and_the_connection_closes() -> None:
    app = create_app(cfg(header_timeout=5, body_timeout=1.0), HeldScorer(held=False))
    with served(app) as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"POST /rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200"
                     b"\r\n\r\n{")
        closed, got, after = closed_within(conn, 8, drip=b'"query": "q"')
        assert closed and got.startswith(b"HTTP/1.1 408") and after < 4, (closed, got[:40], after)
        assert b"body_timeout" in got


def test_connections_over_the_cap_are_refused_at_once() -> None:
    app = create_app(cfg(max_connections=2, header_timeout=10), HeldScorer(held=False))
    with served(app) as port:
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        try:
            time.sleep(0.2)
            started = time.monotonic()
            with socket.create_connection(("127.0.0.1", port)) as third:
                third.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                closed, got, _ = closed_within(third, 5)
            assert closed and time.monotonic() - started < 2.5
            assert got.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in got and b"too_many_connections" in got
        finally:
            for s in held:
                s.close()
        time.sleep(0.3)
        assert httpx.post(f"http://127.0.0.1:{port}/rerank", json=VALID, timeout=10).status_code == 200
        assert "hsp_reranker_connections_refused 1.0" in httpx.get(f"http://127.0.0.1:{port}/metrics").text


def test_a_budget_smaller_than_the_queue_wait_gets_503_quickly() -> None:
    scorer = HeldScorer(seconds=0.3, held=False)
    app = create_app(cfg(max_queue=16), scorer)
    batcher = app.state.service.batcher
    with TestClient(app) as c:
        for _ in range(300):
            if c.get("/readyz").status_code == 200:
                break
            time.sleep(0.01)
        assert c.post("/rerank", json=VALID).status_code == 200  # one call measured: about 0.3 s for 2 pairs
        scorer.release.clear()
        scorer.entered.clear()
        results: list[int] = []
        workers = [threading.Thread(target=lambda: results.append(c.post("/rerank", json=VALID).status_code))
                   for _ in range(4)]
        workers[0].start()
        assert scorer.entered.wait(10)  # one call held in the model
        for w in workers[1:]:
            w.start()
        for _ in range(500):
            if batcher.pending == 3:
                break
            time.sleep(0.01)
        wait, call = batcher.estimate(2)
        assert wait + call > 0.5  # three requests (6 pairs) ahead at about 0.15 s a pair
        started = time.perf_counter()
        r = c.post("/rerank", json=VALID, headers={"X-Request-Timeout": "0.5"})
        took = time.perf_counter() - started
        assert r.status_code == 503 and took < 0.45  # refused at once: before its 0.5 s budget ran out
        assert r.json()["error"] == "overloaded" and "budget" in r.json()["detail"]
        assert int(r.headers["retry-after"]) >= 1
        assert batcher.pending == 3  # refused, not queued
        assert c.post("/rerank", json=VALID, headers={"X-Request-Timeout": "nope"}).status_code == 400
        scorer.release.set()
        for w in workers:
            w.join(20)
        assert results == [200] * 4


def test_queue_wait_stays_within_the_budget_less_the_model_call() -> None:
    async def scenario() -> None:
        scorer = HeldScorer(seconds=0.2, held=False)
        batcher = MicroBatcher(scorer, cfg(max_queue=8, max_queue_wait=10))
        batcher.start()
        try:
            await batcher.submit("q", ["x"])  # measured: about 0.2 s a call
            scorer.release.clear()
            scorer.entered.clear()
            held = asyncio.create_task(batcher.submit("q", ["held"]))
            while not scorer.entered.is_set():
                await asyncio.sleep(0.005)
            budget = 1.0
            started = time.perf_counter()
            with pytest.raises(QueueFull) as expired:
                await batcher.submit("q", ["late"], deadline=started + budget)
            waited = time.perf_counter() - started
            _, call = batcher.estimate(1)
            assert expired.value.budget_s is not None and expired.value.waited_s is not None
            assert waited <= budget - call + 0.2  # answered before the budget, leaving the model call's time
            assert waited < budget
            scorer.release.set()
            await held
            assert scorer.calls == [1, 1]  # the expired request never reached the model
        finally:
            scorer.release.set()
            await batcher.stop()

    asyncio.run(scenario())


def test_http_reranker_sends_its_timeout_as_the_budget() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"scores": [1.0], "order": [0]})

    with HttpReranker("http://reranker:8088", timeout=2.5, transport=httpx.MockTransport(handle)) as r:
        r.score("q", ["a"])
    assert seen[0].headers["x-request-timeout"] == "2.5"


def test_a_micro_batch_stops_before_it_would_outlast_a_deadline_in_it() -> None:
    async def scenario() -> None:
        scorer = HeldScorer(seconds=0.2, held=False)
        batcher = MicroBatcher(scorer, cfg(max_batch_pairs=256, max_queue=8))
        batcher.start()
        try:
            await batcher.submit("q", ["warm", "up"])  # measured: at least 0.1 s a pair
            scorer.entered.clear()
            scorer.release.clear()
            first = asyncio.create_task(batcher.submit("q", ["held"]))
            while not scorer.entered.is_set():
                await asyncio.sleep(0.005)
            now = time.perf_counter()
            tight = asyncio.create_task(batcher.submit("q", ["a"] * 5, deadline=now + 3))
            loose = asyncio.create_task(batcher.submit("q", ["b"] * 200))
            await asyncio.sleep(0.05)
            scorer.release.set()
            await asyncio.gather(first, tight, loose)
            # 5 + 200 pairs fit max_pairs, but 205 x 0.1 s would end after the tight request's deadline
            assert scorer.calls == [2, 1, 5, 200]
        finally:
            scorer.release.set()
            await batcher.stop()

    asyncio.run(scenario())
