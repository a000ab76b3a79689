"""The exit code of every error ``hsp`` reports: one table, here, and nowhere else.

=====  ==========================================================================================
code   meaning
=====  ==========================================================================================
0      ok
1      any other hybridsearch error (an ingest run that failed, the reranker); a failed quality gate
       (``hsp eval --baseline``); ``hsp doctor`` with a FAIL
2      usage, settings or input that cannot work: ``ConfigError``, ``QueryError`` (and argparse)
3      the cluster: ``ClusterError`` and every kind of it not listed below (unreachable, TLS,
       credentials refused, privileges missing, index missing, index blocked)
4      the index does not fit: ``IndexMismatch``, ``AliasConflict``
5      a model: ``ModelError``, ``RerankerModelError``
6      another ingest run holds the prefix's lease: ``IngestLocked``
130    interrupted (Ctrl-C)
=====  ==========================================================================================

An error takes the code of the first class of its MRO found in :data:`EXIT_CODES`, so a new subclass
inherits its parent's code unless it is listed. docs/operations.md ("Exit codes") shows the same table.
"""

from __future__ import annotations

from hybridsearch.errors import (
    AliasConflict,
    ClusterError,
    ConfigError,
    HybridSearchError,
    IndexMismatch,
    IngestLocked,
    ModelError,
)

OK = 0
ERROR = 1
USAGE = 2
CLUSTER = 3
INDEX_MISMATCH = 4
MODEL = 5
LOCKED = 6
INTERRUPTED = 130

#: error class -> exit code; a class not listed takes the code of its nearest listed base
EXIT_CODES: dict[type[HybridSearchError], int] = {
    HybridSearchError: ERROR,
    ConfigError: USAGE,
    ClusterError: CLUSTER,
    IndexMismatch: INDEX_MISMATCH,
    AliasConflict: INDEX_MISMATCH,
    ModelError: MODEL,
    IngestLocked: LOCKED,
}


def exit_code(error: HybridSearchError | type[HybridSearchError]) -> int:
    """The exit code of ``error`` (an instance or a class)."""
    cls = error if isinstance(error, type) else type(error)
    return next(EXIT_CODES[c] for c in cls.__mro__ if c in EXIT_CODES)
