"""SearchClient against the real node: hybrid/bm25/dense, collapse, filters, paging, explain, why (both clients),
errors."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from corpora import index_corpus
from hybridsearch import AsyncSearchClient, SearchClient
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import AsyncEngineClient, EngineClient
from hybridsearch.errors import IndexMismatch, IndexNotFound, QueryError
from hybridsearch.query.filters import AllOf, NoneOf, Range, Term
from hybridsearch.settings import Settings


@pytest.fixture()
def client(es: EngineClient, settings: Settings, embedder: Embedder) -> Iterator[SearchClient]:
    settings = settings.model_copy(update={"index": settings.index.model_copy(  # metadata.year compares as a number
        update={"metadata_fields": {"year": "long"}})})
    index_corpus(es, settings, embedder)
    c = SearchClient(es, settings, embedder=embedder)
    yield c
    c.close()


def ids(result: Any) -> list[str]:
    return [h.doc_id for h in result.hits]


def test_hybrid_search_finds_the_right_document_with_every_stage_reported(client: SearchClient,
                                                                          settings: Settings) -> None:
    res = client.search("how do plants turn sunlight into sugar", k=5)
    assert res.hits[0].doc_id == "d1"
    top = res.hits[0]
    assert top.bm25 is not None and top.knn is not None and top.fused is not None
    assert top.fused.rank == 1 and top.rank == 1
    assert top.fused.score == pytest.approx(1 / (60 + top.bm25.rank) + 1 / (60 + top.knn.rank))
    assert top.title == "Photosynthesis" and top.chunk_id == "d1#0" and top.metadata["lang"] == "en"
    assert res.index == settings.index.versioned() and res.mode == "hybrid" and res.k == 5
    assert res.reranked is False and res.rerank_reason == "no reranker configured"
    assert res.timings.total_ms >= res.timings.search_ms > 0 and res.timings.embed_ms > 0
    assert [h.rank for h in res.hits] == [1, 2, 3, 4, 5]
    assert [h.score for h in res.hits] == sorted((h.score for h in res.hits), reverse=True)


def test_bm25_and_dense_modes_report_only_their_stage(client: SearchClient) -> None:
    bm25 = client.search("volcanic lava", mode="bm25", k=3)
    assert bm25.hits[0].doc_id == "d2" and bm25.hits[0].knn is None and bm25.hits[0].fused is None
    assert bm25.hits[0].score == bm25.hits[0].bm25.score  # type: ignore[union-attr]
    assert bm25.timings.embed_ms == 0
    dense = client.search("molten rock bursting out of a mountain", mode="dense", k=3)
    assert dense.hits[0].doc_id == "d2" and dense.hits[0].bm25 is None and dense.hits[0].knn is not None


def test_chunks_of_one_document_collapse_to_its_best_chunk(es: EngineClient, settings: Settings,
                                                           embedder: Embedder) -> None:
    index_corpus(es, settings, embedder)
    with SearchClient(es, settings, embedder=embedder) as c:  # BM25 scores the whole document, shows its best chunk
        res = c.search("bees waggle dance honeybees", mode="bm25", k=10, highlight=True)
        assert ids(res).count("d7") == 1 and res.hits[0].chunk_id == "d7#1"
        assert {h.term.lower() for h in res.hits[0].highlights} >= {"bees"}
    chunked = settings.model_copy(update={"query": settings.query.model_copy(update={"bm25_unit": "chunk"})})
    with SearchClient(es, chunked, embedder=embedder) as c:
        res = c.search("bees waggle dance honeybees", mode="bm25", k=10)
        assert ids(res).count("d7") == 1
        assert res.hits[0].chunk_id == "d7#1"  # the chunk that says "bees" twice wins
    flat = settings.model_copy(update={"query": settings.query.model_copy(update={"collapse": False})})
    with SearchClient(es, flat, embedder=embedder) as c:
        res = c.search("bees waggle dance honeybees", mode="bm25", k=10)
        assert ids(res).count("d7") == 2
        assert {h.chunk_id for h in res.hits if h.doc_id == "d7"} == {"d7#0", "d7#1"}


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "dense"])
def test_filters_apply_to_both_lists(client: SearchClient, mode: str) -> None:
    res = client.search("plants sunlight bees coffee volcano", k=20, mode=mode,  # type: ignore[arg-type]
                        filters={"source": "wiki"})
    assert res.hits and {h.doc_id for h in res.hits} <= {"d1", "d3", "d5", "d7", "d9", "d11"}
    for h in res.hits:
        assert h.doc_id in {"d1", "d3", "d5", "d7", "d9", "d11"}


def test_typed_filters_range_metadata_and_negation(client: SearchClient) -> None:
    # call-arg, misc: the pydantic mypy plugin hides the positional __init__ AllOf/NoneOf inherit from _Group
    f = AllOf([Range("ingested_at", gte="2024-03-01", lt="2024-09-01"), NoneOf([Term("metadata.lang", "fr")])])
    res = client.search("science nature", k=20, filters=f)
    assert set(ids(res)) == {"d3", "d5", "d6", "d7", "d8"}
    res = client.search("science nature", k=20, filters={"range": {"metadata.year": {"gte": "2022", "lte": "2023"}}})
    assert set(ids(res)) == {"d4", "d5", "d9", "d10"}
    res = client.search("science", k=20, mode="dense", filters={"any_of": [{"term": {"doc_id": "d12"}},
                                                                             {"terms": {"doc_id": ["d2", "d3"]}}]})
    assert set(ids(res)) == {"d2", "d3", "d12"}


def test_tenant_setting_always_filters(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    index_corpus(es, settings, embedder)
    scoped = settings.model_copy(update={"index": settings.index.model_copy(update={"tenant": "globex"})})
    with SearchClient(es, scoped, embedder=embedder) as c:
        res = c.search("plants sunlight gravity moon", k=20)
        assert set(ids(res)) <= {"d3", "d6", "d9", "d12"} and res.hits
        assert c.search("photosynthesis", k=20, filters={"tenant": "acme"}).hits == []


def test_unknown_filter_field_is_refused(client: SearchClient) -> None:
    with pytest.raises(QueryError, match="unknown field 'text'"):
        client.search("bees", filters={"text": "bees"})


def test_pages_are_slices_of_one_stable_window(client: SearchClient) -> None:
    whole = client.search("plants water light energy", k=12)
    pages = [client.search("plants water light energy", k=4, page=p) for p in (1, 2, 3)]
    assert [i for p in pages for i in ids(p)] == ids(whole)[:12]
    assert [h.rank for h in pages[1].hits] == [5, 6, 7, 8]
    assert all(p.candidates == whole.candidates for p in pages)
    assert client.search("plants water light energy", k=4, page=99).hits == []


@pytest.mark.parametrize("mode", ["bm25", "dense"])
def test_one_list_fetches_only_its_page_and_its_pages_still_slice_the_whole_list(client: SearchClient,
                                                                                 mode: str) -> None:
    whole = client.search("plants water light energy", k=12, mode=mode, rerank=False)
    pages = [client.search("plants water light energy", k=4, page=p, mode=mode, rerank=False) for p in (1, 2, 3)]
    assert [i for p in pages for i in ids(p)] == ids(whole)[:12]
    assert [p.candidates for p in pages] == [min(4 * p, whole.candidates) for p in (1, 2, 3)]


def test_explain_gives_each_rrf_term(client: SearchClient) -> None:
    res = client.search("coffee beans brewed", k=3, explain=True)
    top = res.hits[0]
    assert top.doc_id == "d5" and top.explanation is not None
    text = "\n".join(top.explanation)
    assert f"BM25: rank {top.bm25.rank}" in text and f"1/(60+{top.bm25.rank})" in text  # type: ignore[union-attr]
    assert f"kNN: rank {top.knn.rank}" in text and "fused: rank 1" in text  # type: ignore[union-attr]
    assert "no reranker configured" in text
    assert client.search("coffee beans brewed", k=3).hits[0].explanation is None


@pytest.mark.parametrize("method", ["rrf", "zscore", "minmax"])
def test_each_fusion_recorded_in_the_index_fuses_the_real_lists(es: EngineClient, settings: Settings,
                                                                embedder: Embedder, method: str) -> None:
    """``hsp index fusion``'s path records the fusion in the live index's _meta; a new client reads it there and
    fuses the node's lists with it, as the pure fusion does on the scores each hit reports."""
    from hybridsearch.eval.calibrate import record_fusion
    from hybridsearch.index.versions import index_meta
    from hybridsearch.query.fusion import Fusion

    index_corpus(es, settings, embedder)
    recorded = Fusion(method=method, weights=(1.0, 2.0))  # type: ignore[arg-type]
    index = record_fusion(es, settings.index, recorded)
    meta = index_meta(es, index)
    assert meta["fusion"] == recorded.to_meta() and meta["fusion_calibration"] is None
    assert meta["embedding_model"] == settings.embedding.model  # the rest of _meta kept
    with SearchClient(es, settings, embedder=embedder) as c:
        res = c.search("how do plants turn sunlight into sugar", k=20, explain=True)
    label = "RRF k=60" if method == "rrf" else f"{method} sum"
    assert res.fusion == f"{label}, weights bm25 1 / kNN 2 (index)" and res.hits[0].doc_id == "d1"
    lists = {name: sorted(((h.doc_id, s.score, s.rank) for h in res.hits if (s := getattr(h, name)) is not None),
                          key=lambda t: t[2]) for name in ("bm25", "knn")}
    want = recorded.fuse({name: [(doc, score) for doc, score, _ in lst] for name, lst in lists.items()})
    assert [h.doc_id for h in res.hits] == [doc for doc, _ in want]
    assert [h.fused.score for h in res.hits if h.fused] == pytest.approx([score for _, score in want])
    assert f"({label}, weights bm25 1 / kNN 2 (index))" in "\n".join(res.hits[0].explanation or [])


