"""A BM25 hit over sections shows the chunk that matched: recorded ``_msearch`` answers, both clients.

``recordings/msearch_passages.json`` is one hybrid search for ``zq0x3q zq1x5q`` with ``highlight=True`` on
Elasticsearch 9.3.2 over two documents of eight sentences (``hsp ingest --strategy sentence --max-tokens 48``;
``zqDxSq`` is only in sentence S of document D): BM25 over sections finds both documents by their first chunks (the
sections' leaders), kNN finds chunk 3 of each, and the passage list finds ``doc000.txt#3`` and ``doc001.txt#5``:
their own fields, and their text inside the highlighter's marks. ``msearch_passages_plain.json`` is the same search
without highlights (the passage list's text in ``_source``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from hybridsearch import AsyncSearchClient, SearchClient
from hybridsearch.cli.search import HIGHLIGHT, snippet
from hybridsearch.engine import ELASTICSEARCH, OPENSEARCH, Dialect
from hybridsearch.query.results import Highlight, PassageSource, SearchResult
from hybridsearch.query.window import MARK_CLOSE, MARK_OPEN, fuse_window, read_highlights, show_passages
from hybridsearch.settings import Settings
from recorded_engine import FakeAsyncES, FakeES, FixedVectors, list_of, recording, same, settings

D0, D1 = "doc000.txt", "doc001.txt"


def chunk(doc: str, position: int) -> str:
    return f"{doc}#{position}@sentence-48-0.12-v1"


def search(answer: dict[str, Any], query: str = "zq0x3q zq1x5q", dialect: Dialect = ELASTICSEARCH,
           s: Settings | None = None, reranker: Any = None, **kw: Any) -> tuple[SearchResult, FakeES]:
    """One search (``highlight=True`` unless ``kw`` says) through both clients on ``answer`` (they must agree); the
    sync client's result and requests."""
    s = s or settings()
    kw.setdefault("highlight", True)
    es = FakeES(s, answer, dialect)
    with SearchClient(es, s, embedder=FixedVectors(), reranker=reranker) as client:  # type: ignore[arg-type]
        one = client.search(query, rerank=reranker is not None, **kw)

    async def run() -> SearchResult:
        async with AsyncSearchClient(FakeAsyncES(FakeES(s, answer, dialect)), s,  # type: ignore[arg-type]
                                     embedder=FixedVectors(), reranker=reranker) as client:
            return await client.search(query, rerank=reranker is not None, **kw)

    assert same(one, asyncio.run(run()))
    return one, es


def without_passages() -> Settings:
    s = settings()
    return s.model_copy(update={"query": s.query.model_copy(update={"best_passage": False})})


def test_a_bm25_hit_shows_its_documents_best_chunk_with_the_matched_term() -> None:
    result, es = search(recording("passages"), mode="bm25")
    assert [(h.doc_id, h.chunk_id, h.position, h.passage) for h in result.hits] == [
        (D0, chunk(D0, 3), 3, PassageSource.BM25_BEST_CHUNK), (D1, chunk(D1, 5), 5, PassageSource.BM25_BEST_CHUNK)]
    top = result.hits[0]
    assert top.highlights == [Highlight(start=34, end=40, term="zq0x3q")] and top.text[34:40] == "zq0x3q"
    assert top.text.startswith("Sentence 3 of document 0") and MARK_OPEN not in top.text  # text, not markup
    # one _msearch: the sections' BM25 list, then the passage list on the chunks' own fields
    assert len(es.sent) == 1 and [list_of(b) for b in es.sent[0][1::2]] == ["bm25", "passages"]


