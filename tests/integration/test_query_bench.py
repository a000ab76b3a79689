"""ops/bench/bench_query.py runs end to end on a tiny SciFact subset and reports every figure it promises."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from hybridsearch.settings import Settings

# the benchmark script; its searches are test_search.py's on every engine
pytestmark = pytest.mark.engine_neutral

ROOT = Path(__file__).resolve().parents[2]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"


@pytest.mark.slow
@pytest.mark.skipif(not SCIFACT.is_dir(), reason="SciFact is not in ../shared/datasets")
def test_bench_query_on_a_small_subset(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       tiny_bi_encoder: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_query", ROOT / "ops" / "bench" / "bench_query.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setenv("HSP_ES_URL", settings.es.url)
    # a tiny random model (32 dims): every stage and encoder of the benchmark runs, at little cost
    monkeypatch.setenv("HSP_EMBEDDING__MODEL", str(tiny_bi_encoder))
    monkeypatch.setenv("HSP_EMBEDDING__DIMS", "32")
    monkeypatch.setenv("HSP_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "bench.json"
    assert bench.main(["--prefix", settings.index.prefix, "--build-subset", "20", "--queries", "3", "--warmup", "1",
                       "--sweep", "5,20", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    modes = figures["modes"]
    assert figures["queries"] == 3 and set(modes) >= {"hybrid", "bm25", "dense"}
    for stage in ("embed_ms", "search_ms", "fusion_ms", "total_ms"):
        assert modes["hybrid"][stage]["p95"] >= modes["hybrid"][stage]["p50"] >= 0
    assert 0 < modes["overhead_share"] < 1 and modes["hybrid_vs_slower_p50"] > 0
    assert modes["bm25"]["embed_ms"]["p50"] == 0 and 0 <= modes["hybrid"]["ndcg@10"] <= 1
    assert [row["depth"] for row in figures["sweep"]] == [5, 20]
    assert figures["sweep"][0]["candidates_mean"] <= figures["sweep"][1]["candidates_mean"]
