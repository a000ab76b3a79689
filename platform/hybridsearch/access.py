"""Privilege checks before writing: nothing is created or changed before the platform knows it may.

An operation that writes asks the engine first whether the credentials hold every index privilege it needs on
the names it will touch (:meth:`~hybridsearch.engine.EngineClient.index_privileges`: Elasticsearch's
``_has_privileges``, which any authenticated user may call, API keys included) and refuses with
:class:`~hybridsearch.errors.AccessDenied` (``missing`` set) — one line naming the user, the missing privileges
and the index patterns — before its first write. Where the engine cannot say (security off, or OpenSearch, whose
security plugin has no such API) there is nothing to check and the operation goes ahead; a refused write still
fails with HTTP 403.

Only index privileges on the prefix are ever needed (plus cluster ``monitor`` for ``hsp doctor``):
indices are created with explicit settings and mappings, so no index template and no cluster-level
write privilege is involved. ``ops/security/roles.yml`` holds the roles, ``docs/operations.md`` explains them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hybridsearch.engine import EngineClient, engine_errors
from hybridsearch.errors import AccessDenied
from hybridsearch.settings import IndexSettings

# What each kind of operation needs on the names it touches.
CREATE = ("create_index", "manage", "view_index_metadata")  # indices with explicit mappings, alias, mapping updates
INGEST = (*CREATE, "read", "write")  # chunks (bulk, deletes), change detection, refresh, ingest-run documents
MOVE_ALIAS = ("manage", "view_index_metadata")  # rollback and swaps
DROP = ("delete_index", "view_index_metadata")


def chunk_names(index: IndexSettings) -> list[str]:
    """The read alias and every chunk index version: ``<prefix>-chunks*``."""
    return [f"{index.alias}*"]


def prefix_names(index: IndexSettings) -> list[str]:
    """Everything the platform writes for a prefix: chunk indices and alias, the query log, ingest runs and
    the ingest state."""
    return [*chunk_names(index), index.query_log, index.ingest_runs, index.ingest_state]


@dataclass(frozen=True)
class Privileges:
    """What the engine said: who asked, whether it checked (``unchecked``: why not, in words for people), what is
    missing where."""

    user: str | None
    enforced: bool
    missing: dict[str, list[str]] = field(default_factory=dict)  # privilege -> names lacking it
    unchecked: str | None = None

    @property
    def ok(self) -> bool:
        return not self.missing

    def describe(self) -> str:
        """``create_index, write on team-b-chunks*, team-b-query-log``."""
        names = sorted({n for ns in self.missing.values() for n in ns})
        return f"{', '.join(sorted(self.missing))} on {', '.join(names)}"


def check_privileges(es: EngineClient, names: list[str], privileges: tuple[str, ...]) -> Privileges:
    """Which of ``privileges`` the credentials lack on ``names``. Raises ClusterError when authentication
    fails or the cluster cannot be reached; where the engine cannot say, ``enforced=False``."""
    with engine_errors("check privileges"):
        answer = es.index_privileges(names, list(privileges))
    if not answer.checked:
        return Privileges(user=None, enforced=False, unchecked=answer.unchecked_because)
    return Privileges(user=answer.user, enforced=True, missing=answer.missing())


def require_privileges(es: EngineClient, names: list[str], privileges: tuple[str, ...], doing: str) -> Privileges:
    """Raise AccessDenied (one line, ``missing`` set) unless the credentials hold every privilege on every name."""
    got = check_privileges(es, names, privileges)
    if not got.ok:
        raise AccessDenied(doing, user=got.user, missing=got.missing)
    return got
