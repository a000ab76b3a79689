"""Ctrl-C stops `hsp ingest` cleanly (exit 130, run recorded as interrupted); a re-run resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.index.visibility import hidden_lookup, visible_query
from hybridsearch.ingest.chunking import document_chunks
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document, read_path
from hybridsearch.query.client import SearchClient
from hybridsearch.settings import Settings

# signals to the ingesting process; the resume it checks is the ingest protocol, which
# test_ingest_protocol.py runs on every engine
pytestmark = pytest.mark.engine_neutral

N_DOCS = 400


def test_ctrl_c_then_rerun_resumes(es: EngineClient, settings: Settings, embedder: Embedder, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    sentence = "Clinical trial {i} measured blood pressure, cholesterol and outcomes in {n} adults over five years. "
    rows = [{"_id": f"c{i}", "title": f"Trial {i}", "text": sentence.format(i=i, n=i * 7) * 4} for i in range(N_DOCS)]
    corpus.write_text("\n".join(json.dumps(r) for r in rows))
    env = {**os.environ, "HSP_INDEX__PREFIX": settings.index.prefix, "HSP_ES_URL": settings.es.url,
           "HSP_INGEST__DEAD_LETTER_DIR": str(tmp_path / "dl"), "HSP_EMBEDDING__BATCH_SIZE": "4",
           "HF_HUB_OFFLINE": "1"}
    # Ctrl-C raises KeyboardInterrupt even where this test itself runs with SIGINT ignored (a shell's background
    # job, e.g. `.ci/run &`), which a child would inherit, never seeing the signal
    child = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); " \
            "from hybridsearch.cli.main import entry; entry()"
    proc = subprocess.Popen([sys.executable, "-c", child, "ingest", str(corpus), "--no-progress"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    alias = settings.index.alias
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if es.send(request.alias_exists(alias)):
            es.send(request.refresh(alias))
            if es.send(request.count(alias))["count"] > 0:
                break
        time.sleep(0.05)
    assert proc.poll() is None, "the ingest ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "Interrupted" in out
    es.send(request.refresh(alias))
    partial = es.send(request.count(alias))["count"]
    assert 0 < partial < N_DOCS
    runs = es.send(request.search(settings.index.ingest_runs, request.body()))["hits"]["hits"]
    assert [r["_source"]["status"] for r in runs] == ["interrupted"]

    again = run_ingest(corpus, settings, es=es, embedder=embedder)
    assert again.status == "completed" and again.documents_failed == 0, again.dead_letter_path and \
        Path(again.dead_letter_path).read_text()[:2000]
    assert again.documents_skipped > 0  # one chunk per document: each skipped, written, or reused (written but hidden)
    assert again.documents_skipped + again.indexed + again.reused == N_DOCS
    assert 0 < again.repaired <= N_DOCS - again.documents_skipped  # the hidden documents, adopted and finished
    es.send(request.refresh(alias))
    assert es.send(request.count(alias))["count"] == N_DOCS  # one chunk per document, none twice


# ---- SIGTERM and SIGKILL mid-document ------------------------------------------------

SENTENCE = "Cohort {d} sentence {i} reports blood pressure {i} and cholesterol {n} in adults. "
KILL_DOCS = 4


def _kill_settings(settings: Settings) -> tuple[Settings, dict[str, str]]:
    """Small chunks, small batches, one batch in flight: a document spans many write batches."""
    env = {"HSP_CHUNKING__MAX_TOKENS": "32", "HSP_CHUNKING__OVERLAP": "0", "HSP_EMBEDDING__BATCH_SIZE": "4",
           "HSP_INGEST__QUEUE_SIZE": "1"}
    s = settings.model_copy(update={
        "chunking": settings.chunking.model_copy(update={"max_tokens": 32, "overlap": 0.0}),
        "embedding": settings.embedding.model_copy(update={"batch_size": 4}),
        "ingest": settings.ingest.model_copy(update={"queue_size": 1}),
    })
    return s, env


def _per_doc(es: EngineClient, index: str, query: dict[str, Any]) -> dict[str, int]:
    es.send(request.refresh(index))
    body = es.send(request.search(index, request.body(size=0, query=query, aggs={"d": {"terms": {"field": "doc_id",
                                                                                                 "size": 100}}})))
    return {b["key"]: b["doc_count"] for b in body["aggregations"]["d"]["buckets"]}


def _visible(s: Settings) -> dict[str, Any]:
    """What every reader sees (the one read path: hidden documents left out)."""
    return visible_query(s.index.ingest_state)


def _hidden(s: Settings) -> dict[str, Any]:
    """Chunks of the documents the prefix's state document hides."""
    return {"bool": {"filter": [hidden_lookup(s.index.ingest_state)]}}


