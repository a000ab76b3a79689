"""Ingest against the real node: every document accounted for, re-runs change nothing, updates and deletes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.cli.main import main
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import IndexMismatch
from hybridsearch.index.versions import ensure_index
from hybridsearch.ingest.chunking import chunk_id, chunk_text, text_budget
from hybridsearch.ingest.commit import delete_documents
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document
from hybridsearch.settings import Settings
from ingest_helpers import read_dead_letter

TOPICS = ["protein folding", "gene expression", "immune response", "cell division", "neural circuits",
          "vaccine efficacy", "antibiotic resistance", "tumour growth"]


def corpus(n: int = 8) -> list[Document]:
    return [Document.make(f"doc-{i}", f"This study of {TOPICS[i % len(TOPICS)]} reports finding {i}. "
                          f"Results were replicated in {i + 2} cohorts.", title=f"Paper {i}",
                          metadata={"year": 2000 + i}, source="test") for i in range(n)]


def chunks_of(es: EngineClient, settings: Settings, doc_id: str | None = None) -> list[dict[str, Any]]:
    query: dict[str, Any] = {"term": {"doc_id": doc_id}} if doc_id else {"match_all": {}}
    es.send(request.refresh(settings.index.alias))
    hits = es.send(request.search(settings.index.alias, request.body(
        query=query, size=1000, sort=["doc_id", "position"], source=es.engine.source_with_vectors)))
    return [{"_id": h["_id"], **h["_source"]} for h in hits["hits"]["hits"]]


def test_ingest_then_rerun_changes_nothing(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    docs = corpus()
    first = run_ingest(docs, settings, es=es, embedder=embedder)
    assert first.status == "completed"
    assert (first.documents, first.documents_indexed, first.documents_failed, first.documents_skipped) == (8, 8, 0, 0)
    assert first.indexed == first.chunks == 8 and first.failed == 0 and first.dead_letter_path is None
    stored = chunks_of(es, settings)
    assert len(stored) == 8
    c = stored[0]
    sig = chunker_signature(settings.chunking)
    assert c["_id"] == c["chunk_id"] == chunk_id("doc-0", 0, sig)
    assert c["text"] == docs[0].text and c["title"] == "Paper 0" and c["metadata"] == {"year": 2000}
    assert c["content_hash"] == docs[0].content_hash and len(c["embedding"]) == 384
    assert (c["char_start"], c["char_end"], c["position"]) == (0, len(docs[0].text), 0)
    # the vector is what the query side expects: "title. text", normalised
    want = embedder.encode([f"Paper 0. {docs[0].text}"])[0]
    assert sum(a * b for a, b in zip(c["embedding"], want, strict=True)) > 0.999

    second = run_ingest(docs, settings, es=es, embedder=embedder)
    assert second.changed_nothing
    assert (second.documents_skipped, second.unchanged, second.chunks) == (8, 8, 0)

    runs = es.send(request.search(settings.index.ingest_runs, request.body(sort=["started_at"])))["hits"]["hits"]
    assert [r["_source"]["run_id"] for r in runs] == [first.run_id, second.run_id]
    assert runs[0]["_source"]["indexed"] == 8 and runs[1]["_source"]["unchanged"] == 8
    assert runs[0]["_source"]["documents_indexed"] == 8 and runs[0]["_source"]["chunker"] == "paragraph"
    assert runs[0]["_source"]["status"] == "completed" and runs[0]["_source"]["model"] == settings.embedding.model


def test_changed_document_replaces_its_chunks(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    settings = settings.model_copy(update={"chunking": settings.chunking.model_copy(
        update={"strategy": "sentence", "max_tokens": 16})})
    long_text = " ".join(f"Sentence {i} describes a separate experimental result." for i in range(6))
    docs = [Document.make("a", long_text, title="A"), Document.make("b", "Short and stable.", title="B")]
    first = run_ingest(docs, settings, es=es, embedder=embedder)
    n_before = len(chunks_of(es, settings, "a"))
    assert n_before >= 3 and first.indexed == n_before + 1

    edited = [Document.make("a", "Now only one sentence remains.", title="A"), docs[1]]
    second = run_ingest(edited, settings, es=es, embedder=embedder)
    after = chunks_of(es, settings, "a")
    assert [c["text"] for c in after] == ["Now only one sentence remains."]
    assert second.updated == 1 and second.deleted == n_before - 1 and second.indexed == 0
    assert second.documents_skipped == 1 and second.unchanged == 1

    assert delete_documents(["a", "missing"], settings, es=es) == 1
    assert chunks_of(es, settings, "a") == [] and len(chunks_of(es, settings, "b")) == 1


def test_bad_inputs_are_dead_lettered_and_the_rest_indexed_once(es: EngineClient, settings: Settings,
                                                                embedder: Embedder, tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    (root / "good.txt").write_text("A perfectly fine plain text document about enzymes.")
    (root / "page.html").write_text("<html><head><title>Web</title></head><body><p>Kinase pathways.</p></body></html>")
    (root / "empty.txt").write_bytes(b"")
    (root / "binary.md").write_bytes(b"\x00\x01\x02PK\x03\x04" * 10)
    (root / "latin1.txt").write_bytes("na\xefve caf\xe9".encode("latin-1"))
    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(25):
        deep = {"n": deep}
    records = [
        {"_id": "r1", "title": "Record one", "text": "Antibodies bind antigens."},
        {"_id": "r1", "title": "Duplicate", "text": "Same id again in the same batch."},
        {"_id": "r2", "title": "No text here"},
        {"_id": "r3", "text": "Metadata too deep for the flattened field.", "metadata": deep},
        {"_id": "r4", "text": "Ribosomes translate mRNA."},
    ]
    (root / "records.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n{oops\n")

    result = run_ingest(root, settings, es=es, embedder=embedder)
    stored = {c["doc_id"] for c in chunks_of(es, settings)}
    # Elasticsearch's flattened field refuses metadata nested deeper than 20; OpenSearch's flat_object takes it
    deep_refused = es.engine.kind == "elasticsearch"
    assert stored == {"good.txt", "page.html", "r1", "r4"} | (set() if deep_refused else {"r3"})
    assert (result.documents, result.documents_indexed, result.documents_failed) == (
        (11, 4, 7) if deep_refused else (11, 5, 6))
    assert result.failed == (1 if deep_refused else 0)  # the chunk the mapping rejected
    dead = read_dead_letter(Path(result.dead_letter_path or ""))
    reasons = {(d["doc_id"], d["stage"]): d["reason"] for d in dead}
    assert "empty" in reasons[("empty.txt", "read")]
    assert "binary" in reasons[("binary.md", "read")]
    assert "UTF-8" in reasons[("latin1.txt", "read")]
    assert "duplicate" in reasons[("r1", "read")]
    assert "no text field" in reasons[("r2", "read")]
    assert "invalid JSON" in reasons[("records.jsonl:6", "read")]
    if deep_refused:
        assert "document_parsing_exception" in reasons[("r3", "write")]
        assert dead[-1]["chunk_id"] == chunk_id("r3", 0, chunker_signature(settings.chunking))
    r1 = chunks_of(es, settings, "r1")
    assert [c["title"] for c in r1] == ["Record one"]

    again = run_ingest(root, settings, es=es, embedder=embedder)
    assert again.documents_skipped == len(stored) and again.indexed == again.updated == 0
    assert again.documents_failed == (7 if deep_refused else 6)  # the same bad inputs, recorded again
    assert {c["doc_id"] for c in chunks_of(es, settings)} == stored


def test_shards_split_a_corpus_without_overlap(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    docs = corpus(8)
    parts = [run_ingest(docs, settings, es=es, embedder=embedder, shard=(i, 2)) for i in range(2)]
    assert sum(p.documents for p in parts) == 8 and all(p.documents < 8 for p in parts)
    assert len({c["doc_id"] for c in chunks_of(es, settings)}) == 8
    assert parts[0].shard == "0/2"


def test_parent_child_chunks_carry_their_parent(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    settings = settings.model_copy(update={"chunking": settings.chunking.model_copy(
        update={"strategy": "parent_child", "max_tokens": 16, "parent_max_tokens": 40})})
    text = "\n\n".join(" ".join(f"Paragraph {p} sentence {s} is about cells." for s in range(4)) for p in range(2))
    run_ingest([Document.make("pc", text, title="Parents")], settings, es=es, embedder=embedder)
    stored = chunks_of(es, settings, "pc")
    assert len(stored) > 2
    for c in stored:
        assert c["parent_text"] == text[c["parent_start"]:c["parent_end"]]
        assert c["parent_start"] <= c["char_start"] < c["char_end"] <= c["parent_end"]
        assert c["parent_id"].startswith("pc#p")
    assert len({c["parent_id"] for c in stored}) >= 2


def test_index_built_for_another_model_is_refused(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    other = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"model": "other/model"})})
    ensure_index(es, other)
    with pytest.raises(IndexMismatch):
        run_ingest(corpus(2), settings, es=es, embedder=embedder)
    assert es.send(request.count(settings.index.alias))["count"] == 0


def test_chunks_fit_the_model_with_the_title(embedder: Embedder) -> None:
    tok = embedder.tokenizer()
    title = "A rather long title about " + "many things " * 10
    text = " ".join(f"Word{i}" for i in range(600))
    limit = text_budget(tok, title, True, embedder.max_seq_length)
    for c in chunk_text(text, Settings().chunking, tok, limit):
        assert len(embedder.model.tokenizer(f"{title.strip()}. {c.text}")["input_ids"]) <= embedder.max_seq_length


def test_cli_ingest_twice_and_delete(es: EngineClient, settings: Settings, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text}) for d in corpus(3)))
    monkeypatch.setenv("HSP_INDEX__PREFIX", settings.index.prefix)
    monkeypatch.setenv("HSP_ES_URL", settings.es.url)
    monkeypatch.setenv("HSP_INGEST__DEAD_LETTER_DIR", str(tmp_path / "dl"))
    assert main(["ingest", str(path), "--no-progress"]) == 0
    assert "3 new" in capsys.readouterr().out
    assert main(["ingest", str(path), "--no-progress"]) == 0
    assert "Nothing changed" in capsys.readouterr().out
    assert main(["delete", "doc-1", "doc-2"]) == 0
    assert "deleted 2 chunks" in capsys.readouterr().out
    assert main(["ingest", str(path), "--shard", "3/2"]) == 2
    assert es.send(request.count(settings.index.alias))["count"] == 1


def _deleted(es: EngineClient, index: str) -> int:
    es.send(request.refresh(index))
    return int(es.send(request.index_stats(index, metric="docs"))["_all"]["primaries"]["docs"]["deleted"])


def _counters(es: EngineClient, index: str) -> tuple[int, int, int]:
    """The engine's own counters for ``index``'s primaries: documents indexed and deleted by requests, and
    deleted copies left in its segments."""
    es.send(request.refresh(index))
    primaries = es.send(request.index_stats(index, metric="indexing,docs"))["_all"]["primaries"]
    return (int(primaries["indexing"]["index_total"]), int(primaries["indexing"]["delete_total"]),
            int(primaries["docs"]["deleted"]))


def test_each_chunk_is_written_once_and_leaves_no_copy(es: EngineClient, settings: Settings,
                                                       embedder: Embedder) -> None:
    first = run_ingest(corpus(8), settings, es=es, embedder=embedder)
    assert first.indexed == 8 and _counters(es, first.index) == (8, 0, 0)  # one write per chunk, nothing to merge
    changed = [Document.make(d.doc_id, d.text + " Revised.", title=d.title) if d.doc_id == "doc-3" else d
               for d in corpus(8)]
    second = run_ingest(changed, settings, es=es, embedder=embedder)
    assert (second.updated, second.indexed, second.documents_skipped) == (1, 0, 7)
    assert _counters(es, second.index) == (9, 0, 1)  # the changed chunk overwritten in place: one write
    assert len({c["doc_id"] for c in chunks_of(es, settings)}) == 8
