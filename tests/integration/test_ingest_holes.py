"""The write protocol where input or operators go wrong, on a real node: a bad update hides nothing, the hidden
list holds only what is in flight, a run that loses its state stops before writing another chunk and says so, a
model that cannot be found creates nothing, a byte-order mark the file does not bear out is refused."""

from __future__ import annotations

import codecs
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import IndexNotFound, LeaseLost
from hybridsearch.index.visibility import STATE_ID, visible_query
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document
from hybridsearch.progress import ProgressEvent
from hybridsearch.query.client import SearchClient
from hybridsearch.settings import Settings
from ingest_helpers import read_dead_letter


def _tiny(settings: Settings, tiny_dir: Path, **index: Any) -> Settings:
    """A tiny random model (cheap), small batches, and ``index`` settings (typed metadata)."""
    return settings.model_copy(update={
        "embedding": settings.embedding.model_copy(update={"model": str(tiny_dir), "dims": 32, "batch_size": 8}),
        "ingest": settings.ingest.model_copy(update={"queue_size": 1}),
        "index": settings.index.model_copy(update=index),
    })


def _hidden(es: EngineClient, s: Settings) -> list[str]:
    got = es.send(request.get_doc(s.index.ingest_state, STATE_ID))
    return list((got or {}).get("_source", {}).get("hidden") or [])


def _visible(es: EngineClient, s: Settings, doc_id: str) -> list[dict[str, Any]]:
    es.send(request.refresh(s.index.alias))
    query = visible_query(s.index.ingest_state, [{"term": {"doc_id": doc_id}}])
    hits = es.send(request.search(s.index.alias, request.body(query=query, size=100)))["hits"]["hits"]
    return [h["_source"] for h in hits]


def test_a_bad_update_keeps_the_old_version_and_hides_nothing(es: EngineClient, settings: Settings,
                                                              tiny_bi_encoder: Path) -> None:
    s = _tiny(settings, tiny_bi_encoder, metadata_fields={"n": "long"})
    embedder = Embedder(s.embedding, s.models)
    first = run_ingest([Document.make("m5", "The fifth record, as first written.", metadata={"n": 5})], s,
                       es=es, embedder=embedder)
    assert first.documents_indexed == 1
    old = _visible(es, s, "m5")
    assert len(old) == 1 and old[0]["meta"] == {"n": 5}

    bad = run_ingest([Document.make("m5", "The fifth record, rewritten.", metadata={"n": "bad"}),
                      Document.make("fresh", "A new record with a bad value.", metadata={"n": "bad"})], s,
                     es=es, embedder=embedder)
    assert bad.documents_failed == 2 and bad.indexed == bad.updated == 0 and bad.still_hidden == 0
    assert _hidden(es, s) == []
    assert _visible(es, s, "m5") == old  # the old version, still found by every search
    assert _visible(es, s, "fresh") == []
    reasons = {r["doc_id"]: r["reason"] for r in read_dead_letter(Path(str(bad.dead_letter_path)))}
    assert set(reasons) == {"m5", "fresh"} and "'bad'" in reasons["m5"]


def test_the_hidden_list_holds_only_what_is_in_flight(es: EngineClient, settings: Settings,
                                                      tiny_bi_encoder: Path) -> None:
    s = _tiny(settings, tiny_bi_encoder, metadata_fields={"n": "long"})
    docs = [Document.make(f"bad{i:03d}", f"Record {i} with a value that is not a number.", metadata={"n": "x"})
            for i in range(300)]
    docs += [Document.make(f"good{i:02d}", f"Record {i} with a number.", metadata={"n": i}) for i in range(20)]
    seen: list[list[str]] = []

    def sample(event: ProgressEvent) -> None:
        if es.send(request.index_exists(s.index.ingest_state)):
            seen.append(_hidden(es, s))

    result = run_ingest(docs, s, es=es, embedder=Embedder(s.embedding, s.models), progress=sample)
    assert result.documents_failed == 300 and result.documents_indexed == 20
    assert len(seen) > 300 and _hidden(es, s) == []
    assert not [ids for ids in seen if any(d.startswith("bad") for d in ids)]  # a rejected record is never hidden
    assert max(len(ids) for ids in seen) <= 20