def test_why_reports_each_stage_and_probes_missing_lists(client: SearchClient) -> None:
    rep = client.why("coffee beans brewed", "d5")
    assert rep.bm25 is not None and rep.knn is not None and rep.fused is not None and rep.final_rank == 1
    assert any(n.startswith("BM25: rank") for n in rep.notes)
    # No word of this query occurs in d9, so BM25 misses it while kNN finds it.
    rep = client.why("trembling ground caused by moving rock slabs", "d9")
    assert rep.knn is not None and rep.bm25 is None
    assert any("BM25: no section of d9 matches" in n for n in rep.notes)  # BM25 scores whole documents
    rep = client.why("coffee", "d5", filters={"source": "news"})
    assert rep.chunks_in_index == 1 and rep.chunks_matching_filters == 0 and rep.final_rank is None
    assert any("excluded by the filters" in n for n in rep.notes)
    assert client.why("coffee", "nope").chunks_in_index == 0


def test_async_why_answers_as_sync_why(client: SearchClient, embedder: Embedder) -> None:
    asked: list[tuple[str, str, dict[str, Any]]] = [
        ("coffee beans brewed", "d5", {}), ("trembling ground caused by moving rock slabs", "d9", {}),
        ("volcanic lava", "d9", {"mode": "bm25"}), ("coffee", "d5", {"filters": {"source": "news"}}),
        ("coffee", "nope", {})]
    expected = [client.why(query, doc_id, **kw) for query, doc_id, kw in asked]

    async def run() -> list[Any]:
        aes = AsyncEngineClient(client.settings.es)
        try:
            async with AsyncSearchClient(aes, client.settings, embedder=embedder) as c:
                return [await c.why(query, doc_id, **kw) for query, doc_id, kw in asked]
        finally:
            await aes.close()

    got = asyncio.run(run())
    assert [r.model_dump() for r in got] == [r.model_dump() for r in expected]
    assert not any(n.startswith("kNN") for n in got[2].notes)  # a BM25 search has no kNN list to probe
    assert any("BM25: no section of d9 matches" in n for n in got[1].notes) and got[1].knn is not None


