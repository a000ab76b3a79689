"""``hsp doctor`` (check cluster, index, models and reranker; print each problem's whole explanation and fix) and
``hsp kibana import|validate`` (load the dashboards and data views into Kibana)."""

from __future__ import annotations

import argparse
import json
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.table import Column, Table

from hybridsearch import kibana
from hybridsearch.cli import AddCommand, subcommands, with_prefix
from hybridsearch.cli.output import stdout as console
from hybridsearch.cli.output import styled
from hybridsearch.cluster_url import shown
from hybridsearch.errors import ConfigError
from hybridsearch.settings import Settings

STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


def register(add: AddCommand) -> None:
    p = add("doctor", cmd_doctor, help="check cluster, index, models and reranker; exit 1 on any failure")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.add_argument("--no-models", action="store_true", help="skip loading the embedding model")
    p.add_argument("--no-reranker", action="store_true", help="skip the reranker check")
    p.add_argument("--strict", action="store_true", help="warnings fail too")

    p = add("kibana", help="import the hybridsearch data views and dashboard into Kibana")
    action = subcommands(p, "kibana_command", "ACTION")
    imp = action("import", cmd_import, help="post the saved objects to Kibana (overwrites earlier copies)")
    imp.add_argument("--url", default="http://localhost:5601", help="Kibana URL (default %(default)s)")
    imp.add_argument("--prefix", help="index prefix the objects point at (default: HSP_INDEX__PREFIX)")
    imp.add_argument("--space", help="Kibana space id (default: the default space)")
    imp.add_argument("--file", type=Path, help="NDJSON to import (default: ops/kibana/hybridsearch.ndjson)")
    imp.add_argument("--api-key", help="Kibana/Elasticsearch API key (default: HSP_ES__API_KEY)")
    imp.add_argument("--insecure", action="store_true", help="do not verify Kibana's TLS certificate")
    val = action("validate", cmd_validate, help="check the saved objects against our mappings, offline")
    val.add_argument("--file", type=Path)
    val.add_argument("--prefix")


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    """Run the checks and print one row per check: what it found and, below that, the fix, wrapped in its column."""
    from hybridsearch import doctor

    progress: AbstractContextManager[Any] = nullcontext() if args.json else console.status("checking…")
    with progress:
        checks = doctor.run_checks(settings, models=not args.no_models, reranker=not args.no_reranker)
    bad = doctor.failed(checks, strict=args.strict)
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
        return 1 if bad else 0
    console.print(styled(("hybridsearch doctor", "bold"), f" · {shown(settings.es.nodes)} · prefix "
                         f"{settings.index.prefix}"))
    grid = Table.grid(Column(no_wrap=True), Column(no_wrap=True), Column(ratio=1, overflow="fold"), padding=(0, 2))
    for c in checks:
        found = styled(c.detail)
        if c.fix:
            found.append("\nfix: ", style="bold")
            found.append(c.fix)
        grid.add_row(styled((c.status, STYLE[c.status])), styled((c.area, "dim"), f" {c.name}"), found)
    console.print(grid)
    counts = {s: sum(c.status == s for c in checks) for s in STYLE}
    console.print(styled(", ".join(f"{n} {s}" for s, n in counts.items() if n) + " — ",
                         ("not healthy", "bold red") if bad else ("healthy", "green")))
    return 1 if bad else 0


def _prepared(args: argparse.Namespace, settings: Settings) -> tuple[Settings, list[dict[str, Any]]]:
    settings = with_prefix(settings, args.prefix)
    objects = kibana.rewrite_prefix(kibana.load_objects(args.file), settings.index.prefix)
    problems = kibana.validate(objects, settings)
    if problems:
        raise ConfigError("the saved objects do not fit our mappings: " + "; ".join(problems))
    return settings, objects


def cmd_validate(args: argparse.Namespace, settings: Settings) -> int:
    settings, objects = _prepared(args, settings)
    console.print(f"{len(objects)} saved objects fit the {settings.index.prefix} mappings")
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    settings, objects = _prepared(args, settings)
    api_key = args.api_key or (settings.es.api_key.get_secret_value() if settings.es.api_key else None)
    password = settings.es.password.get_secret_value() if settings.es.password else None
    answer = kibana.import_objects(args.url, objects, space=args.space, api_key=api_key,
                                   username=settings.es.username, password=password, verify=not args.insecure)
    console.print(styled(f"imported {answer.get('successCount', len(objects))} objects for prefix ",
                         (settings.index.prefix, "bold"), f": open {args.url.rstrip('/')}/app/dashboards and pick "
                         f"'hybridsearch ({settings.index.prefix})'"))
    return 0
