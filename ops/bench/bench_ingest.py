#!/usr/bin/env python3
"""Ingest benchmark: whole-pipeline chunks/s beside the embedder's own chunks/s, measured in one run.

Ingests a BEIR corpus (default: SciFact, 5,183 abstracts) into a throwaway index prefix against the node at
HSP_ES_URL and encodes the very same chunk texts with the same embedder and batch size ("pure encode"),
alternating the two slice by slice so that other load on the machine hits both alike, and prints the ratio
(target: the pipeline keeps >= 90% of the embedder's throughput). Then compares encode throughput of torch,
ONNX and ONNX-int8 (and torch in 2 processes) on the same chunks, with the mean cosine of each backend's vectors
to the torch vectors, and optionally (--quality-docs) their dense nDCG@10 on SciFact. A second ingest run shows
how fast unchanged documents are skipped.

    HF_HUB_OFFLINE=1 $V/bin/python ops/bench/bench_ingest.py --limit 300      # quick subset
    HF_HUB_OFFLINE=1 $V/bin/python ops/bench/bench_ingest.py                  # full corpus (minutes)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from hybridsearch.cli.output import RichProgress
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.ingest.chunking import document_chunks
from hybridsearch.ingest.lease import IngestResult
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document, read_path
from hybridsearch.ingest.writer import ProcessPoolEncoder
from hybridsearch.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CORPUS = ROOT.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl.gz"
console = Console(width=None if sys.stdout.isatty() else 150)


def timed_encode(encode: Any, texts: list[str], batch: int) -> tuple[float, np.ndarray]:
    """Chunks/s of ``encode`` over ``texts`` fed in pipeline-sized batches, and the vectors."""
    out = []
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch):
        out.append(encode(texts[i:i + batch]))
    dt = time.perf_counter() - t0
    return len(texts) / dt, np.concatenate(out)


def dense_quality(corpus: Path, extra_docs: int, settings: Settings, backends: dict[str, Embedder]
                  ) -> list[tuple[str, float]]:
    """Dense-only nDCG@10 on SciFact test queries over (relevant docs + ``extra_docs`` others), scoring a document
    by its best chunk, for each backend; plus whole documents (no chunking, model truncates) with torch."""
    from ranx import Qrels, Run, evaluate

    qrels: dict[str, dict[str, int]] = {}
    for line in (corpus.parent / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    with (corpus.parent / "queries.jsonl").open() as fh:
        queries = {q["_id"]: q["text"] for q in map(json.loads, fh) if q["_id"] in qrels}
    relevant = {d for rel in qrels.values() for d in rel}
    docs, others = [], 0
    for d in read_path(corpus):
        if isinstance(d, Document) and (d.doc_id in relevant or others < extra_docs):
            others += d.doc_id not in relevant
            docs.append(d)
    rows = []
    for name, emb in backends.items():
        tok = emb.tokenizer()
        owners, texts = [], []
        for d in docs:
            for _, t in document_chunks(d, settings.chunking, settings.embedding, settings.index.tenant, tok,
                                        emb.max_seq_length):
                owners.append(d.doc_id)
                texts.append(t)
        variants = {f"{name}, chunks (max per doc)": (owners, texts)}
        if name == "torch":
            whole = [f"{d.title}. {d.text}" if d.title else d.text for d in docs]
            variants["torch, whole documents (truncated)"] = ([d.doc_id for d in docs], whole)
        qids = list(queries)
        qv = emb.encode([queries[q] for q in qids])
        for label, (own, txt) in variants.items():
            sims = qv @ emb.encode(txt).T
            run: dict[str, dict[str, float]] = {}
            for qi, qid in enumerate(qids):
                best: dict[str, float] = {}
                for j in np.argsort(-sims[qi])[:200]:
                    best.setdefault(own[j], float(sims[qi, j]))
                run[qid] = best
            rows.append((label, float(evaluate(Qrels(qrels), Run(run), "ndcg@10"))))
    console.print(f"dense nDCG@10: {len(queries)} SciFact test queries over {len(docs):,} documents "
                  f"({len(relevant)} relevant + {others} others)")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--limit", type=int, default=None, help="only the first N documents")
    ap.add_argument("--backend-sample", type=int, default=600,
                    help="chunks used for the torch/ONNX/int8 comparison (0 = skip it)")
    ap.add_argument("--no-processes", action="store_true", help="skip the 2-process encode measurement")
    ap.add_argument("--quality-docs", type=int, default=0,
                    help="also compare dense nDCG@10 of torch/ONNX/int8 over relevant + N other docs (e.g. 1500)")
    ap.add_argument("--slices", type=int, default=4,
                    help="alternate pipeline and pure encode over this many slices of the corpus (default 4)")
    ap.add_argument("--keep", action="store_true", help="keep the throwaway indices")
    ap.add_argument("--prefix", default=None, help="index prefix to ingest under (default: a new bench-ingest-<id>)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    args = ap.parse_args(argv)

    prefix = args.prefix or f"bench-ingest-{uuid.uuid4().hex[:8]}"
    settings = load_settings(index={"prefix": prefix}, ingest={"dead_letter_dir": "/tmp/hsp-bench-dead-letter"})
    es = EngineClient(settings.es)
    docs = [d for d in itertools.islice(read_path(args.corpus), args.limit) if isinstance(d, Document)]
    console.print(f"{len(docs):,} documents from {args.corpus} · cpus={os.cpu_count()} · "
                  f"batch_size={settings.embedding.batch_size} · chunker={settings.chunking.strategy}")
    embedder = Embedder(settings.embedding, settings.models)
    embedder.encode(["warm up"])
    figures: dict[str, Any] = {"documents": len(docs), "cpus": os.cpu_count()}
    try:
        # Pipeline and pure encode alternate slice by slice, so load from other work on the machine
        # falls on both alike; each pipeline slice is a full run (index check, lookups, run record).
        tok = embedder.tokenizer()
        batch = max(settings.embedding.batch_size * 4, 16)  # what the pipeline hands the embedder
        first = IngestResult(run_id="all", index="", source=str(args.corpus))
        texts: list[str] = []
        pure_seconds = 0.0
        size = -(-len(docs) // max(1, args.slices))
        for start in range(0, len(docs), size):
            part = docs[start:start + size]
            with RichProgress() as bar:
                r = run_ingest(part, settings, es=es, embedder=embedder, progress=bar)
            for k in ("seconds", "embed_seconds", "indexed", "updated", "failed", "documents_failed"):
                setattr(first, k, getattr(first, k) + getattr(r, k))
            part_texts = [t for d in part for _, t in document_chunks(
                d, settings.chunking, settings.embedding, settings.index.tenant, tok, embedder.max_seq_length)]
            t0 = time.perf_counter()
            timed_encode(embedder.encode, part_texts, batch)
            pure_seconds += time.perf_counter() - t0
            texts += part_texts
        pure_cps = len(texts) / pure_seconds
        second = run_ingest(docs, settings, es=es, embedder=embedder)
    finally:
        if not args.keep:
            es.send(request.delete_index(f"{prefix}-*", expand_wildcards="all"))
    pipe_cps = (first.indexed + first.updated) / first.seconds
    in_pipe_cps = (first.indexed + first.updated) / first.embed_seconds if first.embed_seconds else 0.0
    figures.update(chunks=len(texts), pipeline_seconds=first.seconds, pipeline_chunks_per_s=pipe_cps,
                   encode_inside_pipeline_chunks_per_s=in_pipe_cps,
                   pure_encode_chunks_per_s=pure_cps, ratio=pipe_cps / pure_cps,
                   embed_share=first.embed_seconds / first.seconds, rerun_seconds=second.seconds,
                   rerun_changed_nothing=second.changed_nothing, failed=first.failed + first.documents_failed)

    t = Table(title="ingest pipeline vs pure encode (same chunks, same run)")
    for col in ("documents", "chunks", "pipeline s", "pipeline chunks/s", "encode chunks/s", "ratio",
                "embedder busy", "encode inside pipeline", "re-run s", "re-run"):
        t.add_column(col, justify="right")
    t.add_row(f"{len(docs):,}", f"{len(texts):,}", f"{first.seconds:.1f}", f"{pipe_cps:.1f}", f"{pure_cps:.1f}",
              f"{pipe_cps / pure_cps:.2f}", f"{figures['embed_share']:.0%}", f"{in_pipe_cps:.1f}/s",
              f"{second.seconds:.1f}",
              "nothing changed" if second.changed_nothing else "CHANGED")
    console.print(t)
    console.print("embedder busy = share of the pipeline's wall time spent in encode; 'encode inside pipeline' "
                  "vs 'encode chunks/s' shows how much other load on the machine moved between the two phases.")

    onnx_backends: dict[str, Embedder] = {}
    for name, extra in (("onnx fp32", {"onnx_quantized": False}), ("onnx int8", {"onnx_quantized": True})):
        onnx_backends[name] = Embedder(settings.embedding.model_copy(update={"backend": "onnx", **extra}),
                                         settings.models)
    if args.backend_sample:
        sample = texts[:args.backend_sample]
        encoders: dict[str, Any] = {"torch (1 process)": embedder.encode,
                                    **{k: e.encode for k, e in onnx_backends.items()}}
        pool = None
        if not args.no_processes:
            pool = ProcessPoolEncoder(settings.embedding, settings.models, 2)
            encoders["torch (2 processes × 1 thread)"] = pool.encode
        for enc in encoders.values():
            enc(["warm up", "warm up"])
        # round-robin over slices of the sample, so drifting load hits every backend alike
        seconds = dict.fromkeys(encoders, 0.0)
        vecs: dict[str, list[np.ndarray]] = {k: [] for k in encoders}
        step = -(-len(sample) // 4)
        for start in range(0, len(sample), step):
            for name, enc in encoders.items():
                cps, v = timed_encode(enc, sample[start:start + step], batch)
                seconds[name] += len(v) / cps
                vecs[name].append(v)
        if pool is not None:
            pool.close()
        ref = np.concatenate(vecs["torch (1 process)"])
        torch_cps = len(sample) / seconds["torch (1 process)"]
        bt = Table(title=f"encode throughput on the same {len(sample):,} chunks (interleaved)")
        for col in ("backend", "chunks/s", "× torch", "mean cosine to torch"):
            bt.add_column(col, justify="right")
        for name in encoders:
            cps = len(sample) / seconds[name]
            cos = float((np.concatenate(vecs[name]) * ref).sum(1).mean())
            bt.add_row(name, f"{cps:.1f}", f"{cps / torch_cps:.2f}", f"{cos:.4f}")
            figures[f"encode::{name}"] = {"chunks_per_s": cps, "speedup": cps / torch_cps, "cosine": cos}
        console.print(bt)
    if args.quality_docs:
        backends = {"torch": embedder, **onnx_backends}
        qt = Table(title="retrieval quality (dense only, no Elasticsearch)")
        qt.add_column("embedding")
        qt.add_column("nDCG@10", justify="right")
        for label, ndcg in dense_quality(args.corpus, args.quality_docs, settings, backends):
            qt.add_row(label, f"{ndcg:.4f}")
            figures[f"ndcg10::{label}"] = ndcg
        console.print(qt)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if figures["failed"] == 0 and second.changed_nothing else 1


if __name__ == "__main__":
    sys.exit(main())
