#!/usr/bin/env python
"""The query encoder's cost against query length: median ms to embed one query of 8, 16, 32, 64,
128 and 256 word pieces with the ONNX encoder on the fp32 and the int8 file, measured side by side.

What is timed is what a search pays: one call of the one encoder (:class:`~hybridsearch.embedding.encoder.
OnnxEncoder`: tokenise, one ONNX Runtime run, pool) on one text, from one thread, in the session the search
path makes (:func:`~hybridsearch.embedding.onnx.ort_session`: threads that do not spin, ONNX Runtime's default
intra-op threads; ``--threads N`` makes it N intra-op threads instead, ``--threads 1`` one core per query). The
texts are real: prefixes of SciFact abstracts (in id order) ending at a word, ``--texts`` of them per length,
each of exactly that many word pieces including [CLS] and [SEP] (checked with the encoder's own tokenizer). Every
round times every (length, variant) pair once, in an order shuffled per round
(seeded), so a busy machine slows all cells alike; the ratios are the figures to read (docs/evaluation.md, "Long
queries").

    $V/bin/python ops/bench/bench_query_length.py                    # 80 rounds, both variants, the default model
    $V/bin/python ops/bench/bench_query_length.py --rounds 20 --lengths 8,256

The ONNX files are the ones the query encoder uses (exported on first use from the model, which loads torch
once). Writes reports/bench-query-length-<time>.json and .png (ms against length, one line per variant; with
``--out DIR``: DIR/bench-query-length.json and .png). Exit 0; numbers only, no gate.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hybridsearch.embedding.encoder import ModelSpec, OnnxEncoder, load_tokenizer, read_spec
from hybridsearch.settings import DEFAULT_EMBEDDING_MODEL, ModelsSettings

DEFAULT_CORPUS = Path("/work/shared/datasets/scifact/corpus.jsonl.gz")
LENGTHS = (8, 16, 32, 64, 128, 256)
VARIANTS = ("fp32", "int8")


def onnx_paths(model: str, models: ModelsSettings) -> dict[str, Path]:
    """The fp32 and int8 ONNX files of ``model`` the query encoder runs, exported when missing."""
    from hybridsearch.embedding.models import resolve_model
    from hybridsearch.embedding.onnx import onnx_files

    folder = resolve_model(model, models)
    paths = {"fp32": onnx_files(folder, models, False)[1], "int8": onnx_files(folder, models, True)[1]}
    if not all(p.is_file() for p in paths.values()):
        from hybridsearch.embedding.encoder import load_sentence_transformer
        from hybridsearch.embedding.onnx import export

        st = load_sentence_transformer(model, models, "cpu")
        paths = {"fp32": export(st, folder, models, False), "int8": export(st, folder, models, True)}
    return paths


class OneQuery:
    """One query's vector by the one encoder, as :meth:`~hybridsearch.embedding.encoder.Embedder.encode_query`
    makes it (the prompt first), with the tokenizer that counts its word pieces."""

    def __init__(self, onnx_path: Path, spec: ModelSpec, prompt: str) -> None:
        self.encoder = OnnxEncoder(onnx_path, spec)
        self.onnx_path, self.spec, self.prompt, self.tokenizer = onnx_path, spec, prompt, load_tokenizer(spec)

    def __call__(self, text: str) -> np.ndarray:
        vec: np.ndarray = self.encoder.encode([text], self.prompt)[0]
        return vec


def session_threads(encoder: OneQuery, threads: int) -> None:
    """Replace ``encoder``'s session by one like the search path's with at most ``threads`` intra-op threads."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    encoder.encoder.session = ort.InferenceSession(str(encoder.onnx_path), sess_options=opts,
                                                   providers=["CPUExecutionProvider"])


def texts_of_length(encoder: OneQuery, corpus: Path, lengths: list[int],
                    per_length: int) -> dict[int, list[str]]:
    """``per_length`` distinct texts per length, each a word-ending prefix of an abstract whose encoding (with the
    prompt, [CLS] and [SEP]) is exactly that many word pieces."""
    found: dict[int, list[str]] = {n: [] for n in lengths}
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        docs = sorted((json.loads(line) for line in fh if line.strip()), key=lambda d: str(d["_id"]))
    for doc in docs:
        words = str(doc.get("text", "")).split()
        want = [n for n in lengths if len(found[n]) < per_length]
        if not want:
            break
        count, end = 0, 0
        for n in sorted(want):
            while count < n and end < len(words):
                end += 1
                count = len(encoder.tokenizer.encode(encoder.prompt + " ".join(words[:end])).ids)
            if count == n and len(found[n]) < per_length:
                found[n].append(" ".join(words[:end]))
            if end >= len(words) or count >= encoder.spec.max_length:
                break
    short = {n: len(t) for n, t in found.items() if len(t) < per_length}
    if short:
        raise SystemExit(f"not enough texts of these lengths in {corpus}: {short}")
    return found


def measure(encoders: dict[str, Callable[[str], Any]], texts: dict[int, list[str]], rounds: int,
            seed: int) -> dict[str, dict[int, list[float]]]:
    """ms per call for every (variant, length), ``rounds`` interleaved rounds (order shuffled per round)."""
    cells = [(v, n) for v in encoders for n in texts]
    for v, n in cells:  # warm-up: the first runs of a session and of a shape are slower
        for text in texts[n][:3]:
            encoders[v](text)
    out: dict[str, dict[int, list[float]]] = {v: {n: [] for n in texts} for v in encoders}
    rng = random.Random(seed)
    for r in range(rounds):
        order = cells[:]
        rng.shuffle(order)
        for v, n in order:
            text = texts[n][r % len(texts[n])]
            t0 = time.perf_counter()
            encoders[v](text)
            out[v][n].append((time.perf_counter() - t0) * 1000.0)
    return out


