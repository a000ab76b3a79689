"""The reranker HTTP service (``hsp serve-reranker``; the API is in docs/operations.md). Each request is checked
(token, headers, budget, body, JSON limits) before it joins the micro-batcher; every refusal is an ApiError."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from hybridsearch.rerank.base import PairScorer, order_by_score
from hybridsearch.rerank.batching import MicroBatcher, QueueFull
from hybridsearch.rerank.http import REQUEST_TIMEOUT_HEADER
from hybridsearch.settings import RerankerSettings

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger(__name__)


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    query: str = Field(min_length=1)
    passages: list[str]
    top_n: int | None = Field(None, ge=1)


class ApiError(Exception):
    """An answer other than 200, with a machine-readable code and a reason for people."""

    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.headers = status, code, detail, headers


_GZIP_MAGIC = b"\x1f\x8b"


def _compressed(what: str) -> ApiError:
    return ApiError(415, "unsupported_encoding", f"{what} is not accepted: send the JSON uncompressed (no "
                    "Content-Encoding)", {"Accept-Encoding": "identity"})


def check_content_headers(request: Request) -> None:
    """415 unless the body is declared as uncompressed JSON (application/json or a +json type, UTF-8)."""
    coding = request.headers.get("content-encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise _compressed(f"Content-Encoding {coding!r}")
    ctype = request.headers.get("content-type")
    if ctype is None:
        return
    media, *params = (p.strip().lower() for p in ctype.split(";"))
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise ApiError(415, "unsupported_media_type", f"Content-Type {media or ctype!r} is not accepted: send "
                       "the body as application/json")
    charset = next((p.split("=", 1)[1].strip('" ') for p in params if p.startswith("charset=")), "utf-8")
    if charset not in ("utf-8", "utf8"):
        raise ApiError(415, "unsupported_charset", f"charset {charset!r} is not accepted: send UTF-8 JSON")


_SECONDS = TypeAdapter(Annotated[float, Field(gt=0, allow_inf_nan=False)])
#: seconds of a request's budget kept for sending the answer and the client's own bookkeeping
BUDGET_MARGIN_S = 0.1


def request_budget(request: Request, cfg: RerankerSettings) -> float:
    """Seconds the client waits for this answer: its X-Request-Timeout header, else the settings' timeout."""
    given = request.headers.get(REQUEST_TIMEOUT_HEADER)
    try:
        return cfg.timeout if given is None else _SECONDS.validate_python(given)
    except ValidationError:
        raise ApiError(400, "bad_timeout", f"{REQUEST_TIMEOUT_HEADER} must be a positive number of seconds, "
                       f"not {str(given)[:40]!r}") from None


async def read_body(request: Request, cfg: RerankerSettings, deadline: float) -> bytes:
    """The body, read within ``cfg.body_timeout`` and ``deadline`` (else 408) and at most ``max_body_bytes`` (413)."""
    limit = cfg.max_body_bytes
    too_big = ApiError(413, "body_too_large",
                       f"request body over max_body_bytes={limit} (HSP_RERANKER__MAX_BODY_BYTES)")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_big
    seconds = min(cfg.body_timeout, deadline - time.perf_counter())
    body = bytearray()
    try:
        async with asyncio.timeout(max(0.0, seconds)):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise too_big
    except TimeoutError:
        raise ApiError(408, "body_timeout", f"the request body did not arrive within {seconds:.1f}s "
                       "(HSP_RERANKER__BODY_TIMEOUT, or the request's budget)", {"Connection": "close"}) from None
    return bytes(body)


