"""The ops/bench/ benchmarks still run: each one at its smallest size against the node, exit 0, and the report it writes
parses and holds its main figures.

Every run uses the test's own index prefix (deleted afterwards by the ``settings`` fixture), a tiny random
bi-encoder (32 dims: embedding costs nothing, the code paths are the real ones), a tiny cross-encoder where one
reranks, a BEIR collection of a few SciFact queries and documents, and a cache folder of its own.

Not run here, and why:

* ops/bench/bench_query.py: tests/integration/test_query_bench.py runs it end to end on a SciFact subset;
* ops/bench/bench_peers.py and ops/bench/bench_load.py: they drive Haystack and LangChain from their own virtual
  environments (ops/requirements-peers.txt), which the test environment does not have;
* ops/bench/bench_scale.py runs here on the test's node with one size of a few hundred chunks (it is meant for
  a 3-node cluster, ``ops/es-local.sh cluster``);
* GPU paths (``--device cuda``): no GPU in CI.

Each script's ``--help`` runs in tests/unit/test_ops_scripts.py.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.eval.harness import choose_index, eval_settings, ingest_corpus
from hybridsearch.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops" / "bench"
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
QUERIES, DOCUMENTS = 3, 24

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not SCIFACT.is_dir(), reason="SciFact is not in ../shared/datasets")]


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BEIR folder: the first judged test queries of SciFact, their documents and others up to DOCUMENTS."""
    root = tmp_path_factory.mktemp("tiny-scifact")
    qrels: dict[str, dict[str, int]] = {}
    for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc, score = line.split("\t")
        if qid in qrels or len(qrels) < QUERIES:
            qrels.setdefault(qid, {})[doc] = int(score)
    judged = {d for docs in qrels.values() for d in docs}
    kept: list[str] = []
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)["_id"]
            if doc in judged or len(kept) < DOCUMENTS - len(judged):
                kept.append(line)
            if len(kept) >= DOCUMENTS and judged <= {json.loads(k)["_id"] for k in kept}:
                break
    (root / "corpus.jsonl").write_text("".join(kept), encoding="utf-8")
    queries = [q for q in (SCIFACT / "queries.jsonl").read_text().splitlines() if json.loads(q)["_id"] in qrels]
    (root / "queries.jsonl").write_text("\n".join(queries) + "\n", encoding="utf-8")
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, docs in qrels.items()
                                                 for d, s in docs.items()), encoding="utf-8")
    return root


@pytest.fixture
def tiny(settings: Settings, tiny_bi_encoder: Path) -> Settings:
    """The test's settings with the tiny bi-encoder."""
    return settings.model_copy(update={"embedding": settings.embedding.model_copy(
        update={"model": str(tiny_bi_encoder), "dims": 32})})


