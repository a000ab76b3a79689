"""Reranker training data: split guard, query split, negative mining and pair building (no cluster, no model)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

import pytest

from hybridsearch.errors import ConfigError
from hybridsearch.eval.datasets import check_split, read_qrels
from hybridsearch.training.negatives import (
    Candidate,
    SplitData,
    Strategy,
    build_pairs,
    dedupe,
    load_split,
    mine,
    split_queries,
    validation_queries,
)

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "scifact"


def cands(*ids: str) -> list[Candidate]:
    return [Candidate(d, f"text of {d}") for d in ids]


# ------------------------------------------------------------------------------------------ split guard


def test_test_split_is_refused_unless_allowed() -> None:
    with pytest.raises(ConfigError, match="refusing to train on the 'test' split"):
        check_split("test")
    check_split("test", allow_test=True)
    check_split("train")
    check_split("dev")


def test_load_split_refuses_test_before_reading_anything(tmp_path: Path) -> None:
    # The folder does not even exist: the guard fires first, so no test file can have been opened.
    with pytest.raises(ConfigError, match="refusing"):
        load_split(tmp_path / "nowhere", "test")


def _write_collection(root: Path) -> None:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "x"}\n')
    (root / "queries.jsonl").write_text("".join(f'{{"_id": "{q}", "text": "query {q}"}}\n' for q in "abcdef"))
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\na\td1\t1\nb\td2\t1\nc\td3\t0\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nd\td1\t1\ne\td2\t1\n")


def test_load_split_reads_only_the_split_and_keeps_queries_with_a_relevant_document(tmp_path: Path) -> None:
    _write_collection(tmp_path)
    data = load_split(tmp_path, "train")
    assert set(data.queries) == {"a", "b"}  # c has only a grade-0 judgment; d, e are test queries
    assert data.qrels == {"a": {"d1": 1}, "b": {"d2": 1}}
    assert data.queries["a"] == "query a"
    assert [Path(f).name for f in data.files_read] == ["train.tsv"]


def test_load_split_limit_keeps_the_first_queries(tmp_path: Path) -> None:
    _write_collection(tmp_path)
    assert set(load_split(tmp_path, "train", limit=1).queries) == {"a"}


@pytest.mark.skipif(not SCIFACT.exists(), reason="needs ../shared/datasets/scifact")
def test_scifact_training_queries_are_disjoint_from_test_queries() -> None:
    data = load_split(SCIFACT, "train")
    test_qids = set(read_qrels(SCIFACT / "qrels" / "test.tsv"))
    assert len(data.queries) == 809
    assert set(data.queries).isdisjoint(test_qids)
    assert set(data.qrels).isdisjoint(test_qids)
    train, val = split_queries(data.queries, 0.1, seed=42)
    assert set(train) | set(val) == set(data.queries)
    assert not (set(train) | set(val)) & test_qids
    assert all("test" not in Path(f).name for f in data.files_read)


# --------------------------------------------------------------------------------------- query split


def test_split_queries_is_seeded_disjoint_and_order_independent() -> None:
    qids = [str(i) for i in range(50)]
    train, val = split_queries(qids, 0.2, seed=7)
    assert len(val) == 10 and len(train) == 40
    assert not set(train) & set(val)
    assert split_queries(list(reversed(qids)), 0.2, seed=7) == (train, val)
    assert split_queries(qids, 0.2, seed=8)[1] != val


def test_split_queries_edge_cases() -> None:
    assert split_queries(["a", "b", "c"], 0.1, seed=1)[1] != []  # at least one held out
    assert split_queries(["a", "b"], 0.0, seed=1) == (["a", "b"], [])
    assert split_queries(["a"], 0.5, seed=1) == (["a"], [])  # a single query is never held out
    with pytest.raises(ValueError):
        split_queries(["a"], 1.0, seed=1)


# ----------------------------------------------------------------------------------- negative mining


def test_dedupe_keeps_the_best_ranked_chunk_of_each_document() -> None:
    out = dedupe([Candidate("a", "1"), Candidate("b", "2"), Candidate("a", "3")])
    assert out == [Candidate("a", "1"), Candidate("b", "2")]


def negatives_of(candidates: list[Candidate], relevant: set[str], n: int, seed: int = 0,
                 strategy: Strategy = "sample") -> list[str]:
    """The negatives :func:`build_pairs` mines for one query judging ``relevant`` (the first one has a passage)."""
    first = sorted(relevant)[0]
    pairs, _ = build_pairs(["q"], {"q": "query"}, {"q": dict.fromkeys(relevant, 1)}, {"q": candidates},
                           {("q", first): "positive"}, negatives=n, seed=seed, strategy=strategy)
    return [p.doc_id for p in pairs if p.label == 0]


def test_negatives_top_skips_judged_relevant_documents() -> None:
    assert negatives_of(cands("r1", "x", "r2", "y", "z"), {"r1", "r2"}, 2, strategy="top") == ["x", "y"]


def test_negatives_sample_is_seeded_in_rank_order_and_never_relevant() -> None:
    pool = cands(*[f"d{i}" for i in range(30)])
    relevant = {"d0", "d5", "d17"}
    a = negatives_of(pool, relevant, 4, seed=3)
    assert a == negatives_of(pool, relevant, 4, seed=3) and len(a) == 4
    assert not set(a) & relevant
    ranks = [int(d[1:]) for d in a]
    assert ranks == sorted(ranks)
    assert {tuple(negatives_of(pool, relevant, 4, seed=s)) for s in range(5)} != {tuple(a)}


def test_negatives_are_fewer_when_candidates_run_out() -> None:
    assert negatives_of(cands("r", "x"), {"r"}, 5) == ["x"]
    assert negatives_of(cands("x"), {"r"}, 0) == []


# ------------------------------------------------------------------------------------- pair building


QUERIES = {"q1": "first query", "q2": "second query", "q3": "third query"}
QRELS = {"q1": {"p1": 1, "p1b": 2, "n0": 0}, "q2": {"p2": 1}, "q3": {"gone": 1}}
CANDS = {
    "q1": cands("n0", "p1", "x1", "x2", "x3", "x1"),
    "q2": cands("y1", "y2"),
    "q3": cands("z1", "z2"),
}


def test_build_pairs_positives_from_hits_or_index_and_negatives_exclude_judged_relevant() -> None:
    pairs, stats = build_pairs(["q1", "q2", "q3"], QUERIES, QRELS, CANDS, {("q1", "p1b"): "fetched p1b",
                               ("q2", "p2"): "fetched p2"}, negatives=2, seed=1, strategy="top")
    by_q: dict[str, list[tuple[str, int, str]]] = {}
    for p in pairs:
        by_q.setdefault(p.qid, []).append((p.doc_id, p.label, p.passage))
        assert p.query == QUERIES[p.qid]
    # q1: two positives (one retrieved: hit text; one missed: fetched chunk); grade-0 n0 may be a negative
    assert ("p1", 1, "text of p1") in by_q["q1"] and ("p1b", 1, "fetched p1b") in by_q["q1"]
    assert [d for d, lab, _ in by_q["q1"] if lab == 0] == ["n0", "x1"]
    assert by_q["q2"] == [("p2", 1, "fetched p2"), ("y1", 0, "text of y1"), ("y2", 0, "text of y2")]
    # q3's only relevant document is neither retrieved nor in the index: skipped, not trained as all-negative
    assert "q3" not in by_q and stats.skipped_queries == ["q3"] and stats.positives_missing == 1
    assert (stats.queries, stats.positives, stats.negatives) == (2, 3, 4)


class _PairOptions(TypedDict):
    negatives: int
    seed: int


def test_build_pairs_is_reproducible_and_independent_of_query_order() -> None:
    kw: _PairOptions = {"negatives": 2, "seed": 5}
    a, _ = build_pairs(["q1", "q2"], QUERIES, QRELS, CANDS, {("q1", "p1b"): "t", ("q2", "p2"): "t"}, **kw)
    b, _ = build_pairs(["q2", "q1"], QUERIES, QRELS, CANDS, {("q1", "p1b"): "t", ("q2", "p2"): "t"}, **kw)
    c, _ = build_pairs(["q1"], QUERIES, QRELS, CANDS, {("q1", "p1b"): "t"}, **kw)
    assert a == b
    assert [p for p in a if p.qid == "q1"] == c


def test_validation_queries_keep_fused_order_and_drop_unjudged() -> None:
    val = validation_queries(["q1", "q2", "q9"], QUERIES | {"q9": "nine"}, QRELS, CANDS)
    assert [v.qid for v in val] == ["q1", "q2"]
    assert [c.doc_id for c in val[0].candidates] == ["n0", "p1", "x1", "x2", "x3"]
    assert val[0].relevant == {"p1": 1, "p1b": 2}


class ListMiner:
    """A miner over fixed candidate lists (the real one is IndexMiner, exercised in integration tests)."""

    def __init__(self, lists: dict[str, list[Candidate]], chunks: dict[str, str]) -> None:
        self.lists, self.chunks = lists, chunks
        self.asked: list[tuple[str, str, str]] = []

    def candidates(self, query: str, depth: int) -> list[Candidate]:
        return self.lists[query][:depth]

    def best_chunks(self, wanted: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str], str]:
        self.asked.extend(wanted)
        return {(q, d): self.chunks[d] for q, _t, d in wanted if d in self.chunks}


def test_mine_holds_out_validation_queries_from_the_pairs() -> None:
    queries = {f"q{i}": f"query {i}" for i in range(10)}
    qrels = {q: {f"rel{q}": 1} for q in queries}
    lists = {t: [Candidate(f"rel{q}", "relevant")] * (int(q[1:]) % 2) + cands("a", "b", "c")
             for q, t in queries.items()}
    miner = ListMiner(lists, {f"rel{q}": "chunk" for q in queries})
    mined = mine(miner, SplitData("train", queries, qrels, []), depth=3, negatives=2, val_fraction=0.2, seed=1)
    assert len(mined.val_qids) == 2 and not set(mined.val_qids) & set(mined.train_qids)
    assert {p.qid for p in mined.pairs} == set(mined.train_qids)
    assert [v.qid for v in mined.validation] == mined.val_qids
    # only the missed positives of training queries are fetched from the index
    assert {q for q, _t, _d in miner.asked} == {q for q in mined.train_qids if int(q[1:]) % 2 == 0}


def test_mine_without_any_pair_is_a_clear_error() -> None:
    queries = {"q1": "one"}
    with pytest.raises(ConfigError, match="no training pairs"):
        mine(ListMiner({"one": cands("a")}, {}), SplitData("train", queries, {"q1": {"zz": 1}}, []),
             val_fraction=0.0)
