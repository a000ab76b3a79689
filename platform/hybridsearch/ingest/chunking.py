"""Chunking, pure: a document's text cut into chunks of at most ``limit`` word pieces, each with its position and
character offsets, by ``paragraph`` (whole when they fit, short ones merged, long ones sentence-packed), ``sentence``
(syntok sentences packed), ``token`` (word-piece windows), ``fixed`` (character windows) or ``parent_child``
(sentence packs inside paragraph-pack parents); and a document's chunk documents with their stable ``_id`` s.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.index.metadata import typed_metadata
from hybridsearch.ingest.sources import Document
from hybridsearch.settings import ChunkingSettings, EmbeddingSettings

# Longest stretch handed to the tokenizer / sentence splitter at once (longer ones are cut at whitespace first)
MAX_SEGMENT_CHARS = 20_000
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*")


class Tokenizer(Protocol):
    """Anything that maps text to the character spans of its word pieces (special tokens excluded)."""

    def offsets(self, text: str) -> list[tuple[int, int]]: ...


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk: ``text == source[char_start:char_end]``; parent span set by ``parent_child`` only."""

    position: int
    char_start: int
    char_end: int
    text: str
    tokens: int
    parent_start: int | None = None
    parent_end: int | None = None


CharSpan = tuple[int, int]  # (start, end) character offsets into the text being cut


