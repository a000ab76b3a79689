"""Errors raised by hybridsearch.

Every error the package raises on purpose derives from :class:`HybridSearchError`, so a caller
can catch one type. Exceptions from the ``elasticsearch`` client are translated at the boundary
(:func:`hybridsearch.cluster.translate`) and never leak out of the public API::

    HybridSearchError
    ├── ConfigError            settings or arguments that cannot work (bad value, unknown field)
    │   └── QueryError         a query the caller must fix (empty text, k out of range, bad filter)
    ├── ClusterError           Elasticsearch answered with an error
    │   ├── ClusterUnavailable no node answers (connection refused, timeout)
    │   ├── IndexNotFound      the index or alias does not exist
    │   ├── PermissionDenied   the credentials lack privileges an operation needs (checked before writing)
    │   └── IndexMismatch      the index exists but was built for another model, dims or chunker
    ├── ModelError             a model cannot be loaded or does not fit the index
    ├── IngestError            a document or run could not be ingested
    └── RerankerError          the reranker failed, timed out or is unreachable
        └── RerankerModelError the cross-encoder cannot be loaded (also a ModelError: exit code 5)
"""

from __future__ import annotations


class HybridSearchError(Exception):
    """Base class of every error hybridsearch raises on purpose."""

    exit_code = 1


class ConfigError(HybridSearchError):
    """Settings or arguments that cannot work."""

    exit_code = 2


class QueryError(ConfigError):
    """A query the caller must fix: empty text, ``k`` out of range, a filter on an unknown field."""


class ClusterError(HybridSearchError):
    """Elasticsearch answered with an error."""

    exit_code = 3


class ClusterUnavailable(ClusterError):
    """No Elasticsearch node answers at the configured URL."""


class IndexNotFound(ClusterError):
    """The index or alias does not exist."""


class PermissionDenied(ClusterError):
    """The credentials lack index privileges an operation needs; it was refused before writing anything.

    ``missing`` maps each missing privilege to the index names or patterns it is missing on; ``user`` is
    the user Elasticsearch authenticated (None when unknown).
    """

    def __init__(self, message: str, *, user: str | None = None,
                 missing: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.user = user
        self.missing = dict(missing or {})


class IndexMismatch(ClusterError):
    """The index exists but records another embedding model, dims or chunker in its ``_meta``."""

    exit_code = 4


class ModelError(HybridSearchError):
    """A model cannot be loaded, or its output does not fit the index."""

    exit_code = 5


class IngestError(HybridSearchError):
    """A document or an ingest run could not be processed."""


class RerankerError(HybridSearchError):
    """The reranker failed, timed out or could not be reached."""


class RerankerModelError(ModelError, RerankerError):
    """The cross-encoder cannot be loaded: a ModelError for the CLI, a RerankerError for the query layer."""
