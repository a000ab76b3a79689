"""`hsp serve-reranker` (the cross-encoder HTTP service) and `hsp rerank-check` (score a few passages)."""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from hybridsearch.cli import AddCommand
from hybridsearch.cli.output import right, styled, table
from hybridsearch.cli.output import stdout as console
from hybridsearch.errors import ConfigError
from hybridsearch.settings import RerankerSettings, Settings

SAMPLE_QUERY = "what do cross-encoders do in a search engine"
SAMPLE_PASSAGES = [
    "A cross-encoder reads the query and a candidate passage together and outputs one relevance score.",
    "Elasticsearch stores documents in shards that are spread over the nodes of a cluster.",
    "Rerankers rescore the top results of a first-stage retriever to put the most relevant ones first.",
    "The recipe needs two eggs, a cup of flour and a pinch of salt.",
]


def with_overrides(cfg: RerankerSettings, args: argparse.Namespace) -> RerankerSettings:
    """``cfg`` with the options given on the command line."""
    update: dict[str, Any] = {key: value for key in ("model", "device", "url", "batch_window_ms", "micro_batching")
                              if (value := getattr(args, key, None)) is not None}
    # only what was set: a field left unset keeps meaning "decide later" (e.g. max_length from the model's card)
    return cfg.model_validate({**cfg.model_dump(exclude_unset=True), **update})


def serve(args: argparse.Namespace, settings: Settings) -> int:
    """Run the service until interrupted. Loads the model first (RerankerModelError → exit 5) unless --lazy."""
    from hybridsearch.rerank.local import LocalReranker
    from hybridsearch.rerank.service import create_app, server

    cfg = with_overrides(settings.reranker, args)
    logging.getLogger("hybridsearch").setLevel(logging.INFO if args.verbose < 2 else logging.DEBUG)
    scorer = LocalReranker(cfg, settings.models)
    if not args.lazy:
        started = time.perf_counter()
        scorer.load()
        console.print(styled("model ", (cfg.model, "bold"),
                             f" loaded on {scorer.device} in {time.perf_counter() - started:.1f}s"))
    console.print(f"reranker service on http://{args.host}:{args.port} (micro-batching "
                  f"{'on, ' + str(cfg.batch_window_ms) + ' ms' if cfg.micro_batching else 'off'}, "
                  f"auth {'on' if cfg.token else 'off'})")
    server(create_app(cfg, scorer), args.host, args.port, log_level="info", access_log=args.verbose > 0,
           timeout_graceful_shutdown=5).run()
    return 0


def check(args: argparse.Namespace, settings: Settings) -> int:
    """Score a query against passages with the configured reranker (service or in-process) and print them."""
    from hybridsearch.rerank import make_reranker
    from hybridsearch.rerank.base import order_by_score

    reranker = make_reranker(with_overrides(settings.reranker, args), settings.models)
    if reranker is None:
        raise ConfigError("reranking is disabled (HSP_RERANKER__ENABLED=false)")
    query = args.query or SAMPLE_QUERY
    passages = args.passages or SAMPLE_PASSAGES
    started = time.perf_counter()
    scores = reranker.score(query, passages)
    took = (time.perf_counter() - started) * 1000
    grid = table(console, *right("rank", "score"), "passage", title=f"{reranker.name}: {query!r} ({took:.0f} ms)")
    for rank, i in enumerate(order_by_score(scores), 1):
        grid.add_row(str(rank), f"{scores[i]:.4f}", passages[i][:100])
    console.print(grid)
    return 0


def register(add: AddCommand) -> None:
    p = add("serve-reranker", serve, help="run the cross-encoder reranker HTTP service",
            description="Serve POST /rerank, /healthz, /readyz and /metrics (settings: HSP_RERANKER__*).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 in containers)")
    p.add_argument("--port", type=int, default=8088, help="port (default 8088)")
    p.add_argument("--model", help="Hub name or local CrossEncoder folder (default HSP_RERANKER__MODEL)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"], help="default HSP_RERANKER__DEVICE")
    p.add_argument("--batch-window-ms", type=float,
                   help="micro-batching window in ms (default HSP_RERANKER__BATCH_WINDOW_MS)")
    p.add_argument("--no-batching", dest="micro_batching", action="store_const", const=False,
                   help="score every request on its own")
    p.add_argument("--lazy", action="store_true",
                   help="start serving at once and load the model in the background (/readyz says when ready)")

    c = add("rerank-check", check, help="score passages with the configured reranker and show the order")
    c.add_argument("query", nargs="?", help="query (default: a built-in sample)")
    c.add_argument("passages", nargs="*", help="passages (default: built-in samples)")
    c.add_argument("--url", help="reranker service URL (default HSP_RERANKER__URL; unset = in-process)")
    c.add_argument("--model", help="in-process model (default HSP_RERANKER__MODEL)")
    c.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"])