def _segments(text: str, start: int, end: int, *, split_paragraphs: bool = True) -> Iterator[CharSpan]:
    """Non-blank stretches of ``text[start:end]``: paragraphs, each cut to at most MAX_SEGMENT_CHARS."""
    for s, e in _paragraphs(text, start, end) if split_paragraphs else [(start, end)]:
        while e - s > MAX_SEGMENT_CHARS:
            cut = s + MAX_SEGMENT_CHARS
            ws = text.rfind(" ", s + MAX_SEGMENT_CHARS // 2, cut)
            cut = ws + 1 if ws > 0 else cut
            yield from _trim(text, s, cut)
            s = cut
        yield from _trim(text, s, e)


def _paragraphs(text: str, start: int, end: int) -> Iterator[CharSpan]:
    pos = start
    for m in _PARAGRAPH_BREAK.finditer(text, start, end):
        yield pos, m.start()
        pos = m.end()
    yield pos, end


def _trim(text: str, s: int, e: int) -> Iterator[CharSpan]:
    if stripped := (piece := text[s:e]).strip():
        start = s + len(piece) - len(piece.lstrip())
        yield start, start + len(stripped)


def _tokens(tok: Tokenizer, text: str, s: int, e: int) -> list[CharSpan]:
    return [(a + s, b + s) for a, b in tok.offsets(text[s:e])]


def _sentences(text: str, s: int, e: int) -> list[CharSpan]:
    """Sentence spans of ``text[s:e]`` by syntok (absolute offsets, in order, covering the segment)."""
    from syntok import segmenter

    out: list[CharSpan] = []
    piece = text[s:e]
    for paragraph in segmenter.analyze(piece):
        for sentence in paragraph:
            first, last = sentence[0], sentence[-1]
            a, b = first.offset, last.offset + len(last.value)
            if b > a:
                out.append((a + s, b + s))
    if not out:
        return [(s, e)]
    out[0] = (s, out[0][1])  # cover the segment: syntok may drop stray characters it does not tokenise
    out[-1] = (out[-1][0], e)
    return [sp for a, b in out for sp in _trim(text, a, b)]


def _windows(tokens: Sequence[CharSpan], end: Callable[[int], int],
             step: Callable[[int, int], int]) -> Iterator[CharSpan]:
    """Windows ``tokens[i:end(i)]`` from word start to word start (the end moved back to the nearest word start
    after ``i``, if any); the window after ``[i, j)`` starts at ``step(i, j)``, moved on to a word start."""
    n = len(tokens)
    starts = [i == 0 or tokens[i][0] > tokens[i - 1][1] for i in range(n)]  # a word starts after a gap
    i = 0
    while i < n:
        j = min(end(i), n)
        if j < n:
            j = next((k for k in range(j, i, -1) if starts[k]), j)
        yield tokens[i][0], tokens[j - 1][1]
        if j >= n:
            return
        i = step(i, j)
        while i < j and not starts[i]:
            i += 1


def _pack(units: Sequence[tuple[int, int, int]], limit: int, overlap: int,
          split: Any) -> Iterator[CharSpan]:
    """Greedily pack ``(start, end, tokens)`` units up to ``limit`` tokens (a unit over it is ``split(start, end)``);
    the next pack repeats trailing units worth at most ``overlap``."""
    cur: list[tuple[int, int, int]] = []
    n_cur = 0
    for unit in units:
        if unit[2] > limit:
            if cur:
                yield cur[0][0], cur[-1][1]
            cur, n_cur = [], 0
            yield from split(unit[0], unit[1])
            continue
        if cur and n_cur + unit[2] > limit:
            yield cur[0][0], cur[-1][1]
            keep: list[tuple[int, int, int]] = []
            kept = 0
            for prev in reversed(cur):
                if kept + prev[2] > overlap or kept + prev[2] + unit[2] > limit:
                    break
                keep.insert(0, prev)
                kept += prev[2]
            cur, n_cur = keep, kept
        cur.append(unit)
        n_cur += unit[2]
    if cur:
        yield cur[0][0], cur[-1][1]


class _Cutter:
    """Strategy implementations over one text; yields character spans."""

    def __init__(self, text: str, tok: Tokenizer, limit: int, overlap: float) -> None:
        self.text, self.tok, self.limit = text, tok, limit
        self.overlap = int(limit * overlap)

    def by_tokens(self, s: int, e: int, limit: int | None = None) -> Iterator[CharSpan]:
        limit = limit or self.limit
        overlap = int(limit * self.overlap / self.limit)
        for seg_s, seg_e in _segments(self.text, s, e, split_paragraphs=False):
            yield from _windows(_tokens(self.tok, self.text, seg_s, seg_e), lambda i: i + limit,
                                lambda i, j: max(j - overlap, i + 1))

    def by_sentences(self, s: int, e: int, limit: int | None = None) -> Iterator[CharSpan]:
        limit = limit or self.limit
        overlap = int(limit * self.overlap / self.limit)
        for seg_s, seg_e in _segments(self.text, s, e, split_paragraphs=False):
            toks = _tokens(self.tok, self.text, seg_s, seg_e)
            starts = [t[0] for t in toks]
            units = [(a, b, n) for a, b in _sentences(self.text, seg_s, seg_e)
                     if (n := bisect.bisect_left(starts, b) - bisect.bisect_left(starts, a)) > 0]
            yield from _pack(units, limit, overlap, lambda a, b, lim=limit: self.by_tokens(a, b, lim))

    def by_paragraphs(self, s: int, e: int, target: int, hard: int) -> Iterator[CharSpan]:
        """Paragraphs that fit ``hard`` stay whole; neighbours merge up to ``target``; longer ones are cut
        into sentence packs of at most ``min(target, hard)`` tokens."""
        units = [(a, b, n) for a, b in _segments(self.text, s, e) if (n := len(_tokens(self.tok, self.text, a, b)))]
        for alone, group in itertools.groupby(units, key=lambda u: target < u[2] <= hard):
            if alone:  # between target and hard: never merged, never cut
                yield from ((a, b) for a, b, _ in group)
            else:
                yield from _pack(list(group), target, 0, lambda a, b: self.by_sentences(a, b, min(target, hard)))

    def by_chars(self, s: int, e: int) -> Iterator[CharSpan]:
        """Windows of about ``4 * limit`` characters at token granularity, ending before a word start."""
        size = 4 * self.limit
        step = max(1, size - int(size * self.overlap / self.limit))
        for seg_s, seg_e in _segments(self.text, s, e, split_paragraphs=False):
            toks = _tokens(self.tok, self.text, seg_s, seg_e)
            starts, ends = [t[0] for t in toks], [t[1] for t in toks]

            def end(i: int, toks: list[CharSpan] = toks, ends: list[int] = ends) -> int:
                return max(i + 1, min(bisect.bisect_right(ends, toks[i][0] + size), i + self.limit))

            def nxt(i: int, j: int, toks: list[CharSpan] = toks, starts: list[int] = starts) -> int:
                return max(i + 1, min(bisect.bisect_left(starts, toks[i][0] + step), j))

            yield from _windows(toks, end, nxt)


def chunk_text(text: str, cfg: ChunkingSettings, tokenizer: Tokenizer, limit: int) -> Iterator[Chunk]:
    """Cut ``text`` into chunks by ``cfg.strategy`` (lazy, deterministic) of at most ``limit`` word pieces;
    ``cfg.max_tokens`` is the target. Raises ValueError when ``limit`` < 1."""
    if limit < 1:
        raise ValueError("limit must be at least one word piece")
    target = max(1, min(cfg.max_tokens, limit))
    if cfg.strategy == "parent_child":
        yield from _parent_child(text, cfg, tokenizer, target)
        return
    cutter, n = _Cutter(text, tokenizer, target, cfg.overlap), len(text)
    strategies: dict[str, Callable[[], Iterator[CharSpan]]] = {
        "paragraph": lambda: cutter.by_paragraphs(0, n, target, limit), "sentence": lambda: cutter.by_sentences(0, n),
        "token": lambda: cutter.by_tokens(0, n), "fixed": lambda: cutter.by_chars(0, n)}
    yield from _verified(text, tokenizer, strategies[cfg.strategy](), limit)


def _parent_child(text: str, cfg: ChunkingSettings, tokenizer: Tokenizer, target: int) -> Iterator[Chunk]:
    parent_limit = max(cfg.parent_max_tokens, target)
    outer = _Cutter(text, tokenizer, parent_limit, cfg.overlap)
    inner = _Cutter(text, tokenizer, target, cfg.overlap)
    position = 0
    for ps, pe in outer.by_paragraphs(0, len(text), parent_limit, parent_limit):
        for chunk in _verified(text, tokenizer, inner.by_sentences(ps, pe), target, position):
            yield Chunk(chunk.position, chunk.char_start, chunk.char_end, chunk.text, chunk.tokens, ps, pe)
            position += 1


def _verified(text: str, tokenizer: Tokenizer, spans: Iterator[CharSpan], limit: int,
              first: int = 0) -> Iterator[Chunk]:
    """Chunks from spans, cutting any that re-tokenises over ``limit`` (a window cut inside a very long word)."""
    position = first
    for s, e in spans:
        for a, b in _trim(text, s, e):
            toks = _tokens(tokenizer, text, a, b)
            pending = [(a, b, toks)]
            while pending:
                a2, b2, t2 = pending.pop(0)
                if len(t2) <= limit or len(t2) <= 1:
                    if t2:
                        yield Chunk(position, a2, b2, text[a2:b2], len(t2))
                        position += 1
                    continue
                mid = t2[limit - 1][1]
                head = _tokens(tokenizer, text, a2, mid)
                while len(head) > limit and len(head) > 1:
                    mid = head[-2][1]
                    head = _tokens(tokenizer, text, a2, mid)
                pending.insert(0, (a2, mid, head))
                for ra, rb in _trim(text, mid, b2):
                    pending.insert(1, (ra, rb, _tokens(tokenizer, text, ra, rb)))


#: the largest share of the model's window a prepended title may take (:func:`title_cut`)
TITLE_SHARE = 0.25
SPECIAL_TOKENS = 2  # the model's start and end tokens, in every window


def embed_text(title: str | None, text: str, prepend_title: bool) -> str:
    """What the bi-encoder embeds for a chunk: ``"title. text"`` when ``prepend_title``, else ``text``."""
    if prepend_title and title and title.strip():
        t = title.strip()
        return f"{t} {text}" if t.endswith((".", "!", "?", ":")) else f"{t}. {text}"
    return text


def title_cut(tokenizer: Tokenizer, title: str | None, prepend_title: bool, max_seq_length: int) -> int | None:
    """Characters of the title to embed when it would take more than :data:`TITLE_SHARE` of the model's window
    (else a long title fills it and the model never reads the text), or None when it fits."""
    if not (prepend_title and title and title.strip()):
        return None
    share = int((max_seq_length - SPECIAL_TOKENS) * TITLE_SHARE)
    pieces = tokenizer.offsets(title.strip())
    if len(pieces) + 1 <= share:  # the ". " joining title and text is a piece too
        return None
    start = len(title) - len(title.lstrip())
    return start + pieces[max(0, share - 2)][1]


def cut_title(title: str | None, cut: int | None) -> str | None:
    """``title`` as embedded: its first ``cut`` characters when it was cut (:func:`title_cut`)."""
    return title[:cut].rstrip() if title and cut is not None else title


def chunk_embed_text(source: Mapping[str, Any], prepend_title: bool) -> str:
    """What was embedded for a stored chunk document: its title (cut where ``title_cut`` says) and its text."""
    return embed_text(cut_title(source.get("title"), source.get("title_cut")), source.get("text") or "",
                      prepend_title)


def text_budget(tokenizer: Tokenizer, title: str | None, prepend_title: bool, max_seq_length: int) -> int:
    """Word pieces left for chunk text once special tokens and a prepended ``"title. "`` are counted."""
    room = max_seq_length - SPECIAL_TOKENS
    if prepend_title and title and title.strip():
        used = len(tokenizer.offsets(embed_text(title, "", True)))
        room -= min(used, room // 2)
    return max(1, room)


MAX_ID_BYTES = 512  # Elasticsearch rejects longer _id values


def chunk_id(doc_id: str, position: int, signature: str, tenant: str | None = None) -> str:
    """``[tenant/]doc_id#position@signature``; a doc id too long for ``_id`` is replaced by its sha1."""
    base = f"{doc_id}#{position}@{signature}"
    if len(base.encode("utf-8")) > MAX_ID_BYTES - 80:
        base = f"sha1:{hashlib.sha1(doc_id.encode('utf-8')).hexdigest()}#{position}@{signature}"
    return f"{tenant}/{base}" if tenant else base


def parent_id(doc_id: str, start: int, end: int, signature: str) -> str:
    """Id of the parent span ``[start, end)`` of ``doc_id`` (stable across runs of one chunker)."""
    return chunk_id(doc_id, start, signature).replace(f"#{start}@", f"#p{start}-{end}@", 1)


def section_leaders(chunks: Sequence[Chunk], max_words: int) -> dict[int, CharSpan]:
    """BM25 sections of one document: runs of consecutive chunks of about ``max_words`` words (a longer chunk is a
    section of its own). Maps the index of each section's first chunk to the section's character span."""
    leaders: dict[int, CharSpan] = {}
    first, words = 0, 0
    for i, c in enumerate(chunks):
        n = len(c.text.split())
        if i > first and words + n > max_words:
            leaders[first] = (chunks[first].char_start, chunks[i - 1].char_end)
            first, words = i, 0
        words += n
    if chunks:
        leaders[first] = (chunks[first].char_start, chunks[-1].char_end)
    return leaders


def document_chunks(d: Document, chunking: ChunkingSettings, embedding: EmbeddingSettings, tenant: str | None,
                    tokenizer: Tokenizer, max_seq_length: int, section_words: int | None = None,
                    metadata_fields: Mapping[str, str] | None = None,
                    ) -> Iterator[tuple[dict[str, Any], str]]:
    """``(chunk document without its vector, text to embed)`` for each chunk of ``d``; with ``section_words`` each
    BM25 section's first chunk carries ``section_text`` and ``section_title``, and ``meta`` the ``metadata_fields``
    converted. Raises ValueError (a value that does not convert) before any chunk is made."""
    typed = typed_metadata(d.metadata, metadata_fields) if metadata_fields else {}
    signature = chunker_signature(chunking)
    cut = title_cut(tokenizer, d.title, embedding.prepend_title, max_seq_length)  # the body always gets its share
    title = cut_title(d.title, cut)
    limit = text_budget(tokenizer, title, embedding.prepend_title, max_seq_length)
    stamp = datetime.now(UTC).isoformat()
    chunks = list(chunk_text(d.text, chunking, tokenizer, limit))
    leaders = section_leaders(chunks, section_words) if section_words is not None else {}
    for i, c in enumerate(chunks):
        src: dict[str, Any] = {
            "doc_id": d.doc_id, "chunk_id": chunk_id(d.doc_id, c.position, signature, tenant),
            "position": c.position, "doc_chunks": len(chunks), "char_start": c.char_start, "char_end": c.char_end,
            "title": d.title, "text": c.text, "source": d.source, "content_hash": d.content_hash, "tenant": tenant,
            "ingested_at": stamp, "metadata": d.metadata,
        }
        if typed:
            src["meta"] = typed
        if cut is not None:
            src["title_cut"] = cut
        if c.parent_start is not None and c.parent_end is not None:
            src.update(parent_id=parent_id(d.doc_id, c.parent_start, c.parent_end, signature),
                       parent_text=d.text[c.parent_start:c.parent_end],
                       parent_start=c.parent_start, parent_end=c.parent_end)
        if i in leaders:
            start, end = leaders[i]
            src.update(section_title=d.title, section_text=d.text[start:end])
        yield src, embed_text(title, c.text, embedding.prepend_title)
