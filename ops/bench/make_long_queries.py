#!/usr/bin/env python
"""A long-query collection made from SciFact: queries that are whole paragraphs, for measuring
what the query encoder's window costs in quality and time (docs/evaluation.md, "Long queries").

Construction (deterministic: the same input gives byte-identical files):

* every document judged relevant in the qrels splits named by ``--splits`` (default ``test,train``: about 1,000
  documents, so the collection has several hundred queries and nDCG differences of a few thousandths are more than
  one query's rank change) is cut in two at the sentence boundary (syntok, as the ingestion's sentence chunker)
  nearest to the middle of its abstract in word pieces (the default model's tokenizer, no special tokens);
* the query is the second part, the document keeps its title and the first part, and the query's one relevant
  document is the one it was cut from (qrels ``<query id> <doc id> 1``); the query id is ``long-<doc id>``, so
  BEIR's rule of dropping hits whose id equals the query id never applies;
* a document whose second part has fewer than ``--min-pieces`` word pieces (default 128) gives no query and stays
  whole: every query is then longer than the shorter windows compared (32, 64, 128), so each of them cuts every
  query; an abstract of one sentence cannot be cut and stays whole too;
* every other SciFact document is unchanged.

Written as a BEIR folder (``corpus.jsonl.gz``, ``queries.jsonl``, ``qrels/test.tsv``) with ``construction.json``
(the rule, the counts, the query length percentiles) under ``--out`` (default
``~/.cache/hybridsearch/datasets/scifact-long``). Then ``hsp eval <out> --prefix eval-scifact-long``.

    $V/bin/python ops/bench/make_long_queries.py
    $V/bin/python ops/bench/make_long_queries.py --splits test --min-pieces 64 --out /tmp/scifact-long-test
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_SOURCE = Path("/work/shared/datasets/scifact")
DEFAULT_OUT = Path.home() / ".cache" / "hybridsearch" / "datasets" / "scifact-long"
QUERY_PREFIX = "long-"


@dataclass(frozen=True)
class Cut:
    """One document cut in two: what stays in the corpus (``head``) and the query (``tail``), with lengths."""

    doc_id: str
    head: str
    tail: str
    head_pieces: int
    tail_pieces: int


class Pieces:
    """Word pieces of a text by the default model's tokenizer (``tokenizers``; no special tokens, no cut)."""

    def __init__(self) -> None:
        from hybridsearch.embedding.encoder import load_tokenizer, read_spec
        from hybridsearch.embedding.models import resolve_model
        from hybridsearch.settings import DEFAULT_EMBEDDING_MODEL, load_settings

        self.tokenizer = load_tokenizer(read_spec(resolve_model(DEFAULT_EMBEDDING_MODEL, load_settings().models)))

    def __call__(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def sentence_starts(text: str) -> list[int]:
    """Character offsets where the sentences of ``text`` begin (syntok), in order."""
    from syntok import segmenter

    starts: list[int] = []
    for paragraph in segmenter.analyze(text):
        for sentence in paragraph:
            starts.append(sentence[0].offset)
    return starts


def cut(doc_id: str, text: str, pieces: Pieces) -> Cut | None:
    """``text`` cut at the sentence boundary nearest to its middle in word pieces (the earlier one on a tie);
    None for a text of fewer than two sentences."""
    starts = sentence_starts(text)
    if len(starts) < 2:
        return None
    best: Cut | None = None
    total = pieces(text)
    for at in starts[1:]:
        head, tail = text[:at].strip(), text[at:].strip()
        if not head or not tail:
            continue
        candidate = Cut(doc_id, head, tail, pieces(head), pieces(tail))
        if best is None or abs(candidate.tail_pieces - total / 2) < abs(best.tail_pieces - total / 2):
            best = candidate
    return best


def judged(source: Path, splits: list[str]) -> list[str]:
    """Ids of the documents judged relevant (score > 0) in ``splits``, sorted."""
    ids: set[str] = set()
    for split in splits:
        with (source / "qrels" / f"{split}.tsv").open(encoding="utf-8", newline="") as fh:
            ids.update(row["corpus-id"] for row in csv.DictReader(fh, delimiter="\t") if int(row["score"]) > 0)
    return sorted(ids)


def read_corpus(source: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(source / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def percentiles(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    arr = np.asarray(values, dtype=np.float64)
    return {f"p{p}": float(np.percentile(arr, p)) for p in (10, 50, 90)} | {
        "min": float(arr.min()), "max": float(arr.max()), "mean": round(float(arr.mean()), 1)}


def make(source: Path, out: Path, splits: list[str], min_pieces: int) -> dict[str, Any]:
    """Write the collection under ``out``; return what ``construction.json`` records."""
    pieces = Pieces()
    docs = list(read_corpus(source))
    by_id = {str(d["_id"]): d for d in docs}
    wanted = [i for i in judged(source, splits) if i in by_id]
    cuts: dict[str, Cut] = {}
    skipped = {"one_sentence": 0, "short_tail": 0}
    for doc_id in wanted:
        c = cut(doc_id, str(by_id[doc_id].get("text", "")), pieces)
        if c is None:
            skipped["one_sentence"] += 1
        elif c.tail_pieces < min_pieces:
            skipped["short_tail"] += 1
        else:
            cuts[doc_id] = c
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:  # mtime 0: the same bytes every run
        for d in docs:
            c = cuts.get(str(d["_id"]))
            row = {**d, "text": c.head} if c else d
            gz.write((json.dumps(row, ensure_ascii=False) + "\n").encode())
    (out / "corpus.jsonl.gz").write_bytes(raw.getvalue())
    with (out / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for c in cuts.values():
            fh.write(json.dumps({"_id": QUERY_PREFIX + c.doc_id, "text": c.tail, "metadata": {}},
                                ensure_ascii=False) + "\n")
    with (out / "qrels" / "test.tsv").open("w", encoding="utf-8", newline="") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for c in cuts.values():
            fh.write(f"{QUERY_PREFIX}{c.doc_id}\t{c.doc_id}\t1\n")
    info = {
        "source": str(source), "splits": splits, "min_pieces": min_pieces,
        "rule": "each judged document cut at the sentence boundary nearest the middle of its abstract in word "
                "pieces; query = second part, document keeps title + first part; queries under min_pieces "
                "word pieces dropped (the document stays whole)",
        "tokenizer": "all-MiniLM-L6-v2 word pieces, no special tokens",
        "documents": len(docs), "judged_documents": len(wanted), "queries": len(cuts), "skipped": skipped,
        "query_pieces": percentiles([c.tail_pieces for c in cuts.values()]),
        "kept_document_pieces": percentiles([c.head_pieces for c in cuts.values()]),
    }
    (out / "construction.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="SciFact BEIR folder (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder to write (default: %(default)s)")
    ap.add_argument("--splits", default="test,train",
                    help="qrels splits whose relevant documents are cut (default: %(default)s)")
    ap.add_argument("--min-pieces", type=int, default=128,
                    help="shortest query kept, in word pieces (default: %(default)s)")
    args = ap.parse_args(argv)
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    if not splits or args.min_pieces < 1:
        ap.error("--splits needs at least one split and --min-pieces must be positive")
    info = make(args.source, args.out.expanduser(), splits, args.min_pieces)
    q = info["query_pieces"]
    print(f"{info['queries']} queries from {info['judged_documents']} judged documents ({info['skipped']} skipped); "
          f"query word pieces p10 {q.get('p10')}, p50 {q.get('p50')}, p90 {q.get('p90')} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
