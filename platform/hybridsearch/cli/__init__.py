"""The ``hsp`` command line: one module per command group, wired up in :mod:`hybridsearch.cli.main`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from hybridsearch.settings import Settings

Handler = Callable[[argparse.Namespace, Settings], int]
#: adds one command: ``add(name, handler, **add_parser_options)`` returns its parser
AddCommand = Callable[..., argparse.ArgumentParser]


def subcommands(parser: argparse.ArgumentParser, dest: str, metavar: str) -> AddCommand:
    """Give ``parser`` required subcommands; returns the function that adds one, run by ``handler(args, settings)``."""
    sub = parser.add_subparsers(dest=dest, metavar=metavar, required=True)

    def add(name: str, handler: Handler | None = None, **options: Any) -> argparse.ArgumentParser:
        p = sub.add_parser(name, **options)
        p.set_defaults(handler=handler)
        return p

    return add


def with_prefix(settings: Settings, prefix: str | None) -> Settings:
    """``settings`` with the index prefix ``prefix`` when one is given."""
    if not prefix:
        return settings
    return settings.model_copy(update={"index": settings.index.model_copy(update={"prefix": prefix})})
