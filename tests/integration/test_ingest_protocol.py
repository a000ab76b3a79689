"""The write protocol on a real node: one lease per prefix, a document seen whole or not at all, repairs.

A poller reads what every reader reads (the one read path, :mod:`hybridsearch.index.visibility`) while documents
are written, runs are killed and runs overlap, and checks each document it sees is one whole version: every
visible chunk of it carries one ``content_hash`` and there are exactly ``doc_chunks`` of them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import IngestLocked
from hybridsearch.index.visibility import visible_query
from hybridsearch.ingest.lease import UNFINISHED, Lease, hidden_documents
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document
from hybridsearch.migrate import scan_sorted
from hybridsearch.query.client import SearchClient
from hybridsearch.settings import Settings

SENTENCE = "Record {d} sentence {i} notes marker zq{d}x{i}q about {topic}. "
N_OVERLAP = 400  # documents of 8 sentence chunks: a run long enough for a second one to start meanwhile


def _tiny(settings: Settings, tiny_dir: Path, **ingest: Any) -> Settings:
    """Sentence chunks of at most 16 word pieces, embedded by a tiny random model (cheap), small batches."""
    return settings.model_copy(update={
        "embedding": settings.embedding.model_copy(update={"model": str(tiny_dir), "dims": 32, "batch_size": 8}),
        "chunking": settings.chunking.model_copy(update={"strategy": "sentence", "max_tokens": 16, "overlap": 0.0}),
        "ingest": settings.ingest.model_copy(update={"queue_size": 1, **ingest}),
    })


def _env(s: Settings, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HSP_INDEX__PREFIX": s.index.prefix, "HSP_ES_URL": s.es.url,
            "HSP_EMBEDDING__MODEL": s.embedding.model, "HSP_EMBEDDING__DIMS": str(s.embedding.dims),
            "HSP_EMBEDDING__BATCH_SIZE": "8", "HSP_INGEST__QUEUE_SIZE": "1",
            "HSP_INGEST__DEAD_LETTER_DIR": str(tmp_path / "dl"), "HF_HUB_OFFLINE": "1"}


def _hsp(s: Settings, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """``hsp ingest ARGS`` in a process of its own, with sentence chunks of 16 word pieces."""
    return subprocess.Popen([sys.executable, "-c", "from hybridsearch.cli.main import entry; entry()", "ingest", *args,
                             "--no-progress",
                             "--strategy", "sentence", "--max-tokens", "16"],
                            env=_env(s, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _folder(tmp_path: Path, n: int, sentences: int, topic: str = "cells", name: str = "docs") -> Path:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    for d in range(n):
        (folder / f"doc{d:03d}.txt").write_text("".join(SENTENCE.format(d=d, i=i, topic=topic)
                                                        for i in range(sentences)))
    return folder


def _seen(es: EngineClient, s: Settings) -> dict[str, tuple[int, int, int, int]]:
    """What readers see per document: ``(chunks, distinct hashes, distinct positions, doc_chunks)``."""
    body = es.send(request.search(s.index.alias, request.body(size=0, query=visible_query(s.index.ingest_state), aggs={
        "d": {"terms": {"field": "doc_id", "size": 10_000},
              "aggs": {"h": {"cardinality": {"field": "content_hash"}}, "p": {"cardinality": {"field": "position"}},
                       "n": {"max": {"field": "doc_chunks"}}}}})))
    return {b["key"]: (b["doc_count"], b["h"]["value"], b["p"]["value"], int(b["n"]["value"] or 0))
            for b in body["aggregations"]["d"]["buckets"]}


def _partial(seen: dict[str, tuple[int, int, int, int]]) -> dict[str, tuple[int, int, int, int]]:
    return {d: v for d, v in seen.items() if not (v[1] == 1 and v[0] == v[2] == v[3])}


@contextmanager
def poller(es: EngineClient, s: Settings) -> Iterator[list[dict[str, Any]]]:
    """Search continuously (as fast as the node answers) while the block runs; yields the list of partial
    documents seen (empty: none)."""
    bad: list[dict[str, Any]] = []
    polls = [0]
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                if es.send(request.alias_exists(s.index.alias)):
                    if part := _partial(_seen(es, s)):
                        bad.append(part)
                    polls[0] += 1
            except Exception:  # noqa: BLE001 - the index may not exist yet
                time.sleep(0.05)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield bad
    finally:
        stop.set()
        t.join()
    assert polls[0] > 5, "the poller hardly searched"


def _wait_for(es: EngineClient, s: Settings, proc: subprocess.Popen[str], done: int, hidden: bool) -> None:
    """Until ``done`` documents are visible and (``hidden``) some are hidden mid-write."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if len(_seen(es, s)) >= done and (not hidden or hidden_documents(es, s.index.ingest_state)):
                return
        except Exception:  # noqa: BLE001 - not created yet
            pass
        time.sleep(0.05)
    raise AssertionError(f"the run ended before {done} documents were visible: {proc.communicate()[0][-2000:]}")


