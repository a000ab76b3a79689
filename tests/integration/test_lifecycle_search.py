"""Searches keep answering while ``migrate`` builds a new index version and swaps the alias."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from hybridsearch import SearchClient
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.index.spec import chunk_meta
from hybridsearch.index.versions import index_status, read_alias, rollback
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document
from hybridsearch.migrate import migrate
from hybridsearch.settings import Settings

TOPICS = {
    "photosynthesis": "Plants turn sunlight, water and carbon dioxide into glucose and oxygen in their leaves.",
    "volcano": "Magma rises through the crust and erupts as lava, ash and hot volcanic gases.",
    "tides": "The pull of the moon's gravity makes the ocean tides rise and fall twice a day.",
    "bread": "Yeast ferments the sugars in dough and the carbon dioxide it makes lets bread rise.",
    "chess": "Two players move pieces on a checkered board, each trying to checkmate the other king.",
    "vaccines": "A vaccine trains the immune system to recognise a pathogen by showing it harmless antigens.",
    "coffee": "Roasted coffee beans are ground and brewed with hot water into a drink full of caffeine.",
    "rainbow": "Sunlight refracts inside raindrops and splits into a spectrum of colours across the sky.",
    "earthquake": "Tectonic plates slip along faults and release their energy as seismic waves.",
    "bees": "Honeybees pollinate flowers while they collect nectar and tell each other where food is by dancing.",
}
QUERIES = ["why does bread rise", "what causes earthquakes", "how do vaccines work", "moon and ocean tides"]


def documents() -> list[Document]:
    docs = []
    for i in range(3):  # 30 documents, so the copy runs in several batches
        for name, text in TOPICS.items():
            docs.append(Document.make(f"{name}-{i}", f"{text} (Edition {i}.)", title=name.title(),
                                      metadata={"edition": str(i)}))
    return docs


@dataclass
class Answer:
    phase: str
    hits: int
    top: str | None
    error: str | None


class Searcher(threading.Thread):
    """Queries in a loop and records every answer with the migration phase it was asked in."""

    def __init__(self, client: SearchClient) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.phase = "before"
        self.answers: list[Answer] = []
        self.answered = threading.Condition()
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            query = QUERIES[i % len(QUERIES)]
            phase = self.phase
            try:
                res = self.client.search(query, k=3, rerank=False)
                answer = Answer(phase, len(res.hits), res.hits[0].doc_id if res.hits else None, None)
            except Exception as exc:  # noqa: BLE001 - any error is what this test looks for
                answer = Answer(phase, 0, None, f"{type(exc).__name__}: {exc}")
            with self.answered:
                self.answers.append(answer)
                self.answered.notify_all()
            i += 1

    def wait_for(self, n: int, phase: str) -> None:
        """Block until ``n`` more answers were given in ``phase`` (no timing assumptions, only a safety cap)."""
        with self.answered:
            target = sum(a.phase == phase for a in self.answers) + n
            ok = self.answered.wait_for(lambda: sum(a.phase == phase for a in self.answers) >= target, timeout=120)
        assert ok, "the search thread stopped answering"


def test_searches_keep_answering_throughout_a_migration(es: EngineClient, settings: Settings,
                                                         embedder: Embedder) -> None:
    ingest = run_ingest(documents(), settings, es=es, embedder=embedder)
    assert ingest.documents == 30 and ingest.failed == 0
    v1 = settings.index.versioned(1)
    new = settings.model_copy(update={"index": settings.index.model_copy(update={"index_options": "hnsw"})})

    client = SearchClient(es, settings, embedder=embedder)
    searcher = Searcher(client)
    searcher.start()
    try:
        searcher.wait_for(3, "before")
        searcher.phase = "copying"
        batches: list[int] = []

        def each_batch(done: int, total: int) -> None:
            batches.append(done)
            searcher.wait_for(2, "copying")  # searches run between every pair of batches of the copy

        result = migrate(es, settings, new, embedder=embedder, batch_size=7,
                         progress=lambda e: each_batch(e.done, e.total or 0) if e.done else None)
        searcher.phase = "after"
        searcher.wait_for(5, "after")
    finally:
        searcher.stop.set()
        searcher.join(timeout=60)
        client.close()

    assert result.target == settings.index.versioned(2) and result.chunks == ingest.chunks
    assert sorted(read_alias(es, settings.index.alias)) == [result.target]
    assert len(batches) >= 3
    answers = searcher.answers
    errors = [a.error for a in answers if a.error]
    assert errors == []
    assert all(a.hits > 0 for a in answers)
    by_phase = {p: [a for a in answers if a.phase == p] for p in ("before", "copying", "after")}
    assert len(by_phase["copying"]) >= 2 * len(batches) and len(by_phase["after"]) >= 5
    # the same query finds the same kind of document before, during and after the swap
    tops = {(a.phase, a.top.split("-")[0]) for a in answers if a.top}
    for phase in ("before", "copying", "after"):
        assert (phase, "bread") in tops or (phase, "earthquake") in tops
    # the new index really is the new layout, the old one untouched
    status = {r.name: r for r in index_status(es, settings.index).indices}
    assert status[v1].index_options["type"] == "int8_hnsw" and status[result.target].index_options["type"] == "hnsw"
    assert status[v1].chunks == status[result.target].chunks == ingest.chunks


def test_rollback_keeps_search_working(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    run_ingest(documents()[:10], settings, es=es, embedder=embedder)
    new = settings.model_copy(update={"index": settings.index.model_copy(update={"index_options": "hnsw"})})
    migrate(es, settings, new, embedder=embedder)
    with SearchClient(es, settings, embedder=embedder) as client:
        assert client.search("why does bread rise", k=1, rerank=False).hits[0].doc_id == "bread-0"
        rollback(es, settings.index)
        assert sorted(read_alias(es, settings.index.alias)) == [settings.index.versioned(1)]
        assert client.search("what causes earthquakes", k=1, rerank=False).hits[0].doc_id == "earthquake-0"


def test_ingest_after_migration_changes_nothing(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    """The copied chunks keep their ids and content hashes: re-ingesting the sources into the new
    version finds every document unchanged."""
    docs = documents()[:10]
    run_ingest(docs, settings, es=es, embedder=embedder)
    new = settings.model_copy(update={"index": settings.index.model_copy(update={"index_options": "hnsw"})})
    migrate(es, settings, new, embedder=embedder)
    again = run_ingest(docs, new, es=es, embedder=embedder)
    assert again.index == settings.index.versioned(2)
    assert again.changed_nothing and again.unchanged == len(docs) and again.indexed == 0


def long_documents() -> list[Document]:
    """Documents of several paragraphs, so chunkers disagree on how to cut them."""
    names = list(TOPICS)
    docs = []
    for i, name in enumerate(names):
        paragraphs = [TOPICS[n] for n in (names[i:] + names[:i])[:4]]
        docs.append(Document.make(f"long-{name}", "\n\n".join(paragraphs), title=name.title(),
                                  metadata={"kind": "long"}))
    return docs


def test_migration_to_another_chunker_recuts_documents_from_their_chunks(es: EngineClient, settings: Settings,
                                                                        embedder: Embedder) -> None:
    from hybridsearch.migrate import documents_from_chunks, scan_sorted, to_document

    docs = long_documents()
    tenant_b = settings.model_copy(update={"index": settings.index.model_copy(update={"tenant": "b"})})
    run_ingest(docs[:6], settings, es=es, embedder=embedder)
    run_ingest(docs[6:], tenant_b, es=es, embedder=embedder)
    v1 = settings.index.versioned(1)
    old_chunks = es.send(request.count(v1))["count"]
    small = settings.chunking.model_copy(update={"strategy": "sentence", "max_tokens": 24, "overlap": 0.0})
    new = settings.model_copy(update={"chunking": small})

    seen: list[tuple[int, int]] = []
    result = migrate(es, settings, new, embedder=embedder, batch_size=16,
                     progress=lambda e: seen.append((e.done, e.total or 0)) if e.done else None)
    assert result.rechunked and result.reembedded and result.documents == len(docs)
    assert seen[-1] == (len(docs), len(docs))
    assert result.chunks > old_chunks  # smaller chunks, more of them
    assert sorted(read_alias(es, settings.index.alias)) == [result.target]
    signature = chunk_meta(new)["chunker_version"]
    assert signature.startswith("sentence-24-")
    assert index_status(es, new.index).indices[-1].chunker == signature

    # every document comes back exactly from the new chunks, with its tenant, title, metadata and hash
    originals = {d.doc_id: d for d in docs}
    rebuilt = {(t, c[0]["doc_id"]): c for t, c in documents_from_chunks(scan_sorted(es, result.target))}
    assert {k for k in rebuilt} == {(None, d.doc_id) for d in docs[:6]} | {("b", d.doc_id) for d in docs[6:]}
    for (_, doc_id), chunks in rebuilt.items():
        doc = to_document(chunks)
        assert doc.text == originals[doc_id].text and doc.content_hash == originals[doc_id].content_hash
        assert doc.title == originals[doc_id].title and doc.metadata == {"kind": "long"}
        assert all(c["chunk_id"].endswith(f"@{signature}") for c in chunks)

    # the re-cut index is a faithful ingest target: the sources change nothing, searches find them
    again = run_ingest(docs[:6], new, es=es, embedder=embedder)
    assert again.changed_nothing and again.index == result.target
    with SearchClient(es, new, embedder=embedder) as client:
        assert client.search("why does bread rise", k=1, rerank=False).hits[0].doc_id.startswith("long-")
