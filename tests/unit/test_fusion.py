"""RRF and score fusion (zscore, minmax), golden-tested against numbers computed by hand."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybridsearch.errors import QueryError
from hybridsearch.query.fusion import Fusion, interpolate, normalise

# 1/61, 1/62, 1/63 written out by hand.
R61, R62, R63 = 0.01639344262295082, 0.016129032258064516, 0.015873015873015872


def rrf(*ranked: Sequence[str], k: int = 60, weights: tuple[float, float] = (1.0, 1.0)) -> list[tuple[str, float]]:
    """RRF of up to two lists of ids, best first (their scores play no part)."""
    lists = {name: [(d, 0.0) for d in ids] for name, ids in zip(("bm25", "knn"), ranked, strict=False)}
    return Fusion(k=k, weights=weights).fuse(lists)


def test_rrf_golden_two_lists() -> None:
    out = rrf(["a", "b", "c"], ["b", "c", "d"])
    assert [doc for doc, _ in out] == ["b", "c", "a", "d"]
    want = {"b": R62 + R61, "c": R63 + R62, "a": R61, "d": R63}
    for doc, score in out:
        assert score == pytest.approx(want[doc], abs=1e-15)
    assert out[0][1] == pytest.approx(0.032522474881015336, abs=1e-15)


def test_rrf_ties_are_broken_by_id() -> None:
    assert [d for d, _ in rrf(["y", "x"], ["x", "y"])] == ["x", "y"]
    assert rrf(["b"], ["a"]) == [("a", R61), ("b", R61)]


def test_rrf_weights_and_small_k() -> None:
    # k=1: a = 2/(1+1) + 1/(1+2) = 4/3; b = 2/(1+2) + 1/(1+1) = 7/6
    out = rrf(["a", "b"], ["b", "a"], k=1, weights=(2.0, 1.0))
    want: list[tuple[str, object]] = [("a", pytest.approx(4 / 3)), ("b", pytest.approx(7 / 6))]
    assert out == want
    assert rrf(["a"], ["b"], weights=(0.0, 1.0)) == [("b", R61), ("a", 0.0)]


def test_rrf_counts_a_repeated_id_once_at_its_best_rank() -> None:
    assert rrf(["a", "a", "b"]) == [("a", R61), ("b", R62)]


def test_rrf_edge_cases() -> None:
    assert rrf() == [] and rrf([], []) == []
    assert rrf(["only"]) == [("only", R61)]
    assert rrf(["x", "y", "z"])[2] == ("z", pytest.approx(1 / 63))
    assert rrf(["z"], k=60, weights=(0.5, 1.0)) == [("z", pytest.approx(0.5 / 61))]
    with pytest.raises(QueryError, match="at least 1"):
        rrf(["a"], k=0)
    with pytest.raises(QueryError, match="non-negative"):
        rrf(["a"], weights=(-1.0, 1.0))
    with pytest.raises(QueryError, match="non-negative"):
        rrf(["a"], weights=(float("inf"), 1.0))


@given(st.lists(st.lists(st.sampled_from("abcdefghij"), max_size=10, unique=True), min_size=1, max_size=2),
       st.integers(min_value=1, max_value=100))
def test_rrf_properties(lists: list[list[str]], k: int) -> None:
    out = rrf(*lists, k=k)
    assert {d for d, _ in out} == {d for lst in lists for d in lst}
    assert out == sorted(out, key=lambda kv: (-kv[1], kv[0]))
    for doc, score in out:
        assert score == pytest.approx(sum(1 / (k + lst.index(doc) + 1) for lst in lists if doc in lst))


def test_normalise_golden() -> None:
    assert normalise([10, 5, 0]) == [1.0, 0.5, 0.0]
    assert normalise([3, 3]) == [1.0, 1.0] and normalise([]) == []
    assert normalise([0.9, 0.5], "zscore") == pytest.approx([1.0, -1.0])
    assert normalise([10, 5, 0], "zscore") == pytest.approx([1.2247448714, 0.0, -1.2247448714])
    assert normalise([2, 2], "zscore") == [0.0, 0.0]


BM25 = [("a", 10.0), ("b", 5.0), ("c", 0.0)]
DENSE = [("b", 0.9), ("d", 0.5)]


def test_minmax_fusion_golden() -> None:
    # a = .5*1 + .5*0 ; b = .5*.5 + .5*1 ; c = 0 ; d = .5*0 (ties c, d by id)
    lists = {"bm25": BM25, "knn": DENSE}
    assert Fusion(method="minmax", weights=(0.5, 0.5)).fuse(lists) == [
        ("b", pytest.approx(0.75)), ("a", pytest.approx(0.5)), ("c", 0.0), ("d", 0.0)]
    assert [d for d, _ in Fusion(method="minmax", weights=(0.0, 1.0)).fuse(lists)] == ["b", "a", "c", "d"]


def test_zscore_fusion_golden() -> None:
    # z(bm25) = 1.2247, 0, -1.2247, shifted to 2.4495, 1.2247, 0; z(dense) = 1, -1, shifted to 2, 0
    want: list[tuple[str, object]] = [("b", pytest.approx(1.6123724357)), ("a", pytest.approx(1.2247448714)),
                                      ("c", 0.0), ("d", 0.0)]
    assert Fusion(method="zscore", weights=(0.5, 0.5)).fuse({"bm25": BM25, "knn": DENSE}) == want


def test_an_id_repeated_in_one_list_counts_at_its_first_score() -> None:
    assert Fusion(method="minmax").fuse({"bm25": [("a", 4.0), ("b", 2.0), ("a", 0.0)]}) == [("a", 1.0), ("b", 0.0)]


def test_the_fusion_recorded_in_meta_is_read_back() -> None:
    for fusion in (Fusion(method="zscore", weights=(0.5, 1.5)), Fusion(method="minmax"), Fusion(k=10)):
        assert Fusion.from_meta(fusion.to_meta()) == Fusion(fusion.method, fusion.k, fusion.weights, "index")
    assert Fusion(method="zscore").to_meta() == {"method": "zscore", "weights": [1.0, 1.0]}  # k is RRF's
    assert Fusion(k=10).to_meta() == {"method": "rrf", "weights": [1.0, 1.0], "k": 10}
    for bad in ({"method": "linear", "norm": "zscore", "weights": [1, 1]}, {"method": "zscore", "weights": [1]},
                {"method": "rrf", "weights": [1, 1], "k": 0}, {"method": "minmax"}):
        with pytest.raises(QueryError, match="recorded fusion") as err:
            Fusion.from_meta(bad)
        assert err.value.fix is not None and "hsp index fusion" in err.value.fix
    with pytest.raises(QueryError, match="unknown fusion 'linear'"):
        Fusion(method="linear")  # type: ignore[arg-type]


def test_interpolate_golden() -> None:
    # rerank minmax: 0, 1, 0.5 ; fused minmax: 1, 0, 0.25
    out = interpolate([2.0, 4.0, 3.0], [0.5, 0.1, 0.2], 0.25)
    assert out == pytest.approx([0.75, 0.25, 0.3125])
    assert interpolate([2.0, 4.0], [0.5, 0.1], 1.0) == [0.0, 1.0]
    assert interpolate([2.0, 4.0], [0.5, 0.1], 0.0) == [1.0, 0.0]
    assert interpolate([], [], 0.5) == []
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(QueryError, match="blend"):
            interpolate([1.0], [1.0], bad)
    with pytest.raises(QueryError, match="2 rerank scores for 1"):
        interpolate([1.0, 2.0], [1.0], 0.5)


ranked = st.lists(st.tuples(st.sampled_from("abcdefgh"), st.floats(0, 50)), max_size=8, unique_by=lambda t: t[0])


@given(bm25=ranked, knn=ranked, method=st.sampled_from(["rrf", "zscore", "minmax"]),
       weights=st.tuples(st.floats(0, 2), st.floats(0, 2)), k=st.integers(1, 100))
def test_each_lists_shares_add_up_to_the_fused_score(bm25: list[tuple[str, float]], knn: list[tuple[str, float]],
                                                      method: str, weights: tuple[float, float], k: int) -> None:
    """What ``--explain`` prints for each list (its RRF term, or its weighted normalised score) sums to the fused score;
    a list that missed an id adds nothing."""
    lists = {"bm25": sorted(bm25, key=lambda t: -t[1]), "knn": sorted(knn, key=lambda t: -t[1])}
    fusion = Fusion(method=method, k=k, weights=weights)  # type: ignore[arg-type]
    shares = fusion.shares(lists)
    for doc, score in fusion.fuse(lists):
        assert sum(shares[name].get(doc, 0.0) for name in lists) == pytest.approx(score, abs=1e-12)
    assert set(shares["bm25"]) == {doc for doc, _ in bm25} and set(shares["knn"]) == {doc for doc, _ in knn}


# scores on a grid of 0.1, so that scaling and shifting them keeps their differences far above rounding error
grid_scores = st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 500).map(lambda i: i / 10)),
                       max_size=8, unique_by=lambda t: t[0])


@given(bm25=grid_scores, knn=grid_scores, method=st.sampled_from(["zscore", "minmax"]),
       weights=st.tuples(st.floats(0, 2), st.floats(0, 2)), scale=st.floats(0.01, 100), shift=st.floats(-100, 100),
       which=st.sampled_from(["bm25", "knn"]))
def test_score_fusion_is_invariant_to_scaling_and_shifting_one_lists_scores(
        bm25: list[tuple[str, float]], knn: list[tuple[str, float]], method: str, weights: tuple[float, float],
        scale: float, shift: float, which: str) -> None:
    """Normalising each list makes its scores' unit and origin irrelevant: BM25's unbounded scores and kNN's
    similarities fuse the same however either is scaled (by a positive factor) or shifted."""
    lists = {"bm25": sorted(bm25, key=lambda t: -t[1]), "knn": sorted(knn, key=lambda t: -t[1])}
    moved = {**lists, which: [(doc, scale * s + shift) for doc, s in lists[which]]}
    fusion = Fusion(method=method, weights=weights)  # type: ignore[arg-type]
    before, after = dict(fusion.fuse(lists)), fusion.fuse(moved)
    assert dict(after) == pytest.approx(before, abs=1e-9)
    ranked_before = [before[doc] for doc, _ in after]  # the new order ranks the old scores highest first
    assert all(a >= b - 1e-9 for a, b in itertools.pairwise(ranked_before))


@given(bm25=grid_scores, knn=grid_scores, scale=st.floats(0.01, 100))
def test_rrf_reads_only_ranks(bm25: list[tuple[str, float]], knn: list[tuple[str, float]], scale: float) -> None:
    lists = {"bm25": sorted(bm25, key=lambda t: -t[1]), "knn": sorted(knn, key=lambda t: -t[1])}
    moved = {"bm25": lists["bm25"], "knn": [(doc, scale * s - 7) for doc, s in lists["knn"]]}
    assert Fusion().fuse(moved) == Fusion().fuse(lists)
