"""Sources: folder trees, records, BEIR corpora and every kind of bad input, each with its reason."""

from __future__ import annotations

import codecs
import gzip
import hashlib
import json
from pathlib import Path

import pytest

from hybridsearch.ingest.sources import (
    Document,
    RecordFields,
    SourceFailure,
    html_to_text,
    read_path,
)


def split(items: list[Document | SourceFailure]) -> tuple[dict[str, Document], list[SourceFailure]]:
    docs = {d.doc_id: d for d in items if isinstance(d, Document)}
    return docs, [f for f in items if isinstance(f, SourceFailure)]


def test_folder_tree_reads_every_format(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.txt").write_text("ignored")
    (tmp_path / "a.txt").write_text("Plain text.\n\nSecond paragraph.")
    (tmp_path / "sub" / "b.md").write_text("# The Title\n\nSome *markdown*.")
    (tmp_path / "c.html").write_text(
        "<html><head><title>Page</title><style>p{color:red}</style><script>var x=1</script></head>"
        "<body><h1>Head</h1><p>Hello <b>world</b></p><p>Second</p></body></html>")
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"id": "r1", "title": "T1", "text": "one", "metadata": {"year": 2020}}) + "\n\n"
        + json.dumps({"text": "no id"}) + "\n")
    (tmp_path / "e.json").write_text(json.dumps([{"doc_id": "j1", "body": "json body"}]))
    docs, failures = split(list(read_path(tmp_path)))
    assert failures == []
    assert sorted(docs) == ["a.txt", "c.html", "d.jsonl:3", "j1", "r1", "sub/b.md"]
    assert docs["a.txt"].text == "Plain text.\n\nSecond paragraph." and docs["a.txt"].title is None
    assert docs["sub/b.md"].title == "The Title"
    html = docs["c.html"]
    assert html.title == "Page"
    assert html.text == "Head\n\nHello world\n\nSecond"
    assert "color" not in html.text and "var x" not in html.text
    assert docs["r1"].title == "T1" and docs["r1"].metadata == {"year": 2020}
    assert docs["j1"].text == "json body"
    assert docs["a.txt"].source.endswith("a.txt")


def test_bad_inputs_are_recorded_with_reasons(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.md").write_text("   \n\n  ")
    (tmp_path / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "records.jsonl").write_text(
        '{"_id": "ok", "text": "fine"}\n{"_id": "notext", "title": ""}\n{broken\n[1, 2]\n'
        '{"_id": "num", "text": 42}\n')
    docs, failures = split(list(read_path(tmp_path)))
    assert list(docs) == ["ok"]
    reasons = {f.doc_id: f.reason for f in failures}
    assert "binary" in reasons["binary.txt"]
    assert "not valid UTF-8" in reasons["latin1.txt"] and "0xe9" in reasons["latin1.txt"]
    assert "empty" in reasons["empty.txt"] and "empty" in reasons["blank.md"]
    assert "unsupported file type '.png'" in reasons["image.png"]
    assert "invalid JSON" in reasons["bad.json"]
    assert "no text field" in reasons["notext"]
    assert "invalid JSON" in reasons["records.jsonl:3"]
    assert "not an object" in reasons["records.jsonl:4"]
    assert "non-string" in reasons["num"]
    assert all(f.source for f in failures)


def test_missing_path_is_a_failure(tmp_path: Path) -> None:
    (failure,) = read_path(tmp_path / "nope")
    assert isinstance(failure, SourceFailure) and "no such" in failure.reason


def test_beir_corpus_gz(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl.gz"
    rows = [{"_id": "4983", "title": "Microstructural development", "text": "Alterations of the ...",
             "metadata": {}}, {"_id": "5836", "title": "", "text": "Only text."}]
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    docs, failures = split(list(read_path(path)))
    assert failures == [] and list(docs) == ["4983", "5836"]
    assert docs["4983"].title == "Microstructural development" and docs["5836"].title is None
    assert docs["4983"].source == str(path)


def test_configured_fields(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"key": "k1", "headline": "H", "summary": "S", "lang": "en"}) + "\n")
    fields = RecordFields(id="key", title="headline", text="summary", extra_metadata=("lang",))
    (doc,) = read_path(path, fields)
    assert isinstance(doc, Document)
    assert (doc.doc_id, doc.title, doc.text, doc.metadata) == ("k1", "H", "S", {"lang": "en"})


