"""Sources: a folder tree (sorted) of ``.txt``, ``.md``, ``.html``/``.htm``, ``.json`` (an object or a list) and
``.jsonl`` files (optionally ``.gz``; BEIR ``corpus.jsonl`` included) into :class:`Document` records, or
:class:`SourceFailure` records saying why not (undecodable, binary, empty or unparsable). Text is UTF-8, or UTF-16/32
after their byte-order mark when the rest bears it out.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import io
import json
import os
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".html", ".htm"}
_MD_HEADING = re.compile(r"^\s{0,3}#\s+(.+?)\s*#*\s*$", re.MULTILINE)
_BLOCK_TAGS = "p,div,h1,h2,h3,h4,h5,h6,li,br,tr,td,th,section,article,header,footer,pre,blockquote,dt,dd,table"
BINARY_SNIFF_BYTES = 8192
#: Byte-order marks of the encodings read besides UTF-8, longest first (UTF-32-LE's starts like UTF-16-LE's).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))


#: Unicode categories that text decoded with its right encoding does not hold (whitespace controls aside):
#: controls, unassigned and private-use code points, lone surrogates
_MISREAD_CATEGORIES = frozenset({"Cc", "Cn", "Co", "Cs"})


def bom_encoding(head: bytes) -> str | None:
    """``"utf-16"`` or ``"utf-32"`` when ``head`` starts with that byte-order mark, else None (UTF-8)."""
    return next((enc for bom, enc in _BOMS if head.startswith(bom)), None)


@dataclass(frozen=True, slots=True)
class Document:
    """One source document. ``content_hash`` (sha256 hex of title, text and metadata) detects changes."""

    doc_id: str
    title: str | None
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    content_hash: str = ""

    def __post_init__(self) -> None:
        if not self.content_hash:  # sha256 hex of the canonical JSON of [title, text, metadata]
            payload = json.dumps([self.title, self.text, self.metadata or {}], sort_keys=True, ensure_ascii=False,
                                 default=str)
            object.__setattr__(self, "content_hash", hashlib.sha256(payload.encode("utf-8")).hexdigest())

    @classmethod
    def make(cls, doc_id: str, text: str, title: str | None = None, metadata: dict[str, Any] | None = None,
             source: str = "") -> Document:
        """A document with its hash computed."""
        return cls(doc_id=doc_id, title=title, text=text, metadata=dict(metadata or {}), source=source)


@dataclass(frozen=True, slots=True)
class SourceFailure:
    """An input that could not become a document: where it came from and why."""

    source: str
    reason: str
    doc_id: str | None = None


@dataclass(frozen=True)
class RecordFields:
    """Which JSON fields hold the id, title, text and metadata. ``None`` id/text = first present of the
    usual names (``_id``/``id``/``doc_id``; ``text``/``body``/``content``/``abstract``)."""

    id: str | None = None
    title: str = "title"
    text: str | None = None
    metadata: str = "metadata"
    extra_metadata: tuple[str, ...] = ()


ID_FIELDS = ("_id", "id", "doc_id", "docid")
TEXT_FIELDS = ("text", "body", "content", "contents", "abstract")


def read_path(path: str | Path, fields: RecordFields | None = None) -> Iterator[Document | SourceFailure]:
    """Documents from a file or a folder tree (hidden entries skipped, others sorted). ``doc_id`` is the record's
    id, else the path relative to the folder, else ``<file>:<line>``; ``source`` is the file's resolved path."""
    root = Path(path).resolve()
    fields = fields or RecordFields()
    if not root.exists():
        yield SourceFailure(str(root), "no such file or folder")
        return
    if root.is_file():
        yield from read_file(root, root.name, fields)
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            file = Path(dirpath) / name
            yield from read_file(file, file.relative_to(root).as_posix(), fields)


def read_file(path: Path, rel: str, fields: RecordFields) -> Iterator[Document | SourceFailure]:
    """Documents from one file; ``rel`` is its name relative to the ingested root (used for ids)."""
    name = path.name.lower()
    suffix, gz = Path(name.removesuffix(".gz")).suffix, name.endswith(".gz")  # corpus.jsonl.gz: .jsonl, gzipped
    source = str(path)
    if suffix in {".jsonl", ".ndjson"}:
        yield from _read_jsonl(path, rel, gz, fields)
        return
    if suffix not in TEXT_SUFFIXES | {".json"}:
        yield SourceFailure(source, f"unsupported file type {suffix or '(none)'!r}", rel)
        return
    try:
        text = decode(gzip.decompress(path.read_bytes()) if gz else path.read_bytes(), source, rel)
    except (OSError, EOFError) as exc:
        text = SourceFailure(source, f"cannot read: {exc}", rel)
    if isinstance(text, SourceFailure):
        yield text
    elif suffix == ".json":
        yield from _json_records(text, source, rel, fields)
    else:
        yield _text_document(text, suffix, source, rel)


def _text_document(text: str, suffix: str, source: str, rel: str) -> Document | SourceFailure:
    title: str | None = None
    if suffix in {".html", ".htm"}:
        title, text = html_to_text(text)
    elif suffix in {".md", ".markdown"} and (m := _MD_HEADING.search(text)):
        title = m.group(1)
    if not text.strip():
        return SourceFailure(source, "empty document: no text", rel)
    return Document.make(rel, text, title=title, metadata={"path": rel, "format": suffix.lstrip(".")}, source=source)


