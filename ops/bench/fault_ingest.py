#!/usr/bin/env python
"""Ingestion that survives a fault, on the local multi-node cluster. One command, bounded.

Two ingestion workers (``hsp ingest … --shard 0/2`` and ``--shard 1/2``, separate processes) write a SciFact
corpus into a 3-primary, 1-replica chunk index while a fault is injected and, a little later, cleared:

* ``--fault node``: one data node is killed with SIGKILL (``ops/es-local.sh cluster kill NODE``) and
  restarted (``cluster restart NODE``);
* ``--fault block``: the flood-stage block ``index.blocks.read_only_allow_delete: true`` is set on the
  index, then cleared;
* ``--fault sync``: no engine fault. The corpus is ingested, then re-exported as a nightly export would be (every
  tenth record dropped, every twentieth changed, new records in the middle), and ``hsp ingest FILE --sync`` is
  SIGKILLed once it has written some chunks of the new records; the next ``--sync`` run must take over and finish
  (the new and changed records whole, the dropped ones gone), and a third finds nothing to do. One worker.

Then it checks, against the chunk ids the chunker produces for every document (no model call: the
chunker only needs the tokenizer): every valid document is visible, each with exactly its chunks, none
missing, none duplicated, nothing left hidden (the prefix's ingest state); the run records in
``<prefix>-ingest-runs`` (status, retried); and that a re-run of both shards finds nothing to do.
Exit status 0 only when lost = duplicated = incomplete = 0 and the re-run indexed nothing.

    ops/es-local.sh cluster start
    $V/bin/python ops/bench/fault_ingest.py --fault node --limit-docs 1500
    $V/bin/python ops/bench/fault_ingest.py --fault block --limit-docs 1500
    $V/bin/python ops/bench/fault_ingest.py --fault sync --es-url URL --replicas 0 --prefix fault-sync --limit-docs 600

``--fault block`` and ``--fault sync`` need no second node: on a single node, ``--es-url URL --replicas 0`` (the
prefix's indices are deleted first, by name, so use a prefix of your own there).

Writes ``reports/fault-ingest-<fault>-<time>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsearch.engine import request

if TYPE_CHECKING:  # imported where used, so that --help loads nothing of the package
    from hybridsearch.engine import EngineClient
    from hybridsearch.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
ES_LOCAL = ROOT / "ops" / "es-local.sh"
SCIFACT = Path(os.environ.get("HSP_SCIFACT", "/work/shared/datasets/scifact/corpus.jsonl.gz"))
HSP = [sys.executable, "-c", "from hybridsearch.cli.main import entry; entry()"]


def log(msg: str) -> None:
    print(f"[fault-ingest {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cluster_urls() -> str:
    return subprocess.run([str(ES_LOCAL), "cluster", "url"], check=True, capture_output=True, text=True).stdout.strip()


def write_subset(dest: Path, limit: int | None) -> int:
    """The first ``limit`` SciFact records (all when None) as a plain .jsonl; returns how many."""
    n = 0
    with gzip.open(SCIFACT, "rt", encoding="utf-8") as src, dest.open("w", encoding="utf-8") as out:
        for line in src:
            if limit is not None and n >= limit:
                break
            if line.strip():
                out.write(line if line.endswith("\n") else line + "\n")
                n += 1
    return n


def reexport(corpus: Path) -> dict[str, Any]:
    """Rewrite ``corpus`` as a nightly re-export would: every tenth record dropped, every twentieth other one
    changed, and a twentieth as many new SciFact records (those after the file's) placed in the middle. Returns
    the ids dropped, changed and new."""
    records = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    with gzip.open(SCIFACT, "rt", encoding="utf-8") as src:
        later = [json.loads(line) for line in list(src)[len(records):len(records) + max(1, len(records) // 20)]]
    kept = [r for i, r in enumerate(records) if i % 10 != 9]
    changed = [r["_id"] for i, r in enumerate(kept) if i % 20 == 4]
    for r in kept:
        if r["_id"] in changed:
            r["text"] += " The re-export revised this record."
    kept[len(kept) // 2:len(kept) // 2] = later
    corpus.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    return {"dropped": [r["_id"] for i, r in enumerate(records) if i % 10 == 9], "changed": changed,
            "new": [r["_id"] for r in later]}


def run_sync(corpus: Path, env: dict[str, str], deadline: float, tag: str,
             kill_when: Callable[[], bool] | None = None) -> dict[str, Any]:
    """One ``hsp ingest CORPUS --sync`` process; SIGKILLed as soon as ``kill_when()`` holds (polled every 0.2 s)."""
    log_path = ROOT / "reports" / f"fault-ingest-{tag}.log"
    with log_path.open("w") as out:
        proc = subprocess.Popen([*HSP, "ingest", str(corpus), "--sync", "--no-progress"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        killed = False
        while proc.poll() is None and time.monotonic() < deadline:
            if kill_when is not None and not killed and kill_when():
                proc.kill()
                killed = True
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
            log(f"{tag} ran past the time limit and was killed")
        rc = proc.wait()
    return {"run": tag, "exit": rc, "killed": killed, "tail": log_path.read_text(errors="replace")[-600:]}


def chunks_of(es: EngineClient, alias: str, doc_ids: list[str]) -> int:
    """Chunks written of ``doc_ids``, hidden ones included (-1 while the engine does not answer)."""
    try:
        es.send(request.refresh(alias))
        query = {"terms": {"doc_id": doc_ids}}
        return int(es.send(request.count(alias, query))["count"])
    except Exception:  # noqa: BLE001 - a probe while a run writes
        return -1


def sync_fault(es: EngineClient, settings: Settings, corpus: Path, env: dict[str, str],
               time_limit: float) -> dict[str, Any]:
    """``--fault sync``: the first sync, the re-export, the killed sync, the sync that finishes, the idle one."""
    alias, t0 = settings.index.alias, time.monotonic()
    first = run_sync(corpus, env, t0 + time_limit, "sync-first")
    edit = reexport(corpus)
    log(f"re-exported: {len(edit['dropped'])} dropped, {len(edit['changed'])} changed, {len(edit['new'])} new")
    target = max(1, len(edit["new"]) // 2)
    killed = run_sync(corpus, env, time.monotonic() + time_limit, "sync-killed",
                      kill_when=lambda: chunks_of(es, alias, edit["new"]) >= target)
    log(f"the sync was {'SIGKILLed' if killed['killed'] else 'NOT killed'} with "
        f"{chunks_of(es, alias, edit['new'])} chunks of the new records written")
    finish = run_sync(corpus, env, time.monotonic() + time_limit, "sync-finish")
    return {"reexport": {k: len(v) for k, v in edit.items()}, "runs": [first, killed, finish],
            "dropped_still_stored": chunks_of(es, alias, edit["dropped"])}


def worker_env(urls: str, prefix: str, shards: int, replicas: int) -> dict[str, str]:
    env = {**os.environ, "HSP_ES_URL": urls, "HSP_INDEX__PREFIX": prefix, "HSP_INDEX__SHARDS": str(shards),
           "HSP_INDEX__REPLICAS": str(replicas), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HSP_INGEST__DEAD_LETTER_DIR": str(ROOT / "reports" / f"dead-letter-{prefix}")}
    env.pop("HSP_ES__URL", None)
    return env


def run_workers(corpus: Path, env: dict[str, str], deadline: float, tag: str) -> list[dict[str, Any]]:
    """Both shards as separate ``hsp ingest`` processes; waits until both end (killed at ``deadline``)."""
    procs = []
    for i in (0, 1):
        out = (ROOT / "reports" / f"fault-ingest-{tag}-shard{i}.log").open("w")
        procs.append((i, out, subprocess.Popen([*HSP, "ingest", str(corpus), "--shard", f"{i}/2", "--no-progress"],
                                               env=env, stdout=out, stderr=subprocess.STDOUT)))
    results = []
    for i, out, p in procs:
        try:
            rc = p.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
            log(f"worker shard {i}/2 ran past the time limit and was killed")
        out.close()
        tail = (ROOT / "reports" / f"fault-ingest-{tag}-shard{i}.log").read_text(errors="replace")[-600:]
        results.append({"shard": f"{i}/2", "exit": rc, "tail": tail})
    return results


def prefix_patterns(prefix: str) -> tuple[str, ...]:
    """The prefix's indices: its chunk indices, ingest run records and state, query log."""
    return f"{prefix}-chunks*", f"{prefix}-ingest-*", f"{prefix}-query-log*"


def drop_indices(es: EngineClient, patterns: Iterable[str]) -> list[str]:
    """Delete every index matching ``patterns``, each by its name (a cluster may refuse wildcard deletes); a pattern
    that matches nothing, or an index gone in between, is no error. Returns the names deleted."""
    from hybridsearch.engine import API_ERRORS, status_of

    dropped: list[str] = []
    for pattern in patterns:
        for name in sorted(es.send(request.get_index(pattern, expand_wildcards="all", allow_no_indices=True))):
            try:
                es.send(request.delete_index(name))
            except API_ERRORS as exc:
                if status_of(exc) != 404:
                    raise
                continue
            dropped.append(name)
    return dropped


def chunk_count(es: EngineClient, alias: str) -> int:
    try:
        return int(es.send(request.count(alias))["count"])
    except Exception:  # noqa: BLE001 - a probe during a fault
        return -1


def inject(fault: str, es: EngineClient, index: str, node: str, after_chunks: int, hold_s: float, deadline: float,
           events: list[dict[str, Any]], alias: str) -> None:
    """Wait until ``after_chunks`` chunks are written, inject the fault, hold it ``hold_s``, clear it."""
    t0 = time.monotonic()
    while time.monotonic() < deadline and chunk_count(es, alias) < after_chunks:
        time.sleep(0.5)
    events.append({"at_s": round(time.monotonic() - t0, 1), "event": f"inject {fault}",
                   "chunks_so_far": chunk_count(es, alias)})  # written so far, hidden ones too
    log(f"injecting {fault} ({events[-1]['chunks_so_far']} chunks written so far)")
    if fault == "node":
        subprocess.run([str(ES_LOCAL), "cluster", "kill", node], check=True)
    else:
        es.send(request.put_settings(index, {"index.blocks.read_only_allow_delete": True}))
    time.sleep(hold_s)
    log(f"clearing {fault}")
    if fault == "node":
        subprocess.run([str(ES_LOCAL), "cluster", "restart", node], check=True)
    else:
        es.send(request.put_settings(index, {"index.blocks.read_only_allow_delete": None}))
    events.append({"at_s": round(time.monotonic() - t0, 1), "event": f"cleared {fault}",
                   "chunks_so_far": chunk_count(es, alias)})


def expected_chunks(corpus: Path, settings: Settings) -> tuple[dict[str, set[str]], int]:
    """Per valid document, the chunk ids the package's chunker gives it (``ingest.chunking.document_chunks``, as
    ingestion calls it; the model's tokenizer, no encoding); and how many records were not valid documents (no
    chunks or unreadable)."""
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.ingest.chunking import document_chunks
    from hybridsearch.ingest.sources import Document, read_path

    embedder = Embedder(settings.embedding, settings.models)
    tokenizer = embedder.tokenizer()
    want: dict[str, set[str]] = {}
    invalid = 0
    for d in read_path(corpus):
        if not isinstance(d, Document):
            invalid += 1
            continue
        ids = {src["chunk_id"] for src, _ in document_chunks(d, settings.chunking, settings.embedding,
                                                               settings.index.tenant, tokenizer,
                                                               embedder.max_seq_length)}
        if ids:
            want[d.doc_id] = ids
        else:
            invalid += 1
    return want, invalid


def stored_chunks(es: EngineClient, index: str) -> tuple[list[dict[str, Any]], set[str]]:
    """What every reader sees (the one read path), and the documents hidden from it."""
    from hybridsearch.index.visibility import scan_visible, state_index_for
    from hybridsearch.ingest.lease import hidden_documents

    visible = [{"_id": h["_id"], **h["_source"]} for h in scan_visible(es, index, source=["doc_id", "position"],
                                                                       size=2000)]
    hidden = {d for ids in hidden_documents(es, state_index_for(index)).values() for d in ids}
    return visible, hidden


def verify(want: dict[str, set[str]], stored: tuple[list[dict[str, Any]], set[str]]) -> dict[str, Any]:
    visible, hidden = stored
    by_doc: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in visible:
        by_doc[str(c["doc_id"])].append(c)
    positions = Counter((str(c["doc_id"]), c["position"]) for c in visible)
    lost = sorted(set(want) - set(by_doc))
    incomplete = sorted(d for d in want if d in by_doc and {c["_id"] for c in by_doc[d]} != want[d])
    return {
        "documents_expected": len(want), "chunks_expected": sum(len(v) for v in want.values()),
        "documents_visible": len(by_doc), "chunks_visible": len(visible), "documents_hidden": len(hidden),
        "documents_lost": len(lost), "documents_incomplete": len(incomplete),
        "chunks_duplicated": sum(n - 1 for n in positions.values() if n > 1),
        "unexpected_documents": len(set(by_doc) - set(want)),
        "examples": {"lost": lost[:5], "incomplete": incomplete[:5]},
    }


def run_records(es: EngineClient, runs_index: str) -> list[dict[str, Any]]:
    """The prefix's ingest run records, oldest first; none when no run has written one (no index)."""
    if not es.send(request.index_exists(runs_index)):
        return []
    es.send(request.refresh(runs_index))
    hits = es.send(request.search(runs_index, request.body(size=50, sort=[{"started_at": "asc"}])))["hits"]["hits"]
    keep = ("run_id", "shard", "status", "documents", "documents_indexed", "documents_skipped", "documents_failed",
            "chunks", "indexed", "updated", "unchanged", "reused", "retried", "seconds")
    return [{k: h["_source"].get(k) for k in keep} for h in hits]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fault", choices=("node", "block", "sync"), default="node")
    ap.add_argument("--node", default="node-2", help="node to kill with --fault node")
    ap.add_argument("--es-url", help="comma-separated node URLs (default: ops/es-local.sh cluster url)")
    ap.add_argument("--prefix", help="index prefix (default fault-<fault>); its indices are deleted first")
    ap.add_argument("--limit-docs", type=int, default=1500, help="first N SciFact documents (0: all 5,183)")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--fault-after-chunks", type=int, default=300, help="inject once this many chunks are written")
    ap.add_argument("--hold", type=float, default=20.0, help="seconds the fault lasts before it is cleared")
    ap.add_argument("--time-limit", type=float, default=900.0, help="seconds for the faulted run")
    ap.add_argument("--bulk-max-retries", type=int, help="HSP_INGEST__BULK_MAX_RETRIES for the workers (default 5: "
                    "about 15 s of backoff; a fault held longer dead-letters documents for the re-run to resume)")
    ap.add_argument("--verify-only", action="store_true", help="no new faulted run: verify the index and the run "
                    "records a previous one left, then re-run")
    args = ap.parse_args(argv)

    from hybridsearch.engine import EngineClient
    from hybridsearch.index.versions import ensure_index
    from hybridsearch.settings import load_settings

    urls = args.es_url or cluster_urls()
    prefix = args.prefix or f"fault-{args.fault}"
    settings = load_settings(es_url=urls, index={"prefix": prefix, "shards": args.shards, "replicas": args.replicas})
    es = EngineClient(settings.es)
    (ROOT / "reports").mkdir(exist_ok=True)
    if not args.verify_only and (dropped := drop_indices(es, prefix_patterns(prefix))):
        log(f"deleted the indices of an earlier run: {', '.join(dropped)}")
    index = ensure_index(es, settings)
    corpus = ROOT / "reports" / f"fault-ingest-corpus-{args.limit_docs or 'all'}.jsonl"
    n_docs = write_subset(corpus, args.limit_docs or None)
    log(f"{n_docs} SciFact documents → {index} ({args.shards} primaries, {args.replicas} replica) on {urls}")
    env = worker_env(urls, prefix, args.shards, args.replicas)
    if args.bulk_max_retries is not None:
        env["HSP_INGEST__BULK_MAX_RETRIES"] = str(args.bulk_max_retries)

    if args.fault == "sync":
        return sync_main(es, settings, corpus, env, index, args.time_limit)
    t0 = time.monotonic()
    deadline = t0 + args.time_limit
    events: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []
    if not args.verify_only:
        fault = threading.Thread(target=inject, args=(args.fault, es, index, args.node, args.fault_after_chunks,
                                                      args.hold, deadline, events, settings.index.alias), daemon=True)
        fault.start()
        workers = run_workers(corpus, env, deadline, f"{args.fault}-run")
        fault.join(max(1.0, deadline + 300 - time.monotonic()))
    faulted_s = time.monotonic() - t0
    log(f"faulted run ended after {faulted_s:.0f} s; exits {[w['exit'] for w in workers]}")
    es.send(request.cluster_health(wait_for_status="yellow", timeout="120s"))
    es.send(request.refresh(index))

    want, invalid = expected_chunks(corpus, settings)
    after_fault = verify(want, stored_chunks(es, index))
    records = run_records(es, settings.index.ingest_runs)

    log("re-running both shards: it must find nothing to do")
    rerun = run_workers(corpus, env, time.monotonic() + args.time_limit, f"{args.fault}-rerun")
    es.send(request.refresh(index))
    rerun_records = [r for r in run_records(es, settings.index.ingest_runs) if r["run_id"] not in
                     {x["run_id"] for x in records}]
    after_rerun = verify(want, stored_chunks(es, index))
    rerun_work = sum((r.get("indexed") or 0) + (r.get("updated") or 0) + (r.get("documents_indexed") or 0)
                     for r in rerun_records)

    ok = (after_fault["documents_lost"] == 0 and after_fault["chunks_duplicated"] == 0
          and after_fault["documents_incomplete"] == 0 and after_fault["documents_hidden"] == 0 and rerun_work == 0
          and after_rerun["documents_lost"] == 0 and after_rerun["chunks_duplicated"] == 0)
    report = {"fault": args.fault, "node": args.node if args.fault == "node" else None, "es_url": urls,
              "index": index, "documents_in_file": n_docs, "invalid_records": invalid, "events": events,
              "faulted_run_seconds": round(faulted_s, 1), "workers": workers, "after_fault": after_fault,
              "run_records": records, "rerun_records": rerun_records, "rerun_workers": rerun,
              "after_rerun": after_rerun, "rerun_work": rerun_work, "ok": ok,
              "machine": "shared 2-core machine, 3 nodes x 512 MB heap on loopback"}
    out = ROOT / "reports" / f"fault-ingest-{args.fault}-{dt.datetime.now():%Y%m%dT%H%M%S}.json"
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")

    print(f"\nfault: {args.fault}" + (f" ({args.node} SIGKILLed, restarted)" if args.fault == "node" else
                                        " (read_only_allow_delete set, cleared)"))
    for e in events:
        print(f"  {e['at_s']:>6.1f} s  {e['event']}  ({e['chunks_so_far']} chunks written then)")
    print(f"workers: exits {[w['exit'] for w in workers]}")
    for r in records:
        print(f"  run {r['run_id']} shard {r['shard']}: {r['status']}, documents_indexed {r['documents_indexed']}, "
              f"chunks indexed {r['indexed']}, retried {r['retried']}, failed docs {r['documents_failed']}")
    a = after_fault
    print(f"documents written {a['documents_visible']} of {a['documents_expected']} valid; lost {a['documents_lost']}; "
          f"incomplete {a['documents_incomplete']}; chunks duplicated {a['chunks_duplicated']}; "
          f"chunks {a['chunks_visible']}/{a['chunks_expected']}; hidden leftovers {a['documents_hidden']}")
    print(f"re-run: exits {[w['exit'] for w in rerun]}, chunks/documents written {rerun_work} (must be 0); after it: "
          f"lost {after_rerun['documents_lost']}, duplicated {after_rerun['chunks_duplicated']}")
    print(f"{'PASS' if ok else 'FAIL'}  (report {out.relative_to(ROOT)})")
    return 0 if ok else 1


def sync_main(es: EngineClient, settings: Settings, corpus: Path, env: dict[str, str], index: str,
              time_limit: float) -> int:
    """``--fault sync`` end to end: run it, verify against the re-exported file, re-run, report; the exit status."""
    outcome = sync_fault(es, settings, corpus, env, time_limit)
    es.send(request.refresh(index))
    want, invalid = expected_chunks(corpus, settings)
    after = verify(want, stored_chunks(es, index))
    idle = run_sync(corpus, env, time.monotonic() + time_limit, "sync-idle")
    records = run_records(es, settings.index.ingest_runs)
    idle_work = sum((records[-1].get(k) or 0) for k in ("indexed", "updated", "documents_indexed", "deleted",
                                                        "documents_deleted")) if records else -1
    killed = outcome["runs"][1]
    ok = (killed["killed"] and outcome["runs"][2]["exit"] == 0 and after["documents_lost"] == 0
          and after["documents_incomplete"] == 0 and after["chunks_duplicated"] == 0
          and after["documents_hidden"] == 0 and after["unexpected_documents"] == 0
          and outcome["dropped_still_stored"] == 0 and idle["exit"] == 0 and idle_work == 0)
    report = {"fault": "sync", "index": index, "invalid_records": invalid, **outcome, "after_finish": after,
              "idle_run": idle, "run_records": records, "idle_work": idle_work, "ok": ok}
    out = ROOT / "reports" / f"fault-ingest-sync-{dt.datetime.now():%Y%m%dT%H%M%S}.json"
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    r = outcome["reexport"]
    print(f"\nfault: sync (re-export: {r['dropped']} dropped, {r['changed']} changed, {r['new']} new; the sync "
          f"{'SIGKILLed' if killed['killed'] else 'not killed'} mid-way)")
    print("runs: " + ", ".join(f"{x['run']} exit {x['exit']}" for x in [*outcome["runs"], idle]))
    for rec in records:
        print(f"  run {rec['run_id']}: {rec['status']}, documents_indexed {rec['documents_indexed']}, "
              f"chunks indexed {rec['indexed']}, updated {rec['updated']}")
    print(f"after the finishing sync: documents {after['documents_visible']} of {after['documents_expected']}; lost "
          f"{after['documents_lost']}; incomplete {after['documents_incomplete']}; chunks duplicated "
          f"{after['chunks_duplicated']}; hidden leftovers {after['documents_hidden']}; documents the source no "
          f"longer holds {after['unexpected_documents']} (chunks of dropped records {outcome['dropped_still_stored']})")
    print(f"idle sync: chunks/documents written or deleted {idle_work} (must be 0)")
    print(f"{'PASS' if ok else 'FAIL'}  (report {out.relative_to(ROOT)})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