def test_content_hash_tracks_title_text_and_metadata() -> None:
    base = Document.make("d", "text", title="t", metadata={"a": 1})
    canonical = json.dumps(["t", "text", {"a": 1}], sort_keys=True, ensure_ascii=False)
    assert base.content_hash == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert len(base.content_hash) == 64
    assert Document.make("other-id", "text", title="t", metadata={"a": 1}).content_hash == base.content_hash
    for changed in (Document.make("d", "text!", title="t", metadata={"a": 1}),
                    Document.make("d", "text", title="T", metadata={"a": 1}),
                    Document.make("d", "text", title="t", metadata={"a": 2})):
        assert changed.content_hash != base.content_hash


def test_html_without_body() -> None:
    title, text = html_to_text("<p>just a fragment</p>")
    assert text == "just a fragment" and title is None


def test_big_text_file_is_one_document(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    line = "All work and no play makes Jack a dull boy. " * 20 + "\n\n"
    with path.open("w") as fh:
        for _ in range(6_000):  # ~5.4 MB
            fh.write(line)
    (doc,) = read_path(path)
    assert isinstance(doc, Document) and len(doc.text) == path.stat().st_size


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
def test_utf16_and_utf32_with_a_bom_are_text(tmp_path: Path, encoding: str) -> None:
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE, "utf-32-le": codecs.BOM_UTF32_LE,
           "utf-32-be": codecs.BOM_UTF32_BE}.get(encoding, b"")
    (tmp_path / "note.txt").write_bytes(bom + "# Café\n\nNaïve résumé 🔥.".encode(encoding))
    (tmp_path / "one.json").write_bytes(bom + json.dumps({"_id": "j", "text": "größe"}).encode(encoding))
    lines = '{"_id": "a", "text": "ä"}\n{"_id": "b", "text": "ß"}\n'
    (tmp_path / "many.jsonl").write_bytes(bom + lines.encode(encoding))
    docs, failures = split(list(read_path(tmp_path)))
    assert failures == []
    assert docs["note.txt"].text == "# Café\n\nNaïve résumé 🔥."
    assert (docs["j"].text, docs["a"].text, docs["b"].text) == ("größe", "ä", "ß")


def test_binary_is_still_refused_even_behind_a_bom(tmp_path: Path) -> None:
    (tmp_path / "nul.txt").write_bytes(b"plain\x00binary")
    (tmp_path / "bom.txt").write_bytes(codecs.BOM_UTF16_LE + "PK\x03\x04\x00\x00\x08".encode("utf-16-le"))
    (tmp_path / "odd.txt").write_bytes(codecs.BOM_UTF16_LE + b"a\x00b")  # odd byte count: truncated UTF-16
    _, failures = split(list(read_path(tmp_path)))
    reasons = {f.doc_id: f.reason for f in failures}
    assert reasons["nul.txt"] == "binary file (NUL bytes), not text"
    assert reasons["bom.txt"].startswith("binary file (NUL characters after a UTF-16 byte-order mark)")
    assert reasons["odd.txt"].startswith("not valid UTF-16")


def test_a_bom_the_rest_does_not_bear_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "utf8.txt").write_bytes(codecs.BOM_UTF16_LE + "plain UTF-8 text, café\n".encode())
    (tmp_path / "noise.txt").write_bytes(codecs.BOM_UTF16_LE + bytes(range(0x80, 0x100)) * 4)
    (tmp_path / "private.txt").write_bytes(codecs.BOM_UTF16_LE + "a\ue000 b\n".encode("utf-16-le"))
    (tmp_path / "good.txt").write_bytes(codecs.BOM_UTF16_LE + "日本語の文章\n".encode("utf-16-le"))
    docs, failures = split(list(read_path(tmp_path)))
    reasons = {f.doc_id: f.reason for f in failures}
    assert set(reasons) == {"utf8.txt", "noise.txt", "private.txt"} and set(docs) == {"good.txt"}
    assert reasons["utf8.txt"] == "starts with a UTF-16 byte-order mark but the rest is UTF-8 text, not UTF-16"
    assert reasons["private.txt"] == ("starts with a UTF-16 byte-order mark but the rest is not UTF-16 text "
                                      "(U+E000 at character 1)")
