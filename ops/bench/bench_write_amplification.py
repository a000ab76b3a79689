#!/usr/bin/env python3
"""Write amplification of ingestion, this checkout beside another commit, in one run on the same corpus.

For each side (``--baseline`` commit, checked out into a temporary git worktree, and this checkout) it runs
`hsp ingest` on the same BEIR subset into a fresh prefix of the node at HSP_ES_URL, then again after 10 % of
the documents changed, and reads the engine's own counters for the chunk index (``_stats`` primaries):
index and delete operations, deleted copies left in the segments, merges, store bytes. It prints, per run,
the bulk item operations per chunk the run wrote (index + delete operations / chunks of the documents
written), which is 1.0 when each chunk is written once.

    HF_HUB_OFFLINE=1 $V/bin/python ops/bench/bench_write_amplification.py --baseline b5979e7 --limit 600
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsearch.engine import request

if TYPE_CHECKING:  # imported where used, so that --help loads nothing of the package
    from hybridsearch.engine import EngineClient

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CORPUS = ROOT.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl.gz"


def subset(corpus: Path, limit: int, dest: Path, changed_every: int | None) -> list[str]:
    """Write the first ``limit`` records of ``corpus`` to ``dest``; with ``changed_every`` N, every N-th text gets a
    sentence more. Returns the ids of the changed records."""
    changed: list[str] = []
    opener = gzip.open if corpus.suffix == ".gz" else open
    with opener(corpus, "rt", encoding="utf-8") as fh, dest.open("w", encoding="utf-8") as out:
        for i, line in enumerate(fh):
            if i >= limit:
                break
            rec = json.loads(line)
            if changed_every and i % changed_every == 0:
                rec["text"] = rec.get("text", "") + " This abstract was revised."
                changed.append(str(rec["_id"]))
            out.write(json.dumps(rec) + "\n")
    return changed


def counters(es: EngineClient, index: str) -> dict[str, int]:
    es.send(request.refresh(index))
    p = es.send(request.index_stats(index, metric="indexing,docs,merge,store"))["_all"]["primaries"]
    return {"index_ops": p["indexing"]["index_total"], "delete_ops": p["indexing"]["delete_total"],
            "docs": p["docs"]["count"], "deleted_copies": p["docs"]["deleted"],
            "merges": p["merges"]["total"], "store_bytes": p["store"]["size_in_bytes"]}


def ingest(package: Path, prefix: str, corpus: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(package), "HSP_INDEX__PREFIX": prefix, "HF_HUB_OFFLINE": "1",
           "HSP_QUERY__LOG_QUERIES": "false"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", "from hybridsearch.cli.main import entry; entry()", "ingest",
                          str(corpus), "--no-progress"], env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"ingest with {package} failed ({out.returncode}): {out.stdout[-2000:]}{out.stderr[-2000:]}")
    return time.perf_counter() - t0, out.stdout


def side(name: str, package: Path, es: EngineClient, base: Path, changed: Path, changed_ids: list[str],
         prefix: str = "bench-wa") -> list[dict[str, Any]]:
    prefix = f"{prefix}-{name}-{uuid.uuid4().hex[:6]}"
    index = f"{prefix}-chunks-v1"
    rows = []
    try:
        before = {k: 0 for k in ("index_ops", "delete_ops", "merges")}
        for label, corpus in (("fresh ingest", base), ("10 % changed", changed)):
            seconds, _ = ingest(package, prefix, corpus)
            now = counters(es, index)
            written = now["docs"] if label == "fresh ingest" else changed_chunks(es, index, changed_ids)
            ops = now["index_ops"] - before["index_ops"] + now["delete_ops"] - before["delete_ops"]
            rows.append({"side": name, "run": label, "chunks_written": written, "index_ops":
                         now["index_ops"] - before["index_ops"], "delete_ops": now["delete_ops"] - before["delete_ops"],
                         "ops_per_chunk": round(ops / written, 3) if written else None,
                         "deleted_copies": now["deleted_copies"], "merges": now["merges"] - before["merges"],
                         "store_mb": round(now["store_bytes"] / 1e6, 1), "seconds": round(seconds, 1)})
            before = now
    finally:
        es.send(request.delete_index(f"{prefix}-*", expand_wildcards="all"))
    return rows


def changed_chunks(es: EngineClient, index: str, doc_ids: list[str]) -> int:
    """Chunks of the changed documents' new versions."""
    body = es.send(request.count(index, {"terms": {"doc_id": doc_ids}}))
    return int(body["count"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="b5979e7",
                    help="commit to compare with (a git worktree of it); none: this checkout only")
    ap.add_argument("--prefix", default="bench-wa", help="index prefix: each side ingests under <prefix>-<side>-<id>")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--limit", type=int, default=600, help="first N documents")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from hybridsearch.engine import EngineClient
    from hybridsearch.settings import load_settings

    es = EngineClient(load_settings().es)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base, changed = work / "base.jsonl", work / "changed.jsonl"
        subset(args.corpus, args.limit, base, None)
        changed_ids = subset(args.corpus, args.limit, changed, 10)
        rows = []
        if args.baseline != "none":
            tree = work / "baseline"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.baseline],
                           check=True, capture_output=True)
            try:
                rows += side(f"{args.baseline[:7]}", tree / "platform", es, base, changed, changed_ids, args.prefix)
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        rows += side("this", ROOT / "platform", es, base, changed, changed_ids, args.prefix)
    table = Table(title=f"write amplification, {args.limit} documents of {args.corpus.name}")
    for col in rows[0]:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    Console(width=200).print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
