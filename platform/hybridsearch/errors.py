"""Errors raised by hybridsearch.

Every error the package raises on purpose derives from :class:`HybridSearchError`, so a caller
can catch one type. Exceptions from the ``elasticsearch`` client are translated at the boundary
(:func:`hybridsearch.cluster.translate`) and never leak out of the public API::

    HybridSearchError
    ├── ConfigError            settings or arguments that cannot work (bad value, unknown field)
    │   └── QueryError         a query the caller must fix (empty text, k out of range, bad filter)
    ├── ClusterError           Elasticsearch answered with an error
    │   ├── ClusterUnavailable no node answers (connection refused, timeout)
    │   │   └── TlsFailure     the TLS handshake failed (untrusted certificate, not a TLS port)
    │   │       └── SchemeMismatch  http:// to a node that speaks TLS, or https:// to a plain HTTP one
    │   ├── AuthenticationFailed  HTTP 401: the credentials were refused or are missing
    │   ├── AccessDenied       HTTP 403: the credentials lack a privilege for an action
    │   ├── IndexNotFound      the index or alias does not exist
    │   ├── PermissionDenied   the credentials lack privileges an operation needs (checked before writing)
    │   ├── IndexMismatch      the index exists but was built for another model, dims or chunker
    │   ├── AliasConflict      the read alias points at more than one index
    │   └── IndexBlocked       a block refuses writes to the index (write block, disk flood stage, read-only)
    ├── ModelError             a model cannot be loaded or does not fit the index
    ├── IngestError            a document or run could not be ingested
    │   ├── IngestLocked       another live run holds the prefix's ingest lease (exit code 6)
    │   └── LeaseLost          this run's lease was taken over; it stopped writing
    └── RerankerError          the reranker failed, timed out or is unreachable
        └── RerankerModelError the cross-encoder cannot be loaded (also a ModelError: exit code 5)
"""

from __future__ import annotations

from hybridsearch.redact import redact_url


class HybridSearchError(Exception):
    """Base class of every error hybridsearch raises on purpose.

    ``problem`` says what went wrong and ``fix`` (when known) what to do about it; the message is
    ``"<problem>. <fix>"``, so programs (``hsp doctor``) read the two fields and never split the text."""

    exit_code = 1

    def __init__(self, problem: str = "", *, fix: str | None = None) -> None:
        super().__init__(f"{problem}. {fix}" if fix else problem)
        self.problem = problem
        self.fix = fix


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


class TlsFailure(ClusterUnavailable):
    """The TLS handshake with ``url`` failed; retrying cannot help.

    ``untrusted`` is True when the node's certificate could not be verified (the fix is
    ``HSP_ES__CA_CERTS``), False when the handshake failed otherwise (e.g. an https URL on a plain
    HTTP port). ``reason`` is the TLS library's own words.
    """

    def __init__(self, url: str, reason: str, *, untrusted: bool) -> None:
        url = redact_url(url)
        self.url, self.reason, self.untrusted = url, reason, untrusted
        if untrusted:
            message = (f"the TLS certificate of {url} is not trusted ({reason}): set HSP_ES__CA_CERTS to the CA "
                       "certificate file that signed it (HSP_ES__VERIFY_CERTS=false skips the check, for a "
                       "throw-away test node only)")
        else:
            message = (f"TLS handshake with {url} failed ({reason}): if the node serves plain HTTP use an "
                       "http:// URL in HSP_ES_URL; otherwise check HSP_ES__CA_CERTS and HSP_ES__VERIFY_CERTS")
        super().__init__(message)


class SchemeMismatch(TlsFailure):
    """The URL's scheme does not match what the node at ``node`` (``host:port``) speaks: ``speaks_tls`` True for
    an ``http://`` URL to a node that serves HTTPS (it drops the plain request), False for an ``https://`` URL to a
    node that serves plain HTTP. ``use`` is the URL to put in ``HSP_ES_URL`` (never with credentials)."""

    def __init__(self, node: str, *, speaks_tls: bool, use: str) -> None:
        self.node, self.speaks_tls, self.use = node, speaks_tls, redact_url(use)
        speaks = "TLS (https)" if speaks_tls else "plain HTTP, not TLS"
        said = "http://" if speaks_tls else "https://"
        self.url, self.reason, self.untrusted = self.use, f"the node speaks {speaks}", False
        ClusterUnavailable.__init__(self, f"the node at {node} speaks {speaks}, but HSP_ES_URL says {said}",
                                    fix=f"Use {self.use} in HSP_ES_URL" + (
                                        " (and HSP_ES__CA_CERTS for the CA that signed its certificate)"
                                        if speaks_tls else ""))


