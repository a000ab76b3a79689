"""The lease's pure parts: which runs collide, what readers are told to hide, how a state document reads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hybridsearch.ingest.lease import State, overlaps, owns, shard_of, stored_shard

shards = st.one_of(st.none(), st.integers(1, 6).flatmap(lambda n: st.tuples(st.integers(0, n - 1), st.just(n))))


@given(shards, shards)
def test_collision_is_symmetric(a: tuple[int, int] | None, b: tuple[int, int] | None) -> None:
    assert overlaps(a, b) == overlaps(b, a)


@given(shards, shards, st.lists(st.text(min_size=1, max_size=12), max_size=40))
def test_runs_that_do_not_collide_never_share_a_document(a: tuple[int, int] | None, b: tuple[int, int] | None,
                                                         doc_ids: list[str]) -> None:
    if not overlaps(a, b):
        assert not [d for d in doc_ids if owns(a, d) and owns(b, d)]


def test_workers_of_one_split_run_side_by_side_and_nothing_else_does() -> None:
    assert not overlaps((0, 4), (1, 4))
    assert overlaps((1, 4), (1, 4)) and overlaps(None, (1, 4)) and overlaps((0, 2), (0, 4))
    assert owns(None, "x") and owns((shard_of("x", 3), 3), "x")


def test_a_lease_with_an_unreadable_shard_collides_with_everything() -> None:
    assert stored_shard("1/4") == (1, 4)
    assert stored_shard("garbage") is None and stored_shard(None) is None and stored_shard("5/4") is None


def test_hidden_is_every_hold_once_sorted() -> None:
    state = State.of({"leases": {"r1": {"shard": None}}, "holds": {"r1": ["b", "a"], "unfinished": ["a", "c"],
                                                                   "r2": []}})
    doc = state.doc()
    assert doc["hidden"] == ["a", "b", "c"]
    assert doc["holds"] == {"r1": ["a", "b"], "unfinished": ["a", "c"]}  # empty holds dropped
    assert State.of(None).doc()["hidden"] == [] and State.of(doc).holds == doc["holds"]
