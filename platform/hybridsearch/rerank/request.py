"""One ``POST /rerank`` request read and checked (:mod:`.service` answers it): the body's declared type and
encoding (:func:`check_content_headers`), the client's budget (:func:`request_budget`), the body read within its
time and size limits (:func:`read_body`), and the JSON validated against the limits (:func:`parse_request`). Every
refusal is an :class:`ApiError` with its HTTP status and code."""

from __future__ import annotations

import asyncio
import math
import time

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hybridsearch.rerank.http import REQUEST_TIMEOUT_HEADER
from hybridsearch.settings import RerankerSettings


class RerankRequest(BaseModel):
    """Body of ``POST /rerank``."""

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


#: seconds of a request's budget kept for what happens outside the service's measure (sending the answer, the
#: client's own bookkeeping)
BUDGET_MARGIN_S = 0.1


def request_budget(request: Request, cfg: RerankerSettings) -> float:
    """Seconds the client waits for this answer: its X-Request-Timeout header, else the settings' timeout."""
    given = request.headers.get(REQUEST_TIMEOUT_HEADER)
    if given is None:
        return cfg.timeout
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ApiError(400, "bad_timeout", f"{REQUEST_TIMEOUT_HEADER} must be a positive number of seconds, "
                       f"not {given[:40]!r}")
    return seconds


async def read_body(request: Request, cfg: RerankerSettings, deadline: float | None = None) -> bytes:
    """The body, read within ``cfg.body_timeout`` (and before ``deadline``, a perf_counter value): 408 and the
    connection closed otherwise; 413 over ``cfg.max_body_bytes``."""
    limit = cfg.max_body_bytes
    too_big = ApiError(413, "body_too_large",
                       f"request body over max_body_bytes={limit} (HSP_RERANKER__MAX_BODY_BYTES)")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_big
    seconds = cfg.body_timeout
    if deadline is not None:
        seconds = min(seconds, deadline - time.perf_counter())
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
    """The request in ``raw``, checked against ``cfg``'s limits: 415 for a gzip body, 400 for one that is not
    UTF-8 JSON, 422 for missing or invalid fields, a blank query, no passages or a limit passed."""
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
