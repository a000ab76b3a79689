"""``hsp demo`` end to end on a few stdlib documents: ingest, then queries with per-stage ranks."""

from __future__ import annotations

import re

import pytest

from hybridsearch.cli.main import main
from hybridsearch.engine import EngineClient, request
from hybridsearch.settings import Settings

# the demo command; its ingest and search are test_ingest.py's and test_search.py's on every engine
pytestmark = pytest.mark.engine_neutral


def test_demo_ingests_then_answers_and_a_rerun_changes_nothing(es: EngineClient, settings: Settings,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HSP_ES_URL", settings.es.url)
    monkeypatch.setenv("HSP_INDEX__PREFIX", settings.index.prefix)
    monkeypatch.setenv("HSP_QUERY__LOG_QUERIES", "false")
    monkeypatch.setenv("HSP_RERANKER__ENABLED", "false")
    monkeypatch.setenv("HSP_INGEST__DEAD_LETTER_DIR", str(settings.ingest.dead_letter_dir))
    monkeypatch.setenv("COLUMNS", "200")
    args = ["demo", "--limit", "5", "-q", "assert statement raises AssertionError", "--k", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "5 documents →" in out and "0 failed" in out
    assert "» assert statement raises AssertionError" in out
    assert " 1. assert (Python language reference)  py:topic:assert\n" in out
    assert "BM25 #" in out and "kNN #" in out and "RRF #" in out
    assert out.count("not reranked: reranker disabled (HSP_RERANKER__ENABLED=false)\n") == 1  # said once, in one line
    hits = es.send(request.count(settings.index.alias, {"prefix": {"doc_id": "py:topic:"}}))["count"]
    assert hits > 5  # the long topics were cut into several chunks

    assert main(args) == 0  # the second run re-embeds nothing
    again = re.search(r"5 documents → (\d+) chunks: 0 indexed, 0 updated, (\d+) unchanged, 0 failed",
                      capsys.readouterr().out)
    assert again is not None and int(again.group(2)) == hits
