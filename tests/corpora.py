"""Small corpora the integration tests write and search: the search tests' twelve documents, written straight
into a fresh index version (:func:`index_corpus`), and two teams' documents for the tenant and security tests."""

from __future__ import annotations

from typing import Any

from hybridsearch import SearchClient
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.index.metadata import typed_metadata
from hybridsearch.index.versions import ensure_index
from hybridsearch.ingest.sources import Document
from hybridsearch.settings import Settings

# doc_id → (title, [chunk texts], source, tenant, ingested_at, metadata)
CORPUS: dict[str, tuple[str, list[str], str, str, str, dict[str, str]]] = {
    "d1": ("Photosynthesis", ["Plants convert sunlight, water and carbon dioxide into glucose and oxygen."],
           "wiki", "acme", "2024-01-10", {"lang": "en", "year": "2019"}),
    "d2": ("Volcanoes", ["Magma rises through the crust and erupts as lava, ash and volcanic gases."],
           "news", "acme", "2024-02-10", {"lang": "en", "year": "2020"}),
    "d3": ("Black holes", ["A region of spacetime where gravity is so strong that not even light escapes."],
           "wiki", "globex", "2024-03-10", {"lang": "en", "year": "2021"}),
    "d4": ("Vaccines", ["Vaccines train the immune system to recognise pathogens by exposing it to antigens."],
           "news", "acme", "2024-04-10", {"lang": "fr", "year": "2022"}),
    "d5": ("Coffee", ["Roasted coffee beans are ground and brewed with hot water into a caffeinated drink."],
           "wiki", "acme", "2024-05-10", {"lang": "en", "year": "2023"}),
    "d6": ("Tides", ["The gravitational pull of the moon makes the ocean tides rise and fall twice a day."],
           "news", "globex", "2024-06-10", {"lang": "en", "year": "2019"}),
    "d7": ("Honeybees", ["Honeybees pollinate flowering plants while collecting nectar.",
                         "Bees tell each other where food is with a waggle dance, bees are clever."],
           "wiki", "acme", "2024-07-10", {"lang": "de", "year": "2020"}),
    "d8": ("Bread", ["Yeast ferments sugars in dough, producing carbon dioxide that makes bread rise."],
           "news", "acme", "2024-08-10", {"lang": "en", "year": "2021"}),
    "d9": ("Earthquakes", ["Tectonic plates slip along faults, releasing energy as seismic waves."],
           "wiki", "globex", "2024-09-10", {"lang": "en", "year": "2022"}),
    "d10": ("Antibiotics", ["Antibiotics kill bacteria or stop their growth but do not work against viruses."],
            "news", "acme", "2024-10-10", {"lang": "en", "year": "2023"}),
    "d11": ("Rainbows", ["Sunlight refracts and reflects inside raindrops, splitting into a spectrum of colours."],
            "wiki", "acme", "2024-11-10", {"lang": "en", "year": "2019"}),
    "d12": ("Chess", ["Two players move pieces on a checkered board aiming to checkmate the opposing king."],
            "news", "globex", "2024-12-10", {"lang": "en", "year": "2020"}),
}
VECTORS: dict[str, list[float]] = {}  # each chunk text's embedding, computed once per session


def index_corpus(es: EngineClient, settings: Settings, embedder: Embedder,
                 corpus: dict[str, Any] | None = None) -> str:
    """Create the versioned index + alias for ``settings`` and bulk-write the test chunks; returns the index."""
    name = ensure_index(es, settings)
    actions = []
    for doc_id, (title, chunks, source, tenant, date, meta) in (corpus or CORPUS).items():
        for pos, text in enumerate(chunks):
            chunk_id = f"{doc_id}#{pos}"
            key = f"{title}. {text}"
            if key not in VECTORS:
                VECTORS[key] = embedder.encode([key])[0].tolist()
            actions.append({"_index": name, "_id": chunk_id, "doc_id": doc_id, "chunk_id": chunk_id, "title": title,
                            "text": text, "embedding": VECTORS[key], "source": source, "tenant": tenant,
                            "ingested_at": date, "position": pos, "metadata": meta, "content_hash": f"h-{chunk_id}"})
            if typed := typed_metadata(meta, settings.index.metadata_fields):  # as ingestion writes it
                actions[-1]["meta"] = typed
            if pos == 0:  # the document's BM25 section rides on its first chunk, as ingestion writes it
                actions[-1].update(section_title=title, section_text=" ".join(chunks))
    assert request.bulk_failures(es.send(request.bulk(actions, refresh=True)))[1] == []
    return name


TEAM_A = {
    "handbook": ("Expense policy", "Team A reimburses train tickets and hotel nights booked through the portal."),
    "oncall": ("On-call rota", "Team A engineers hand over the pager every Monday at ten in the morning."),
    "shared-id": ("Coffee machine", "Team A descales the espresso machine on the first Friday of the month."),
}
TEAM_B = {
    "recipes": ("Sourdough", "Team B feeds the sourdough starter with rye flour and water every evening."),
    "garden": ("Allotment", "Team B waters the tomatoes and harvests courgettes in late summer."),
    "shared-id": ("Coffee beans", "Team B buys single-origin coffee beans roasted in small batches."),
}


def docs(corpus: dict[str, tuple[str, str]]) -> list[Document]:
    return [Document.make(doc_id, text, title=title) for doc_id, (title, text) in corpus.items()]


def seen(client: SearchClient, query: str, **kw: Any) -> set[tuple[str, str | None]]:
    return {(h.doc_id, h.title) for h in client.search(query, k=10, rerank=False, **kw).hits}
