"""Privilege checks before writing: nothing is created or changed before the platform knows it may.

An operation that writes asks Elasticsearch first whether the credentials hold every index privilege
it needs on the names it will touch (``POST /_security/user/_has_privileges``, which any authenticated
user may call, API keys included) and refuses with :class:`~hybridsearch.errors.AccessDenied` (``missing``
set) — one line naming the user, the missing privileges and the index patterns — before its first write.
On a cluster with security off that API answers with an error: there is nothing to check and the operation
goes ahead.

Only index privileges on the prefix are ever needed (plus cluster ``monitor`` for ``hsp doctor``):
indices are created with explicit settings and mappings, so no index template and no cluster-level
write privilege is involved. ``ops/security/roles.yml`` holds the roles, ``docs/operations.md`` explains them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from hybridsearch.engine import API_ERRORS, EngineClient, engine_errors, status_of
from hybridsearch.errors import AccessDenied
from hybridsearch.settings import Settings

log = logging.getLogger(__name__)

# What each kind of operation needs on the names it touches.
CREATE = ("create_index", "manage", "view_index_metadata")  # indices with explicit mappings, alias, mapping updates
INGEST = (*CREATE, "read", "write")  # chunks (bulk, deletes), change detection, refresh, ingest-run documents
MOVE_ALIAS = ("manage", "view_index_metadata")  # rollback and swaps
DROP = ("delete_index", "view_index_metadata")


def chunk_names(settings: Settings) -> list[str]:
    """The read alias and every chunk index version: ``<prefix>-chunks*``."""
    return [f"{settings.index.alias}*"]


def prefix_names(settings: Settings) -> list[str]:
    """Everything the platform writes for a prefix: chunk indices and alias, the query log, ingest runs and
    the ingest state."""
    return [*chunk_names(settings), settings.index.query_log, settings.index.ingest_runs, settings.index.ingest_state]


@dataclass(frozen=True)
class Privileges:
    """The answer of ``_has_privileges``: who asked, whether security is on, what is missing where."""

    user: str | None
    enforced: bool
    missing: dict[str, list[str]] = field(default_factory=dict)  # privilege -> names lacking it

    @property
    def ok(self) -> bool:
        return not self.missing

    def describe(self) -> str:
        """``create_index, write on team-b-chunks*, team-b-query-log``."""
        names = sorted({n for ns in self.missing.values() for n in ns})
        return f"{', '.join(sorted(self.missing))} on {', '.join(names)}"


def check_privileges(es: EngineClient, names: list[str], privileges: tuple[str, ...]) -> Privileges:
    """Which of ``privileges`` the credentials lack on ``names``. Raises ClusterError when authentication
    fails or the cluster cannot be reached; a cluster without security answers ``enforced=False``."""
    with engine_errors("check privileges"):
        kind = es.engine.kind
    if kind == "opensearch":
        # Its security plugin (absent from many clusters) has another API; a refused write still fails with 403.
        log.debug("privileges not checked before writing: OpenSearch has no _has_privileges")
        return Privileges(user=None, enforced=False)
    with engine_errors("check privileges"):
        try:
            body = es.security.has_privileges(index=[{"names": names, "privileges": list(privileges)}])
        except API_ERRORS as exc:
            if status_of(exc) in (401, 403) or status_of(exc) is None:
                raise
            # Security off, or OpenSearch (no such API): an error answer instead, nothing to enforce.
            log.debug("privileges not checked (HTTP %s): security looks off", status_of(exc))
            return Privileges(user=None, enforced=False)
    missing: dict[str, list[str]] = {}
    for name, privs in body.get("index", {}).items():
        for priv, granted in privs.items():
            if not granted:
                missing.setdefault(priv, []).append(name)
    return Privileges(user=body.get("username"), enforced=True, missing=missing)


def require_privileges(es: EngineClient, names: list[str], privileges: tuple[str, ...], doing: str) -> Privileges:
    """Raise AccessDenied (one line, ``missing`` set) unless the credentials hold every privilege on every name."""
    got = check_privileges(es, names, privileges)
    if not got.ok:
        raise AccessDenied(doing, user=got.user, missing=got.missing)
    return got