def test_a_run_whose_state_index_is_deleted_stops_before_the_next_chunk(es: EngineClient, settings: Settings,
                                                                        tiny_bi_encoder: Path) -> None:
    """The writer finds the state index gone at its next batch, and no state write (the heartbeat's included)
    creates it anew."""
    s = _tiny(settings, tiny_bi_encoder)
    embedder = Embedder(s.embedding, s.models)
    run_ingest([Document.make("seed", "A first document, so searches have an index.")], s, es=es,
               embedder=embedder)
    client = SearchClient(es, s, embedder=embedder)
    assert client.search("first document", mode="bm25").hits  # the client now knows the prefix's state index
    docs = [Document.make(f"d{i:03d}", " ".join(f"Sentence {j} of record {i}." for j in range(12)))
            for i in range(200)]
    at_delete: list[int] = []

    def delete_state(event: ProgressEvent) -> None:  # once, in the writer thread, right after its first batch
        if not at_delete and threading.current_thread().name.startswith("hsp-writer"):
            es.send(request.delete_index(s.index.ingest_state))
            es.send(request.refresh(s.index.alias))
            at_delete.append(int(es.send(request.count(s.index.alias))["count"]))

    with pytest.raises(LeaseLost, match=f"ingest state index {s.index.ingest_state} was deleted") as lost:
        run_ingest(docs, s, es=es, embedder=embedder, progress=delete_state)
    assert lost.value.fix and "again" in lost.value.fix
    es.send(request.refresh(s.index.alias))
    assert at_delete and int(es.send(request.count(s.index.alias))["count"]) == at_delete[0]  # not one chunk more
    assert not es.send(request.index_exists(s.index.ingest_state))  # nothing recreated it with guessed mappings
    es.send(request.refresh(s.index.ingest_runs))
    lost = request.body(query={"term": {"status": "lease_lost"}})
    records = es.send(request.search(s.index.ingest_runs, lost))["hits"]["hits"]
    assert len(records) == 1 and records[0]["_source"]["indexed"] > 0

    with pytest.raises(IndexNotFound, match=f"ingest state index {s.index.ingest_state} of") as missing:
        client.search("first document", mode="bm25")
    assert missing.value.fix and "hsp ingest" in missing.value.fix


def test_a_model_that_cannot_be_found_creates_nothing(es: EngineClient, settings: Settings, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("A document that never gets indexed.")
    env = {**os.environ, "HSP_INDEX__PREFIX": settings.index.prefix, "HSP_EMBEDDING__MODEL": "some-org/not-a-model",
           "HSP_INGEST__DEAD_LETTER_DIR": str(tmp_path / "dl"), "HF_HUB_OFFLINE": "1"}
    env.pop("HSP_ALLOW_DOWNLOAD", None)
    proc = subprocess.run([sys.executable, "-c", "from hybridsearch.cli.main import entry; entry()", "ingest",
                           str(tmp_path / "docs")], env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 5, out
    assert "some-org/not-a-model" in out and "0 failed" not in out
    assert es.send(request.get_index(f"{settings.index.prefix}-*", expand_wildcards="all")) == {}


def test_a_byte_order_mark_the_file_does_not_bear_out_is_dead_lettered(es: EngineClient, settings: Settings,
                                                                        tiny_bi_encoder: Path,
                                                                        tmp_path: Path) -> None:
    s = _tiny(settings, tiny_bi_encoder)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "good.txt").write_text("A plain text file.")
    (folder / "ffe.txt").write_bytes(codecs.BOM_UTF16_LE + b"UTF-8 text behind a UTF-16 byte-order mark")
    result = run_ingest(folder, s, es=es, embedder=Embedder(s.embedding, s.models))
    assert result.documents_indexed == 1 and result.documents_failed == 1
    records = read_dead_letter(Path(str(result.dead_letter_path)))
    assert [(r["doc_id"], r["reason"]) for r in records] == [
        ("ffe.txt", "starts with a UTF-16 byte-order mark but the rest is UTF-8 text, not UTF-16")]
    assert _visible(es, s, "ffe.txt") == []
