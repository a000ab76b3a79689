"""The long-query tools on small inputs: ops/bench/make_long_queries.py cuts judged documents into
a kept first part and a paragraph query, deterministically; ops/bench/eval_query_window.py's variants change only the
query side and its comparison flags a drop past the tolerance; ops/bench/bench_query_length.py times every cell every
round."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from hybridsearch.settings import EmbeddingSettings
from ops_modules import load_ops

SENTENCE = "Vitamin D supplementation changed the fracture rate in the older adults of the trial."


def beir(root: Path, docs: list[dict[str, str]], judged: list[str]) -> Path:
    (root / "qrels").mkdir(parents=True)
    with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(d) + "\n" for d in docs)
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": "a claim"}) + "\n"
                                                for i in range(len(judged))), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\t{d}\t1\n" for i, d in enumerate(judged)), encoding="utf-8")
    return root


def test_make_long_queries_cuts_each_judged_document_once_and_the_same_way_twice(tmp_path: Path) -> None:
    make = load_ops("make_long_queries")
    long_text = " ".join(f"{SENTENCE[:-1]} number {i}." for i in range(12))
    docs = [{"_id": "d1", "title": "Long", "text": long_text},
            {"_id": "d2", "title": "One sentence", "text": SENTENCE},
            {"_id": "d3", "title": "Short", "text": f"{SENTENCE} {SENTENCE}"},
            {"_id": "d4", "title": "Not judged", "text": long_text}]
    source = beir(tmp_path / "src", docs, ["d1", "d2", "d3"])
    info = make.make(source, tmp_path / "out", ["test"], 40)
    assert info["queries"] == 1 and info["skipped"] == {"one_sentence": 1, "short_tail": 1}
    with gzip.open(tmp_path / "out" / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        corpus = {d["_id"]: d for d in map(json.loads, fh)}
    (query,) = [json.loads(line) for line in (tmp_path / "out" / "queries.jsonl").read_text().splitlines()]
    assert query["_id"] == "long-d1"
    head = corpus["d1"]["text"]
    assert f"{head} {query['text']}" == long_text and head.endswith(".") and query["text"].startswith("Vitamin")
    assert abs(len(head) - len(query["text"])) <= len(SENTENCE) + 12  # cut near the middle
    assert corpus["d2"] == docs[1] and corpus["d3"] == docs[2] and corpus["d4"] == docs[3]
    assert (tmp_path / "out" / "qrels" / "test.tsv").read_text().splitlines() == [
        "query-id\tcorpus-id\tscore", "long-d1\td1\t1"]
    make.make(source, tmp_path / "again", ["test"], 40)
    for name in ("corpus.jsonl.gz", "queries.jsonl", "qrels/test.tsv"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name


@pytest.mark.parametrize(("name", "window", "int8"), [("limit", None, False), ("w64", 64, False),
                                                      ("int8", None, True), ("int8-w128", 128, True)])
def test_eval_query_window_variants_change_only_the_query_side(name: str, window: int | None, int8: bool) -> None:
    tool = load_ops("eval_query_window")
    base = EmbeddingSettings(query_prompt="q: ", batch_size=7)
    got = tool.variant_settings(base, name)
    assert (got.query_max_tokens, got.onnx_quantized) == (window, int8)
    assert (got.model, got.dims, got.query_prompt, got.batch_size) == (base.model, base.dims, "q: ", 7)
    assert got.backend == "onnx"  # never a silent fall-back to torch


def test_eval_query_window_refuses_unknown_variants() -> None:
    with pytest.raises(ValueError, match="w<N>"):
        load_ops("eval_query_window").variant_settings(EmbeddingSettings(), "window64")


def result(collection: str, variant: str, dense: float, hybrid: float) -> dict[str, Any]:
    return {"collection": collection, "variant": variant,
            "metrics": {"dense": {"ndcg@10": dense, "recall@100": 0.9}, "hybrid": {"ndcg@10": hybrid,
                                                                                 "recall@100": 0.9}}}


def test_eval_query_window_compares_each_variant_with_the_models_limit() -> None:
    tool = load_ops("eval_query_window")
    got = tool.compare([result("a", "limit", 0.70, 0.72), result("b", "limit", 0.90, 0.95),
                        result("a", "w64", 0.699, 0.72), result("b", "w64", 0.90, 0.948),
                        result("a", "int8", 0.696, 0.72), result("b", "int8", 0.91, 0.95)], 0.003)
    assert got["w64"]["within"] and got["w64"]["deltas"]["a"]["dense"]["ndcg@10"] == -0.001
    assert not got["int8"]["within"]  # 0.004 lost on one collection in one mode is enough
    assert got["int8"]["deltas"]["b"]["dense"]["ndcg@10"] == 0.01


def test_bench_query_length_times_every_cell_every_round() -> None:
    bench = load_ops("bench_query_length")
    calls: list[tuple[str, str]] = []

    def encoder(variant: str) -> Any:
        return lambda text: calls.append((variant, text))

    texts = {8: ["a", "b"], 256: ["c"]}
    samples = bench.measure({"fp32": encoder("fp32"), "int8": encoder("int8")}, texts, rounds=5, seed=1)
    assert {v: {n: len(ms) for n, ms in by.items()} for v, by in samples.items()} == {
        "fp32": {8: 5, 256: 5}, "int8": {8: 5, 256: 5}}
    assert ("fp32", "b") in calls and ("int8", "c") in calls  # the texts of a length take turns
    summary = bench.summarise({"fp32": {8: [1.0, 2.0, 3.0], 256: [10.0]}, "int8": {8: [1.0], 256: [4.0]}})
    assert summary["median_ms"]["fp32"]["8"]["p50"] == 2.0
    assert summary["ratios"]["int8 / fp32"] == {"8": 0.5, "256": 0.4}
    assert summary["ratios"]["fp32 / fp32@256"]["8"] == 0.2
