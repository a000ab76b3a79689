"""A multi-megabyte text file streams through the pipeline (a tiny random bi-encoder keeps embedding cheap)."""

from __future__ import annotations

from pathlib import Path

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.settings import Settings

MB = 1_000_000


def test_big_text_file_streams_through(es: EngineClient, settings: Settings, tiny_bi_encoder: Path,
                                       tmp_path: Path) -> None:
    settings = settings.model_copy(update={"embedding": settings.embedding.model_copy(
        update={"model": str(tiny_bi_encoder), "dims": 32, "batch_size": 64})})
    path = tmp_path / "big.txt"
    paragraph = ("Cells divide by mitosis, and errors in the process can lead to aneuploidy. " * 9).strip()
    with path.open("w", encoding="utf-8") as fh:
        while fh.tell() < 3 * MB:
            fh.write(paragraph + "\n\n")
    embedder = Embedder(settings.embedding, settings.models)
    result = run_ingest(path, settings, es=es, embedder=embedder)
    n_paragraphs = path.read_text().count("\n\n")
    assert result.documents == 1 and result.documents_failed == 0 and result.failed == 0
    assert result.chunks == result.indexed > n_paragraphs // 2  # paragraphs merged up to max_tokens
    es.send(request.refresh(settings.index.alias))
    assert es.send(request.count(settings.index.alias))["count"] == result.indexed
    last = es.send(request.search(settings.index.alias, request.body(size=1,
                                                                     sort=[{"position": "desc"}])))["hits"]["hits"][0]
    assert last["_source"]["position"] == result.indexed - 1
    assert last["_source"]["char_end"] == path.stat().st_size - 2  # the text is covered to its end

    again = run_ingest(path, settings, es=es, embedder=embedder)
    assert again.changed_nothing and again.unchanged == result.indexed
