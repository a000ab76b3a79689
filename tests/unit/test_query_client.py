"""SearchClient.from_settings picks the reranker from hybridsearch.rerank.make_reranker, never failing on it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import hybridsearch.rerank
from hybridsearch import SearchClient
from hybridsearch.engine import connect
from hybridsearch.errors import RerankerError
from hybridsearch.query.assemble import Window
from hybridsearch.query.build import plan
from hybridsearch.query.results import RerankOutcome
from hybridsearch.settings import RerankerSettings, Settings, load_settings


class Fixed:
    name = "fixed"
    blend: float | None = None  # no recommendation (Reranker.blend)

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        return [1.0] * len(passages)


def _settings(**reranker: object) -> Settings:
    return load_settings(es_url="http://127.0.0.1:1", query={"log_queries": False}, reranker=reranker)


def _reason(client: SearchClient) -> str | None:
    from hybridsearch.query.assemble import Candidate

    window = Window(candidates=[Candidate(key="a", source={}, chunk_id="a#0")], depths={"bm25": 1})
    return window.rerank_reason if client._rerank_skip(plan(client.query, None, "q"), window) else None


def test_factory_reranker_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    made = Fixed()
    monkeypatch.setattr(hybridsearch.rerank, "make_reranker", lambda s: made)
    with SearchClient.from_settings(_settings()) as c:
        assert c.reranker is made and _reason(c) is None


def test_explicit_reranker_wins_and_disabled_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = Fixed()
    with SearchClient.from_settings(_settings(), reranker=mine) as c:
        assert c.reranker is mine
    with SearchClient.from_settings(_settings(enabled=False)) as c:
        assert c.reranker is None and _reason(c) == "reranker disabled (HSP_RERANKER__ENABLED=false)"


@pytest.mark.parametrize("exc", [RerankerError("no model here"), ValueError("bad url")])
def test_factory_failure_degrades_with_a_reason(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    def boom(cfg: RerankerSettings) -> None:
        raise exc

    monkeypatch.setattr(hybridsearch.rerank, "make_reranker", boom)
    with SearchClient.from_settings(_settings()) as c:
        assert c.reranker is None
        assert _reason(c) in ("reranker unavailable: no model here", "reranker unavailable: ValueError: bad url")


def test_no_reranker_and_not_requested() -> None:
    with SearchClient(connect(_settings().es), _settings()) as c:
        assert _reason(c) == "no reranker configured"
        window = Window(candidates=[], depths={})
        assert c._rerank_skip(plan(c.query, None, "q", rerank=False), window)
        assert window.rerank_outcome is RerankOutcome.SKIPPED and window.rerank_reason == "rerank not requested"


class Recommends(Fixed):
    def __init__(self, blend: object) -> None:
        self.blend = blend


@pytest.mark.parametrize(("setting", "recommended", "used"), [
    (None, None, 1.0),  # no card: reranker order only
    (None, 0.3, 0.3),  # the model's card decides
    (0.8, 0.3, 0.8),  # HSP_RERANKER__BLEND overrides the card
    (0.0, 0.3, 0.0),  # ... even with 0 (fused order kept)
    (None, 7, 1.0),  # an out-of-range recommendation is ignored
])
def test_rerank_blend_setting_then_model_recommendation_then_one(setting: float | None, recommended: object,
                                                                  used: float) -> None:
    with SearchClient(connect(_settings().es), _settings(blend=setting), reranker=Recommends(recommended)) as c:
        assert c.rerank_blend() == used
