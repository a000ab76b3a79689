"""Chunking properties (hypothesis) with the model's real tokenizer and a model-free one."""

from __future__ import annotations

import itertools
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.embedding.encoder import Embedder, TextTokenizer
from hybridsearch.index.spec import section_words_of
from hybridsearch.ingest.chunking import (
    MAX_SEGMENT_CHARS,
    Chunk,
    Tokenizer,
    chunk_text,
    embed_text,
    section_leaders,
    text_budget,
)
from hybridsearch.settings import ChunkingSettings, EmbeddingSettings, ModelsSettings, load_settings
from ingest_helpers import WhitespaceTokenizer

STRATEGIES = ["paragraph", "sentence", "token", "fixed", "parent_child"]


def _models() -> ModelsSettings:
    return load_settings().models



@cache
def hf() -> TextTokenizer:
    """The packaged MiniLM's tokenizer, as the chunker gets it from the embedder."""
    return Embedder(EmbeddingSettings(device="cpu"), _models()).tokenizer()


WORDS = st.sampled_from(
    ["the", "cell", "protein", "binding", "Dr.", "e.g.", "3.5", "mg", "(p<0.05)", "anti-inflammatory",
     "pneumonoultramicroscopicsilicovolcanoconiosis", "résumé", "naïve", "β-catenin", "ATP", "x" * 60, "",
     "end.", "why?", "wow!", "TNF-α", "ok;", "IL-6,"]
)
SEPS = st.sampled_from([" ", " ", " ", "  ", "\n", "\n\n", ". ", "\t", " \n \n "])


@st.composite
def texts(draw: st.DrawFn) -> str:
    n = draw(st.integers(0, 400))
    parts = []
    for _ in range(n):
        parts.append(draw(WORDS))
        parts.append(draw(SEPS))
    return "".join(parts)


def check_chunks(text: str, cfg: ChunkingSettings, tok: Tokenizer, limit: int) -> None:
    chunks = list(chunk_text(text, cfg, tok, limit))
    bound = min(limit, cfg.max_tokens) if cfg.strategy != "paragraph" else limit
    covered = [False] * len(text)
    prev_start = -1
    for i, c in enumerate(chunks):
        assert c.position == i
        assert c.text == text[c.char_start:c.char_end]
        assert c.text.strip(), "empty chunk"
        assert len(tok.offsets(c.text)) <= bound, "chunk over the limit"
        assert c.char_start >= prev_start, "chunks out of order"
        prev_start = c.char_start
        for k in range(c.char_start, c.char_end):
            covered[k] = True
        if cfg.strategy == "parent_child":
            assert c.parent_start is not None and c.parent_end is not None
            assert c.parent_start <= c.char_start < c.char_end <= c.parent_end
        else:
            assert c.parent_start is None
    missing = [ch for ch, cov in zip(text, covered, strict=True) if not cov and not ch.isspace()]
    assert not missing, f"text not covered: {''.join(missing)[:80]!r}"
    assert list(chunk_text(text, cfg, tok, limit)) == chunks, "not deterministic"


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts(), max_tokens=st.integers(16, 80), overlap=st.sampled_from([0.0, 0.1, 0.25]),
       limit=st.integers(10, 120))
def test_chunks_cover_text_in_order_within_limit(strategy: str, text: str, max_tokens: int, overlap: float,
                                                 limit: int) -> None:
    cfg = ChunkingSettings(strategy=strategy, max_tokens=max_tokens, overlap=overlap, parent_max_tokens=200)
    check_chunks(text, cfg, hf(), limit)


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=40, deadline=None)
@given(text=st.text(max_size=600), max_tokens=st.integers(16, 40))
def test_arbitrary_unicode_with_whitespace_tokenizer(strategy: str, text: str, max_tokens: int) -> None:
    cfg = ChunkingSettings(strategy=strategy, max_tokens=max_tokens, overlap=0.12, parent_max_tokens=64)
    check_chunks(text, cfg, WhitespaceTokenizer(), 30)


@settings(max_examples=30, deadline=None)
@given(n_words=st.integers(50, 400), overlap=st.sampled_from([0.1, 0.2, 0.3]))
def test_token_windows_overlap_as_configured(n_words: int, overlap: float) -> None:
    text = " ".join(f"w{i}" for i in range(n_words))
    tok = WhitespaceTokenizer()
    cfg = ChunkingSettings(strategy="token", max_tokens=40, overlap=overlap)
    chunks = list(chunk_text(text, cfg, tok, 100))
    assert all(c.tokens == 40 for c in chunks[:-1])
    for a, b in itertools.pairwise(chunks):
        shared = set(a.text.split()) & set(b.text.split())
        assert len(shared) == int(40 * overlap)


def test_sentence_overlap_repeats_short_trailing_sentences() -> None:
    text = " ".join(f"Sentence number {i} is short." for i in range(30))
    cfg = ChunkingSettings(strategy="sentence", max_tokens=40, overlap=0.3)
    chunks = list(chunk_text(text, cfg, WhitespaceTokenizer(), 100))
    assert len(chunks) > 3
    for a, b in itertools.pairwise(chunks):
        assert a.char_start < b.char_start < a.char_end, "consecutive chunks should share a sentence"
        shared = len(WhitespaceTokenizer().offsets(a.text[b.char_start - a.char_start:]))
        assert shared <= int(40 * 0.3)