def _start_and_kill(es: EngineClient, settings: Settings, embedder: Embedder, env: dict[str, str], tmp_path: Path,
                    sig: int) -> tuple[subprocess.Popen[str], Path, dict[str, int]]:
    """Start `hsp ingest` on a corpus of long documents; send ``sig`` once one document is searchable and
    another written in part (counting every chunk in the index, searchable or not). Returns the process, the corpus
    and each document's number of chunks."""
    corpus = tmp_path / "long.jsonl"
    rows = [{"_id": f"d{d}", "title": f"Cohort {d}",
             "text": "".join(SENTENCE.format(d=d, i=i, n=i * 3) for i in range(90))} for d in range(KILL_DOCS)]
    corpus.write_text("\n".join(json.dumps(r) for r in rows))
    tokenizer = embedder.tokenizer()
    expected = {d.doc_id: len(list(document_chunks(d, settings.chunking, settings.embedding, settings.index.tenant,
                                                   tokenizer, embedder.max_seq_length)))
                for d in read_path(corpus) if isinstance(d, Document)}
    assert len(expected) == KILL_DOCS and min(expected.values()) > 40
    full_env = {**os.environ, **env, "HSP_INDEX__PREFIX": settings.index.prefix, "HSP_ES_URL": settings.es.url,
                "HSP_INGEST__DEAD_LETTER_DIR": str(tmp_path / "dl"), "HF_HUB_OFFLINE": "1"}
    # Ctrl-C raises KeyboardInterrupt even where this test itself runs with SIGINT ignored (a shell's background
    # job, e.g. `.ci/run &`), which a child would inherit, never seeing the signal
    child = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); " \
            "from hybridsearch.cli.main import entry; entry()"
    proc = subprocess.Popen([sys.executable, "-c", child, "ingest", str(corpus), "--no-progress"],
                            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    index = settings.index.versioned(1)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            stored, shown = _per_doc(es, index, {"match_all": {}}), _per_doc(es, index, _visible(settings))
        except Exception:  # noqa: BLE001 - the run's indices are being created (no shard active yet)
            time.sleep(0.05)
            continue
        if shown and any(n < expected[d] for d, n in stored.items()):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the ingest ended before it could be stopped"
    proc.send_signal(sig)
    return proc, corpus, expected


def _nothing_partial(es: EngineClient, s: Settings, embedder: Embedder, expected: dict[str, int]
                     ) -> tuple[dict[str, int], dict[str, int]]:
    """No document is partly searchable after the stop; returns chunks per document, visible and pending."""
    index = s.index.versioned(1)
    time.sleep(1.5)  # a bulk request sent before the signal still completes on the node
    visible, stored = _per_doc(es, index, _visible(s)), _per_doc(es, index, {"match_all": {}})
    for doc, n in visible.items():
        assert n == expected[doc], f"{doc} is searchable with {n} of its {expected[doc]} chunks"
    assert any(n < expected[d] for d, n in stored.items()), "the run was not stopped mid-document"
    assert visible, "no document was committed before the stop"
    pending = _per_doc(es, index, _hidden(s))
    assert {d: n for d, n in stored.items() if d not in visible} == pending
    with SearchClient(es, s, embedder=embedder) as client:  # what searches see now
        seen = {h.doc_id for h in client.search("cohort blood pressure", k=KILL_DOCS, mode="bm25").hits}
    assert seen == set(visible)
    return visible, pending


def _resumes(es: EngineClient, s: Settings, embedder: Embedder, corpus: Path, expected: dict[str, int],
             visible: dict[str, int], pending: dict[str, int]) -> None:
    """The re-run completes, reusing every chunk the stopped run wrote."""
    index = s.index.versioned(1)
    again = run_ingest(corpus, s, es=es, embedder=embedder)
    full = _per_doc(es, index, {"match_all": {}})
    assert again.status == "completed" and again.documents_failed == 0 and again.failed == 0
    assert full == expected and _per_doc(es, index, _hidden(s)) == {}
    assert _per_doc(es, index, _visible(s)) == full
    assert again.repaired == len(expected) - len(visible) and again.still_hidden == 0  # says what it repaired
    written_before = sum(pending.values())
    assert again.reused == written_before > 0  # every chunk the stopped run wrote: not embedded again
    assert again.updated == 0
    assert again.chunks == sum(full.values()) - sum(visible.values()) - written_before
    assert again.documents_skipped == len(visible)
    with SearchClient(es, s, embedder=embedder) as client:
        top = client.search("cohort blood pressure", k=KILL_DOCS, mode="bm25").hits
    assert sorted(h.doc_id for h in top) == sorted(full)


def _runs(es: EngineClient, settings: Settings) -> list[str]:
    es.send(request.refresh(settings.index.ingest_runs))
    hits = es.send(request.search(settings.index.ingest_runs,
                                  request.body(sort=[{"started_at": "asc"}])))["hits"]["hits"]
    return [h["_source"]["status"] for h in hits]


def test_sigterm_mid_document_stops_cleanly_and_resumes(es: EngineClient, settings: Settings,
                                                        embedder: Embedder, tmp_path: Path) -> None:
    s, env = _kill_settings(settings)
    proc, corpus, expected = _start_and_kill(es, s, embedder, env, tmp_path, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    visible, pending = _nothing_partial(es, s, embedder, expected)
    assert proc.returncode == 130 and "Interrupted" in out, out
    assert _runs(es, s) == ["interrupted"]
    _resumes(es, s, embedder, corpus, expected, visible, pending)
    assert _runs(es, s) == ["interrupted", "completed"]


def test_sigkill_mid_document_is_recorded_as_killed_and_resumes(es: EngineClient, settings: Settings,
                                                               embedder: Embedder, tmp_path: Path) -> None:
    s, env = _kill_settings(settings)
    proc, corpus, expected = _start_and_kill(es, s, embedder, env, tmp_path, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    visible, pending = _nothing_partial(es, s, embedder, expected)
    assert _runs(es, s) == ["running"]  # nothing could record the end
    _resumes(es, s, embedder, corpus, expected, visible, pending)
    assert _runs(es, s) == ["killed", "completed"]  # the next run recorded it
