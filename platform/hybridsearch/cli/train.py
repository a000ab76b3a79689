"""`hsp` commands of this group (not written yet)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this group's sub-commands to ``sub``."""