def test_paragraph_keeps_an_abstract_that_fits_whole() -> None:
    abstract = " ".join(["The protein binds to the receptor and modulates signalling."] * 20)
    tok = hf()
    n = len(tok.offsets(abstract))
    assert 200 < n < 250
    limit = text_budget(tok, "A short title", True, 256)
    chunks = list(chunk_text(abstract, ChunkingSettings(), tok, limit))
    assert [(c.char_start, c.char_end) for c in chunks] == [(0, len(abstract))]


def test_paragraph_merges_short_paragraphs_and_splits_long_ones() -> None:
    short = "Short paragraph one.\n\nShort paragraph two.\n\n"
    long = " ".join(f"Long sentence {i} talks about proteins." for i in range(60))
    chunks = list(chunk_text(short + long, ChunkingSettings(max_tokens=64), hf(), 100))
    assert chunks[0].text.startswith("Short paragraph one.")
    assert len(chunks) > 3
    assert all(c.tokens <= 64 for c in chunks[1:])


def test_huge_text_is_chunked_lazily() -> None:
    para = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 40
    text = (para + "\n\n") * 2_000  # ~4.6 MB
    it = chunk_text(text, ChunkingSettings(), hf(), 254)
    first = [next(it) for _ in range(5)]
    assert first[0].char_start == 0 and all(c.char_end <= 2 * len(para) + 2 for c in first)


def test_a_single_unbroken_word_is_cut_by_word_pieces() -> None:
    text = "a" + "bcdefghij" * (3 * MAX_SEGMENT_CHARS // 9)
    chunks = list(chunk_text(text[:5_000], ChunkingSettings(strategy="token"), hf(), 50))
    assert all(len(hf().offsets(c.text)) <= 50 for c in chunks)
    assert "".join(c.text for c in chunks) == text[:5_000]


def test_signature_and_embed_text() -> None:
    assert chunker_signature(ChunkingSettings()) == "paragraph-200-0.12-v1"
    assert "400" in chunker_signature(ChunkingSettings(strategy="parent_child", parent_max_tokens=400))
    assert embed_text("Title", "body", True) == "Title. body"
    assert embed_text("Why?", "body", True) == "Why? body"
    assert embed_text("Title", "body", False) == "body"
    assert embed_text(None, "body", True) == "body"


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        list(chunk_text("x", ChunkingSettings(), WhitespaceTokenizer(), 0))


def _chunk(position: int, start: int, words: int) -> Chunk:
    text = " ".join(["w"] * words)
    return Chunk(position=position, text=text, char_start=start, char_end=start + len(text), tokens=words)


def test_sections_pack_whole_chunks_up_to_the_word_limit() -> None:
    chunks = [_chunk(0, 0, 40), _chunk(1, 70, 40), _chunk(2, 150, 40), _chunk(3, 230, 200)]
    # 40+40 fit in 100, the third starts a new section, the oversized last chunk is a section of its own
    assert section_leaders(chunks, 100) == {0: (0, 149), 2: (150, 229), 3: (230, 629)}
    assert section_leaders(chunks, 10_000) == {0: (0, 629)}  # a document within the limit is one section
    assert section_leaders([], 100) == {}


def test_only_section_indices_score_bm25_on_sections() -> None:
    assert section_words_of({"bm25_unit": "section", "section_words": 1000}) == 1000
    assert section_words_of({"bm25_unit": "chunk", "section_words": 1000}) is None
    assert section_words_of({}) is None  # built before sections existed


def test_a_title_longer_than_its_share_is_cut_so_the_text_is_embedded() -> None:
    """A 10,000-character title gets its share of the window, so the body still reaches the model."""
    tok = hf()
    from hybridsearch.ingest.chunking import TITLE_SHARE, chunk_embed_text, document_chunks
    from hybridsearch.ingest.sources import Document
    from hybridsearch.settings import load_settings

    s = load_settings()
    title = " ".join(f"word{i}" for i in range(2000))
    doc = Document.make("long-title", "The body says zq0x3q about enzymes. " * 5, title=title)
    chunks = list(document_chunks(doc, s.chunking, s.embedding, None, tok, 256))
    for src, text in chunks:
        cut = src["title_cut"]
        assert 0 < cut < len(title) and text.startswith(title[:cut].rstrip()) and src["text"] in text
        assert len(tok.offsets(text)) <= 254  # the whole chunk text fits what the model reads
        assert len(tok.offsets(title[:cut])) <= int(254 * TITLE_SHARE)
        assert chunk_embed_text(src, True) == text  # a migration re-embeds exactly what ingestion embedded
    short = Document.make("short", "Body text.", title="A short title")
    (src, text), = document_chunks(short, s.chunking, s.embedding, None, tok, 256)
    assert "title_cut" not in src and text == "A short title. Body text."