def decode(raw: bytes, source: str, doc_id: str | None = None) -> str | SourceFailure:
    """Text of ``raw``: UTF-8 (BOM stripped), or UTF-16/32 after their BOM when the rest reads cleanly in it; a
    SourceFailure for binary (NUL), undecodable bytes or a byte-order mark the rest does not bear out."""
    encoding = bom_encoding(raw[:4])
    if encoding is None and b"\x00" in raw[:BINARY_SNIFF_BYTES]:
        return SourceFailure(source, "binary file (NUL bytes), not text", doc_id)
    name = (encoding or "utf-8").upper()
    if encoding is not None and _plain_utf8(raw[4 if encoding == "utf-32" else 2:]):
        return SourceFailure(source, f"starts with a {name} byte-order mark but the rest is UTF-8 text, not {name}",
                             doc_id)
    try:
        text = raw.decode(encoding or "utf-8-sig")
    except UnicodeDecodeError as exc:
        return SourceFailure(source, f"not valid {name}: byte 0x{raw[exc.start]:02x} at offset {exc.start}", doc_id)
    if encoding is None:
        return text
    if "\x00" in text[:BINARY_SNIFF_BYTES]:
        return SourceFailure(source, f"binary file (NUL characters after a {name} byte-order mark), not text", doc_id)
    odd = next((i for i, ch in enumerate(text) if unicodedata.category(ch) in _MISREAD_CATEGORIES and not ch.isspace()),
               None)
    if odd is None:
        return text
    return SourceFailure(source, f"starts with a {name} byte-order mark but the rest is not {name} text "
                                 f"(U+{ord(text[odd]):04X} at character {odd})", doc_id)


def _plain_utf8(raw: bytes) -> bool:
    """Whether ``raw`` is UTF-8 text without a NUL byte (UTF-16/32 text with a space or a digit has NUL bytes)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return bool(raw) and b"\x00" not in raw


def html_to_text(html: str) -> tuple[str | None, str]:
    """(title, visible text) of an HTML page; block elements become paragraph breaks."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title") or tree.css_first("h1")
    title = title_node.text(strip=True) if title_node is not None else None
    for node in tree.css("script,style,noscript,template,head"):
        node.decompose()
    for node in tree.css(_BLOCK_TAGS):
        node.insert_after("\n\n")
    body = tree.body if tree.body is not None else tree.root
    raw = body.text(separator="") if body is not None else ""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", raw)]
    return (title or None), "\n\n".join(p for p in paragraphs if p)


def _json_records(text: str, source: str, rel: str, fields: RecordFields) -> Iterator[Document | SourceFailure]:
    if not text.strip():
        yield SourceFailure(source, "empty file", rel)
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        yield SourceFailure(source, f"invalid JSON: {exc}", rel)
        return
    for i, rec in enumerate(data if isinstance(data, list) else [data]):
        yield record_to_document(rec, source, f"{rel}:{i}", fields)


def _read_jsonl(path: Path, rel: str, gz: bool, fields: RecordFields) -> Iterator[Document | SourceFailure]:
    source = str(path)
    empty = True
    try:
        with (gzip.open(path, "rb") if gz else path.open("rb")) as fh:
            for lineno, raw in enumerate(_lines(cast(IO[bytes], fh)), start=1):
                if not raw.strip():
                    continue
                empty = False
                where = f"{rel}:{lineno}"
                text = decode(raw, f"{source}:{lineno}", where)
                if isinstance(text, SourceFailure):
                    yield text
                    continue
                try:
                    rec = json.loads(text)
                except json.JSONDecodeError as exc:
                    yield SourceFailure(f"{source}:{lineno}", f"invalid JSON: {exc}", where)
                    continue
                yield record_to_document(rec, f"{source}:{lineno}", where, fields, file_source=source)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        yield SourceFailure(source, f"cannot read: {exc}", rel)
        return
    if empty:
        yield SourceFailure(source, "empty file", rel)


def _lines(fh: IO[bytes]) -> Iterator[bytes]:
    """Lines of ``fh`` as UTF-8 bytes; a UTF-16/32 file (with its BOM) is decoded line by line first."""
    encoding = bom_encoding(fh.peek(4)[:4] if isinstance(fh, io.BufferedReader | gzip.GzipFile) else b"")
    if encoding is None:
        yield from fh
        return
    text = io.TextIOWrapper(fh, encoding=encoding, errors="strict", newline="")  # a bad sequence: "cannot read"
    for line in text:
        yield line.encode("utf-8")


def record_to_document(rec: Any, where: str, fallback_id: str, fields: RecordFields,
                       file_source: str | None = None) -> Document | SourceFailure:
    """A Document from one JSON record, or a SourceFailure naming the missing or bad field."""
    if not isinstance(rec, dict):
        return SourceFailure(where, f"record is a {type(rec).__name__}, not an object", fallback_id)
    id_key = fields.id or next((k for k in ID_FIELDS if k in rec), None)
    raw_id = rec.get(id_key) if id_key else None
    doc_id = str(raw_id) if raw_id is not None and str(raw_id).strip() else fallback_id
    text_key = fields.text or next((k for k in TEXT_FIELDS if k in rec), None)
    text = rec.get(text_key) if text_key else None
    if not isinstance(text, str):
        wanted = fields.text or "/".join(TEXT_FIELDS)
        what = "has no" if text is None else f"has a non-string ({type(text).__name__})"
        return SourceFailure(where, f"record {what} text field ({wanted})", doc_id)
    title = rec.get(fields.title)
    title = title if isinstance(title, str) and title.strip() else None
    if not text.strip() and not title:
        return SourceFailure(where, "record has empty text", doc_id)
    meta = rec.get(fields.metadata)
    metadata: dict[str, Any] = dict(meta) if isinstance(meta, dict) else {}
    for key in fields.extra_metadata:
        if key in rec:
            metadata[key] = rec[key]
    return Document.make(doc_id, text if text.strip() else title or "", title=title, metadata=metadata,
                         source=file_source or where)

