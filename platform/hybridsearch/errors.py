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
    │   ├── IndexMismatch      the index exists but was built for another model, dims or chunker
    │   └── AliasConflict      the read alias points at more than one index
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


class IndexMismatch(ClusterError):
    """The index exists but its ``_meta`` or mapping (vector dims, similarity, field types) does not fit
    the settings. ``differences`` holds ``(field, expected, actual)`` for each disagreement; ``actual`` is
    None for a field the index lacks."""

    exit_code = 4

    def __init__(self, message: str, *, index: str = "",
                 differences: tuple[tuple[str, object, object], ...] = ()) -> None:
        super().__init__(message)
        self.index = index
        self.differences = differences


class AliasConflict(ClusterError):
    """The read alias points at more than one index, so reads would mix them and writes go to one of them.
    ``alias`` and ``indices`` (sorted) say which."""

    exit_code = 4

    def __init__(self, message: str, *, alias: str = "", indices: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.alias = alias
        self.indices = indices


class ModelError(HybridSearchError):
    """A model cannot be loaded, or its output does not fit the index."""

    exit_code = 5


class IngestError(HybridSearchError):
    """A document or an ingest run could not be processed."""


class RerankerError(HybridSearchError):
    """The reranker failed, timed out or could not be reached."""


class RerankerModelError(ModelError, RerankerError):
    """The cross-encoder cannot be loaded: a ModelError for the CLI, a RerankerError for the query layer."""