def parse_request(raw: bytes, cfg: RerankerSettings) -> RerankRequest:
    """The request in ``raw``, checked against ``cfg``'s limits (415 gzip, 400 not UTF-8 JSON, 422 invalid)."""
    if raw.startswith(_GZIP_MAGIC):
        raise _compressed("a gzip-compressed body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, "bad_encoding", f"request body is not UTF-8: byte {raw[exc.start]:#04x} at "
                                            f"offset {exc.start}") from None
    try:
        req = RerankRequest.model_validate_json(text)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if any(e["type"] == "json_invalid" for e in errors):
            raise ApiError(400, "bad_json", f"request body is not valid JSON: {errors[0]['msg']}") from None
        detail = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in errors[:5])
        raise ApiError(422, "invalid_request", detail) from None
    if not req.query.strip():
        raise ApiError(422, "blank_query", "query is blank (only whitespace): send the text to score the "
                                           "passages against")
    if not req.passages:
        raise ApiError(422, "no_passages", "passages is empty: send at least one passage")
    if len(req.passages) > cfg.max_passages:
        raise ApiError(422, "too_many_passages", f"{len(req.passages)} passages over max_passages="
                       f"{cfg.max_passages} (HSP_RERANKER__MAX_PASSAGES); split the request")
    if len(req.query) > cfg.max_passage_chars:
        raise ApiError(422, "query_too_long", f"query of {len(req.query)} characters over max_passage_chars="
                       f"{cfg.max_passage_chars} (HSP_RERANKER__MAX_PASSAGE_CHARS)")
    for i, p in enumerate(req.passages):
        if len(p) > cfg.max_passage_chars:
            raise ApiError(422, "passage_too_long", f"passages[{i}] has {len(p)} characters, over "
                           f"max_passage_chars={cfg.max_passage_chars} (HSP_RERANKER__MAX_PASSAGE_CHARS)")
    return req


@dataclass
class ConnectionGuard:
    """The connection limits of one served app and the connections open now, refused and cut off."""

    header_timeout: float
    max_connections: int
    open: int = 0
    refused: int = 0
    timed_out: int = 0


_REFUSED = b'{"error": "too_many_connections", "detail": "the service holds max_connections connections"}'
REFUSED_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                    b"Connection: close\r\nContent-Length: " + str(len(_REFUSED)).encode() + b"\r\n\r\n" + _REFUSED)
TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
#: seconds a refused connection is kept half-closed so that its client reads the 503 before the close
REFUSED_LINGER_S = 1.0