def summarise(samples: dict[str, dict[int, list[float]]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for v, by_len in samples.items():
        table[v] = {str(n): {"p50": statistics.median(ms), "p25": float(np.percentile(ms, 25)),
                             "p75": float(np.percentile(ms, 75)), "n": len(ms)} for n, ms in by_len.items()}
    lengths = list(next(iter(samples.values())))
    longest = max(lengths)
    ratios: dict[str, Any] = {}
    for v in samples:
        ratios[f"{v} / {v}@{longest}"] = {str(n): table[v][str(n)]["p50"] / table[v][str(longest)]["p50"]
                                          for n in lengths}
    if {"fp32", "int8"} <= set(samples):
        ratios["int8 / fp32"] = {str(n): table["int8"][str(n)]["p50"] / table["fp32"][str(n)]["p50"]
                                 for n in lengths}
        ratios["int8 / fp32@" + str(longest)] = {str(n): table["int8"][str(n)]["p50"]
                                                  / table["fp32"][str(longest)]["p50"] for n in lengths}
    return {"median_ms": table, "ratios": ratios}


def plot(summary: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for v, by_len in summary["median_ms"].items():
        lengths = [int(n) for n in by_len]
        ax.plot(lengths, [by_len[str(n)]["p50"] for n in lengths], marker="o", label=f"{v} (median)")
        ax.fill_between(lengths, [by_len[str(n)]["p25"] for n in lengths], [by_len[str(n)]["p75"] for n in lengths],
                        alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlabel("query length (word pieces, incl. [CLS] and [SEP])")
    ax.set_ylabel("ms per query (one call, band: p25-p75)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_EMBEDDING_MODEL, help="embedding model (default: %(default)s)")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="BEIR corpus.jsonl.gz the texts come from")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="word pieces (default: %(default)s)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="fp32, int8 or both (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=80, help="timed calls per cell (default: %(default)s)")
    ap.add_argument("--texts", type=int, default=20, help="distinct texts per length (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=0,
                    help="intra-op threads of each session (default 0: the search path's session as it is)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="folder for bench-query-length.json/.png (default: reports/, stamped)")
    args = ap.parse_args(argv)
    lengths = sorted({int(x) for x in args.lengths.split(",") if x.strip()})
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not lengths or min(lengths) < 3 or not variants or set(variants) - set(VARIANTS):
        ap.error("--lengths: integers ≥ 3; --variants: fp32 and/or int8")
    if args.rounds < 1 or args.texts < 1 or args.threads < 0:
        ap.error("--rounds and --texts must be ≥ 1, --threads ≥ 0")

    from hybridsearch.embedding.models import resolve_model, resolve_prompts
    from hybridsearch.settings import EmbeddingSettings, load_settings

    models = load_settings().models
    folder = resolve_model(args.model, models)
    spec = read_spec(folder)
    if max(lengths) > spec.max_length:
        ap.error(f"--lengths: the model's limit is {spec.max_length} word pieces")
    prompt = resolve_prompts(EmbeddingSettings(model=args.model), models).query
    paths = onnx_paths(args.model, models)
    encoders = {v: OneQuery(paths[v], spec, prompt) for v in variants}
    for e in encoders.values():
        if args.threads:
            session_threads(e, args.threads)
    texts = texts_of_length(next(iter(encoders.values())), args.corpus, lengths, args.texts)
    started = dt.datetime.now(dt.UTC)
    samples = measure(dict(encoders), texts, args.rounds, args.seed)
    summary = summarise(samples)
    report = {
        "created_at": started.isoformat(timespec="seconds"), "model": args.model, "prompt": prompt,
        "onnx_files": {v: str(paths[v]) for v in variants}, "lengths": lengths, "rounds": args.rounds,
        "texts_per_length": args.texts, "intra_op_threads": args.threads or "onnxruntime default (search path)",
        "seed": args.seed,
        "machine": {"cpus": os.cpu_count(), "load_average": list(os.getloadavg()), "python": platform.python_version()},
        **summary,
    }
    stamp = started.strftime("%Y%m%dT%H%M%S")
    out = args.out or Path("reports")
    name = "bench-query-length" if args.out else f"bench-query-length-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    threads = f"{args.threads} intra-op thread(s)" if args.threads else "search-path session"
    plot(summary, out / f"{name}.png", f"{args.model.rsplit('/', 1)[-1]}, lean ONNX query encoder: {threads}, "
                                       f"{args.rounds} rounds interleaved")
    print("length  " + "  ".join(f"{v:>9}" for v in variants) + ("   int8/fp32" if len(variants) == 2 else ""))
    for n in lengths:
        row = "  ".join(f"{summary['median_ms'][v][str(n)]['p50']:8.2f}ms" for v in variants)
        ratio = f"   {summary['ratios']['int8 / fp32'][str(n)]:9.2f}" if len(variants) == 2 else ""
        print(f"{n:6d}  {row}{ratio}")
    print(f"-> {out / name}.json, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
