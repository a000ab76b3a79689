"""The calibrate-fusion workflow called from Python, with a stand-in search at the I/O seam; the train/test guard
it shares with training; progress reported as events by the core, drawn by the CLI only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import hybridsearch.eval.calibrate as calibrate_mod
from hybridsearch.errors import ConfigError
from hybridsearch.eval.calibrate import Calibration, calibrate_fusion
from hybridsearch.progress import ProgressEvent, Task
from hybridsearch.query.results import Hit, SearchResult, StageScore
from hybridsearch.settings import load_settings


def _collection(root: Path, train: str = "abcd", test: str = "ef") -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(f'{{"_id": "d{q}", "title": "", "text": "x"}}\n' for q in "abcdef"))
    (root / "queries.jsonl").write_text("".join(f'{{"_id": "{q}", "text": "query {q}"}}\n' for q in "abcdef"))
    for split, qids in (("train", train), ("test", test)):
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                                      + "".join(f"{q}\td{q}\t1\n" for q in qids))
    return root


class _Engine:
    """Stands in for the engine client: the workflow only passes it to checked_live_index and record_meta."""

    def __init__(self) -> None:
        self.recorded: dict[str, Any] = {}


def _search(text: str, mode: str) -> SearchResult:
    """BM25 ranks the query's own document first; kNN ranks it second."""
    own = "d" + text.split()[-1]
    others = [f"d{q}" for q in "abcdef" if f"d{q}" != own]
    docs = [own, *others] if mode == "bm25" else [others[0], own, *others[1:]]
    stage = "bm25" if mode == "bm25" else "knn"
    hits = [Hit.model_construct(doc_id=d, rank=i + 1, **{stage: StageScore(rank=i + 1, score=10.0 - i)},
                                **{other: None for other in ("bm25", "knn") if other != stage})
            for i, d in enumerate(docs)]
    return SearchResult.model_construct(query=text, mode=mode, hits=hits)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> _Engine:
    es = _Engine()
    monkeypatch.setattr(calibrate_mod, "checked_live_index", lambda client, s: f"{s.index.prefix}-chunks-v1")

    def record(client: _Engine, index: str, **entries: Any) -> dict[str, Any]:
        client.recorded[index] = entries
        return entries
    monkeypatch.setattr(calibrate_mod, "record_meta", record)
    return es


def test_calibrate_fusion_runs_from_python_records_and_reports(tmp_path: Path, engine: _Engine) -> None:
    events: list[ProgressEvent] = []
    done = calibrate_fusion(_collection(tmp_path / "toy"), load_settings(), out=tmp_path / "reports",
                            progress=events.append, es=engine, search=_search)  # type: ignore[arg-type]
    assert isinstance(done, Calibration)
    assert done.index == "eval-toy-chunks-v1" and done.split == "train" and done.recorded
    assert done.queries == 4 and done.bm25_score == 1.0
    assert engine.recorded["eval-toy-chunks-v1"]["fusion_calibration"] == done.meta()
    assert done.report is not None and json.loads(done.report.read_text())["index"] == done.index
    assert [(e.task, e.done, e.total) for e in events] == [("lists", n, 4) for n in range(5)]
    assert events[-1].finished


def test_calibrate_fusion_dry_run_records_nothing(tmp_path: Path, engine: _Engine) -> None:
    done = calibrate_fusion(_collection(tmp_path / "toy"), load_settings(), dry_run=True, es=engine,  # type: ignore[arg-type]
                            search=_search)
    assert not done.recorded and engine.recorded == {} and done.report is None


def test_calibrate_fusion_refuses_queries_judged_in_test_too_naming_them(tmp_path: Path, engine: _Engine) -> None:
    root = _collection(tmp_path / "toy", train="abcd", test="cdef")
    with pytest.raises(ConfigError, match=r"2 calibration queries are also judged in .*test.tsv \(c, d\)"):
        calibrate_fusion(root, load_settings(), es=engine, search=_search)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="refusing to calibrate on the 'test' split"):
        calibrate_fusion(root, load_settings(), split="test", es=engine, search=_search)  # type: ignore[arg-type]


def test_a_task_reports_counts_and_finishes_once() -> None:
    events: list[ProgressEvent] = []
    task = Task(events.append, "bm25", 2)
    task.advance()
    task.update(detail="half")
    task.advance()
    task.finish()
    assert [(e.done, e.detail, e.finished) for e in events] == [(0, "", False), (1, "", False), (1, "half", False),
                                                                (2, "half", True)]


CORE_WITHOUT_RICH = """
import sys
sys.modules["rich"] = None  # importing rich (or any rich.x) now raises ImportError
import hybridsearch.eval.calibrate, hybridsearch.eval.harness, hybridsearch.ingest.pipeline
import hybridsearch.training.negatives, hybridsearch.training.reranker, hybridsearch.training.embedder
from hybridsearch.eval.calibrate import record_lists
from hybridsearch.progress import Task
from hybridsearch.query.results import SearchResult
events = []
task = Task(events.append, "lists", 2)
record_lists(lambda text, mode: SearchResult.model_construct(hits=[]), {"a": "x", "b": "y"}, on_query=task.advance)
print([(e.task, e.done, e.total) for e in events])
"""


def test_core_workflows_report_progress_without_rich() -> None:
    out = subprocess.run([sys.executable, "-c", CORE_WITHOUT_RICH], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[('lists', 0, 2), ('lists', 1, 2), ('lists', 2, 2)]"


def test_the_cli_renderer_draws_events_and_notes() -> None:
    import io

    from hybridsearch.cli.output import RichProgress, console

    buf = io.StringIO()
    con = console()
    con.file = buf
    with RichProgress(con, keep_finished=False) as bar:
        task = Task(bar, "lists", 2)
        task.advance(2)
        bar(ProgressEvent("training", note="epoch 1: validation ndcg@10 0.5000"))
    assert "epoch 1: validation ndcg@10 0.5000" in buf.getvalue()


def test_training_runs_the_same_guard_before_touching_the_cluster(tmp_path: Path) -> None:
    """Both trainers refuse a train split sharing query ids with test, naming them (as calibration does)."""
    from hybridsearch.training.config import EmbedderConfig, TrainingConfig
    from hybridsearch.training.embedder import run_embedder_training
    from hybridsearch.training.reranker import run_training

    root = _collection(tmp_path / "toy", train="abcd", test="cdef")
    shared = r"2 training queries are also judged in .*test.tsv \(c, d\)"
    with pytest.raises(ConfigError, match=shared):
        run_training(TrainingConfig(dataset=root, out=tmp_path / "r"), load_settings())
    with pytest.raises(ConfigError, match=shared):
        run_embedder_training(EmbedderConfig(dataset=root, out=tmp_path / "e"), load_settings())


def test_the_cli_renders_the_workflows_outcome(tmp_path: Path, engine: _Engine, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import functools

    from hybridsearch.cli.main import main

    monkeypatch.setattr(calibrate_mod, "calibrate_fusion",
                        functools.partial(calibrate_fusion, es=engine, search=_search))
    root = _collection(tmp_path / "toy")
    assert main(["calibrate-fusion", str(root), "--out", str(tmp_path / "r"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "nDCG@10 on 4 train queries (best of" in out and "BM25 alone 1.0000" in out
    assert "would record in eval-toy-chunks-v1's _meta:" in out and "wrote " in out and engine.recorded == {}
