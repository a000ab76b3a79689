"""Names of the platform's indices: chunk index versions (``<alias>-v<N>``, read by :func:`parse_version` only),
the log indices of a prefix (:data:`LOG_KINDS`) and the write aliases their writers go through."""

from __future__ import annotations

import re
from typing import Literal

from hybridsearch.errors import ConfigError
from hybridsearch.settings import IndexSettings

LogKind = Literal["query_log", "ingest_runs", "ingest_state"]
#: the log-type indices of a prefix, in the order they are created and checked
LOG_KINDS: tuple[LogKind, ...] = ("query_log", "ingest_runs", "ingest_state")
#: log indices whose writers go through a write alias with ``require_alias`` (see
#: :mod:`hybridsearch.index_spec.logs`); the ingest state is written by :mod:`hybridsearch.visibility` by name
ALIASED_LOGS: tuple[LogKind, ...] = ("query_log", "ingest_runs")

_VERSION = re.compile(r"-v([1-9][0-9]*)$")


def parse_version(index: str, alias: str | None = None) -> int | None:
    """N of ``<alias>-v<N>`` (of any ``...-v<N>`` when ``alias`` is None); None for every other name, including
    non-canonical ones such as ``-v01`` or ``-v0`` that ``IndexSettings.versioned`` never makes."""
    if alias is not None and not index.startswith(f"{alias}-v"):
        return None
    m = _VERSION.search(index)
    if m is None or (alias is not None and m.start() != len(alias)):
        return None
    return int(m.group(1))


def log_index_name(index: IndexSettings, kind: str) -> str:
    """The concrete name of log index ``kind`` (one of :data:`LOG_KINDS`). Raises ConfigError for another."""
    names = {"query_log": index.query_log, "ingest_runs": index.ingest_runs, "ingest_state": index.ingest_state}
    if kind not in names:
        raise ConfigError(f"no log index of kind {kind!r}: one of {', '.join(names)}")
    return names[kind]


def write_alias_name(index: IndexSettings, kind: str) -> str | None:
    """The write alias of log index ``kind`` (``<prefix>-write-query-log``), None for one written by name."""
    return f"{index.prefix}-write-{kind.replace('_', '-')}" if kind in ALIASED_LOGS else None
