"""Ctrl-C stops `hsp ingest` cleanly (exit 130, run recorded as interrupted); a re-run resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from elasticsearch import Elasticsearch

from hybridsearch.embedding import Embedder
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.settings import Settings

N_DOCS = 400


def test_ctrl_c_then_rerun_resumes(es: Elasticsearch, settings: Settings, embedder: Embedder, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    sentence = "Clinical trial {i} measured blood pressure, cholesterol and outcomes in {n} adults over five years. "
    rows = [{"_id": f"c{i}", "title": f"Trial {i}", "text": sentence.format(i=i, n=i * 7) * 4} for i in range(N_DOCS)]
    corpus.write_text("\n".join(json.dumps(r) for r in rows))
    env = {**os.environ, "HSP_INDEX__PREFIX": settings.index.prefix, "HSP_ES_URL": settings.es.url,
           "HSP_INGEST__DEAD_LETTER_DIR": str(tmp_path / "dl"), "HSP_EMBEDDING__BATCH_SIZE": "4",
           "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-c", "from hybridsearch.cli.main import entry; entry()", "ingest",
                             str(corpus), "--no-progress"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    alias = settings.index.alias
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if es.indices.exists_alias(name=alias):
            es.indices.refresh(index=alias)
            if es.count(index=alias).body["count"] > 0:
                break
        time.sleep(0.05)
    assert proc.poll() is None, "the ingest ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "Interrupted" in out
    es.indices.refresh(index=alias)
    partial = es.count(index=alias).body["count"]
    assert 0 < partial < N_DOCS
    runs = es.search(index=settings.index.ingest_runs).body["hits"]["hits"]
    assert [r["_source"]["status"] for r in runs] == ["interrupted"]

    again = run_ingest(corpus, settings, es=es, embedder=embedder)
    assert again.status == "completed" and again.documents_failed == 0, again.dead_letter_path and \
        Path(again.dead_letter_path).read_text()[:2000]
    assert again.documents_skipped > 0 and again.documents_skipped + again.indexed == N_DOCS
    es.indices.refresh(index=alias)
    assert es.count(index=alias).body["count"] == N_DOCS  # one chunk per document, none twice
