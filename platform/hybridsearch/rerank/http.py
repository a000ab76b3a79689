"""The reranker service's client (``hsp serve-reranker``), a Reranker."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Self

import httpx
from tenacity import Retrying, before_sleep_log, retry_if_exception_type, stop_after_attempt

from hybridsearch.cluster_url import redact_url
from hybridsearch.errors import RerankerError
from hybridsearch.rerank.base import valid_blend
from hybridsearch.retry import RETRIED_STATUSES

log = logging.getLogger(__name__)

#: request header with the seconds the client waits for the answer: the service answers within it, or 503 at once
REQUEST_TIMEOUT_HEADER = "X-Request-Timeout"


class _TryAgain(RerankerError):
    """A failure that another try of the same request may get past."""


def _reason(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:200] or resp.reason_phrase
    detail = (body.get("detail") or body.get("error")) if isinstance(body, dict) else None
    return str(detail or body)[:500]


class HttpReranker:
    """Scores passages through the reranker service at ``url``, ``timeout`` seconds per try. One more try on
    connection errors and RETRIED_STATUSES, except a 503 with ``Retry-After``; none on read timeouts. ``close()``
    (or ``with``) closes its connections."""

    def __init__(self, url: str, timeout: float = 5.0, token: str | None = None, *,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.shown_url = redact_url(self.url)  # in messages and the name: never the URL's credentials
        self.name = f"http:{self.shown_url}"
        headers = {REQUEST_TIMEOUT_HEADER: f"{timeout:g}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self._http = httpx.Client(base_url=self.url, headers=headers, transport=transport,
                                  timeout=httpx.Timeout(timeout, connect=min(timeout, 2.0)),
                                  limits=httpx.Limits(max_connections=32, max_keepalive_connections=8))
        self.blend: float | None = None  # Reranker.blend: the served model's recommendation, from its answers

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One score per passage, in input order. Raises RerankerError."""
        if not passages:
            return []
        tries = Retrying(stop=stop_after_attempt(2), retry=retry_if_exception_type(_TryAgain),
                         before_sleep=before_sleep_log(log, logging.INFO), reraise=True)
        resp = tries(self._send, {"query": query, "passages": list(passages)})
        try:
            body = resp.json()
            scores = [float(s) for s in body["scores"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise RerankerError(f"reranker service at {self.shown_url} sent an unreadable answer: {exc}") from exc
        if len(scores) != len(passages):
            raise RerankerError(f"reranker service at {self.shown_url} sent {len(scores)} scores for {len(passages)} "
                                "passages")
        self.blend = valid_blend(body.get("blend"))
        return scores

    def _send(self, payload: dict[str, Any]) -> httpx.Response:
        """One try; raises _TryAgain when another may get through, RerankerError when none can."""
        try:
            resp = self._http.post("/rerank", json=payload)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError) as exc:
            raise _TryAgain(f"cannot reach the reranker service at {self.shown_url}: {type(exc).__name__}: "
                            f"{redact_url(str(exc))}") from exc
        except httpx.TimeoutException as exc:
            raise RerankerError(f"reranker service at {self.shown_url} timed out "
                                f"({type(exc).__name__}, timeout {self.timeout}s)") from exc
        except httpx.HTTPError as exc:
            raise RerankerError(f"reranker request to {self.shown_url} failed: {type(exc).__name__}: "
                                f"{redact_url(str(exc))}") from exc
        if resp.status_code < 400:
            return resp
        problem = f"reranker service at {self.shown_url} answered {resp.status_code}: {_reason(resp)}"
        if resp.status_code in RETRIED_STATUSES and not (resp.status_code == 503 and "retry-after" in resp.headers):
            raise _TryAgain(problem)
        raise RerankerError(problem)
