"""Faults between the pipeline and a real node: 429s on single bulk items and a cluster that goes away.

A small proxy on loopback (plain HTTP) forwards everything to the real node (over TLS, with the caller's
credentials, when the node is secured) and, on cue, rejects chosen bulk items
with 429 (removing them from the request, as a node whose write queue is full would) or stops answering.
After the fault clears, a re-run ends with every valid document indexed exactly once.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

import pytest

from hybridsearch.chunker_signature import chunker_signature
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import ClusterError, ClusterUnavailable, IngestError
from hybridsearch.ingest.chunking import chunk_id, chunk_text, text_budget
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document
from hybridsearch.settings import Settings
from ingest_helpers import read_dead_letter


@dataclass
class Faults:
    reject_every_other: int = 0  # bulk requests in which every other index item gets a 429
    reject_doc: str | None = None  # items of this doc are always rejected with 429
    drop_after: int | None = None  # once this many bulk items went through, stop answering anything
    bulk_requests: int = 0
    bulk_items: int = 0
    rejected: int = 0


class Proxy:
    def __init__(self, upstream: str, ca_certs: str | None = None) -> None:
        self.faults = Faults()
        up = urlparse(upstream)
        tls = ssl.create_default_context(cafile=ca_certs) if up.scheme == "https" else None
        if up.hostname is None:
            raise ValueError(f"proxy upstream {upstream!r} names no host")
        host, port = up.hostname, up.port
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                f = proxy.faults
                is_bulk = "/_bulk" in self.path
                if f.drop_after is not None and f.bulk_items >= f.drop_after:
                    self.close_connection = True
                    self.connection.close()
                    return
                rejected: dict[int, dict[str, Any]] = {}
                if is_bulk:
                    f.bulk_requests += 1
                    f.bulk_items += len(re.findall(rb'^\{"index"\s*:', body, flags=re.M))  # spaced or not
                    body, rejected = self._reject(body)
                status, headers, payload = self._forward(body) if body.strip() or not is_bulk else \
                    (200, {"Content-Type": "application/json", "X-Elastic-Product": "Elasticsearch"},
                     b'{"took":0,"errors":false,"items":[]}')
                if rejected and status == 200:
                    resp = json.loads(payload)
                    items = iter(resp["items"])
                    total = len(resp["items"]) + len(rejected)
                    resp["items"] = [rejected[i] if i in rejected else next(items) for i in range(total)]
                    resp["errors"] = True
                    payload = json.dumps(resp).encode()
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in {"content-length", "transfer-encoding", "connection"}:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _reject(self, body: bytes) -> tuple[bytes, dict[int, dict[str, Any]]]:
                f = proxy.faults
                lines = [ln for ln in body.split(b"\n") if ln.strip()]
                kept: list[bytes] = []
                rejected: dict[int, dict[str, Any]] = {}
                i = item = 0
                every_other = f.reject_every_other > 0
                while i < len(lines):
                    action = json.loads(lines[i])
                    op, meta = next(iter(action.items()))
                    pair = lines[i:i + 2] if op in {"index", "create", "update"} else lines[i:i + 1]
                    i += len(pair)
                    doc = json.loads(pair[1]) if len(pair) == 2 else {}
                    chunk = "-chunks" in str(meta.get("_index", ""))  # chunk writes only, not run records
                    hit = (every_other and item % 2 == 1) or doc.get("doc_id") == f.reject_doc
                    if op == "index" and chunk and hit:
                        rejected[item] = {op: {"_index": meta.get("_index"), "_id": meta.get("_id"), "status": 429,
                                               "error": {"type": "es_rejected_execution_exception",
                                                         "reason": "rejected by the test proxy: write queue full"}}}
                        f.rejected += 1
                    else:
                        kept.extend(pair)
                    item += 1
                if every_other:
                    f.reject_every_other -= 1
                return (b"\n".join(kept) + b"\n" if kept else b""), rejected

            def _forward(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
                conn = (http.client.HTTPSConnection(host, port, timeout=30, context=tls) if tls else
                        http.client.HTTPConnection(host, port, timeout=30))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in {"host", "content-length"}}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                return resp.status, dict(resp.getheaders()), data

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def proxy(es_url: str, settings: Settings) -> Iterator[Proxy]:
    p = Proxy(es_url, str(settings.es.ca_certs) if settings.es.ca_certs else None)
    yield p
    p.close()


def via(settings: Settings, url: str) -> tuple[Settings, EngineClient]:
    s = settings.model_copy(update={
        "es": settings.es.model_copy(update={"url": url, "max_retries": 0, "request_timeout": 10}),
        "ingest": settings.ingest.model_copy(update={"bulk_chunk_size": 4, "bulk_max_retries": 2,
                                                     "bulk_initial_backoff": 0.05, "bulk_max_backoff": 0.2}),
        "chunking": settings.chunking.model_copy(update={"strategy": "sentence", "max_tokens": 16}),
        "embedding": settings.embedding.model_copy(update={"batch_size": 4}),
    })
    return s, EngineClient(s.es)


def docs(n: int = 10) -> list[Document]:
    return [Document.make(f"d{i}", f"Finding {i} concerns enzyme kinetics. The second sentence adds context {i}. "
                          f"A third sentence closes document {i}.", title=f"T{i}") for i in range(n)]


def assert_indexed_exactly_once(es: EngineClient, settings: Settings, embedder: Embedder,
                                documents: list[Document]) -> None:
    tok = embedder.tokenizer()
    sig = chunker_signature(settings.chunking)
    want = set()
    for d in documents:
        limit = text_budget(tok, d.title, True, embedder.max_seq_length)
        want |= {chunk_id(d.doc_id, c.position, sig) for c in chunk_text(d.text, settings.chunking, tok, limit)}
    es.send(request.refresh(settings.index.alias))
    hits = es.send(request.search(settings.index.alias, request.body(size=1000, source=["content_hash", "doc_id"])))
    got = [h["_id"] for h in hits["hits"]["hits"]]
    assert sorted(got) == sorted(want)
    by_doc = {d.doc_id: d.content_hash for d in documents}
    assert all(h["_source"]["content_hash"] == by_doc[h["_source"]["doc_id"]] for h in hits["hits"]["hits"])


def test_429_items_are_retried_alone(proxy: Proxy, settings: Settings, embedder: Embedder, es: EngineClient) -> None:
    s, client = via(settings, proxy.url)
    proxy.faults.reject_every_other = 3
    corpus = docs()
    result = run_ingest(corpus, s, es=client, embedder=embedder)
    assert proxy.faults.rejected > 0 and result.retried == proxy.faults.rejected
    assert result.failed == 0 and result.documents_failed == 0 and result.dead_letter_path is None
    assert result.indexed == result.chunks  # retried items were written once, never "updated"
    assert_indexed_exactly_once(es, s, embedder, corpus)


def test_persistent_429_goes_to_dead_letter_then_rerun_completes(proxy: Proxy, settings: Settings,
                                                                 embedder: Embedder, es: EngineClient) -> None:
    s, client = via(settings, proxy.url)
    proxy.faults.reject_doc = "d3"
    corpus = docs()
    result = run_ingest(corpus, s, es=client, embedder=embedder)
    assert result.documents_failed == 1 and result.failed > 0
    dead = read_dead_letter(result.dead_letter_path)  # type: ignore[arg-type]
    assert {d["doc_id"] for d in dead} == {"d3"}
    assert all(d["status"] == 429 and "still failing after 2 retries" in d["reason"] for d in dead)

    proxy.faults.reject_doc = None  # the fault clears
    again = run_ingest(corpus, s, es=client, embedder=embedder)
    assert again.documents_skipped == 9 and again.documents_failed == 0 and again.failed == 0
    assert_indexed_exactly_once(es, s, embedder, corpus)


def test_cluster_going_away_mid_run_then_rerun_resumes(proxy: Proxy, settings: Settings, embedder: Embedder,
                                                      es: EngineClient) -> None:
    s, client = via(settings, proxy.url)
    proxy.faults.drop_after = 20  # the first batch of 16 chunks gets through, then the node vanishes
    corpus = docs(16)
    with pytest.raises(ClusterUnavailable, match="Re-run"):
        run_ingest(corpus, s, es=client, embedder=embedder)
    es.send(request.refresh(s.index.alias))
    partial = es.send(request.count(s.index.alias))["count"]
    assert partial > 0

    direct, direct_client = via(settings, settings.es.url)  # the cluster is back
    again = run_ingest(corpus, direct, es=direct_client, embedder=embedder)
    assert again.status == "completed" and again.failed == 0 and again.documents_failed == 0
    assert again.documents_skipped > 0  # documents finished before the fault are not embedded again
    assert_indexed_exactly_once(es, direct, embedder, corpus)


def test_update_that_failed_leaves_no_stale_chunks_after_rerun(proxy: Proxy, settings: Settings, embedder: Embedder,
                                                               es: EngineClient) -> None:
    s, client = via(settings, proxy.url)
    long_text = " ".join(f"Sentence {i} reports another measured effect." for i in range(8))
    old = [Document.make("u", long_text, title="U"), Document.make("v", "Stable document.", title="V")]
    run_ingest(old, s, es=client, embedder=embedder)
    es.send(request.refresh(s.index.alias))
    assert es.send(request.count(s.index.alias, {"term": {"doc_id": "u"}}))["count"] >= 3

    new = [Document.make("u", "A single short sentence now.", title="U"), old[1]]
    proxy.faults.reject_doc = "u"  # the update cannot be written
    failed = run_ingest(new, s, es=client, embedder=embedder)
    assert failed.documents_failed == 1 and failed.documents_skipped == 1

    proxy.faults.reject_doc = None
    again = run_ingest(new, s, es=client, embedder=embedder)
    assert again.documents_failed == 0 and again.deleted >= 2
    assert_indexed_exactly_once(es, s, embedder, new)


def test_an_unexpected_failure_inside_a_run_is_an_ingest_error(settings: Settings, embedder: Embedder,
                                                              es: EngineClient) -> None:
    """Not the cluster's fault, so not a ClusterError: an IngestError naming what broke, the cause chained.
    (A batch the encoder fails on is dead-lettered instead; the thread that prepares documents has no such net:
    here the documents' own iterator breaks in it.)"""

    def breaking() -> Iterator[Document]:
        yield from docs(3)
        raise RuntimeError("reading crashed")

    with pytest.raises(IngestError) as info:
        run_ingest(breaking(), settings, es=es, embedder=embedder)
    exc = info.value
    assert not isinstance(exc, ClusterError) and isinstance(exc.__cause__, RuntimeError)
    assert exc.problem.endswith("failed unexpectedly: RuntimeError: reading crashed")
    assert exc.fix is not None and "hsp -v ingest" in exc.fix
