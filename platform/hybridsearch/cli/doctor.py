"""``hsp doctor``: check cluster, index, models and reranker; print the whole explanation and fix of each problem."""

from __future__ import annotations

import argparse
import json
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from typing import Any

from rich.table import Table

from hybridsearch import doctor
from hybridsearch.cli import AddCommand
from hybridsearch.cli.output import stdout as console
from hybridsearch.cli.output import styled
from hybridsearch.cluster_url import shown
from hybridsearch.settings import Settings

STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


def register(add: AddCommand) -> None:
    p = add("doctor", cmd_doctor, help="check cluster, index, models and reranker; exit 1 on any failure")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.add_argument("--no-models", action="store_true", help="skip loading the embedding model")
    p.add_argument("--no-reranker", action="store_true", help="skip the reranker check")
    p.add_argument("--strict", action="store_true", help="warnings fail too")


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    """Run the checks and print one row per check: what it found and, below that, the fix, wrapped in its column."""
    progress: AbstractContextManager[Any] = nullcontext() if args.json else console.status("checking…")
    with progress:
        checks = doctor.run_checks(settings, models=not args.no_models, reranker=not args.no_reranker)
    bad = doctor.failed(checks, strict=args.strict)
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
        return 1 if bad else 0
    console.print(styled(("hybridsearch doctor", "bold"), f" · {shown(settings.es.nodes)} · prefix "
                         f"{settings.index.prefix}"))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
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
