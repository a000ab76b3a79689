"""``hsp index status|create|migrate|rollback|drop|fusion``: versioned chunk indices behind one alias."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from rich.table import Column

from hybridsearch.cli import AddCommand, subcommands
from hybridsearch.cli.output import RichProgress, print_table, print_wrapped, styled, table
from hybridsearch.cli.output import stdout as console
from hybridsearch.engine import EngineClient
from hybridsearch.errors import ConfigError
from hybridsearch.index.spec import parse_version
from hybridsearch.index.versions import create_version, drop_version, index_meta, index_status, live_index, rollback
from hybridsearch.migrate import migrate, migration_settings
from hybridsearch.settings import Settings


def register(add: AddCommand) -> None:
    p = add("index", help="inspect and manage versioned chunk indices",
            description="Versioned chunk indices <prefix>-chunks-v<N> behind the read alias <prefix>-chunks.")
    action = subcommands(p, "index_command", "ACTION")
    s = action("status", cmd_status, help="aliases, versions, counts, models, sizes, health")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")

    c = action("create", cmd_create, help="create a chunk index version for the current settings")
    c.add_argument("--version", type=int, help="N of <prefix>-chunks-v<N> (default: next free)")

    m = action("migrate", cmd_migrate, help="re-embed the live index into a new version, then swap the alias",
               description="Scan the live index, re-embed every chunk with the new model (or vector options), verify "
                           "counts, swap the alias atomically. Searches keep answering from the old index until the "
                           "swap; it is kept for `hsp index rollback`.")
    m.add_argument("--to-model", help="embedding model (Hub name or local folder); default: current")
    m.add_argument("--dims", type=int, help="its vector size (default: read from the model)")
    m.add_argument("--to-version", type=int, help="N of the new index (default: next free)")
    m.add_argument("--index-options",
                   choices=["hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw", "flat", "int8_flat"],
                   help="dense_vector index_options of the new index (default: current setting)")
    m.add_argument("--chunker", choices=["paragraph", "sentence", "token", "fixed", "parent_child"],
                   help="cut the documents again with this chunker (rebuilt from the chunks' offsets)")
    m.add_argument("--max-tokens", type=int, help="with --chunker: target chunk size in word pieces")
    m.add_argument("--overlap", type=float, help="with --chunker: share of a chunk repeated")
    m.add_argument("--no-title", action="store_true", help="embed chunk text without the title prepended")
    m.add_argument("--reembed", action="store_true",
                   help="embed every chunk again even when the model is unchanged (default: copy its vector)")
    m.add_argument("--no-swap", action="store_true", help="build and verify the new index but leave the alias")
    m.add_argument("--batch-size", type=int, default=256, help="chunks per scroll page and bulk request")

    r = action("rollback", cmd_rollback, help="point the alias back at the previous version")
    r.add_argument("--to-version", type=int, help="version to go back to (default: the previous)")

    d = action("drop", cmd_drop, help="delete a chunk index version that is not live")
    d.add_argument("--version", type=int, required=True)

    f = action("fusion", cmd_fusion, help="record how hybrid searches of the live index fuse their lists",
               description="Record in the live index's _meta the fusion its hybrid searches use while "
                           "HSP_QUERY__FUSION=auto: rrf (Reciprocal Rank Fusion), zscore or minmax (the sum of "
                           "normalised scores). Needs no judgments; docs/evaluation.md compares them.")
    f.add_argument("method", choices=["rrf", "zscore", "minmax"])
    f.add_argument("--k", type=int, default=60, help="RRF's k (rrf only; default 60)")
    f.add_argument("--weights", default="1,1", help="weights of the BM25 and kNN lists, e.g. 1,2 (default 1,1)")


def _human(n: int) -> str:
    """``n`` bytes in B, KB, MB, GB or TB."""
    unit = next(u for u in range(4, -1, -1) if n >= 1024**u or u == 0)
    return f"{n} B" if unit == 0 else f"{n / 1024**unit:.1f} {'KMGT'[unit - 1]}B"


def _options(opts: dict[str, Any]) -> str:
    short = {"ef_construction": "ef", "confidence_interval": "ci"}
    return " ".join([str(opts.get("type", "?")), *(f"{short.get(k, k)}={v}" for k, v in opts.items() if k != "type")])


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    es = EngineClient(settings.es)
    status = index_status(es, settings.index)
    if args.json:
        print(json.dumps(dataclasses.asdict(status), indent=2, default=str))
        return 0
    alias = (", ".join(status.alias_targets), "") if status.alias_targets else ("missing", "red")
    console.print(styled("prefix ", (status.prefix, "bold"), " · alias ", (status.alias, "bold"), " → ", alias))
    grid = table(console, *(Column(col, justify="right" if col in {"docs", "chunks", "size"} else "left", no_wrap=True)
                            for col in ("", "version", "health", "docs", "chunks", "size", "vectors", "created")))
    for row in status.indices:
        health = styled((row.health, row.health if row.health in ("green", "yellow", "red") else ""))
        grid.add_row(styled(("●", "bold green")) if row.live else "", f"v{row.version}", health,
                      "?" if row.documents is None else f"{row.documents:,}", f"{row.chunks:,}",
                      _human(row.store_bytes), str(row.index_options.get("type", "?")),
                      (row.created or "")[:16].replace("T", " "))
    if status.indices:
        print_table(console, grid)
        for row in status.indices:
            print_wrapped(console, f"v{row.version} {row.name}: {row.model or '?'} ({row.dims or '?'} dims), "
                                   f"chunker {row.chunker or '?'}, vectors {_options(row.index_options)}", indent=2)
    else:
        console.print("no chunk index yet: `hsp index create` or `hsp ingest PATH` makes one")
    for name, count in status.logs.items():
        console.print(f"{name}: {count:,} documents")
    return 0


def cmd_create(args: argparse.Namespace, settings: Settings) -> int:
    es = EngineClient(settings.es)
    name = create_version(es, settings, args.version)
    live = live_index(es, settings.index)
    console.print(styled("created ", (name, "bold"), f" ({settings.embedding.model}, {settings.embedding.dims} dims)"
                         + (" · alias points at it" if live == name else f" · alias still points at {live}")))
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    es = EngineClient(settings.es)
    new = migration_settings(settings, model=args.to_model, dims=args.dims,
                             prepend_title=False if args.no_title else None,
                             index_options=args.index_options, chunker=args.chunker,
                             max_tokens=args.max_tokens, overlap=args.overlap)
    with RichProgress(console, keep_finished=False) as progress:
        result = migrate(es, settings, new, version=args.to_version, swap=not args.no_swap,
                         batch_size=args.batch_size, progress=progress, reembed=True if args.reembed else None)
    how = f"re-embedded with {new.embedding.model}" if result.reembedded else "copied with their vectors"
    if result.rechunked:
        how = f"re-cut by {result.target_meta.get('chunker_version')} and " + (
            how if result.reembedded else "copied with their vectors (no chunk's text changed)")
    console.print(styled(f"{result.source} → ", (result.target, "bold"), f": {result.chunks:,} chunks of "
                         f"{result.documents:,} documents {how} "
                         f"in {result.seconds:.1f} s ({result.chunks_per_second:.0f} chunks/s)"))
    if result.swapped:
        console.print(f"alias {settings.index.alias} → {result.target}; {result.source} kept "
                      f"(`hsp index rollback` to go back, `hsp index drop --version "
                      f"{parse_version(result.source)}` to delete it)")
    else:
        console.print(f"alias left on {result.source}; swap with `hsp index rollback --to-version "
                      f"{parse_version(result.target)}`")
    if new.embedding.model != settings.embedding.model or new.embedding.dims != settings.embedding.dims:
        console.print(styled(("query clients must now use", "yellow"), f" HSP_EMBEDDING__MODEL={new.embedding.model} "
                             f"HSP_EMBEDDING__DIMS={new.embedding.dims}"))
    if result.rechunked:
        console.print(styled(("ingestion must now use", "yellow"), f" HSP_CHUNKING__STRATEGY={new.chunking.strategy} "
                             f"HSP_CHUNKING__MAX_TOKENS={new.chunking.max_tokens} "
                             f"HSP_CHUNKING__OVERLAP={new.chunking.overlap:g}"))
    return 0


def cmd_rollback(args: argparse.Namespace, settings: Settings) -> int:
    es = EngineClient(settings.es)
    old, new = rollback(es, settings.index, args.to_version)
    console.print(styled(f"alias {settings.index.alias}: {old} → ", (new, "bold")))
    meta = index_meta(es, new)
    console.print(f"{new} was built with {meta.get('embedding_model')} ({meta.get('embedding_dims')} dims); "
                  "query clients must use that model")
    return 0


def cmd_drop(args: argparse.Namespace, settings: Settings) -> int:
    es = EngineClient(settings.es)
    name = drop_version(es, settings.index, args.version)
    console.print(f"deleted {name}")
    return 0


def cmd_fusion(args: argparse.Namespace, settings: Settings) -> int:
    from hybridsearch.eval.calibrate import record_fusion
    from hybridsearch.query.fusion import Fusion

    if args.k != 60 and args.method != "rrf":
        raise ConfigError(f"--k is RRF's; {args.method} has none")
    try:
        bm25, knn = (float(w) for w in args.weights.split(","))
    except ValueError:
        raise ConfigError(f"--weights {args.weights!r}: expected two numbers, BM25's and kNN's, e.g. 1,2") from None
    fusion = Fusion(method=args.method, k=args.k, weights=(bm25, knn), source="index")
    index = record_fusion(EngineClient(settings.es), settings.index, fusion)
    console.print(styled(f"{index}: hybrid searches fuse with ", (fusion.label, "bold")))
    if settings.query.fusion != "auto":
        console.print(styled(("HSP_QUERY__FUSION", "yellow"), f"={settings.query.fusion} overrides it here"))
    return 0
