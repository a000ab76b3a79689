"""What a person sees: ``hsp search``, ``hsp models list``, ``hsp doctor``, ``hsp index status``, ``hsp eval`` and
``hsp ingest`` in a pipe are plain text (no escape codes, no box drawing) that fits 80 columns, nothing cut; a search
that is not reranked says why in one line, and so does a failed query-log write.

``hsp search`` runs through ``main`` with the search client replaced at its seam (``SearchClient.from_settings``)
by one that answers a result built from real text: the running interpreter's own language-reference topics.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from hybridsearch import doctor
from hybridsearch.cli import index as cli_index
from hybridsearch.cli.main import main
from hybridsearch.cli.search import NO_CROSS_ENCODER
from hybridsearch.demo import topic_documents
from hybridsearch.index.versions import ClusterStatus, IndexStatus
from hybridsearch.query.results import Highlight, Hit, RerankOutcome, SearchResult, StageScore

ESCAPE = "\x1b"
BOX_DRAWING = re.compile("[\u2500-\u259f]")  # box drawing and block elements
#: the long reason a search carries when the reranker's model is not on this machine (its message: problem and fix)
MISSING_MODEL = ("reranker error: reranker model 'cross-encoder/ms-marco-MiniLM-L-6-v2' is not on this machine (not a "
                 "local folder, not in the Hugging Face cache) and downloads are off. Copy a sentence-transformers "
                 "CrossEncoder (or a Hugging Face *ForSequenceClassification folder) for 'cross-encoder/ms-marco-"
                 "MiniLM-L-6-v2' to this machine and point HSP_RERANKER__MODEL=/path/to/folder at it, or set "
                 "HSP_RERANKER__ENABLED=false to search without reranking (HSP_MODELS__ALLOW_DOWNLOAD=true lets it "
                 "download from the Hugging Face Hub)")
QUERY = "exception raised by the assert statement"


@pytest.fixture(autouse=True)
def pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard output is a pipe of no stated width, as in ``hsp search ... | cat``."""
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)


def result(outcome: RerankOutcome = RerankOutcome.NO_MODEL, reason: str | None = MISSING_MODEL,
           hits: int = 10) -> SearchResult:
    """A hybrid result of ``hits`` long language-reference topics, the last with a long title and no BM25 rank."""
    topics = sorted(topic_documents(), key=lambda d: -len(d.text))[:hits]
    found = []
    for rank, doc in enumerate(topics, start=1):
        at = doc.text.find("raise")
        found.append(Hit(
            doc_id=doc.doc_id, chunk_id=f"{doc.doc_id}#0", title=doc.title if rank < hits else "A title " * 30,
            text=doc.text, score=1 / (60 + rank), rank=rank, highlights=[Highlight(start=at, end=at + 5, term="raise")]
            if at >= 0 else [], bm25=None if rank == hits else StageScore(rank=rank + 1, score=20.0 / rank),
            knn=StageScore(rank=rank, score=0.9 - rank / 100), fused=StageScore(rank=rank, score=1 / (60 + rank))))
    return SearchResult(query=QUERY, mode="hybrid", index="hsp-chunks-v1", k=hits, hits=found, candidates=150,
                        rerank_outcome=outcome, rerank_reason=reason)


class Answering:
    """The search client seen by ``hsp search``: checks nothing, loads nothing, answers ``answer``."""

    def __init__(self, answer: SearchResult) -> None:
        self.answer = answer
        self.reranker: object = None

    def __enter__(self) -> Answering:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def index(self) -> str:
        return self.answer.index

    def check(self, *args: Any, **kwargs: Any) -> None:
        pass

    def warm_up(self, mode: str) -> None:
        pass

    def search(self, query: str, **kwargs: Any) -> SearchResult:
        return self.answer


def search(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], answer: SearchResult,
           *argv: str) -> str:
    from hybridsearch.query.client import SearchClient

    monkeypatch.setattr(SearchClient, "from_settings", lambda *a, **kw: Answering(answer))
    assert main(["search", QUERY, *argv]) == 0
    return capsys.readouterr().out


