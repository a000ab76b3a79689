"""BM25 over whole documents (sections), kNN over chunks, on the real node."""

from __future__ import annotations

from hybridsearch import SearchClient
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.index.versions import index_meta
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document
from hybridsearch.settings import Settings

# Four paragraphs of about 40 words each: with 48-piece chunks and 100-word sections the long document is cut into
# several chunks and two sections. "zygomorphic" is in the first paragraph, "quokka" in the second.
PARAGRAPHS = [
    "Orchids often have zygomorphic flowers whose single plane of symmetry guides visiting insects toward the "
    "nectar, and botanists have long used this shape to sort the family into tribes and subtribes across the "
    "tropics and temperate zones.",
    "On Rottnest Island the quokka lives in dense scrub, feeding at night on grasses and leaves, and the small "
    "marsupial has become famous for photographs in which it appears to smile at the tourists who visit it.",
    "Glaciers carve wide valleys with a characteristic U shape, leaving behind moraines, erratic boulders and "
    "lakes once the ice retreats, which geologists read as a record of past climates over thousands of years.",
    "Sourdough bread rises because wild yeasts and lactic acid bacteria ferment the flour, producing gas and the "
    "sour taste, and bakers keep a starter alive for years by feeding it flour and water every single day.",
]


def _settings(settings: Settings) -> Settings:
    return settings.model_copy(update={
        "index": settings.index.model_copy(update={"section_words": 100}),
        "chunking": settings.chunking.model_copy(update={"max_tokens": 48, "overlap": 0.0}),
    })


def test_bm25_scores_sections_and_a_document_is_found_by_words_in_different_chunks(
    es: EngineClient, settings: Settings, embedder: Embedder
) -> None:
    s = _settings(settings)
    docs = [Document.make("long", "\n\n".join(PARAGRAPHS), title="Field notes"),
            Document.make("short", "A quokka photo and a zygomorphic orchid.", title="Captions")]
    result = run_ingest(docs, s, es=es, embedder=embedder)
    assert index_meta(es, result.index)["bm25_unit"] == "section"
    es.send(request.refresh(result.index))
    hits = es.send(request.search(result.index, request.body(query={"term": {"doc_id": "long"}}, size=50,
                                                             sort=["position"])))["hits"]["hits"]
    chunks = [h["_source"] for h in hits]
    leaders = [c for c in chunks if "section_text" in c]
    assert len(chunks) >= 4 and len(leaders) == 2 and chunks[0] is leaders[0]  # one leader per section
    assert "zygomorphic" in leaders[0]["section_text"] and "quokka" in leaders[0]["section_text"]
    assert "Sourdough" in leaders[1]["section_text"] and leaders[1]["section_title"] == "Field notes"

    both = s.model_copy(update={"query": s.query.model_copy(update={"operator": "and"})})
    with SearchClient(es, both, embedder=embedder) as client:
        # every word must match: no chunk of the long document holds both, its first section does
        found = [h.doc_id for h in client.search("zygomorphic quokka", mode="bm25", rerank=False).hits]
        assert found == ["short", "long"] or found == ["long", "short"]
        hit = next(h for h in client.search("zygomorphic quokka", mode="hybrid", rerank=False).hits
                   if h.doc_id == "long")
        assert hit.bm25 is not None and hit.text  # shown with a chunk's text, not the section's
        # a section's title and text are one field: a word of the title and a word of the text match together
        assert [h.doc_id for h in client.search("captions orchid", mode="bm25", rerank=False).hits] == ["short"]
    separate = both.model_copy(update={"query": both.query.model_copy(update={"bm25_fields": "separate"})})
    with SearchClient(es, separate, embedder=embedder) as client:  # best_fields: every word in one field
        assert client.search("captions orchid", mode="bm25", rerank=False).hits == []
        assert {h.doc_id for h in client.search("zygomorphic quokka", mode="bm25", rerank=False).hits} == {
            "short", "long"}
    chunked = both.model_copy(update={"query": both.query.model_copy(update={"bm25_unit": "chunk"})})
    with SearchClient(es, chunked, embedder=embedder) as client:
        assert [h.doc_id for h in client.search("zygomorphic quokka", mode="bm25", rerank=False).hits] == ["short"]
