#!/usr/bin/env python3
"""Pseudo-judgments made from a BEIR collection itself, for choosing a fusion without judgments: a BEIR folder
whose queries are documents' titles (``--kind title``), or one sentence held back from each document's text
(``--kind sentence``), each with that document as its one relevant answer (split ``test``).

``title``: the corpus is linked as it is (titles are in the indexed text, so these queries favour BM25), and the
collection's own index can be evaluated with ``--no-ingest``. ``sentence``: the held-back sentences are removed
from the corpus written beside the queries, which therefore needs its own index (its own ``--prefix``).

    $V/bin/python ops/bench/make_pseudo_queries.py ../shared/datasets/scifact /tmp/scifact-titles --sample 500
    hsp eval /tmp/scifact-titles --prefix eval-scifact-all-minilm-l6-v2 --no-ingest --modes bm25,dense,hybrid \\
        --sweep query.fusion=rrf,zscore,minmax --sweep query.rrf_k=10,60
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")
MIN_WORDS = 4


def read_corpus(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def corpus_file(root: Path) -> Path:
    for name in ("corpus.jsonl.gz", "corpus.jsonl"):
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(f"{root} has no corpus.jsonl[.gz]")


def held_back(text: str, rng: random.Random) -> tuple[str, str] | None:
    """One sentence of ``text`` (not the first: it often repeats the title) and the text without it; None when
    the text has fewer than three sentences of :data:`MIN_WORDS` words."""
    sentences = SENTENCE_END.split(text.strip())
    choices = [i for i, s in enumerate(sentences) if i > 0 and len(s.split()) >= MIN_WORDS]
    if len(sentences) < 3 or not choices:
        return None
    i = rng.choice(choices)
    return sentences[i], " ".join(s for j, s in enumerate(sentences) if j != i)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("collection", type=Path, help="BEIR folder")
    ap.add_argument("out", type=Path, help="folder to write (corpus, queries.jsonl, qrels/test.tsv)")
    ap.add_argument("--kind", choices=("title", "sentence"), default="title")
    ap.add_argument("--sample", type=int, default=500, help="documents made into queries (default 500)")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    source = corpus_file(args.collection)
    docs = read_corpus(source)
    queries: dict[str, tuple[str, str]] = {}  # query id -> (text, doc id)
    order = list(range(len(docs)))
    rng.shuffle(order)
    edited: dict[int, str] = {}
    for i in order:
        if len(queries) >= args.sample:
            break
        d = docs[i]
        if args.kind == "title":
            title = (d.get("title") or "").strip()
            if len(title.split()) >= MIN_WORDS:
                queries[f"pq-{d['_id']}"] = (title, str(d["_id"]))
        elif (cut := held_back(d.get("text") or "", rng)) is not None:
            queries[f"pq-{d['_id']}"] = (cut[0], str(d["_id"]))
            edited[i] = cut[1]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "qrels").mkdir(exist_ok=True)
    target = args.out / source.name
    if args.kind == "title":
        target.unlink(missing_ok=True)
        target.symlink_to(source.resolve())
    else:
        with gzip.open(args.out / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
            for i, d in enumerate(docs):
                fh.write(json.dumps({**d, "text": edited.get(i, d.get("text", ""))}) + "\n")
    with (args.out / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, (text, _) in queries.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    with (args.out / "qrels" / "test.tsv").open("w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, (_, doc) in queries.items():
            fh.write(f"{qid}\t{doc}\t1\n")
    print(f"{len(queries)} {args.kind} queries from {len(docs)} documents of {args.collection} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
