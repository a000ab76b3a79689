"""HttpReranker's retry and error mapping, against scripted answers (httpx.MockTransport)."""

from __future__ import annotations

import json

import httpx
import pytest

from hybridsearch.errors import RerankerError
from hybridsearch.rerank import HttpReranker


def scripted(*answers: httpx.Response | Exception) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handle), seen


def ok(scores: list[float]) -> httpx.Response:
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return httpx.Response(200, json={"scores": scores, "order": order, "model": "m", "took_ms": 1.0})


def test_scores_sends_query_passages_and_token() -> None:
    transport, seen = scripted(ok([0.2, 0.9]))
    client = HttpReranker("http://reranker:8088/", token="s3cret", transport=transport)
    assert client.score("q", ["a", "b"]) == [0.2, 0.9]
    assert seen[0].url == "http://reranker:8088/rerank"
    assert seen[0].headers["authorization"] == "Bearer s3cret"
    assert json.loads(seen[0].content) == {"query": "q", "passages": ["a", "b"]}


def test_blend_recommended_by_the_service_is_kept() -> None:
    answer = {"scores": [0.1], "order": [0], "model": "m", "took_ms": 1.0, "blend": 0.35}
    transport, _ = scripted(httpx.Response(200, json=answer), httpx.Response(200, json={**answer, "blend": None}))
    client = HttpReranker("http://x", transport=transport)
    assert client.blend is None
    client.score("q", ["a"])
    assert client.blend == 0.35
    client.score("q", ["a"])
    assert client.blend is None


def test_empty_passages_need_no_request() -> None:
    transport, seen = scripted()
    assert HttpReranker("http://x", transport=transport).score("q", []) == []
    assert seen == []


def test_one_retry_on_5xx_then_success() -> None:
    transport, seen = scripted(httpx.Response(503, json={"error": "loading", "detail": "model is still loading"}),
                               ok([1.0]))
    assert HttpReranker("http://x", transport=transport).score("q", ["a"]) == [1.0]
    assert len(seen) == 2


def test_one_retry_on_connect_error_then_a_clear_error() -> None:
    transport, seen = scripted(httpx.ConnectError("refused"), httpx.ConnectError("refused"))
    with pytest.raises(RerankerError, match="cannot reach the reranker service at http://x"):
        HttpReranker("http://x", transport=transport).score("q", ["a"])
    assert len(seen) == 2


def test_persistent_gateway_errors_name_status_and_reason() -> None:
    fail = httpx.Response(502, json={"error": "bad_gateway", "detail": "upstream closed the connection"})
    transport, seen = scripted(fail, fail)
    with pytest.raises(RerankerError, match="answered 502: upstream closed the connection"):
        HttpReranker("http://x", transport=transport).score("q", ["a"])
    assert len(seen) == 2


def test_a_500_is_not_retried() -> None:
    fail = httpx.Response(500, json={"error": "model_failed", "detail": "model failed: CUDA out of memory"})
    transport, seen = scripted(fail, ok([1.0]))
    with pytest.raises(RerankerError, match="answered 500: model failed: CUDA out of memory"):
        HttpReranker("http://x", transport=transport).score("q", ["a"])
    assert len(seen) == 1


def test_4xx_is_not_retried() -> None:
    transport, seen = scripted(httpx.Response(401, json={"error": "unauthorized", "detail": "wrong bearer token"}))
    with pytest.raises(RerankerError, match="401: wrong bearer token"):
        HttpReranker("http://x", transport=transport).score("q", ["a"])
    assert len(seen) == 1


def test_overloaded_503_with_retry_after_is_not_retried_at_once() -> None:
    busy = httpx.Response(503, headers={"Retry-After": "6"},
                          json={"error": "overloaded", "detail": "queue full (32 waiting)"})
    transport, seen = scripted(busy, ok([1.0]))
    with pytest.raises(RerankerError, match="answered 503: queue full"):
        HttpReranker("http://x", transport=transport).score("q", ["a"])
    assert len(seen) == 1


def test_read_timeout_is_not_retried() -> None:
    transport, seen = scripted(httpx.ReadTimeout("slow"))
    with pytest.raises(RerankerError, match="timed out"):
        HttpReranker("http://x", timeout=0.5, transport=transport).score("q", ["a"])
    assert len(seen) == 1


@pytest.mark.parametrize("answer", [httpx.Response(200, text="<html>proxy</html>"), ok([1.0, 2.0, 3.0]),
                                    httpx.Response(200, json={"order": []})])
def test_unreadable_or_mismatched_answers_are_errors(answer: httpx.Response) -> None:
    transport, _ = scripted(answer)
    with pytest.raises(RerankerError, match="reranker service at http://x"):
        HttpReranker("http://x", transport=transport).score("q", ["a", "b"])