def test_a_second_run_is_refused_naming_the_holder_or_waits(es: EngineClient, settings: Settings,
                                                             embedder: Embedder) -> None:
    docs = [Document.make(f"d{i}", f"Text of document {i} about lungs.", title=f"D{i}") for i in range(3)]
    run_ingest(docs, settings, es=es, embedder=embedder)
    holder = Lease(es, settings.index, "other-run", (0, 2))  # a live run (this process) on 0/2
    holder.acquire()
    try:
        with pytest.raises(IngestLocked) as caught:
            run_ingest(docs, settings, es=es, embedder=embedder)
        assert caught.value.holder == "other-run" and caught.value.shard == "0/2"
        assert "other-run" in str(caught.value) and "\n" not in str(caught.value)
        other_shard = run_ingest(docs, settings, es=es, embedder=embedder, shard=(1, 2))  # side by side
        assert other_shard.status == "completed"
        threading.Timer(2.0, holder.release).start()
        waited = run_ingest(docs, settings, es=es, embedder=embedder, wait_s=60)
        assert waited.status == "completed" and waited.documents_skipped == 3
    finally:
        holder.release()
    assert hidden_documents(es, settings.index.ingest_state) == {}


def test_two_runs_at_once_then_a_kill_lose_nothing(es: EngineClient, settings: Settings, tiny_bi_encoder: Path,
                                                  tmp_path: Path) -> None:
    """Run B starts while A runs (it is refused, naming A); A is killed mid-run; the next
    run takes A's lease over, repairs what A left and says so; every document is then whole, exactly once."""
    s = _tiny(settings, tiny_bi_encoder)
    folder = _folder(tmp_path, N_OVERLAP, 8)
    with poller(es, s) as partial:
        a = _hsp(s, tmp_path, str(folder))
        _wait_for(es, s, a, 1, hidden=True)
        b = _hsp(s, tmp_path, str(folder))
        out_b, _ = b.communicate(timeout=120)
        assert b.returncode == 6, out_b
        line = [x for x in out_b.splitlines() if "being ingested by run" in x]
        assert len(line) == 1 and "pid" in line[0], out_b
        _wait_for(es, s, a, 10, hidden=True)
        a.send_signal(signal.SIGKILL)
        a.communicate(timeout=60)
        time.sleep(1.0)  # a bulk request sent before the kill still completes on the node
        hidden = {d for ids in hidden_documents(es, s.index.ingest_state).values() for d in ids}
        assert hidden, "A was not killed mid-run"
        again = run_ingest(folder, s, es=es, embedder=Embedder(s.embedding, s.models))
    assert partial == []
    assert again.took_over and again.repaired >= len(hidden) and again.still_hidden == 0
    assert again.documents_failed == 0 and again.failed == 0
    seen = _seen(es, s)
    assert len(seen) == N_OVERLAP and _partial(seen) == {}
    assert hidden_documents(es, s.index.ingest_state) == {}
    total = sum(v[0] for v in seen.values())
    es.send(request.refresh(s.index.alias))
    assert es.send(request.count(s.index.alias))["count"] == total  # no chunk twice, none left hidden
    # the exact marker of a hidden document
    with SearchClient(es, s, embedder=Embedder(s.embedding, s.models)) as client:
        doc = sorted(hidden)[0]
        marker = f"zq{int(doc[3:6])}x3q"
        hits = client.search(marker, k=3, mode="bm25").hits
    assert hits and hits[0].doc_id == doc


