"""A BM25 hit shows the chunk that matched, on the real node.

Two documents of eight sentences, ingested with ``hsp ingest --strategy sentence --max-tokens 48`` (one sentence
per chunk, each document one BM25 section); ``zqDxSq`` occurs only in sentence S of document D. ``hsp search zq0x3q
--mode bm25`` must show ``doc000.txt``'s chunk 3, not its first chunk (sentence 0, the section's leader), which does
not hold the word.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridsearch import SearchClient
from hybridsearch.cli.main import main
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.query.results import Highlight, PassageSource
from hybridsearch.settings import Settings

PLACES = ["rivers", "orchards", "lanterns", "harbours", "meadows", "quarries", "bridges", "markets"]


def write_corpus(folder: Path) -> None:
    folder.mkdir()
    for d in range(2):
        text = " ".join(f"Sentence {i} of document {d} mentions zq{d}x{i}q while describing the {place} near the old "
                        "town, where people walk slowly every morning before the shops open their heavy wooden doors."
                        for i, place in enumerate(PLACES))
        (folder / f"doc{d:03d}.txt").write_text(text + "\n", encoding="utf-8")


@pytest.fixture()
def ingested(es: EngineClient, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The corpus ingested by ``hsp ingest`` under the test's prefix (deleted afterwards by ``settings``)."""
    for key, value in {"HSP_INDEX__PREFIX": settings.index.prefix, "HSP_QUERY__LOG_QUERIES": "false",
                       "HSP_RERANKER__ENABLED": "false", "HSP_INGEST__DEAD_LETTER_DIR": str(tmp_path / "dead"),
                       "COLUMNS": "200"}.items():
        monkeypatch.setenv(key, value)
    write_corpus(tmp_path / "src")
    assert main(["ingest", str(tmp_path / "src"), "--strategy", "sentence", "--max-tokens", "48",
                 "--no-progress"]) == 0
    return settings.model_copy(update={"chunking": settings.chunking.model_copy(
        update={"strategy": "sentence", "max_tokens": 48})})


def chunk(doc: str, position: int) -> str:
    return f"{doc}#{position}@sentence-48-0.12-v1"


def test_bm25_and_hybrid_show_the_sentence_that_matched(
    ingested: Settings, es: EngineClient, embedder: Embedder, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["search", "zq0x3q", "--mode", "bm25", "--json"]) == 0
    top = json.loads(capsys.readouterr().out)["hits"][0]
    assert (top["doc_id"], top["chunk_id"], top["position"]) == ("doc000.txt", chunk("doc000.txt", 3), 3)
    assert top["passage"] == "bm25_best_chunk" and top["text"].startswith("Sentence 3 of document 0")
    start = top["text"].index("zq0x3q")
    assert top["highlights"] == [{"start": start, "end": start + 6, "term": "zq0x3q"}]

    with SearchClient(es, ingested, embedder=embedder) as client:
        for mode in ("bm25", "hybrid"):
            hit = client.search("zq0x3q", mode=mode, rerank=False, highlight=True).hits[0]  # type: ignore[arg-type]
            assert (hit.doc_id, hit.chunk_id) == ("doc000.txt", chunk("doc000.txt", 3)), mode
            assert hit.passage is PassageSource.BM25_BEST_CHUNK and hit.bm25 is not None and hit.bm25.rank == 1
            assert hit.highlights == [Highlight(start=start, end=start + 6, term="zq0x3q")]
            stored = es.send(request.get_doc(ingested.index.alias, hit.chunk_id))  # the text is read from the highlight
            assert stored is not None and hit.text == stored["_source"]["text"]
        # the section ranks the same without the passage list; only the chunk shown differs
        off = ingested.model_copy(update={"query": ingested.query.model_copy(update={"best_passage": False})})
        with SearchClient(es, off, embedder=embedder) as before:
            old = before.search("zq0x3q", mode="bm25", rerank=False).hits
        new = client.search("zq0x3q", mode="bm25", rerank=False).hits  # without highlights: the same chunk
        assert [(h.doc_id, h.score) for h in old] == [(h.doc_id, h.score) for h in new]
        assert new[0].chunk_id == chunk("doc000.txt", 3) and new[0].highlights == []
        assert old[0].chunk_id == chunk("doc000.txt", 0) and old[0].passage is PassageSource.SECTION_FIRST_CHUNK
        # a word from each document: each hit shows its own matching sentence
        both = client.search("zq0x3q zq1x5q", mode="bm25", rerank=False).hits
        assert {h.doc_id: h.chunk_id for h in both} == {"doc000.txt": chunk("doc000.txt", 3),
                                                        "doc001.txt": chunk("doc001.txt", 5)}

    assert main(["search", "zq0x3q", "--mode", "bm25", "--why", "doc000.txt"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"passage: chunk 3 ({chunk('doc000.txt', 3)}), the document's chunk that best matches the query "
            "(matched: zq0x3q)") in out