def test_highlights_travel_as_data_in_json() -> None:
    result, _ = search(recording("passages"), mode="bm25")
    hit = json.loads(result.model_dump_json())["hits"][1]
    assert hit["passage"] == "bm25_best_chunk" and hit["position"] == 5
    assert hit["highlights"] == [{"start": 34, "end": 40, "term": "zq1x5q"}]
    assert "<em>" not in result.model_dump_json() and MARK_OPEN not in result.model_dump_json()


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_document_order_and_scores_do_not_change(mode: str) -> None:
    """Only the chunk shown changes: the same documents in the same order with the same stage ranks and scores as
    without the passage list (HSP_QUERY__BEST_PASSAGE=false, where each BM25 hit shows its section's first chunk)."""
    def ranking(r: SearchResult) -> list[Any]:
        return [(h.doc_id, h.rank, h.score, h.bm25, h.knn, h.fused) for h in r.hits]

    on, _ = search(recording("passages"), mode=mode)
    off, es = search(recording("passages"), mode=mode, s=without_passages())
    assert ranking(on) == ranking(off) and on.candidates == off.candidates
    assert all(list_of(b) != "passages" for r in es.sent for b in r[1::2])
    if mode == "bm25":
        assert {h.passage for h in off.hits} == {PassageSource.SECTION_FIRST_CHUNK}
        assert [h.chunk_id for h in off.hits] == [chunk(D0, 0), chunk(D1, 0)] and not off.hits[0].highlights


def test_hybrid_shows_bm25s_best_chunk_unless_knn_added_more() -> None:
    """Both documents rank the same in both lists here (a tie): BM25's best chunk, whose matched word can be shown,
    not kNN's chunk 3 of doc001.txt, which does not hold zq1x5q."""
    result, _ = search(recording("passages"), mode="hybrid")
    assert [(h.chunk_id, h.passage) for h in result.hits] == [
        (chunk(D0, 3), PassageSource.BM25_BEST_CHUNK), (chunk(D1, 5), PassageSource.BM25_BEST_CHUNK)]
    assert result.hits[0].knn is not None and result.hits[0].highlights[0].term == "zq0x3q"


def test_a_document_missing_from_the_passage_list_keeps_its_first_chunk_and_says_why() -> None:
    answer = recording("passages")
    passages = answer["responses"][2]["hits"]["hits"]
    answer["responses"][2]["hits"]["hits"] = [h for h in passages if h["_source"]["doc_id"] == D0]
    result, _ = search(answer, mode="bm25", explain=True)
    second = result.hits[1]
    assert (second.doc_id, second.chunk_id, second.passage) == (D1, chunk(D1, 0), PassageSource.SECTION_FIRST_CHUNK)
    assert second.highlights == [] and result.hits[0].chunk_id == chunk(D0, 3)
    assert second.explanation is not None and any(
        line.startswith(f"passage: chunk 0 ({chunk(D1, 0)}), the first chunk of the BM25 section (no chunk's text "
                        "matched among the passage search's top 50 documents)") for line in second.explanation)
    # hybrid: kNN's nearest chunk rather than a first chunk that matched nothing
    hybrid, _ = search(answer, mode="hybrid")
    assert (hybrid.hits[1].chunk_id, hybrid.hits[1].passage) == (chunk(D1, 3), PassageSource.KNN)


def test_a_passage_hit_without_its_highlight_is_no_passage() -> None:
    """Highlights asked for, the text is only in the highlight: a hit the highlighter left out has no text to show."""
    answer = recording("passages")
    answer["responses"][2]["hits"]["hits"][1].pop("highlight")
    result, _ = search(answer, mode="bm25")
    assert [h.passage for h in result.hits] == [PassageSource.BM25_BEST_CHUNK, PassageSource.SECTION_FIRST_CHUNK]
    assert result.hits[1].text.startswith("Sentence 0 of document 1")


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_without_highlights_the_same_passages_are_shown_for_less(mode: str) -> None:
    """``highlight=False`` (the default; evaluation, mining): the passage list asks for no highlighting, the
    engine's costly part, and fetches the text instead; the same chunks are shown and reranked, without offsets."""
    plain, es = search(recording("passages_plain"), mode=mode, highlight=False, explain=True)
    marked, _ = search(recording("passages"), mode=mode)
    assert plain.hits[0].explanation is not None and (
        f"passage: chunk 3 ({chunk(D0, 3)}), the document's chunk that best matches the query"
        in plain.hits[0].explanation)
    assert [(h.chunk_id, h.text, h.passage) for h in plain.hits] == [(h.chunk_id, h.text, h.passage)
                                                                      for h in marked.hits]
    assert all(h.highlights == [] for h in plain.hits) and all(h.highlights for h in marked.hits)
    body = next(b for r in es.sent for b in r[1::2] if list_of(b) == "passages")
    assert "highlight" not in body and "text" in body["_source"]


