"""Entry point of ``hsp``: parses arguments, dispatches, maps errors to exit codes in one place.

Errors are printed here only, as text (never rich markup), in a few lines; ``--verbose`` adds their
causes and the Elasticsearch client's own retry warnings (see :mod:`hybridsearch.cli.output`).

Exit codes (the table is :mod:`hybridsearch.cli.exit_codes`): 0 ok · 1 other hybridsearch error, or a failed
quality gate (``hsp eval --baseline``) · 2 usage or settings · 3 cluster · 4 index mismatch · 5 model · 6 another
ingest run holds the prefix's lease · 130 interrupted. Each command
module in this package exposes ``register(subparsers)``, which adds its sub-commands and sets
``handler(args, settings) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from hybridsearch.cli import output
from hybridsearch.cli.exit_codes import INTERRUPTED, exit_code
from hybridsearch.errors import HybridSearchError
from hybridsearch.settings import load_settings

# Command modules, in the order their commands appear in --help.
COMMAND_MODULES = ("ingest", "search", "rerank", "eval", "calibrate", "index", "doctor", "kibana", "train", "models",
                   "demo")

err_console = output.console(stderr=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hsp", description="Hybrid BM25 + dense search on Elasticsearch.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"hybridsearch.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hsp`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return int(exc.code or 0)
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    output.quiet_client_logs(args.verbose)
    try:
        settings = load_settings()
        if settings.models.allow_download:  # a .env line counts as much as the variable, for every command
            from hybridsearch.embedding.models import set_downloads_allowed

            set_downloads_allowed(True)
        code: int = args.handler(args, settings)
        return code
    except HybridSearchError as exc:
        output.print_error(err_console, exc, args.verbose)
        return exit_code(exc)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return INTERRUPTED


def entry() -> None:
    """Console-script wrapper around :func:`main`."""
    sys.exit(main())
