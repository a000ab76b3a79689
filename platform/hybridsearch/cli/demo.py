"""``hsp demo``: index the Python standard library's own documentation and answer sample queries."""

from __future__ import annotations

import argparse
import time

from hybridsearch.cli import AddCommand
from hybridsearch.cli.output import RichProgress, print_wrapped, styled
from hybridsearch.cli.output import stdout as console
from hybridsearch.cli.search import print_result
from hybridsearch.settings import Settings


def register(add: AddCommand) -> None:
    from hybridsearch.demo import SAMPLE_QUERIES

    p = add("demo", cmd_demo, help="ingest the stdlib documentation and run sample queries",
            description="Index the running interpreter's standard-library documentation (pydoc topics, module, "
                        "class, function and method docstrings; no download) into the configured index, then answer "
                        "a few queries showing every stage. Afterwards `hsp search \"...\"` searches the same index.")
    p.add_argument("--limit", type=int, default=3000,
                   help="documents to ingest (default %(default)s, 0 = all ~5,000)")
    p.add_argument("--query", "-q", action="append", default=None, metavar="TEXT",
                   help=f"a query to run (repeatable; default: {len(SAMPLE_QUERIES)} samples)")
    p.add_argument("--k", type=int, default=3, help="hits per query (default %(default)s)")
    p.add_argument("--skip-ingest", action="store_true", help="only run the queries")
    p.add_argument("--no-rerank", action="store_true", help="do not call the reranker")


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from hybridsearch.demo import SAMPLE_QUERIES, stdlib_documents
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.engine import EngineClient
    from hybridsearch.query.client import SearchClient
    from hybridsearch.query.core import auto_reranker

    es = EngineClient(settings.es)
    embedder = Embedder(settings.embedding, settings.models)
    if not args.skip_ingest:
        from hybridsearch.ingest.pipeline import run_ingest

        limit = args.limit or None
        print_wrapped(console, styled(("1/2", "bold"), " ingesting the Python standard library's documentation "
                                      f"({'all documents' if limit is None else f'{limit:,} documents'}) into ",
                                      (settings.index.alias, "bold"), f" with {settings.embedding.model}"))
        t0 = time.perf_counter()
        with RichProgress() as progress:
            result = run_ingest(stdlib_documents(limit), settings, es=es, embedder=embedder, progress=progress)
        took = time.perf_counter() - t0
        print_wrapped(console, f"{result.documents:,} documents → {result.chunks:,} chunks: {result.indexed:,} "
                               f"indexed, {result.updated:,} updated, {result.unchanged:,} unchanged, "
                               f"{result.failed:,} failed in {took:.0f} s ({result.chunks_per_second:.1f} chunks/s)"
                               + (f"; dead letters: {result.dead_letter_path}" if result.dead_letter_path else ""),
                      indent=4)
    reranker, reason = auto_reranker(settings.reranker, settings.models)
    queries = args.query or list(SAMPLE_QUERIES)
    print_wrapped(console, styled(("2/2", "bold"), f" {len(queries)} queries: BM25 sent at once, kNN once the query is "
                                  "embedded, RRF fusion" + (", then a cross-encoder rerank where its model loads"
                                                            if reranker and not args.no_rerank else "")))
    with SearchClient(es, settings, embedder=embedder, reranker=reranker, no_reranker_reason=reason) as client:
        said: set[str] = set()  # why the results are not reranked is said once
        for query in queries:
            console.print()
            print_result(console, client.search(query, k=args.k, rerank=not args.no_rerank), said=said)
    console.print(styled("\nSearch it yourself: ", ('hsp search "how do I parse JSON"', "bold")))
    console.print(styled("Index status: ", ("hsp index status", "bold"), " · health: ", ("hsp doctor", "bold")))
    return 0
