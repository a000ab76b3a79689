"""The ``hsp`` command line: one module per command group, wired up in :mod:`hybridsearch.cli.main`."""

from __future__ import annotations

import argparse
from typing import Protocol


class Subcommands(Protocol):
    """What ``ArgumentParser.add_subparsers()`` returns, as a command module's ``register`` uses it."""

    def add_parser(self, name: str, *, help: str | None = ..., description: str | None = ...,
                   formatter_class: type[argparse.HelpFormatter] = ...) -> argparse.ArgumentParser: ...