class AuthenticationFailed(ClusterError):
    """Elasticsearch refused the credentials, or wanted some (HTTP 401), for ``action``.

    ``reason`` is Elasticsearch's own reason (None for HEAD requests, which get no body).
    """

    status = 401

    def __init__(self, action: str, reason: str | None = None) -> None:
        self.action, self.reason = action, reason
        said = f": {reason}" if reason else ""
        super().__init__(f"authentication failed for {action} (HTTP 401{said}): check HSP_ES__USERNAME and "
                         "HSP_ES__PASSWORD, or HSP_ES__API_KEY")


class AccessDenied(ClusterError):
    """The credentials are valid but lack a privilege (HTTP 403).

    ``action`` is what hybridsearch was doing (``"get alias hsp-chunks"``); ``es_action``,
    ``resource`` and ``privileges`` are what Elasticsearch named, when it said (HEAD requests get
    no body, so they stay None / empty).
    """

    status = 403

    def __init__(self, action: str, *, es_action: str | None = None, resource: str | None = None,
                 privileges: tuple[str, ...] = (), reason: str | None = None) -> None:
        self.action, self.es_action, self.resource = action, es_action, resource
        self.privileges, self.reason = privileges, reason
        what = f"{action} ({es_action})" if es_action else action
        where = f" on {resource}" if resource else ""
        grant = (f"grant one of the privileges {', '.join(privileges)}" if privileges
                 else "grant the privilege")
        super().__init__(f"not allowed: {what}{where} (HTTP 403): the credentials in HSP_ES__USERNAME or "
                         f"HSP_ES__API_KEY lack the privilege; {grant} to their role")


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
    """The index exists but its ``_meta`` or mapping (vector dims, similarity, field types) does not fit
    the settings. ``differences`` holds ``(field, expected, actual)`` for each disagreement; ``actual`` is
    None for a field the index lacks."""

    exit_code = 4

    def __init__(self, message: str, *, index: str = "", fix: str | None = None,
                 differences: tuple[tuple[str, object, object], ...] = ()) -> None:
        super().__init__(message, fix=fix)
        self.index = index
        self.differences = differences


class AliasConflict(ClusterError):
    """The read alias points at more than one index, so reads would mix them and writes go to one of them.
    ``alias`` and ``indices`` (sorted) say which."""

    exit_code = 4

    def __init__(self, message: str, *, alias: str = "", indices: tuple[str, ...] = (),
                 fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.alias = alias
        self.indices = indices


class IndexBlocked(ClusterError):
    """A block refuses writes to ``index`` (``"the cluster"`` for a cluster-wide block): ``block`` names it
    (``index.blocks.write``, ``index.blocks.read_only_allow_delete (the disk flood-stage watermark)``...). The
    engine answers such a write with HTTP 403 or 429, which is not a matter of credentials; ``fix`` says how the
    block is lifted."""

    def __init__(self, problem: str, *, index: str, block: str, fix: str | None = None) -> None:
        super().__init__(problem, fix=fix)
        self.index = index
        self.block = block


class ModelError(HybridSearchError):
    """A model cannot be loaded, or its output does not fit the index."""

    exit_code = 5


class IngestError(HybridSearchError):
    """A document or an ingest run could not be processed."""


class IngestLocked(IngestError):
    """Another live run holds the prefix's ingest lease (:mod:`hybridsearch.ingest.lease`) for documents this run
    would write. ``holder`` is its run id; ``host``, ``pid``, ``shard`` (``i/N`` or None) and ``heartbeat_age_s``
    say where it runs and when it was last seen."""

    exit_code = 6

    def __init__(self, problem: str, *, fix: str | None = None, holder: str, host: str | None, pid: int | None,
                 shard: str | None, heartbeat_age_s: float) -> None:
        super().__init__(problem, fix=fix)
        self.holder, self.host, self.pid, self.shard = holder, host, pid, shard
        self.heartbeat_age_s = heartbeat_age_s


class LeaseLost(IngestError):
    """This run's ingest lease was taken over (its heartbeat stopped for longer than the lease lasts): the run
    stops writing at once; its unfinished documents stay hidden and the next run repairs them."""


class RerankerError(HybridSearchError):
    """The reranker failed, timed out or could not be reached."""


class RerankerModelError(ModelError, RerankerError):
    """The cross-encoder cannot be loaded: a ModelError for the CLI, a RerankerError for the query layer."""