@pytest.fixture
def env(es_url: str, tiny: Settings, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a script run: the node, the test's prefix, the tiny model, a cache folder of its own."""
    yield {**os.environ, "HSP_ES_URL": es_url, "HSP_INDEX__PREFIX": tiny.index.prefix,
           "HSP_EMBEDDING__MODEL": tiny.embedding.model, "HSP_EMBEDDING__DIMS": str(tiny.embedding.dims),
           "HSP_CACHE": str(tmp_path / "cache"), "HSP_INGEST__DEAD_LETTER_DIR": str(tmp_path / "dead-letter"),
           "HSP_QUERY__LOG_QUERIES": "false", "HSP_RERANKER__ENABLED": "false", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "MPLBACKEND": "Agg"}


def run(script: str, env: dict[str, str], *args: str | Path) -> str:
    done = subprocess.run([sys.executable, str(OPS / script), *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (f"ops/bench/{script} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                                  f"{done.stderr[-3000:]}")
    return done.stdout


def report(path: Path) -> Any:
    assert path.is_file(), f"no report at {path}"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.engine_neutral  # ingest benchmark: ingest is test_ingest.py's on every engine
def test_bench_ingest(env: dict[str, str], tiny: Settings, collection: Path, tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    run("bench_ingest.py", env, "--corpus", collection / "corpus.jsonl", "--limit", 8, "--slices", 1,
        "--backend-sample", 0, "--prefix", f"{tiny.index.prefix}-ingest", "--json", out)
    figures = report(out)
    assert figures["documents"] == 8 and figures["failed"] == 0 and figures["chunks"] >= 8
    assert figures["rerun_changed_nothing"] is True and figures["pipeline_chunks_per_s"] > 0


@pytest.mark.engine_neutral  # ingest benchmark: ingest is test_ingest.py's on every engine
def test_bench_write_amplification(env: dict[str, str], tiny: Settings, collection: Path, tmp_path: Path) -> None:
    out = tmp_path / "wa.json"
    run("bench_write_amplification.py", env, "--baseline", "none", "--corpus", collection / "corpus.jsonl",
        "--limit", 10, "--prefix", f"{tiny.index.prefix}-wa", "--json", out)
    rows = report(out)
    assert [(r["side"], r["run"]) for r in rows] == [("this", "fresh ingest"), ("this", "10 % changed")]
    assert rows[0]["ops_per_chunk"] == 1.0  # each chunk written once


def test_bench_vectors(env: dict[str, str], tiny: Settings, collection: Path, tmp_path: Path) -> None:
    out = tmp_path / "vectors"
    run("bench_vectors.py", env, "--options", "hnsw", "--collection", collection, "--limit-queries", 2,
        "--warmup", 0, "--prefix", f"{tiny.index.prefix}-vec", "--out", out)
    (json_report,) = out.glob("bench-vectors-*.json")
    data = report(json_report)
    (row,) = data["rows"]
    assert data["queries"] == 2 and data["dims"] == 32 and row["option"] == "hnsw"
    assert 0 <= row[f"recall_at_10_nc{data['num_candidates'][0]}"] <= 1 and row["dense_p50_ms"] > 0
    assert json_report.with_suffix(".png").stat().st_size > 0


def test_bench_knn_width(env: dict[str, str], es: EngineClient, tiny: Settings, collection: Path,
                         tmp_path: Path) -> None:
    """Recall of the kNN list per rescoring factor on a built index: with the whole index rescored it is exact."""
    built = eval_settings(tiny, f"{tiny.index.prefix}-width")
    choose_index(es, built)
    assert ingest_corpus(es, built, collection / "corpus.jsonl", embedder=Embedder(built.embedding, built.models)
                         )["chunks"] > 0
    out = tmp_path / "width"
    stdout = run("bench_knn_width.py", env, "--prefix", built.index.prefix, "--queries",
                 collection / "queries.jsonl", "--oversample", "0,3", "--out", out)
    (json_report,) = out.glob("bench-knn-width-*.json")
    data = report(json_report)
    off, rescored = data["rows"]
    assert data["queries"] == QUERIES and data["chunks"] > 0 and off["oversample"] is None
    depth = min(off["k"], data["chunks"])
    if es.engine.rescores_vectors:  # 3 x k candidates cover this small index, rescored on their floats
        assert rescored["oversample"] == 3 and rescored["num_candidates"] >= 3 * rescored["k"]
        assert rescored["recall_at_10"] == rescored[f"recall_at_{depth}"] == 1.0
    else:
        assert rescored["oversample"] is None and "cannot" in rescored["width"]
    assert 0 < off[f"recall_at_{depth}"] <= 1 and "recall" in stdout


def test_bench_single_list(env: dict[str, str], es: EngineClient, tiny: Settings, collection: Path,
                           tmp_path: Path) -> None:
    built = eval_settings(tiny, f"{tiny.index.prefix}-single")
    choose_index(es, built)
    embedder = Embedder(built.embedding, built.models)
    assert ingest_corpus(es, built, collection / "corpus.jsonl", embedder=embedder)["chunks"] > 0
    out = tmp_path / "single.json"
    run("bench_single_list.py", env, "--prefix", built.index.prefix, "--dataset", collection, "--queries", 2,
        "--k", 10, "--json", out)
    figures = report(out)
    assert set(figures) == {"bm25", "dense"}
    assert figures["dense"]["search (SearchClient, total)"]["p50"] > 0 and "embed (encoder alone)" in figures["dense"]


@pytest.mark.engine_neutral  # no engine at all
def test_bench_rerank(env: dict[str, str], tiny_cross_encoder: Path, tmp_path: Path) -> None:
    out, png = tmp_path / "rerank.json", tmp_path / "rerank.png"
    run("bench_rerank.py", env, "--model", tiny_cross_encoder, "--device", "cpu", "--passages", 4, "--words", 30,
        "--rounds", 1, "--clients", 2, "--requests", 1, "--json", out, "--plot", png)
    figures = report(out)
    assert figures["passages"] == 4 and len(figures["inproc_ms"]) == len(figures["service_ms"]) == 1
    assert figures["batching_on"]["requests"] == figures["batching_off"]["requests"] == 2  # every request answered
    assert png.stat().st_size > 0


def test_bench_scale(env: dict[str, str], es: EngineClient, tiny: Settings, tmp_path: Path) -> None:
    """The scale benchmark at its smallest: one size on the test's node, one primary, a second per concurrency."""
    prefix, out = f"{tiny.index.prefix}-scale", tmp_path / "scale"
    stdout = run("bench_scale.py", env, "--es-url", env["HSP_ES_URL"], "--prefix", prefix, "--sizes", 300,
                 "--shards", 1, "--seconds", 1, "--queries", 8, "--out", out)
    (json_report,) = out.glob("bench-scale-*.json")
    (row,) = report(json_report)
    assert row["chunks"] == 300 and row["index_seconds"] > 0 and row["bytes_per_chunk"] > 0
    assert 0 < row["knn_recall_at_10"] <= 1 and row["num_candidates"] >= 10
    assert row["p50_c1_ms"] > 0 and row["p50_c16_ms"] > 0 and row["errors_c1"] == row["errors_c16"] == 0
    assert json_report.with_suffix(".png").stat().st_size > 0 and "scale curve" in stdout
    left = es.send(request.get_index(f"{prefix}-300-*", expand_wildcards="all", allow_no_indices=True))
    assert not left, f"indices left after measuring (no --keep): {sorted(left)}"
