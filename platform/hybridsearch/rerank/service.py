"""The reranker HTTP service (FastAPI), started by ``hsp serve-reranker``.

Endpoints:

* ``POST /rerank`` ``{"query": str, "passages": [str, ...], "top_n": int?}`` →
  ``{"scores": [...] (input order), "order": [indices best first, cut to top_n], "model", "took_ms",
  "blend"}`` (blend: the rerank blend the model's training card recommends, or null)
* ``GET /healthz`` liveness (always 200 while the process serves)
* ``GET /readyz`` 200 once the model is loaded (with its recommended blend and max length), 503 while
  loading or when loading failed (with the reason)
* ``GET /metrics`` Prometheus text: requests by status, latency, batch sizes, readiness

Errors answer ``{"error": code, "detail": reason}``: 400 body not UTF-8 JSON, 401 missing/wrong
bearer token, 413 body over ``max_body_bytes``, 415 a Content-Type other than JSON or a compressed
body, 422 missing/invalid fields, a blank query or a limit (``max_passages``, ``max_passage_chars``),
500 the model failed on this request, 503 model not loaded, or ``overloaded``: ``max_queue`` requests
already wait for the model (``HSP_RERANKER__MAX_QUEUE``), answered at once with ``Retry-After`` (whole
seconds, the estimated time to drain the queue) so that load beyond capacity is shed instead of
queued without bound; likewise a request that waited over ``max_queue_wait`` seconds in the queue
(its client has given up) is answered 503 instead of being scored. The service stays up after each. With
``HSP_RERANKER__TOKEN`` set, ``/rerank`` needs ``Authorization: Bearer <token>``; the probes and
``/metrics`` stay open (keep the port private).

**Slow clients and budgets.** :func:`serve` runs the app on uvicorn with :class:`ConnectionGuard`'s protocol: a
client has ``header_timeout`` seconds to send a request's headers (counted from the connection, or from the first
byte of a later request on it; an idle keep-alive connection is closed by uvicorn after 5 s) and is then cut off
with 408, so slow senders cannot hold connections; one connection over ``max_connections`` is answered 503 with
``Retry-After`` at once and closed. The body must arrive within ``body_timeout`` and the request's budget (408,
connection closed). The budget is what the client waits: its ``X-Request-Timeout`` header (seconds; the query
layer's HttpReranker sends its timeout), else ``timeout`` from the settings. A request waits in the queue at most
the budget less the time already spent, the expected model call and a small margin (and ``max_queue_wait``), so
that an accepted request is answered before its client gives up; one whose budget the queue ahead cannot meet is
answered 503 with ``Retry-After`` at once.

Compressed bodies (``Content-Encoding: gzip``, or gzip bytes without the header) are refused with
415 and ``Accept-Encoding: identity`` (RFC 9110 §15.5.16) rather than decoded: rerank bodies are a
query and a few dozen passages sent over a private network, so compression saves little, while
decoding would let a small body expand far past ``max_body_bytes`` (a zip bomb). A request
without a Content-Type is read as JSON.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from hybridsearch.rerank.base import PairScorer
from hybridsearch.rerank.batching import MicroBatcher, QueueFull
from hybridsearch.rerank.connections import ConnectionGuard, guarded_protocol
from hybridsearch.rerank.http import REQUEST_TIMEOUT_HEADER
from hybridsearch.rerank.local import LocalReranker
from hybridsearch.rerank.ranking import order_by_score
from hybridsearch.rerank.request import (
    BUDGET_MARGIN_S,
    ApiError,
    check_content_headers,
    parse_request,
    read_body,
    request_budget,
)
from hybridsearch.settings import RerankerSettings

log = logging.getLogger(__name__)


class Metrics:
    """Prometheus metrics of one app (own registry, so several apps can live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("hsp_reranker_requests", "rerank requests by HTTP status", ["status"],
                                registry=self.registry)
        self.latency = Histogram("hsp_reranker_request_seconds", "rerank request latency",
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                                 registry=self.registry)
        self.batch_requests = Histogram("hsp_reranker_batch_requests", "requests per model call",
                                        buckets=(1, 2, 4, 8, 16, 32, 64), registry=self.registry)
        self.batch_pairs = Histogram("hsp_reranker_batch_pairs", "pairs per model call",
                                     buckets=(1, 8, 16, 32, 64, 128, 256, 512, 1024), registry=self.registry)
        self.model_seconds = Histogram("hsp_reranker_model_seconds", "seconds per model call",
                                       registry=self.registry)
        self.ready = Gauge("hsp_reranker_ready", "1 once the model is loaded", registry=self.registry)
        self.queued = Gauge("hsp_reranker_queued_requests", "requests waiting for the model", registry=self.registry)
        self.refused = Counter("hsp_reranker_refused", "requests refused with 503 because the queue was full",
                               registry=self.registry)
        self.connections = Gauge("hsp_reranker_connections", "client connections open", registry=self.registry)
        self.connections_refused = Gauge("hsp_reranker_connections_refused", "connections refused over "
                                         "max_connections since start", registry=self.registry)
        self.slow_clients = Gauge("hsp_reranker_slow_clients_cut", "connections cut off since start for sending "
                                  "headers slower than header_timeout", registry=self.registry)

    def on_batch(self, n_requests: int, n_pairs: int, seconds: float) -> None:
        self.batch_requests.observe(n_requests)
        self.batch_pairs.observe(n_pairs)
        self.model_seconds.observe(seconds)


class ServiceState:
    """What the endpoints share: limits, scorer, batcher, readiness."""

    def __init__(self, cfg: RerankerSettings, scorer: PairScorer) -> None:
        self.cfg = cfg
        self.scorer = scorer
        self.token = cfg.token.get_secret_value() if cfg.token else None
        self.metrics = Metrics()
        self.batcher = MicroBatcher(scorer, window_s=cfg.batch_window_ms / 1000, max_pairs=cfg.max_batch_pairs,
                                    enabled=cfg.micro_batching, on_batch=self.metrics.on_batch,
                                    max_queue=cfg.max_queue, max_wait_s=cfg.max_queue_wait)
        self.metrics.queued.set_function(lambda: self.batcher.pending)
        self.guard = ConnectionGuard(cfg.header_timeout, cfg.max_connections)
        self.metrics.connections.set_function(lambda: self.guard.open)
        self.metrics.connections_refused.set_function(lambda: self.guard.refused)
        self.metrics.slow_clients.set_function(lambda: self.guard.timed_out)
        self.ready = False
        self.load_error: str | None = None

    async def load(self) -> None:
        try:
            await asyncio.to_thread(self.scorer.load)
        except Exception as exc:  # noqa: BLE001 - reported by /readyz and /rerank
            self.load_error = str(exc)
            log.error("reranker model failed to load: %s", exc)
            return
        self.ready = True
        self.metrics.ready.set(1)

    def check_token(self, request: Request) -> None:
        if self.token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer <token>)",
                           {"WWW-Authenticate": "Bearer"})
        if not secrets.compare_digest(given.strip().encode(), self.token.encode()):
            raise ApiError(401, "unauthorized", "wrong bearer token",
                           {"WWW-Authenticate": 'Bearer error="invalid_token"'})

    def overloaded(self, exc: QueueFull) -> ApiError:
        """The 503 for a full queue, with Retry-After (counted in the refused metric)."""
        self.metrics.refused.inc()
        if exc.budget_s is not None and exc.waited_s is None:
            what = (f"the queue and the model need about {exc.needed_s or 0:.1f}s, more than the {exc.budget_s:.1f}s "
                    f"left of this request's budget ({REQUEST_TIMEOUT_HEADER} or HSP_RERANKER__TIMEOUT)")
        elif exc.budget_s is not None:
            what = (f"waited {exc.waited_s:.1f}s in the queue: the rest of this request's budget "
                    f"({REQUEST_TIMEOUT_HEADER} or HSP_RERANKER__TIMEOUT) is needed by the model call")
        elif exc.waited_s is not None:
            what = (f"waited {exc.waited_s:.1f}s in the queue, over max_queue_wait={self.cfg.max_queue_wait}s "
                    "(HSP_RERANKER__MAX_QUEUE_WAIT)")
        else:
            what = (f"{exc.waiting} requests already wait for the model (max_queue={self.cfg.max_queue}, "
                    "HSP_RERANKER__MAX_QUEUE)")
        return ApiError(503, "overloaded", f"overloaded: {what}; retry after {exc.retry_after}s",
                        {"Retry-After": str(exc.retry_after)})

    def check_capacity(self) -> None:
        """ApiError 503 overloaded when the batcher's queue is full."""
        try:
            self.batcher.check_capacity()
        except QueueFull as exc:
            raise self.overloaded(exc) from None


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": exc.code, "detail": exc.detail}, status_code=exc.status, headers=exc.headers)