def test_a_failed_passage_list_never_fails_the_search() -> None:
    answer = recording("passages")
    answer["responses"][2] = {"status": 400, "error": {"root_cause": [
        {"type": "illegal_argument_exception", "reason": "highlighting is too long"}]}}
    result, _ = search(answer, mode="bm25", explain=True)
    assert [h.chunk_id for h in result.hits] == [chunk(D0, 0), chunk(D1, 0)]
    assert result.hits[0].explanation is not None and any(
        "the passage search failed: illegal_argument_exception: highlighting is too long" in line
        for line in result.hits[0].explanation)


class Remembers:
    """A reranker that keeps the passages it was given."""

    name = "remembers"
    blend: float | None = None  # no recommendation (Reranker.blend)

    def __init__(self) -> None:
        self.seen: list[str] = []

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        self.seen = list(passages)
        return [0.0] * len(passages)


def test_the_reranker_scores_the_passage_shown() -> None:
    reranker = Remembers()
    result, _ = search(recording("passages"), mode="bm25", reranker=reranker)
    assert result.reranked and reranker.seen == [h.text for h in result.hits]
    assert "zq0x3q" in reranker.seen[0] and "zq1x5q" in reranker.seen[1]


def test_why_reports_the_passage() -> None:
    s = settings()
    es = FakeES(s, recording("passages"))
    with SearchClient(es, s, embedder=FixedVectors()) as client:  # type: ignore[arg-type]
        report = client.why("zq0x3q zq1x5q", D1, mode="bm25", rerank=False)
    assert (report.chunk_id, report.passage) == (chunk(D1, 5), PassageSource.BM25_BEST_CHUNK)
    assert report.highlights == [Highlight(start=34, end=40, term="zq1x5q")]
    assert (f"passage: chunk 5 ({chunk(D1, 5)}), the document's chunk that best matches the query (matched: "
            "zq1x5q)") in report.notes


def test_chunk_level_indices_are_unchanged() -> None:
    """An index without sections (bm25_unit chunk): no passage list is sent, and hits show the chunks as before
    (BM25's chunk; kNN's when kNN found the document)."""
    s = settings()
    es = FakeES(s, recording("hybrid"))
    es.indices.mappings["_meta"].update(bm25_unit="chunk", section_words=None)
    with SearchClient(es, s, embedder=FixedVectors()) as client:  # type: ignore[arg-type]
        result = client.search("how do bees find food", rerank=False)
    assert all(list_of(b) != "passages" and "highlight" not in b for r in es.sent for b in r[1::2])
    assert [len(r) for r in es.sent] == [2, 2]
    by_doc = {h.doc_id: (h.chunk_id, h.passage, h.highlights) for h in result.hits}
    hybrid = recording("hybrid")["responses"]
    knn_chunks = {h["_source"]["doc_id"]: h["_id"] for h in hybrid[1]["hits"]["hits"]}
    bm25_chunks = {h["_source"]["doc_id"]: h["_id"] for h in hybrid[0]["hits"]["hits"]}
    for doc, (chunk_id, passage, marks) in by_doc.items():
        assert marks == []
        if doc in knn_chunks:
            assert (chunk_id, passage) == (knn_chunks[doc], PassageSource.KNN)
        else:
            assert (chunk_id, passage) == (bm25_chunks[doc], PassageSource.BM25)


def test_opensearch_sends_the_same_passage_list() -> None:
    """The unified highlighter's syntax is the same on both engines: the BM25 request lines do not differ."""
    es_result, es_es = search(recording("passages"), mode="bm25")
    os_result, os_es = search(recording("passages"), mode="bm25", dialect=OPENSEARCH)
    assert same(es_result, os_result) and es_es.sent == os_es.sent
    body = es_es.sent[0][3]
    assert body["highlight"]["type"] == "unified" and body["collapse"] == {"field": "doc_id"}
    assert body["highlight"]["fields"] == {"text": {"number_of_fragments": 0}}  # the whole text, marked
    assert body["size"] == settings().query.passage_k and "text" not in body["_source"]  # it is in the highlight
    assert body["query"]["bool"]["must"] == [{"match": {"text": {"query": "zq0x3q zq1x5q", "operator": "or"}}}]
    assert body["query"]["bool"]["filter"] == es_es.sent[0][1]["query"]["bool"]["filter"]  # filters, visibility


