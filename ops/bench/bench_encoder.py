#!/usr/bin/env python3
"""Passage encoding on CPU, side by side: sentence-transformers' torch model against the one encoder (the model's
ONNX graph in ONNX Runtime, fp32 and optionally int8), for one model or several, on the very same chunks,
alternating all the encoders round by round so that other load on the machine hits each alike. Prints chunks/s,
the ratio to the same model's torch and to the first model's torch, and the lowest and mean cosine to the same
model's torch vectors.

    HF_HUB_OFFLINE=1 $V/bin/python ops/bench/bench_encoder.py                   # 600 SciFact chunks, 3 rounds
    HF_HUB_OFFLINE=1 $V/bin/python ops/bench/bench_encoder.py --int8 --rounds 5
    HF_HUB_OFFLINE=1 $V/bin/python ops/bench/bench_encoder.py --chunks 300 --int8 \\
        --models all-MiniLM-L6-v2,bge-small-en-v1.5,e5-small-v2
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

from hybridsearch.embedding.encoder import Embedder, compare_vectors
from hybridsearch.ingest.chunking import document_chunks
from hybridsearch.ingest.sources import Document
from hybridsearch.settings import Settings, load_settings

DEFAULT_CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "scifact" / "corpus.jsonl.gz"


def sample_chunks(corpus: Path, settings: Settings, embedder: Embedder, count: int) -> list[str]:
    """The embedded texts of the first ``count`` chunks of ``corpus``, cut as ingestion cuts them."""
    tokenizer = embedder.tokenizer()
    texts: list[str] = []
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            doc = Document(doc_id=str(d["_id"]), title=d.get("title") or None, text=d.get("text", ""))
            for _src, text in document_chunks(doc, settings.chunking, settings.embedding, settings.index.tenant,
                                              tokenizer, embedder.max_seq_length):
                texts.append(text)
            if len(texts) >= count:
                return texts[:count]
    return texts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--chunks", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--int8", action="store_true", help="also the int8-quantised graph")
    ap.add_argument("--models", default=None, help="comma-separated model names or folders (default: "
                    "HSP_EMBEDDING__MODEL); the chunks are cut once, with the first model's tokenizer")
    args = ap.parse_args(argv)
    settings = load_settings()
    models = [m.strip() for m in (args.models or settings.embedding.model).split(",") if m.strip()]
    encoders: dict[tuple[str, str], Embedder] = {}
    for model in models:
        cfg = settings.embedding.model_copy(update={"device": "cpu", "model": model})
        encoders[model, "torch"] = Embedder(cfg.model_copy(update={"backend": "torch"}), settings.models)
        encoders[model, "onnx fp32"] = Embedder(cfg.model_copy(update={"backend": "onnx", "onnx_quantized": False}),
                                               settings.models)
        if args.int8:
            encoders[model, "onnx int8"] = Embedder(cfg.model_copy(update={"backend": "onnx", "onnx_quantized": True}),
                                                   settings.models)
    texts = sample_chunks(args.corpus, settings, encoders[models[0], "onnx fp32"], args.chunks)
    for e in encoders.values():
        e.encode(texts[:64])  # loads, exports once, warms up
    seconds = dict.fromkeys(encoders, 0.0)
    vectors: dict[tuple[str, str], np.ndarray] = {}
    names = list(encoders)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            vectors[name] = encoders[name].encode(texts)
            seconds[name] += time.perf_counter() - t0
    print(f"{len(texts)} chunks x {args.rounds} rounds, batch {settings.embedding.batch_size}, "
          f"{len(names)} encoders alternated")
    first = (models[0], "torch")
    print(f"{'model':24s} {'encoder':10s} {'chunks/s':>8s} {'x own torch':>11s} {'x ' + models[0] + ' torch':>20s}"
          "  cosine to own torch: lowest, mean")
    for model, encoder in names:
        name = (model, encoder)
        ref = vectors[model, "torch"]
        cps = len(texts) * args.rounds / seconds[name]
        low, _ = compare_vectors(ref, vectors[name])
        mean = float(np.mean((ref * vectors[name]).sum(1)))
        print(f"{model:24s} {encoder:10s} {cps:8.1f} {seconds[model, 'torch'] / seconds[name]:10.2f}x "
              f"{seconds[first] / seconds[name]:19.2f}x  {low:.6f}, {mean:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
