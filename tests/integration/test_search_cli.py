"""`hsp search` end to end against the real node."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from corpora import index_corpus
from hybridsearch.cli.main import main
from hybridsearch.cli.search import NO_CROSS_ENCODER
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient
from hybridsearch.settings import Settings


@pytest.fixture()
def env(es: EngineClient, settings: Settings, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> Settings:
    index_corpus(es, settings, embedder)
    monkeypatch.setenv("HSP_INDEX__PREFIX", settings.index.prefix)
    monkeypatch.setenv("HSP_QUERY__LOG_QUERIES", "false")
    monkeypatch.setenv("HSP_RERANKER__ENABLED", "false")
    monkeypatch.setenv("COLUMNS", "200")
    return settings


def test_table_with_filters_and_explain(env: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "coffee beans", "--mode", "bm25", "--filter", "source=wiki", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "bm25 search of" in out and "d5" in out and "Coffee" in out and "Roasted coffee beans" in out
    # d4 is news; a word match, since the random index prefix may itself contain "d4"
    assert "BM25: rank 1" in out and re.search(r"\bd4\b", out) is None


def test_a_pipe_gets_plain_blocks_in_80_columns_and_one_line_on_the_missing_reranker(
        env: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setenv("HSP_RERANKER__ENABLED", "true")
    monkeypatch.setenv("HSP_RERANKER__MODEL", str(tmp_path / "no-cross-encoder-here"))
    assert main(["search", "how do plants turn sunlight into sugar", "--k", "3"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "\x1b" not in out and not re.search("[\u2500-\u259f]", out) and max(map(len, lines)) <= 80
    assert [line for line in lines if line.startswith("not reranked")] == [NO_CROSS_ENCODER]
    assert re.search(r"^ 1\. .*  d1$", out, re.MULTILINE) and "BM25 #" in out and "kNN #1 " in out
    for argv in (["index", "status"], ["models", "list"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and not re.search("[\u2500-\u259f]", out)
        assert max(map(len, out.splitlines())) <= 80


def test_json_hybrid_search(env: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "how do plants turn sunlight into sugar", "--k", "3", "--json", "--no-rerank"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hits"][0]["doc_id"] == "d1" and data["hits"][0]["knn"]["rank"] >= 1
    assert data["rerank_reason"] == "rerank not requested" and len(data["hits"]) == 3


def test_why(env: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "coffee beans", "--mode", "bm25", "--why", "d5"]) == 0
    out = capsys.readouterr().out
    assert "why d5" in out and "BM25: rank 1" in out and "final: rank 1" in out


def test_bad_input_exits_with_usage_code(env: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "   ", "--mode", "bm25"]) == 2
    assert main(["search", "coffee", "--mode", "bm25", "--filter", "body=x"]) == 2
    assert main(["search", "coffee", "--mode", "bm25", "--k", "0"]) == 2
    err = capsys.readouterr().err
    assert "query is empty" in err and "unknown field 'body'" in err and "k must be" in err
    assert "Traceback" not in err


def test_missing_index_exits_with_cluster_code(env: Settings, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HSP_INDEX__PREFIX", env.index.prefix + "-nothing")
    assert main(["search", "coffee", "--mode", "bm25"]) == 3
    assert "does not exist" in capsys.readouterr().err
