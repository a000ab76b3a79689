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

#: Each command and the module of ``hybridsearch.cli`` that registers it, in the order of ``--help``. A command
#: imports only its own module (``hsp search`` never loads training, evaluation or the doctor); ``hsp --help``
#: and an unknown command load them all. ``tests/unit/test_cli_commands.py`` checks this against the modules.
COMMANDS = {"ingest": "ingest", "delete": "ingest", "search": "search", "serve-reranker": "rerank",
            "rerank-check": "rerank", "eval": "eval", "calibrate-fusion": "calibrate", "index": "index",
            "doctor": "doctor", "kibana": "kibana", "train-reranker": "train", "train-embedder": "train",
            "models": "models", "demo": "demo"}
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))

err_console = output.console(stderr=True)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """``hsp``'s parser: with ``argv`` naming a known command, only that command's module is loaded."""
    parser = argparse.ArgumentParser(prog="hsp", description="Hybrid BM25 + dense search on Elasticsearch.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    command = next((a for a in argv or () if not a.startswith("-")), None)
    for name in (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES:
        importlib.import_module(f"hybridsearch.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hsp`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return int(exc.code or 0)
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    output.quiet_client_logs(args.verbose)
    try:
        settings = load_settings()
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