def test_readers_never_see_part_of_a_document(es: EngineClient, settings: Settings, tiny_bi_encoder: Path,
                                              tmp_path: Path) -> None:
    """A poller searches while (a) a document of thousands of chunks is written, (b) a run is killed and run
    again, (c) two runs overlap (the second waits for the lease) over changed documents."""
    s = _tiny(settings, tiny_bi_encoder)
    embedder = Embedder(s.embedding, s.models)
    with poller(es, s) as partial:
        big = [Document.make("big", "".join(SENTENCE.format(d=999, i=i, topic="lungs") for i in range(2500)),
                             title="Big")]
        first = run_ingest(big, s, es=es, embedder=embedder)
        assert first.indexed > 2000
        folder = _folder(tmp_path, 12, 120)
        killed = _hsp(s, tmp_path, str(folder))
        _wait_for(es, s, killed, 2, hidden=True)
        killed.send_signal(signal.SIGKILL)
        killed.communicate(timeout=60)
        again = run_ingest(folder, s, es=es, embedder=embedder)
        assert again.took_over and again.repaired > 0
        changed = _folder(tmp_path, 12, 120, topic="tissue", name="docs")  # every document changes
        one = _hsp(s, tmp_path, str(changed))
        _wait_for(es, s, one, 1, hidden=True)
        two = _hsp(s, tmp_path, str(changed), "--wait", "300")
        out_one, _ = one.communicate(timeout=300)
        out_two, _ = two.communicate(timeout=300)
    assert partial == [], f"{len(partial)} polls saw part of a document, e.g. {partial[0]}"
    assert one.returncode == 0 and two.returncode == 0, out_one + out_two
    assert "Nothing changed" in out_two  # it waited for the lease, then found the work done
    seen = _seen(es, s)
    assert len(seen) == 13 and _partial(seen) == {}


def test_a_recut_skips_documents_being_written(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    """Readers other than search (re-chunking, migration copies) use the same read path: a document being
    rewritten is not read, in part or whole; and a migration waits for the lease like a run."""
    docs = [Document.make(f"d{i}", f"First version of document {i}. It has two sentences.", title=f"D{i}")
            for i in range(4)]
    run_ingest(docs, settings, es=es, embedder=embedder)
    index = settings.index.versioned(1)
    writer = Lease(es, settings.index, "writer-run")
    writer.acquire()
    try:
        writer.hide(["d2"])  # d2 is being rewritten: one of its chunks already holds the new version
        hits = es.send(request.search(index, request.body(query={"term": {"doc_id": "d2"}})))["hits"]["hits"]
        es.send(request.bulk([{"_op_type": "update", "_index": index, "_id": hits[0]["_id"],
                               "doc": {"text": "Second version", "content_hash": "new"}}], refresh=True))
        read = {c["_source"]["doc_id"] for c in scan_sorted(es, index)}
        assert read == {"d0", "d1", "d3"}
        from hybridsearch.migrate import migrate
        other = settings.model_copy(update={"chunking": settings.chunking.model_copy(update={"strategy": "sentence"})})
        with pytest.raises(IngestLocked):
            migrate(es, settings, other, embedder=embedder)
    finally:
        writer.release()
    assert hidden_documents(es, settings.index.ingest_state) == {UNFINISHED: ["d2"]}  # not whole: stays hidden
    again = run_ingest(docs, settings, es=es, embedder=embedder)
    assert again.repaired == 1 and again.still_hidden == 0 and again.documents_skipped == 3
    assert hidden_documents(es, settings.index.ingest_state) == {}
    assert {c["_source"]["doc_id"] for c in scan_sorted(es, index)} == {"d0", "d1", "d2", "d3"}


def test_delete_forgets_a_hidden_document(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    from hybridsearch.ingest.commit import delete_documents

    run_ingest([Document.make("gone", "Soon deleted text.", title="G")], settings, es=es, embedder=embedder)
    writer = Lease(es, settings.index, "writer-run")
    writer.acquire()
    writer.hide(["gone"])
    writer.release()
    assert delete_documents(["gone"], settings, es=es) == 1
    assert hidden_documents(es, settings.index.ingest_state) == {}