def assert_plain_and_narrow(out: str) -> list[str]:
    lines = out.splitlines()
    assert ESCAPE not in out and not BOX_DRAWING.search(out)
    assert max(len(line) for line in lines) <= 80
    return lines


def test_search_in_a_pipe_is_plain_text_with_a_block_per_hit_in_80_columns(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    answer = result()
    lines = assert_plain_and_narrow(search(monkeypatch, capsys, answer))
    assert len(lines) <= 60
    blocks = "\n".join(lines).split("\n\n")[1:]
    assert len(blocks) == 10
    for block, hit in zip(blocks, answer.hits, strict=True):
        head, stages, *snippet = block.splitlines()
        assert head.startswith(f"{hit.rank:>2}. ") and head.endswith(hit.doc_id)
        bm25 = "BM25 –" if hit.bm25 is None else f"BM25 #{hit.bm25.rank} ({hit.bm25.score:.3g})"
        knn = f"kNN #{hit.rank} ({0.9 - hit.rank / 100:.3g})"
        assert stages == f"    {bm25} · {knn} · RRF #{hit.rank} ({hit.score:.3g})"
        assert len(snippet) == 2 and all(len(line.strip()) >= 60 for line in snippet)
    assert "A title A title" in blocks[-1] and "…" in blocks[-1].splitlines()[0]


def test_explanations_wrap_under_their_hit(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    answer = result(hits=2)
    why = "RRF: 1/(60+2) from BM25 + 1/(60+1) from kNN; " + "the passage shown is the chunk kNN found nearest " * 3
    answer.hits[0].explanation = [why, "rerank: not applied"]
    lines = assert_plain_and_narrow(search(monkeypatch, capsys, answer, "--explain"))
    at = lines.index("    rerank: not applied")
    assert " ".join(x.strip() for x in lines[at - 3:at]) == why.strip()
    assert lines[at + 1] == "" and lines[at + 2].startswith(" 2. A title")


def test_a_terminal_gets_colour_and_marked_terms_and_its_own_width(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "160")
    out = search(monkeypatch, capsys, result())
    assert ESCAPE in out and "raise" in out
    plain = re.sub("\x1b\\[[0-9;]*m", "", out)
    assert max(map(len, plain.splitlines())) > 100 and max(map(len, plain.splitlines())) <= 160


def test_a_search_with_no_cross_encoder_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    lines = search(monkeypatch, capsys, result()).splitlines()
    said = [line for line in lines if "rerank" in line and "RRF #" not in line and "rerank 0" not in line]
    assert said == [NO_CROSS_ENCODER]
    assert len(NO_CROSS_ENCODER) <= 80


@pytest.mark.parametrize(("outcome", "reason", "line"), [
    (RerankOutcome.FAILED, "reranker error: RuntimeError: CUDA out of memory.\nTried to allocate 2 GiB",
     "not reranked: reranker error: RuntimeError: CUDA out of memory."),
    (RerankOutcome.DISABLED, "reranker disabled (HSP_RERANKER__ENABLED=false)",
     "not reranked: reranker disabled (HSP_RERANKER__ENABLED=false)"),
    (RerankOutcome.TIMED_OUT, "reranker timeout after 0.3s", "not reranked: reranker timeout after 0.3s"),
    (RerankOutcome.FAILED, "reranker error: " + "very long " * 20, "not reranked: reranker error: very long"),
    (RerankOutcome.SKIPPED, "rerank not requested", None),
])
def test_every_other_reason_is_one_line_too(outcome: RerankOutcome, reason: str, line: str | None,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    lines = assert_plain_and_narrow(search(monkeypatch, capsys, result(outcome, reason, hits=2)))
    said = [x for x in lines if x.startswith("not reranked")]
    assert len(said) == (0 if line is None else 1)
    if line is not None:
        assert said[0].startswith(line)
    assert not any("Tried to allocate" in x for x in lines)


def test_json_is_the_whole_result_and_the_table_is_kept(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    answer = result(hits=3)
    for argv in (["--json"], ["--format", "json"]):
        assert SearchResult.model_validate(json.loads(search(monkeypatch, capsys, answer, *argv))) == answer
    table = search(monkeypatch, capsys, answer, "--format", "table", "--no-rerank")
    assert ESCAPE not in table and not BOX_DRAWING.search(table)
    assert re.search(r"#\s+score\s+bm25\s+knn\s+fused\s+rerank", table) and "py:topic:" in table


def test_models_list_in_a_pipe(capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.embedding import catalogue

    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    lines = assert_plain_and_narrow(out)
    assert len(lines) <= 4 * len(catalogue.ENTRIES) + 4
    for e in catalogue.ENTRIES:
        assert any(line.startswith(f"{e.name} ") for line in lines) and e.licence in out


def test_doctor_in_a_pipe_keeps_the_whole_explanation_and_fix(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    fix = ("set HSP_RERANKER__MODEL to a local cross-encoder folder, HSP_RERANKER__URL to a reranker service, or "
           "HSP_RERANKER__ENABLED=false")
    checks = [doctor.Check("cluster", "reachable", "OK", "hybridsearch-local, 1 node(s)"),
              doctor.Check("reranker", "local model", "WARN", MISSING_MODEL.removeprefix("reranker error: "), fix)]
    monkeypatch.setattr(doctor, "run_checks", lambda *a, **kw: checks)
    assert main(["doctor", "--no-models"]) == 0
    lines = assert_plain_and_narrow(capsys.readouterr().out)
    words = " ".join(" ".join(lines).split())
    assert "fix: " + fix in words and "lets it download from the Hugging Face Hub" in words
    assert lines[-1] == "1 OK, 1 WARN — healthy"


def test_index_status_in_a_pipe(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    row = IndexStatus(name="team-a-chunks-v2", version=2, live=True, health="green", status="open", chunks=4261,
                      documents=3000, store_bytes=31_000_000, model="sentence-transformers/all-MiniLM-L6-v2",
                      dims=384, chunker="paragraph-200-0.12-v1", index_options={"type": "int8_hnsw", "m": 16},
                      created="2026-01-02T03:04:05")
    status = ClusterStatus(prefix="team-a", alias="team-a-chunks", alias_targets=[row.name], indices=[row],
                           logs={"team-a-query-log": 12})
    monkeypatch.setattr(cli_index, "EngineClient", lambda es: None)
    monkeypatch.setattr(cli_index, "index_status", lambda es, index: status)
    assert main(["index", "status"]) == 0
    lines = assert_plain_and_narrow(capsys.readouterr().out)
    assert re.search(r"v2\s+green\s+3,000\s+4,261\s+29\.6 MB\s+int8_hnsw\s+2026-01-02 03:04", "\n".join(lines))


def eval_report() -> Any:
    """An evaluation of four modes with every metric, latency and a knob sweep over three of them."""
    from hybridsearch.eval.metrics import METRICS
    from hybridsearch.eval.report import LATENCY_KEYS, EvalReport

    modes = ("bm25", "dense", "hybrid", "hybrid+rerank")
    latency = {k: {"p50": 12.25, "p95": 140.5, "mean": 20.0} for k in LATENCY_KEYS}
    trials = [{"knob": "rrf_k", "value": v, "metrics": {m: {"ndcg@10": 0.6723, "recall@100": 0.9312} for m in modes}}
              for v in ("20", "60", "100")]
    return EvalReport.model_validate({
        "created_at": "2026-01-01T00:00:00+00:00", "dataset": {"name": "scifact", "split": "test", "queries": 300},
        "index": {"documents": 5183, "chunks": 9112}, "model": "m", "chunker": "c", "cluster": {}, "git": {},
        "settings": {}, "k": 100, "sweep": trials,
        "modes": [{"mode": m, "status": "ok", "metrics": dict.fromkeys(METRICS, 0.6723), "latency_ms": latency}
                  for m in modes]})


def test_eval_tables_in_a_pipe_cut_no_header_or_value(capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.cli.eval import print_report
    from hybridsearch.eval.metrics import METRICS

    print_report(eval_report(), None, 0.01)
    out = capsys.readouterr().out
    lines = assert_plain_and_narrow(out)
    assert "…" not in out
    assert all(name in out for name in METRICS.values())
    for mode in ("bm25", "dense", "hybrid"):  # the sweep is too wide for 80 columns: one "header: value" a line
        assert f"  {mode} Recall@100: 0.9312" in lines


def test_ingest_summary_in_a_pipe_names_every_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.embedding import encoder
    from hybridsearch.ingest import pipeline
    from hybridsearch.ingest.lease import IngestResult

    done = IngestResult(run_id="20260101T000000-1a2b3c4d5e6f", index="a-long-team-prefix-chunks-v12",
                        source=str(tmp_path), status="completed", documents=123_456, documents_indexed=123_000,
                        documents_skipped=456, indexed=234_567, reused=1_234, retried=7, chunker="paragraph")
    monkeypatch.setattr(encoder, "Embedder", lambda cfg, models: None)
    monkeypatch.setattr(pipeline, "run_ingest", lambda *a, **kw: done)
    monkeypatch.setenv("COLUMNS", "50")  # narrower than the table: it becomes "header: value" lines
    assert main(["ingest", str(tmp_path), "--no-progress"]) == 0
    lines = assert_plain_and_narrow(capsys.readouterr().out)
    assert "…" not in "\n".join(lines)
    words = " ".join(" ".join(lines).split())
    assert "documents: 123,456 read, 123,000 indexed, 456 unchanged, 0 failed" in words
    assert "chunks: 234,567 new, 0 updated, 0 unchanged, 1,234 reused (written by a stopped run), 0 deleted" in words


def test_progress_at_80_columns_keeps_names_and_details_whole() -> None:
    from rich.console import Console

    from hybridsearch.cli.output import RichProgress
    from hybridsearch.progress import ProgressEvent

    screen = Console(width=80, record=True, file=open("/dev/null", "w"), markup=False)  # noqa: SIM115
    detail = "123,456 docs (456 unchanged, 0 failed) · 234,567 chunks written · 21.3 chunks/s"
    with RichProgress(screen) as progress:
        progress(ProgressEvent("hybrid+rerank", 12, 300))
        progress(ProgressEvent("ingest", 1234, 3000, detail))
    shown = screen.export_text()
    assert "hybrid+rerank" in shown and "…" not in shown
    assert detail in " ".join(" ".join(line.split()) for line in shown.splitlines() if line.strip())
    assert max(len(line.rstrip()) for line in shown.splitlines()) <= 80


def test_progress_in_a_pipe_is_text_without_a_bar() -> None:
    import io

    from rich.console import Console

    from hybridsearch.cli.output import RichProgress
    from hybridsearch.progress import ProgressEvent

    pipe = io.StringIO()
    with RichProgress(Console(file=pipe, width=80, markup=False)) as progress:
        progress(ProgressEvent("ingest", 1234, 3000, "1,234 docs"))
    shown = pipe.getvalue()
    assert "ingest" in shown and "1234/3000" in shown and "1,234 docs" in shown
    assert "\x1b" not in shown and not set(shown) & set("━─│┃╸╺⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")


def test_a_failed_query_log_write_warns_in_one_short_line(caplog: pytest.LogCaptureFixture) -> None:
    from hybridsearch.errors import ClusterError
    from hybridsearch.query.querylog import QueryLogger
    from hybridsearch.settings import load_settings

    refused = ClusterError("team-a may not write to team-a-query-log: missing create_doc",
                           fix="grant create_doc on team-a-query-log (docs/operations.md, 'Roles'), or set "
                               "HSP_QUERY__LOG_QUERIES=false to search without a query log")

    class Refusing:
        def send(self, *args: Any, **kwargs: Any) -> Any:
            raise refused

    logger = QueryLogger(Refusing(), load_settings(index={"prefix": "team-a"}))  # type: ignore[arg-type]
    logger.submit({"query": "q"})
    logger.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "hybridsearch.query.querylog"]
    assert warnings == [f"query log: 1 of 1 documents not written to team-a-query-log: {refused.problem}"]
