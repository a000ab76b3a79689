"""One index behind the read alias, and index checks on the real mapping."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hybridsearch.doctor import run_checks
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import AliasConflict, IndexMismatch
from hybridsearch.index.spec import load_template, with_analyzer
from hybridsearch.index.versions import checked_live_index, create_version, ensure_index, read_alias, rollback
from hybridsearch.index.visibility import scan_visible
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document
from hybridsearch.migrate import migrate
from hybridsearch.query.client import AsyncSearchClient, SearchClient
from hybridsearch.settings import Settings, load_settings


def docs(text: str) -> list[Document]:
    return [Document.make("d1", text, title="Bees"), Document.make("d2", "Ants build nests underground.")]


def test_alias_over_two_indices_is_refused_with_the_fix(es: EngineClient, settings: Settings,
                                                        embedder: Embedder) -> None:
    run_ingest(docs("Bees dance to tell where flowers are."), settings, es=es, embedder=embedder)
    v1, v2 = settings.index.versioned(1), create_version(es, settings)
    es.send(request.update_aliases([{"add": {"index": v2, "alias": settings.index.alias}}]))  # by hand

    with pytest.raises(AliasConflict) as caught:
        SearchClient(es, settings, embedder=embedder).search("bees", mode="bm25")
    assert caught.value.indices == (v1, v2) and caught.value.alias == settings.index.alias
    message = str(caught.value)
    assert f"points at 2 indices ({v1}, {v2})" in message
    assert "`hsp index rollback --to-version 1`" in message  # v1 is the write index: keep it
    assert f'{{"remove": {{"index": "{v2}", "alias": "{settings.index.alias}"}}}}' in message
    with pytest.raises(AliasConflict):
        asyncio.run(_async_search(settings, embedder))
    with pytest.raises(AliasConflict):  # nothing written to either index
        run_ingest(docs("Bees dance differently now."), settings, es=es, embedder=embedder)
    with pytest.raises(AliasConflict):
        migrate(es, settings, settings, embedder=embedder)
    with pytest.raises(AliasConflict):
        checked_live_index(es, settings)
    es.send(request.refresh(f"{v1},{v2}"))
    assert es.send(request.count(v2))["count"] == 0
    found = es.send(request.search(v1, request.body(query={"term": {"doc_id": "d1"}})))["hits"]["hits"]
    assert found[0]["_source"]["text"] == "Bees dance to tell where flowers are."

    assert rollback(es, settings.index, 1) == (f"{v1}, {v2}", v1)  # the fix the message names
    assert sorted(read_alias(es, settings.index.alias)) == [v1]
    hits = SearchClient(es, settings, embedder=embedder).search("bees", mode="bm25").hits
    assert [h.doc_id for h in hits] == ["d1"]


async def _async_search(settings: Settings, embedder: Embedder) -> None:
    async with AsyncSearchClient.from_settings(settings, embedder=embedder) as client:
        await client.search("bees", mode="bm25")


def _hand_made(es: EngineClient, settings: Settings, change: dict[str, Any]) -> str:
    """An index whose ``_meta`` is copied from the template but whose ``embedding`` field is rendered for the
    engine with ``change`` (``dims`` or ``similarity``) applied."""
    settings = with_analyzer(es, settings)
    body = load_template("chunks", settings, es.dialect)["template"]
    other = settings.model_copy(update={
        "embedding": settings.embedding.model_copy(update={k: v for k, v in change.items() if k == "dims"}),
        "index": settings.index.model_copy(update={k: v for k, v in change.items() if k == "similarity"})})
    body["mappings"]["properties"]["embedding"] = load_template(
        "chunks", other, es.dialect)["template"]["mappings"]["properties"]["embedding"]
    name = settings.index.versioned(1)
    es.send(request.create_index(name, settings=body["settings"], mappings=body["mappings"],
                                 aliases={settings.index.alias: {"is_write_index": True}}))
    return name


def test_hand_made_index_with_other_dims_is_refused_before_embedding(
        es: EngineClient, settings: Settings, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _hand_made(es, settings, {"dims": 768})
    embedded: list[int] = []
    real = embedder.encode

    def spy(texts: list[str], *args: Any, **kwargs: Any) -> Any:
        embedded.append(len(texts))
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(embedder, "encode", spy)

    with pytest.raises(IndexMismatch) as caught:
        run_ingest(docs("Bees dance."), settings, es=es, embedder=embedder)
    assert caught.value.index == name
    assert caught.value.differences == (("embedding.dims", 384, 768),)
    assert "embedding.dims: index has 768, settings say 384" in str(caught.value)
    assert embedded == []  # refused before any document was embedded
    es.send(request.refresh(name))
    assert es.send(request.count(name))["count"] == 0
    with pytest.raises(IndexMismatch, match=r"embedding\.dims"):
        SearchClient(es, settings, embedder=embedder).search("bees")


def test_other_similarity_is_a_mismatch(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    _hand_made(es, settings, {"similarity": "dot_product"})
    with pytest.raises(IndexMismatch) as caught:
        checked_live_index(es, settings)
    assert caught.value.differences == (("embedding.similarity", "cosine", "dot_product"),)


def test_an_index_of_an_earlier_format_is_refused_until_migrated(es: EngineClient, settings: Settings,
                                                                embedder: Embedder) -> None:
    run_ingest(docs("Bees dance to tell where flowers are."), settings, es=es, embedder=embedder)
    v1 = settings.index.versioned(1)
    assert checked_live_index(es, settings) == v1  # what the current code makes fits
    meta = es.send(request.get_mapping(v1))[v1]["mappings"]["_meta"]
    es.send(request.put_mapping(v1, meta={**meta, "schema_version": 1}))  # as an earlier release made it
    for refused in (lambda: checked_live_index(es, settings),
                    lambda: SearchClient(es, settings, embedder=embedder).search("bees", mode="bm25"),
                    lambda: run_ingest(docs("Bees dance."), settings, es=es, embedder=embedder)):
        with pytest.raises(IndexMismatch, match="another format") as caught:
            refused()
        assert caught.value.fix is not None and "`hsp index migrate`" in caught.value.fix
    result = migrate(es, settings, settings, embedder=embedder)  # the fix
    assert result.target == settings.index.versioned(2) and result.swapped
    assert checked_live_index(es, settings) == result.target
    hits = SearchClient(es, settings, embedder=embedder).search("bees", mode="bm25").hits
    assert [h.doc_id for h in hits] == ["d1"]


def test_chunk_indices_get_the_engines_filtered_knn_setting_when_made_and_when_found_without_it(
    es: EngineClient, settings: Settings
) -> None:
    want = es.engine.chunk_index_settings
    if not want:
        pytest.skip(f"{es.engine.name} has no ACORN filtered kNN: nothing to set")

    def have(name: str) -> dict[str, Any]:
        flat: dict[str, Any] = es.send(request.get_settings(name, flat_settings=True))[name]["settings"]
        return {k: flat.get(k) for k in want}

    name = ensure_index(es, settings)
    assert have(name) == want
    es.send(request.put_settings(name, {k: "acorn" for k in want}))  # an index made before the change
    assert ensure_index(es, settings) == name and have(name) == want


def test_whole_source_reads_work_on_opensearch_3_after_documents_change(es: EngineClient, settings: Settings,
                                                                        embedder: Embedder) -> None:
    """OpenSearch 3.x's k-NN derived source fails whole-_source reads from segments with deleted documents: new
    chunk indices turn it off, so migrate's and rechunk's reads keep working."""
    if es.engine.kind != "opensearch" or not es.engine.at_least(3, 0):
        pytest.skip(f"{es.engine.name} has no k-NN derived source")
    run_ingest(docs("Bees dance to tell where flowers are."), settings, es=es, embedder=embedder)
    run_ingest(docs("Bees dance and hum to tell where flowers are."), settings, es=es, embedder=embedder)
    v1 = settings.index.versioned(1)
    flat = es.send(request.get_settings(v1, flat_settings=True))[v1]["settings"]
    assert flat.get("index.knn.derived_source.enabled") == "false"
    hits = list(scan_visible(es, v1))
    assert {h["_source"]["doc_id"] for h in hits} == {"d1", "d2"}
    assert all(len(h["_source"]["embedding"]) == settings.embedding.dims for h in hits)
    result = migrate(es, settings, settings, embedder=embedder)
    assert result.swapped and checked_live_index(es, settings) == result.target


def test_without_a_model_set_search_and_ingest_follow_the_index(es: EngineClient, settings: Settings,
                                                                   tiny_bi_encoder: Path) -> None:
    """An index built with one model (an earlier default, say) keeps working for clients that set none: they use
    the model the index records; a client that names another model is still refused."""
    tiny = settings.embedding.model_copy(update={"model": str(tiny_bi_encoder), "dims": 32})
    run_ingest(docs("Bees dance to tell where flowers are."), settings.model_copy(update={"embedding": tiny}), es=es)
    unset = load_settings(es_url=settings.es.url, index={"prefix": settings.index.prefix},
                          query={"log_queries": False})
    assert "model" not in unset.embedding.model_fields_set
    with SearchClient(es, unset) as client:
        assert client.search("where do bees find flowers", mode="hybrid").hits[0].doc_id == "d1"
        assert client.settings.embedding.model == str(tiny_bi_encoder)
    added = run_ingest([Document.make("d3", "Wasps chew wood into paper.")], unset, es=es)
    assert (added.model, added.documents_indexed) == (str(tiny_bi_encoder), 1)
    model_check = next(c for c in run_checks(unset, es=es, models=False, reranker=False) if c.name == "model")
    assert model_check.status == "OK" and str(tiny_bi_encoder) in model_check.detail
    assert f"hsp index migrate --to-model {unset.embedding.model}" in model_check.detail  # the way to the default
    named = load_settings(es_url=settings.es.url, index={"prefix": settings.index.prefix},
                          embedding={"model": "sentence-transformers/all-MiniLM-L6-v2"})
    with pytest.raises(IndexMismatch):
        SearchClient(es, named).search("bees", mode="hybrid")
