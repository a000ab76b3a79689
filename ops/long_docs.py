#!/usr/bin/env python
"""Derive a long-document BEIR collection from a short-document one, to measure the BM25 unit on long documents.

Each new document joins ``--per-doc`` randomly chosen documents of the source (seeded) as headed paragraphs
("Title" line, then the text), so a document is several times longer than the source's and covers unrelated
topics, like a long manual page or a book chapter. A query's judgment moves to the new document that holds its
judged source document (the best grade wins). Queries are copied unchanged.

    ops/long_docs.py ../shared/datasets/scifact /tmp/scifact-long --per-doc 8
    hsp eval /tmp/scifact-long --split train --modes bm25 --prefix long-s1000 --sweep query.bm25_unit=auto,chunk
    HSP_INDEX__SECTION_WORDS=250 hsp eval /tmp/scifact-long --split train --modes bm25 --prefix long-s250

Writes corpus.jsonl, queries.jsonl and qrels/<split>.tsv for every split of the source. Exit 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import shutil
import sys
from pathlib import Path

from hybridsearch.eval.datasets import iter_corpus


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="BEIR folder")
    ap.add_argument("out", type=Path, help="folder to write the long-document collection to")
    ap.add_argument("--per-doc", type=int, default=8, help="source documents per new document (default 8)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    docs = list(iter_corpus(args.source / "corpus.jsonl.gz" if (args.source / "corpus.jsonl.gz").exists()
                            else args.source / "corpus.jsonl"))
    random.Random(args.seed).shuffle(docs)
    home: dict[str, str] = {}
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for n, start in enumerate(range(0, len(docs), args.per_doc)):
            group = docs[start:start + args.per_doc]
            doc_id = f"long-{n}"
            home.update((d["_id"], doc_id) for d in group)
            text = "\n\n".join(f"{d['title']}\n{d['text']}" if d.get("title") else d["text"] for d in group)
            f.write(json.dumps({"_id": doc_id, "title": f"Collected papers {n}", "text": text}) + "\n")
    shutil.copy(args.source / "queries.jsonl", args.out / "queries.jsonl")
    (args.out / "qrels").mkdir(exist_ok=True)
    for split in sorted((args.source / "qrels").glob("*.tsv")):
        grades: dict[tuple[str, str], int] = {}
        with split.open(encoding="utf-8") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                key = (row["query-id"], home[row["corpus-id"]])
                grades[key] = max(grades.get(key, 0), int(row["score"]))
        with (args.out / "qrels" / split.name).open("w", encoding="utf-8") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            f.writelines(f"{q}\t{d}\t{g}\n" for (q, d), g in sorted(grades.items()))
    print(f"wrote {args.out}: {len(home)} source documents in {len(range(0, len(docs), args.per_doc))} documents")
    return 0


if __name__ == "__main__":
    sys.exit(main())