def test_bad_queries_get_our_errors_and_long_ones_are_truncated(client: SearchClient, settings: Settings) -> None:
    for bad in ("", "   \n\t ", "\x00\x01\u200b\u202e", 42):
        with pytest.raises(QueryError):
            client.search(bad)  # type: ignore[arg-type]
    for k in (0, -1, settings.query.max_k + 1):
        with pytest.raises(QueryError, match="k must be"):
            client.search("bees", k=k)
    with pytest.raises(QueryError, match="unknown mode"):
        client.search("bees", mode="fuzzy")  # type: ignore[arg-type]
    long = client.search("coffee beans " * 10_000, k=3)  # ~130 KB
    assert long.truncated_query and len(long.query) <= settings.query.max_query_chars
    assert long.hits[0].doc_id == "d5"
    odd = client.search("ｃｏｆｆｅｅ\x07 beans\u200b \ud800 brewed 🙂", k=3)
    assert odd.hits[0].doc_id == "d5" and not odd.truncated_query and odd.query == "coffee beans brewed 🙂"


def test_missing_alias_and_model_mismatch_are_our_errors(es: EngineClient, settings: Settings,
                                                        embedder: Embedder) -> None:
    with SearchClient(es, settings, embedder=embedder) as c, pytest.raises(IndexNotFound, match="hsp ingest"):
        c.search("bees")
    index_corpus(es, settings, embedder)
    other = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"model": "x/other"})})
    with SearchClient(es, other, embedder=embedder) as c, pytest.raises(IndexMismatch, match="x/other"):
        c.search("bees")
