"""BEIR collection loading: files, gzip, splits, and clear errors on bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from hybridsearch.errors import ConfigError
from hybridsearch.eval.datasets import collection_name, iter_corpus, load_collection

CORPUS = [{"_id": "d1", "title": "Alpha", "text": "alpha text"}, {"_id": "d2", "title": "", "text": "beta"},
          {"_id": 3, "text": "gamma"}]
QUERIES = [{"_id": "1", "text": "alpha?"}, {"_id": "2", "text": "beta?"}, {"_id": "3", "text": "gamma?"},
           {"_id": "10", "text": "no judgements"}]


def write_beir(root: Path, *, gz: bool = False, qrels: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(json.dumps(r) for r in CORPUS) + "\n"
    if gz:
        with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.write(lines)
    else:
        (root / "corpus.jsonl").write_text(lines, encoding="utf-8")
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in QUERIES) + "\n\n", encoding="utf-8")
    (root / "qrels").mkdir(exist_ok=True)
    splits = qrels or {
        "test": "query-id\tcorpus-id\tscore\n1\td1\t1\n2\td2\t2\n2\td1\t0\n99\td3\t1\n",
        "train": "query-id\tcorpus-id\tscore\n3\t3\t1\n",
    }
    for name, text in splits.items():
        (root / "qrels" / f"{name}.tsv").write_text(text, encoding="utf-8")
    return root


def test_loads_the_test_split_keeping_only_judged_queries_that_exist(tmp_path: Path) -> None:
    col = load_collection(write_beir(tmp_path / "MyData Set"))
    assert col.name == "mydata-set"
    assert col.split == "test"
    assert col.queries == {"1": "alpha?", "2": "beta?"}  # "3" is train, "10" unjudged
    assert col.qrels == {"1": {"d1": 1}, "2": {"d2": 2, "d1": 0}}
    assert col.skipped_queries == 1  # "99" is judged but has no query text
    assert col.corpus_path.name == "corpus.jsonl"
    assert len(col) == 2


def test_other_split_and_gzipped_corpus(tmp_path: Path) -> None:
    col = load_collection(write_beir(tmp_path / "c", gz=True), split="train")
    assert col.queries == {"3": "gamma?"}
    assert col.corpus_path.name == "corpus.jsonl.gz"
    assert [r["_id"] for r in iter_corpus(col.corpus_path)] == ["d1", "d2", "3"]
    assert list(iter_corpus(col.corpus_path, limit=1)) == [{"_id": "d1", "title": "Alpha", "text": "alpha text"}]


def test_limit_keeps_the_first_queries_in_natural_id_order(tmp_path: Path) -> None:
    qrels = {"test": "query-id\tcorpus-id\tscore\n10\td1\t1\n2\td2\t1\n3\t3\t1\n"}
    col = load_collection(write_beir(tmp_path / "c", qrels=qrels))
    small = col.limit(2)
    assert list(small.queries) == ["2", "3"] and set(small.qrels) == {"2", "3"}
    assert col.limit(None) is col and col.limit(50) is col


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: (r / "corpus.jsonl").unlink(), "no corpus.jsonl"),
        (lambda r: (r / "queries.jsonl").write_text('{"_id": "1"}\n'), "needs '_id' and 'text'"),
        (lambda r: (r / "queries.jsonl").write_text("{oops\n"), r"queries.jsonl:1: invalid JSON"),
        (lambda r: (r / "qrels" / "test.tsv").unlink(), r"no qrels for split 'test' \(available: train\)"),
        (lambda r: (r / "qrels" / "test.tsv").write_text("1\td1\t1\n"), "expected a header line"),
        (lambda r: (r / "qrels" / "test.tsv").write_text("q\tc\ts\n1\td1\n"), "test.tsv:2: expected 3"),
        (lambda r: (r / "qrels" / "test.tsv").write_text("q\tc\ts\n1\td1\thigh\n"), "is not a number"),
        (lambda r: (r / "qrels" / "test.tsv").write_text("q\tc\ts\n77\td1\t1\n"), "no query of split"),
    ],
)
def test_bad_collections_raise_config_errors_naming_the_problem(tmp_path: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    root = write_beir(tmp_path / "c")
    mutate(root)
    with pytest.raises(ConfigError, match=message):
        load_collection(root)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_collection(tmp_path / "nope")


def test_collection_name_is_index_safe(tmp_path: Path) -> None:
    assert collection_name(tmp_path / "SciFact") == "scifact"
    assert collection_name(tmp_path / "BEIR: Trec Covid!") == "beir-trec-covid"
