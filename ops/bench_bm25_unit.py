#!/usr/bin/env python
"""What BM25 should score: chunks, sections of up to N words, or whole documents (issue 16, item 1).

For each unit the collection's documents are cut with the platform's own chunker and section rule
(``ingest.chunking.chunk_text``, ``ingest.layout.section_leaders``), written as text only into a scratch index
with the analyzer new indices get (english where the cluster has it), and every judged query of the split is
searched with the query layer's own BM25 body (``query.build.bm25_body``: title and text, best_fields, collapsed
per document). Prints nDCG@10 and Recall@100 per unit. Vectors play no part, so nothing is embedded.

    ops/long_docs.py ../shared/datasets/scifact /tmp/scifact-long --per-doc 8      # long documents
    ops/bench_bm25_unit.py /tmp/scifact-long --split train
    ops/bench_bm25_unit.py ../shared/datasets/scifact --split train

Needs a running node (HSP_ES_URL). Scratch indices ``bm25unit-*`` are deleted afterwards. Exit 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from hybridsearch.embedding import resolve_model
from hybridsearch.engine import EngineClient, connect
from hybridsearch.eval.datasets import Collection, iter_corpus, load_collection
from hybridsearch.eval.metrics import evaluate
from hybridsearch.indices import with_analyzer
from hybridsearch.ingest.chunking import HFTokenizer, chunk_text, text_budget
from hybridsearch.ingest.layout import section_leaders
from hybridsearch.query.build import bm25_body, plan
from hybridsearch.settings import Settings, load_settings

console = Console()
WHOLE = 10**9  # a section limit no document reaches


def units(col: Collection, settings: Settings, tokenizer: HFTokenizer, unit: str) -> Iterator[dict[str, Any]]:
    """The BM25 documents of ``unit`` (``chunk``, a word limit, or ``whole``) for every corpus document."""
    for rec in iter_corpus(col.corpus_path):
        title, text = rec.get("title") or None, rec["text"]
        if unit == "whole":
            yield {"doc_id": rec["_id"], "title": title, "text": text}
            continue
        limit = text_budget(tokenizer, title, settings.embedding.prepend_title, 256)
        chunks = list(chunk_text(text, settings.chunking, tokenizer, limit))
        if unit == "chunk":
            yield from ({"doc_id": rec["_id"], "title": title, "text": c.text} for c in chunks)
            continue
        for start, end in section_leaders(chunks, int(unit)).values():
            yield {"doc_id": rec["_id"], "title": title, "text": text[start:end]}


def build(es: EngineClient, name: str, analyzer: str, docs: Iterator[dict[str, Any]]) -> int:
    es.indices.delete(index=f"{name}*")  # a pattern: no error when absent
    es.indices.create(index=name, settings={"number_of_shards": 1, "number_of_replicas": 0}, mappings={
        "properties": {"doc_id": {"type": "keyword"}, "title": {"type": "text", "analyzer": analyzer},
                       "text": {"type": "text", "analyzer": analyzer}}})
    n = 0
    for ok, _ in es.streaming_bulk(({"_index": name, **d} for d in docs), chunk_size=500):
        n += int(ok)
    es.indices.refresh(index=name)
    return n


def rankings(es: EngineClient, name: str, col: Collection, settings: Settings) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for qid, text in col.queries.items():
        body = bm25_body(settings.query, plan(settings.query, None, text, mode="bm25"))
        hits = es.msearch(searches=[{"index": name}, body])["responses"][0]["hits"]["hits"]
        out[qid] = [h["_source"]["doc_id"] for h in hits if h["_source"]["doc_id"] != qid]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("collection", type=Path, help="BEIR folder")
    ap.add_argument("--split", default="train")
    ap.add_argument("--units", default="chunk,250,500,1000,2000,whole", help="chunk, word limits, whole")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    settings = load_settings()
    col = load_collection(args.collection, args.split)
    tokenizer = HFTokenizer(AutoTokenizer.from_pretrained(str(resolve_model(settings.embedding.model))))
    es = connect(settings.es)
    analyzer = with_analyzer(es, settings).index.analyzer
    table = Table(title=f"BM25 unit on {col.name} {col.split} ({len(col)} queries, analyzer {analyzer})")
    for column in ("unit", "BM25 documents", "nDCG@10", "Recall@100"):
        table.add_column(column, justify="right")
    try:
        for unit in args.units.split(","):
            name = f"bm25unit-{unit}"
            n = build(es, name, analyzer, units(col, settings, tokenizer, unit))
            means, _ = evaluate(col.qrels, rankings(es, name, col, settings), ("ndcg@10", "recall@100"))
            table.add_row(unit if unit in ("chunk", "whole") else f"≤ {unit} words", f"{n:,}",
                          f"{means['ndcg@10']:.4f}", f"{means['recall@100']:.4f}")
            console.print(f"{unit}: {n} documents, nDCG@10 {means['ndcg@10']:.4f}")
            es.indices.delete(index=f"{name}*")
    finally:
        es.close()
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
