"""Entry point of ``hsp``: parses arguments, runs the command, maps errors to exit codes (:data:`EXIT_CODES`)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from hybridsearch.cli import output, subcommands
from hybridsearch.errors import (
    AliasConflict,
    ClusterError,
    ConfigError,
    HybridSearchError,
    IndexMismatch,
    IngestLocked,
    ModelError,
)
from hybridsearch.settings import load_settings

#: Each command and the module of ``hybridsearch.cli`` that registers it, in the order of ``--help``; a command
#: imports only its own module, ``hsp --help`` and an unknown command load them all.
COMMANDS = {"ingest": "ingest", "delete": "ingest", "search": "search", "serve-reranker": "rerank",
            "rerank-check": "rerank", "eval": "eval", "calibrate-fusion": "eval", "index": "index",
            "doctor": "ops", "kibana": "ops", "train-reranker": "train", "train-embedder": "train",
            "models": "models", "demo": "demo"}
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))
INTERRUPTED = 130
#: loggers of the engines' client libraries
TRANSPORT_LOGGER = "elastic_transport"  # the one client library that logs (retries, dead nodes)
#: error class -> exit code; 1 is also a failed quality gate (``hsp eval --baseline``) or a doctor FAIL
EXIT_CODES: dict[type[HybridSearchError], int] = {HybridSearchError: 1, ConfigError: 2, ClusterError: 3,
                                                   IndexMismatch: 4, AliasConflict: 4, ModelError: 5, IngestLocked: 6}


def exit_code(error: HybridSearchError | type[HybridSearchError]) -> int:
    """The exit code of ``error`` (an instance or a class)."""
    cls = error if isinstance(error, type) else type(error)
    return next(EXIT_CODES[c] for c in cls.__mro__ if c in EXIT_CODES)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """``hsp``'s parser: with ``argv`` naming a known command, only that command's module is loaded."""
    parser = argparse.ArgumentParser(prog="hsp", description="Hybrid BM25 + dense search on Elasticsearch.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    add = subcommands(parser, "command", "COMMAND")
    command = next((a for a in argv or () if not a.startswith("-")), None)
    for name in (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES:
        importlib.import_module(f"hybridsearch.cli.{name}").register(add)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hsp`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser(argv).parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return int(exc.code or 0)
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s" if args.verbose else
                        "%(levelname)s: %(message)s")
    # its retry warnings (with tracebacks) only with -v: our error says what failed
    logging.getLogger(TRANSPORT_LOGGER).setLevel(logging.NOTSET if args.verbose else logging.ERROR)
    output.redact_logs()
    err = output.console(stderr=True)
    try:
        return int(args.handler(args, load_settings()))
    except HybridSearchError as exc:
        output.print_error(err, exc, args.verbose)
        return exit_code(exc)
    except KeyboardInterrupt:
        err.print("interrupted")
        return INTERRUPTED


def entry() -> None:
    """Console-script wrapper around :func:`main`."""
    sys.exit(main())