def create_app(cfg: RerankerSettings | None = None, scorer: PairScorer | None = None) -> FastAPI:
    """The service app. ``scorer`` defaults to a LocalReranker of ``cfg`` (default: the defaults); the model
    loads in the background at start-up unless the scorer is already loaded."""
    cfg = cfg or RerankerSettings()
    state = ServiceState(cfg, scorer if scorer is not None else LocalReranker(cfg))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.batcher.start()
        loading = asyncio.create_task(state.load())
        try:
            yield
        finally:
            loading.cancel()
            await state.batcher.stop()

    app = FastAPI(title="hybridsearch reranker", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = state

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        if state.ready:
            return JSONResponse({"status": "ready", "model": state.scorer.name,
                                 "blend": getattr(state.scorer, "blend", None),
                                 "max_length": getattr(state.scorer, "max_length", None)})
        if state.load_error:
            return JSONResponse({"status": "failed", "detail": state.load_error}, status_code=503)
        return JSONResponse({"status": "loading", "model": state.scorer.name}, status_code=503,
                            headers={"Retry-After": "1"})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/rerank")
    async def rerank(request: Request) -> JSONResponse:
        started = time.perf_counter()
        n_passages = 0
        stats: dict[str, float] = {}
        try:
            state.check_token(request)
            check_content_headers(request)
            deadline = started + request_budget(request, state.cfg) - BUDGET_MARGIN_S
            state.check_capacity()  # shed load before reading and parsing the body
            req = parse_request(await read_body(request, state.cfg, deadline), state.cfg)
            n_passages = len(req.passages)
            if not state.ready:
                if state.load_error:
                    raise ApiError(503, "model_unavailable", f"model not loaded: {state.load_error}")
                raise ApiError(503, "loading", "model is still loading; retry shortly", {"Retry-After": "1"})
            try:
                scores = await state.batcher.submit(req.query, req.passages, stats, deadline=deadline)
            except QueueFull as exc:  # filled up while this body was read
                raise state.overloaded(exc) from None
            except Exception as exc:  # the model failed on this request: say so, stay up
                log.exception("rerank failed")
                raise ApiError(500, "model_failed", f"model failed: {exc}") from exc
            took_ms = (time.perf_counter() - started) * 1000
            body: dict[str, Any] = {"scores": scores, "order": order_by_score(scores, top_n=req.top_n),
                                    "model": state.scorer.name, "took_ms": round(took_ms, 3),
                                    "blend": getattr(state.scorer, "blend", None)}
            response = JSONResponse(body)
        except ApiError as exc:
            response = _error(exc)
        seconds = time.perf_counter() - started
        state.metrics.requests.labels(status=str(response.status_code)).inc()
        state.metrics.latency.observe(seconds)
        log.info("rerank status=%d passages=%d took_ms=%.1f queue_ms=%.1f model_ms=%.1f batch_requests=%d",
                 response.status_code, n_passages, seconds * 1000, stats.get("queue_ms", 0.0),
                 stats.get("model_ms", 0.0), stats.get("batch_requests", 0))
        return response

    return app


def server_config(app: FastAPI, host: str, port: int, **uvicorn_options: Any) -> Any:
    """A ``uvicorn.Config`` serving ``app`` (from :func:`create_app`) with its settings' connection limits."""
    import uvicorn

    state: ServiceState = app.state.service
    return uvicorn.Config(app, host=host, port=port, http=guarded_protocol(state.guard), **uvicorn_options)


def serve(app: FastAPI, host: str, port: int, **uvicorn_options: Any) -> None:
    """Serve ``app`` until interrupted (``hsp serve-reranker``), with the header timeout and connection cap."""
    import uvicorn

    uvicorn.Server(server_config(app, host, port, **uvicorn_options)).run()
