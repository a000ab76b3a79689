"""--sweep parsing: only query settings, validated values."""

from __future__ import annotations

import pytest

from hybridsearch.errors import ConfigError
from hybridsearch.eval.harness import parse_sweep, with_query
from hybridsearch.settings import load_settings


def test_parse_sweep_accepts_query_settings_with_or_without_prefix() -> None:
    assert parse_sweep(["query.rrf_k=20, 60", "title_boost=2"]) == [("rrf_k", ["20", "60"]), ("title_boost", ["2"])]


@pytest.mark.parametrize("spec", ["index.index_options=hnsw", "query.nope=1", "query.rrf_k", "query.rrf_k="])
def test_parse_sweep_rejects_build_settings_unknown_names_and_bad_syntax(spec: str) -> None:
    with pytest.raises(ConfigError, match="--sweep"):
        parse_sweep([spec])


def test_with_query_validates_values() -> None:
    q = with_query(load_settings().query, "rrf_k", "20")
    # with fusion auto an index's calibrated fusion would win: sweeping rrf_k sweeps RRF
    assert q.rrf_k == 20 and q.fusion == "rrf"
    assert q.model_copy(update={"rrf_k": 60, "fusion": "auto"}) == load_settings().query
    assert with_query(load_settings().query, "knn_share", "0.3").fusion == "rrf"
    assert with_query(load_settings().query, "fusion", "zscore").fusion == "zscore"
    assert with_query(load_settings().query, "title_boost", "2").fusion == "auto"
    with pytest.raises(ConfigError, match=r"query\.rrf_k=0"):
        with_query(load_settings().query, "rrf_k", "0")
