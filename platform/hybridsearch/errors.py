"""The error tree: everything the package raises on purpose derives from :class:`HybridSearchError`, which carries
``problem`` and ``fix`` as data (plus the fields of its kind) and renders its plain-text message in one place; exit
codes are :data:`hybridsearch.cli.main.EXIT_CODES`; docs/architecture.md ("Errors") draws the tree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hybridsearch.cluster_url import redact_url


class HybridSearchError(Exception):
    """Read ``problem`` and ``fix`` (None when nothing better can be said), never the text."""

    def __init__(self, problem: str = "", *, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix or None
        super().__init__(self.render(problem, self.fix))

    @staticmethod
    def render(problem: str, fix: str | None) -> str:
        """``"<problem>. <fix>"`` (no second stop after a sentence), or either alone."""
        if not fix:
            return problem
        if not problem:
            return fix
        return f"{problem} {fix}" if problem.rstrip().endswith((".", "!", "?")) else f"{problem}. {fix}"


class ConfigError(HybridSearchError):
    """Settings or arguments that cannot work."""


class QueryError(ConfigError):
    """A query the caller must fix: empty text, ``k`` out of range, a filter on an unknown field."""


class ClusterError(HybridSearchError):
    """The engine answered with an error."""


class ClusterUnavailable(ClusterError):
    """No node answers at the configured URL."""


class TlsFailure(ClusterUnavailable):
    """The TLS handshake with ``url`` failed; retrying cannot help. ``untrusted``: the certificate could not be
    verified (else e.g. an https URL on a plain HTTP port); ``reason``: the TLS library's own words."""

    def __init__(self, url: str, reason: str, *, untrusted: bool) -> None:
        url = redact_url(url)
        self.url, self.reason, self.untrusted = url, reason, untrusted
        if untrusted:
            super().__init__(f"the TLS certificate of {url} is not trusted ({reason})",
                             fix="Set HSP_ES__CA_CERTS to the CA certificate file that signed it "
                                 "(HSP_ES__VERIFY_CERTS=false skips the check, for a throw-away test node only)")
        else:
            super().__init__(f"TLS handshake with {url} failed ({reason})",
                             fix="If the node serves plain HTTP, use an http:// URL in HSP_ES_URL; otherwise check "
                                 "HSP_ES__CA_CERTS and HSP_ES__VERIFY_CERTS")


class SchemeMismatch(TlsFailure):
    """The URL's scheme is not what the node at ``node`` (``host:port``) speaks (``speaks_tls``); ``use`` is the
    URL to put in ``HSP_ES_URL`` (never with credentials)."""

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
    """The engine refused the credentials, or wanted some (HTTP 401), for ``action``; ``reason`` is its own (None
    for HEAD requests, which get no body)."""

    status = 401

    def __init__(self, action: str, reason: str | None = None) -> None:
        self.action, self.reason = action, reason
        said = f": {reason}" if reason else ""
        super().__init__(f"authentication failed for {action} (HTTP 401{said})",
                         fix="Set HSP_ES__USERNAME and HSP_ES__PASSWORD, or HSP_ES__API_KEY, to credentials this "
                             "cluster accepts")


class AccessDenied(ClusterError):
    """The credentials lack a privilege ``action`` (what hybridsearch was doing) needs. From an HTTP 403:
    ``es_action``, ``resource`` and ``privileges`` as the engine named them. From the check before a write (nothing
    written): ``missing`` maps each missing privilege to the names lacking it, ``user`` who asked."""

    status = 403

    def __init__(self, action: str, *, es_action: str | None = None, resource: str | None = None,
                 privileges: Sequence[str] = (), reason: str | None = None, user: str | None = None,
                 missing: Mapping[str, Sequence[str]] | None = None) -> None:
        self.action, self.es_action, self.reason, self.user = action, es_action, reason, user
        self.missing = {priv: list(names) for priv, names in (missing or {}).items()}
        if self.missing:
            privileges = tuple(sorted(self.missing))
            resource = ", ".join(sorted({n for names in self.missing.values() for n in names}))
        self.privileges, self.resource = tuple(privileges), resource
        if self.missing:
            who = f"user {user!r}" if user else "these credentials"
            super().__init__(f"{who} may not {action}: missing index privileges {', '.join(self.privileges)} on "
                             f"{resource}; nothing was written",
                             fix="Use credentials whose role grants them (docs/operations.md, 'Roles'), or set "
                                 "HSP_INDEX__PREFIX to a prefix these credentials own")
            return
        what = f"{action} ({es_action})" if es_action else action
        where = f" on {resource}" if resource else ""
        grant = (f"one of the privileges {', '.join(self.privileges)}" if self.privileges
                 else "the privilege it needs")
        super().__init__(f"not allowed: {what}{where} (HTTP 403)",
                         fix=f"The credentials in HSP_ES__USERNAME or HSP_ES__API_KEY lack the privilege: grant "
                             f"{grant} to their role (docs/operations.md lists what each command needs)")


class IndexNotFound(ClusterError):
    """The index or alias does not exist."""


class IndexMismatch(ClusterError):
    """The index's ``_meta`` or mapping does not fit the settings: ``differences`` holds ``(field, expected,
    actual)``, ``actual`` None for a field the index lacks."""

    def __init__(self, problem: str, *, index: str = "", fix: str | None = None,
                 differences: tuple[tuple[str, object, object], ...] = ()) -> None:
        super().__init__(problem, fix=fix)
        self.index, self.differences = index, differences


class AliasConflict(ClusterError):
    """The read alias ``alias`` points at more than one index (``indices``, sorted)."""

    def __init__(self, problem: str, *, alias: str = "", indices: tuple[str, ...] = (),
                 fix: str | None = None) -> None:
        super().__init__(problem, fix=fix)
        self.alias, self.indices = alias, indices


class IndexBlocked(ClusterError):
    """A block (``block``: ``index.blocks.write``...) refuses writes to ``index`` (``"the cluster"`` for a
    cluster-wide one); the engine answers such a write with HTTP 403 or 429. ``fix`` says how to lift it."""

    def __init__(self, problem: str, *, index: str, block: str, fix: str | None = None) -> None:
        super().__init__(problem, fix=fix)
        self.index, self.block = index, block


class ModelError(HybridSearchError):
    """A model cannot be loaded, or its output does not fit the index."""


class IngestError(HybridSearchError):
    """A document or an ingest run could not be processed."""


class IngestLocked(IngestError):
    """Another live run (``holder``, on ``host``/``pid``, ``shard`` ``i/N`` or None, seen ``heartbeat_age_s``
    ago) holds the prefix's ingest lease for documents this run would write."""

    def __init__(self, problem: str, *, fix: str | None = None, holder: str, host: str | None, pid: int | None,
                 shard: str | None, heartbeat_age_s: float) -> None:
        super().__init__(problem, fix=fix)
        self.holder, self.host, self.pid, self.shard = holder, host, pid, shard
        self.heartbeat_age_s = heartbeat_age_s


class LeaseLost(IngestError):
    """This run's ingest lease was taken over: it stops writing; its unfinished documents stay hidden."""


class RerankerError(HybridSearchError):
    """The reranker failed, timed out or could not be reached."""


class RerankerModelError(ModelError, RerankerError):
    """The cross-encoder cannot be loaded: a ModelError for the CLI, a RerankerError for the query layer."""
