"""SearchClient.from_settings picks the reranker from hybridsearch.rerank.make_reranker, never failing on it: a
search says what the rerank stage did, and why."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import hybridsearch.query.client as client_module
import hybridsearch.rerank
from hybridsearch import SearchClient
from hybridsearch.errors import RerankerError
from hybridsearch.query.results import RerankOutcome, SearchResult
from hybridsearch.settings import ClusterSettings, ModelsSettings, RerankerSettings, Settings, load_settings
from recorded_engine import FakeES, FixedVectors, recording


class Fixed:
    name = "fixed"
    blend: float | None = None  # no recommendation (Reranker.blend)

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        return [1.0] * len(passages)


def _settings(**reranker: object) -> Settings:
    return load_settings(es_url="http://127.0.0.1:1", query={"log_queries": False}, reranker=reranker)


@pytest.fixture(autouse=True)
def recorded_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """``from_settings`` connects to the recorded cluster (tests/recorded_engine.py)."""
    monkeypatch.setattr(client_module, "EngineClient", lambda cfg: FakeES(_settings(), recording("hybrid")))


def searched(client: SearchClient, **kw: object) -> SearchResult:
    return client.search("how do bees find food", **kw)  # type: ignore[arg-type]


def test_factory_reranker_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    made = Fixed()
    monkeypatch.setattr(hybridsearch.rerank, "make_reranker", lambda s, m: made)
    with SearchClient.from_settings(_settings(), embedder=FixedVectors()) as c:  # type: ignore[arg-type]
        result = searched(c)
        assert c.reranker is made and result.rerank_outcome is RerankOutcome.APPLIED and result.rerank_reason is None


def test_explicit_reranker_wins_and_disabled_says_so() -> None:
    mine = Fixed()
    with SearchClient.from_settings(_settings(), reranker=mine) as c:
        assert c.reranker is mine
    with SearchClient.from_settings(_settings(enabled=False), embedder=FixedVectors()) as c:  # type: ignore[arg-type]
        result = searched(c)
        assert c.reranker is None and result.rerank_outcome is RerankOutcome.DISABLED
        assert result.rerank_reason == "reranker disabled (HSP_RERANKER__ENABLED=false)"


@pytest.mark.parametrize("exc", [RerankerError("no model here"), ValueError("bad url")])
def test_factory_failure_degrades_with_a_reason(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    def boom(cfg: RerankerSettings, models: ModelsSettings) -> None:
        raise exc

    monkeypatch.setattr(hybridsearch.rerank, "make_reranker", boom)
    with SearchClient.from_settings(_settings(), embedder=FixedVectors()) as c:  # type: ignore[arg-type]
        result = searched(c)
        assert c.reranker is None and result.rerank_outcome is RerankOutcome.DISABLED
        assert result.rerank_reason in ("reranker unavailable: no model here",
                                        "reranker unavailable: ValueError: bad url")


def test_no_reranker_and_not_requested() -> None:
    s = _settings()
    with SearchClient(client_module.EngineClient(ClusterSettings()), s, embedder=FixedVectors()) as c:  # type: ignore[arg-type]
        result = searched(c)
        assert (result.rerank_outcome, result.rerank_reason) == (RerankOutcome.DISABLED, "no reranker configured")
        result = searched(c, rerank=False)
        assert (result.rerank_outcome, result.rerank_reason) == (RerankOutcome.SKIPPED, "rerank not requested")


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
    with SearchClient.from_settings(_settings(blend=setting), reranker=Recommends(recommended),  # type: ignore[arg-type]
                                    embedder=FixedVectors()) as c:  # type: ignore[arg-type]
        assert searched(c).rerank_blend == used
