"""Exact top-k and the recall of an approximate kNN search against it (ops/bench/knn.py)."""

from __future__ import annotations

import numpy as np
import pytest

from ops_modules import load_ops

knn = load_ops("knn")
exact_top_k, knn_recall, unit = knn.exact_top_k, knn.knn_recall, knn.unit


def test_unit_scales_rows_to_length_one_and_leaves_zero_rows() -> None:
    v = unit(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert v.dtype == np.float32
    assert np.allclose(v, [[0.6, 0.8], [0.0, 0.0]])


def test_exact_top_k_matches_a_full_sort_in_every_batch() -> None:
    rng = np.random.default_rng(7)
    vectors, queries = unit(rng.standard_normal((500, 16))), unit(rng.standard_normal((9, 16)))
    ids, scores = exact_top_k(vectors, queries, 10, batch=4)  # batches of 4, 4 and 1
    sims = queries @ vectors.T
    assert ids.shape == scores.shape == (9, 10)
    for row, s in enumerate(sims):
        assert ids[row].tolist() == np.argsort(-s)[:10].tolist()
        assert np.allclose(scores[row], np.sort(s)[::-1][:10])


def test_exact_top_k_with_k_above_the_collection_returns_every_row() -> None:
    vectors = unit(np.eye(3))
    ids, _ = exact_top_k(vectors, vectors[:1], 10)
    assert ids.shape == (1, 3)
    assert ids[0, 0] == 0 and sorted(ids[0].tolist()) == [0, 1, 2]


def test_knn_recall_counts_the_true_neighbours_found() -> None:
    rng = np.random.default_rng(3)
    vectors, query = unit(rng.standard_normal((100, 8))), unit(rng.standard_normal(8))
    ids, scores = exact_top_k(vectors, query[None, :], 5)
    truth, kth = ids[0].tolist(), float(scores[0, -1])
    assert knn_recall(vectors, query, kth, truth, 5) == 1.0
    assert knn_recall(vectors, query, kth, list(reversed(truth)), 5) == 1.0  # order does not matter
    outside = [i for i in range(100) if i not in truth]
    assert knn_recall(vectors, query, kth, truth[:3] + outside[:2], 5) == pytest.approx(0.6)
    # repeated hits count once, unknown rows (-1) not at all, fewer than k hits are misses
    assert knn_recall(vectors, query, kth, [truth[0], truth[0], -1, truth[1]], 5) == pytest.approx(0.4)
    assert knn_recall(vectors, query, kth, [], 5) == 0.0


def test_knn_recall_counts_a_hit_tied_with_the_kth_neighbour() -> None:
    # rows 2 and 3 are the same vector: exact search keeps one of them in the top 3, either is right
    vectors = unit(np.array([[1.0, 0.0], [0.9, 0.1], [0.5, 0.5], [0.5, 0.5], [0.0, 1.0]]))
    query = unit(np.array([1.0, 0.0]))
    _, scores = exact_top_k(vectors, query[None, :], 3)
    kth = float(scores[0, -1])
    assert knn_recall(vectors, query, kth, [0, 1, 2], 3) == 1.0
    assert knn_recall(vectors, query, kth, [0, 1, 3], 3) == 1.0
    assert knn_recall(vectors, query, kth, [0, 1, 4], 3) == pytest.approx(2 / 3)