def _hit(chunk_id: str, score: float, marked: str | None = None) -> dict[str, Any]:
    """A list's hit; with ``marked``, the passage list's (the chunk's own fields, the text in the highlight)."""
    doc = chunk_id.split("#")[0]
    if marked:
        return {"_id": chunk_id, "_score": score, "_source": {"doc_id": doc, "chunk_id": chunk_id},
                "highlight": {"text": [marked]}}
    return {"_id": chunk_id, "_score": score, "_source": {"doc_id": doc, "chunk_id": chunk_id, "title": doc.upper(),
                                                          "text": f"text of {chunk_id}"}}


def _resp(*hits: dict[str, Any]) -> dict[str, Any]:
    return {"hits": {"hits": list(hits)}, "status": 200}


def test_the_hybrid_rule_follows_what_each_list_added() -> None:
    """BM25 ranks a b c d, kNN c b d a (RRF, equal weights): a (BM25 added more) and b (a tie) show BM25's best
    chunk; d (kNN added more) kNN's chunk; c too, but kNN's chunk is BM25's best: shown with its highlights."""
    q = settings().query
    bm25 = _resp(_hit("a#0", 9.0), _hit("b#0", 8.0), _hit("c#0", 7.0), _hit("d#0", 6.0))
    knn = _resp(_hit("c#2", 0.9), _hit("b#9", 0.8), _hit("d#4", 0.7), _hit("a#5", 0.6))
    passages = _resp(*(_hit(f"{doc}#{pos}", 5.0, f"the {MARK_OPEN}word{MARK_CLOSE}")
                       for doc, pos in (("a", 2), ("b", 1), ("c", 2), ("d", 1))))
    w = fuse_window({"bm25": bm25, "knn": knn}, q.collapse)
    show_passages(w.entries, True, passages, q.passage_k)
    shown = {e.key: (e.chunk_id, e.passage, e.matches) for e in w.entries}
    assert shown == {"a": ("a#2", PassageSource.BM25_BEST_CHUNK, ((4, 8),)),
                     "b": ("b#1", PassageSource.BM25_BEST_CHUNK, ((4, 8),)),
                     "c": ("c#2", PassageSource.BM25_BEST_CHUNK, ((4, 8),)),
                     "d": ("d#4", PassageSource.KNN, ())}
    d = next(e for e in w.entries if e.key == "d")
    assert d.passage_reason == "kNN added more to the fused score than BM25, whose best chunk is d#1"
    assert d.source["text"] == "text of d#4"  # what the reranker scores
    a = next(e for e in w.entries if e.key == "a")  # the chunk's own fields over the document's
    assert (a.source["text"], a.source["title"], a.source["chunk_id"]) == ("the word", "A", "a#2")


def test_reading_the_highlighters_marks() -> None:
    o, c = MARK_OPEN, MARK_CLOSE
    assert read_highlights(f"{o}Bees{c} dance to find {o}food{c}.") == ("Bees dance to find food.", [(0, 4), (19, 23)])
    assert read_highlights("no marks") == ("no marks", [])
    for marked in (f"{o}a{o}b{c}{c}", f"a{c}", f"{o}a", f"{o}a{c}{c}"):  # not well formed (or a mark in the text)
        assert read_highlights(marked) is None


def test_the_table_styles_the_engines_spans() -> None:
    text = "Sentence 3 of document 0\n  mentions zq0x3q while describing the harbours."
    start = text.index("zq0x3q")
    snip = snippet(text, ["harbours"], spans=[Highlight(start=start, end=start + 6, term="zq0x3q")])
    assert [snip.plain[s.start:s.end] for s in snip.spans if s.style == HIGHLIGHT] == ["zq0x3q"]
    assert "document 0 mentions" in snip.plain  # whitespace runs read as one space, offsets still right
    words = snippet(text, ["harbours"])  # no spans (a kNN passage): the query's words
    assert [words.plain[s.start:s.end] for s in words.spans] == ["harbours"]
