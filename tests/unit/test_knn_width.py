"""How widely kNN looks (query.build): num_candidates from the shard size, rescoring where it helps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybridsearch.engine import ELASTICSEARCH, OPENSEARCH, EngineInfo
from hybridsearch.errors import ConfigError
from hybridsearch.query.build import (
    BASE_CANDIDATES,
    BASE_SHARD_CHUNKS,
    DEFAULT_OVERSAMPLE,
    MAX_CANDIDATES,
    auto_candidates,
    is_quantized,
    knn_lines,
    knn_size,
    knn_width,
    plan,
)
from hybridsearch.query.client import SearchClient
from hybridsearch.settings import QuerySettings
from recorded_engine import FakeES, FixedVectors, is_probe, recording
from recorded_engine import settings as recorded_settings

sizes = st.integers(min_value=0, max_value=10**9)
ks = st.integers(min_value=1, max_value=2000)


@given(ks, sizes, sizes)
def test_more_chunks_a_shard_never_means_fewer_candidates(k: int, a: int, b: int) -> None:
    small, large = sorted((a, b))
    assert auto_candidates(k, small) <= auto_candidates(k, large)


@given(ks, st.none() | sizes)
def test_candidates_are_at_least_k_and_within_the_engines_limit(k: int, chunks: int | None) -> None:
    assert min(k, MAX_CANDIDATES) <= auto_candidates(k, chunks) <= MAX_CANDIDATES


def test_small_shards_keep_the_measured_base_and_large_ones_grow() -> None:
    assert auto_candidates(10, None) == auto_candidates(10, BASE_SHARD_CHUNKS) == BASE_CANDIDATES
    assert auto_candidates(10, 10 * BASE_SHARD_CHUNKS) > 2 * BASE_CANDIDATES
    assert auto_candidates(500, 1000) == 500  # never fewer than the neighbours asked for


def test_the_setting_overrides_the_size_rule() -> None:
    w = knn_width(QuerySettings(num_candidates=123), 100, 10**8, quantized=False, can_rescore=False)
    assert w.num_candidates == 123 and "HSP_QUERY__NUM_CANDIDATES" in w.reason
    assert knn_width(QuerySettings(num_candidates=50), 100, None, quantized=False, can_rescore=False
                     ).num_candidates == 100  # at least k


@pytest.mark.parametrize(("setting", "quantized", "can", "oversample"), [
    (None, True, True, DEFAULT_OVERSAMPLE), (2.5, True, True, 2.5), (0.0, True, True, None),
    (None, False, True, None), (None, True, False, None), (3.0, True, False, None)])
def test_rescoring_only_of_quantized_vectors_where_the_engine_can(
        setting: float | None, quantized: bool, can: bool, oversample: float | None) -> None:
    w = knn_width(QuerySettings(rescore_oversample=setting), 200, 1000, quantized=quantized, can_rescore=can)
    assert w.oversample == oversample
    assert w.num_candidates >= 200 * (oversample or 1)


def test_the_default_rescores_more_candidates_than_the_list_returns() -> None:
    """Rescoring only the k the list returns fixes their order but not which k they are: the default gathers a
    wider set, so the list's tail, which fusion reads, is exact too."""
    w = knn_width(QuerySettings(), 200, 1000, quantized=True, can_rescore=True)
    assert w.oversample is not None and w.oversample >= 2 and w.num_candidates >= 200 * w.oversample
    assert "rescored" in w.reason and f"{w.oversample:g} × k" in w.reason
    assert f"num_candidates raised to {w.num_candidates}" in w.reason  # the width sent, not the one before


def test_quantized_options() -> None:
    assert [is_quantized(t) for t in ("int8_hnsw", "int4_flat", "bbq_hnsw", "hnsw", "flat", None)] == [
        True, True, True, False, False, False]


def test_rescore_versions() -> None:
    assert EngineInfo("elasticsearch", "8.18.0").rescores_vectors
    assert not EngineInfo("elasticsearch", "8.17.4").rescores_vectors
    assert not EngineInfo("opensearch", "3.5.0").rescores_vectors


def test_the_knn_body_carries_the_width() -> None:
    q = QuerySettings()
    p = plan(q, None, "bees", k=10, mode="dense")
    k = knn_size(q)
    w = knn_width(q, k, 5_000_000, quantized=True, can_rescore=True)
    body = knn_lines(q, "a", p, [0.1, 0.2], ELASTICSEARCH, w)[1]["knn"]
    assert body["num_candidates"] == w.num_candidates > BASE_CANDIDATES
    assert body["rescore_vector"] == {"oversample": DEFAULT_OVERSAMPLE} and body["k"] == k
    plain = knn_lines(q, "a", p, [0.1, 0.2], ELASTICSEARCH)[1]["knn"]
    assert "rescore_vector" not in plain and plain["num_candidates"] == max(BASE_CANDIDATES, k)
    with pytest.raises(ConfigError):
        knn_lines(q, "a", p, [0.1, 0.2], OPENSEARCH, w)


@pytest.mark.parametrize(("setting", "sent"), [(None, {"oversample": DEFAULT_OVERSAMPLE}), (0.0, None)])
def test_why_probes_knn_rescored_as_the_search_was(setting: float | None, sent: dict[str, float] | None) -> None:
    s = recorded_settings()
    s = s.model_copy(update={"query": s.query.model_copy(update={"rescore_oversample": setting})})
    es = FakeES(s, recording("hybrid"))
    with SearchClient(es, s, embedder=FixedVectors()) as client:  # type: ignore[arg-type]
        client.why("how do bees find food", "d-absent", mode="dense", rerank=False)  # probed: not in the list
    knn = [b["knn"] for r in es.sent for b in r[1::2] if is_probe(b) and "knn" in b]
    assert knn and all(k.get("rescore_vector") == sent for k in knn)