def guarded_protocol(guard: ConnectionGuard) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with ``guard``'s limits: a header timeout per request (408) and a connection cap (503)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _refused = False

        def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
            super().connection_made(transport)  # type: ignore[arg-type]
            guard.open += 1
            if guard.open > guard.max_connections:
                guard.refused += 1
                self._refused = True
                self.transport.write(REFUSED_RESPONSE)
                if self.transport.can_write_eof():
                    self.transport.write_eof()
                self._timer = self.loop.call_later(REFUSED_LINGER_S, self.transport.close)
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            guard.open -= 1
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # read and dropped until the linger ends
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                if self._timer is None:  # the first bytes of a request: its headers are now due
                    self._arm()
            else:
                self._disarm()  # headers in (or the connection is going): the app and its body timeout take over

        def _arm(self) -> None:
            self._timer = self.loop.call_later(guard.header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _headers_late(self) -> None:
            self._timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                guard.timed_out += 1
                self.transport.write(TIMEOUT_RESPONSE)
                self.transport.close()

    return GuardedH11Protocol


class ServiceState:
    """What the endpoints share: limits, scorer, batcher, readiness and the Prometheus metrics (own registry)."""

    def __init__(self, cfg: RerankerSettings, scorer: PairScorer) -> None:
        self.cfg = cfg
        self.scorer = scorer
        self.ready = False
        self.load_error: str | None = None
        self.guard = ConnectionGuard(cfg.header_timeout, cfg.max_connections)
        self.batcher = MicroBatcher(scorer, cfg, self.on_batch)
        self.registry = r = CollectorRegistry()
        self.requests = Counter("hsp_reranker_requests", "rerank requests by HTTP status", ["status"], registry=r)
        self.latency = Histogram("hsp_reranker_request_seconds", "rerank request latency",
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.batch_requests = Histogram("hsp_reranker_batch_requests", "requests per model call",
                                        buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.batch_pairs = Histogram("hsp_reranker_batch_pairs", "pairs per model call",
                                     buckets=(1, 8, 16, 32, 64, 128, 256, 512, 1024), registry=r)
        self.model_seconds = Histogram("hsp_reranker_model_seconds", "seconds per model call", registry=r)
        self.refused = Counter("hsp_reranker_refused", "requests refused with 503 because the queue was full",
                               registry=r)
        Gauge("hsp_reranker_ready", "1 once the model is loaded", registry=r).set_function(lambda: float(self.ready))
        Gauge("hsp_reranker_queued_requests", "requests waiting for the model",
              registry=r).set_function(lambda: self.batcher.pending)
        Gauge("hsp_reranker_connections", "client connections open", registry=r).set_function(lambda: self.guard.open)
        Gauge("hsp_reranker_connections_refused", "connections refused over max_connections since start",
              registry=r).set_function(lambda: self.guard.refused)
        Gauge("hsp_reranker_slow_clients_cut", "connections cut off since start for sending headers slower than "
              "header_timeout", registry=r).set_function(lambda: self.guard.timed_out)

    def on_batch(self, n_requests: int, n_pairs: int, seconds: float) -> None:
        self.batch_requests.observe(n_requests)
        self.batch_pairs.observe(n_pairs)
        self.model_seconds.observe(seconds)

    async def load(self) -> None:
        try:
            await asyncio.to_thread(self.scorer.load)
        except Exception as exc:  # noqa: BLE001 - reported by /readyz and /rerank
            self.load_error = str(exc)
            log.error("reranker model failed to load: %s", exc)
            return
        self.ready = True

    def check_token(self, request: Request) -> None:
        if self.cfg.token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer <token>)",
                           {"WWW-Authenticate": "Bearer"})
        if not secrets.compare_digest(given.strip().encode(), self.cfg.token.get_secret_value().encode()):
            raise ApiError(401, "unauthorized", "wrong bearer token",
                           {"WWW-Authenticate": 'Bearer error="invalid_token"'})

    def overloaded(self, exc: QueueFull) -> ApiError:
        """The 503 for a full queue, with Retry-After (counted in the refused metric)."""
        self.refused.inc()
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


def create_app(cfg: RerankerSettings, scorer: PairScorer) -> FastAPI:
    """The service app of ``scorer``, loaded in the background at start-up."""
    state = ServiceState(cfg, scorer)

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
        return Response(generate_latest(state.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/rerank")
    async def rerank(request: Request) -> JSONResponse:
        started = time.perf_counter()
        n_passages = 0
        stats: dict[str, float] = {}
        try:
            state.check_token(request)
            check_content_headers(request)
            deadline = started + request_budget(request, state.cfg) - BUDGET_MARGIN_S
            state.batcher.check_capacity()  # shed load before reading and parsing the body
            req = parse_request(await read_body(request, state.cfg, deadline), state.cfg)
            n_passages = len(req.passages)
            if not state.ready:
                if state.load_error:
                    raise ApiError(503, "model_unavailable", f"model not loaded: {state.load_error}")
                raise ApiError(503, "loading", "model is still loading; retry shortly", {"Retry-After": "1"})
            try:
                scores = await state.batcher.submit(req.query, req.passages, stats, deadline=deadline)
            except QueueFull:  # filled up while this body was read
                raise
            except Exception as exc:  # the model failed on this request: say so, stay up
                log.exception("rerank failed")
                raise ApiError(500, "model_failed", f"model failed: {exc}") from exc
            took_ms = (time.perf_counter() - started) * 1000
            body: dict[str, Any] = {"scores": scores, "order": order_by_score(scores, top_n=req.top_n),
                                    "model": state.scorer.name, "took_ms": round(took_ms, 3),
                                    "blend": getattr(state.scorer, "blend", None)}
            response = JSONResponse(body)
        except (QueueFull, ApiError) as exc:
            error = state.overloaded(exc) if isinstance(exc, QueueFull) else exc
            response = JSONResponse({"error": error.code, "detail": error.detail}, status_code=error.status,
                                    headers=error.headers)
        seconds = time.perf_counter() - started
        state.requests.labels(status=str(response.status_code)).inc()
        state.latency.observe(seconds)
        log.info("rerank status=%d passages=%d took_ms=%.1f queue_ms=%.1f model_ms=%.1f batch_requests=%d",
                 response.status_code, n_passages, seconds * 1000, stats.get("queue_ms", 0.0),
                 stats.get("model_ms", 0.0), stats.get("batch_requests", 0))
        return response

    return app


def server(app: FastAPI, host: str, port: int, **uvicorn_options: Any) -> uvicorn.Server:
    """A uvicorn server of ``app`` (from :func:`create_app`) with its connection limits; ``run()`` serves it."""
    import uvicorn

    state: ServiceState = app.state.service
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, http=guarded_protocol(state.guard),
                                         **uvicorn_options))
