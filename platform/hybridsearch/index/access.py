"""What the cluster lets the platform write: privileges checked before writing, and write blocks read as blocks.

**Privileges.** Nothing is created or changed before the platform knows it may.

An operation that writes asks the engine first whether the credentials hold every index privilege it needs on
the names it will touch (:func:`~hybridsearch.engine.index_privileges`: Elasticsearch's
``_has_privileges``, which any authenticated user may call, API keys included) and refuses with
:class:`~hybridsearch.errors.AccessDenied` (``missing`` set) — one line naming the user, the missing privileges
and the index patterns — before its first write. Where the engine cannot say (security off, or OpenSearch, whose
security plugin has no such API) there is nothing to check and the operation goes ahead; a refused write still
fails with HTTP 403.

Only index privileges on the prefix are ever needed (plus cluster ``monitor`` for ``hsp doctor``):
indices are created with explicit settings and mappings, so no index template and no cluster-level
write privilege is involved. ``ops/security/roles.yml`` holds the roles, ``docs/operations.md`` explains them.

**Blocks.** The engine answers a write block (``index.blocks.write``, the disk flood stage, a read-only cluster)
with HTTP 403, which would otherwise read as missing privileges; :func:`write_errors` and :func:`item_error` (one
failed bulk item) read it as :class:`~hybridsearch.errors.IndexBlocked`, naming the index, the block and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hybridsearch.engine import API_ERRORS, Sender, engine_errors, error_type_of, index_privileges, translate
from hybridsearch.errors import AccessDenied, ClusterError, HybridSearchError, IndexBlocked
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


def check_privileges(es: Sender, names: list[str], privileges: tuple[str, ...]) -> Privileges:
    """Which of ``privileges`` the credentials lack on ``names``. Raises ClusterError when authentication
    fails or the cluster cannot be reached; where the engine cannot say, ``enforced=False``."""
    with engine_errors("check privileges"):
        answer = index_privileges(es, names, list(privileges))
    if not answer.checked:
        return Privileges(user=None, enforced=False, unchecked=answer.unchecked_because)
    return Privileges(user=answer.user, enforced=True, missing=answer.missing)


def require_privileges(es: Sender, names: list[str], privileges: tuple[str, ...], doing: str) -> Privileges:
    """Raise AccessDenied (one line, ``missing`` set) unless the credentials hold every privilege on every name."""
    got = check_privileges(es, names, privileges)
    if not got.ok:
        raise AccessDenied(doing, user=got.user, missing=got.missing)
    return got


# ------------------------------------------------------------------------------------------------------ blocks

_BLOCKED_INDEX = re.compile(r"index \[([^\]]+)\] blocked by")
FLOOD_STAGE = "index.blocks.read_only_allow_delete"
#: the index settings that refuse writes when true
WRITE_BLOCKS = ("index.blocks.write", "index.blocks.read_only", FLOOD_STAGE)


def unblock_fix(index: str, block: str) -> str:
    """How block ``block`` (an index setting such as ``index.blocks.write``, or ``cluster.blocks.read_only``) on
    ``index`` is lifted."""
    if block.startswith(FLOOD_STAGE):
        return ("free disk space on the data nodes (`hsp doctor` shows their use): the engine lifts the block once "
                f"use drops below the high watermark; or, after freeing space, PUT {index}/_settings "
                f"{{\"{FLOOD_STAGE}\": null}}")
    if block.startswith("cluster."):
        return ("a cluster administrator lifts it: PUT _cluster/settings {\"persistent\": "
                "{\"cluster.blocks.read_only\": null, \"cluster.blocks.read_only_allow_delete\": null}}")
    setting = block.split(" ", 1)[0]
    return (f"PUT {index}/_settings {{\"{setting}\": null}} (first ask whoever set it: an operator, or a resize, "
            "clone or snapshot step)")


def blocked(reason: str, index: str, doing: str) -> IndexBlocked:
    """IndexBlocked for a ``cluster_block_exception`` whose engine ``reason`` is e.g. ``index [x] blocked by:
    [FORBIDDEN/8/index write (api)];``, with the fix for that block."""
    m = _BLOCKED_INDEX.search(reason)
    index = m.group(1) if m else index
    low = reason.lower()
    if "cluster read-only" in low:
        block, index = "cluster.blocks.read_only", "the cluster"
    elif "flood-stage" in low or "allow-delete" in low or "allow delete" in low:
        block = f"{FLOOD_STAGE} (the disk flood-stage watermark)"
    elif "read-only" in low or "read_only" in low:
        block = "index.blocks.read_only"
    else:  # "index write (api)" and anything newer
        block = "index.blocks.write"
    return IndexBlocked(f"{doing}: {index} refuses writes, it is blocked by {block} ({reason.strip(' ;')})",
                        fix=unblock_fix(index, block), index=index, block=block)


def _reason(err: Any) -> str:
    if isinstance(err, Mapping):
        root = (err.get("root_cause") or [err])[0]
        return str(root.get("reason") or err.get("reason") or err)
    return str(err)


def bulk_error_type(err: Any) -> str | None:
    """The ``type`` of a bulk item's ``error``; None when it has none."""
    return str(err.get("type")) if isinstance(err, Mapping) and err.get("type") else None


def item_error(item: Mapping[str, Any], index: str, doing: str) -> HybridSearchError:
    """The error of one failed bulk item (``{"error": ..., "status": ...}``; ``exception`` when the whole request
    failed), as a typed error: a block as IndexBlocked, anything else as the engine's error would be."""
    exc = item.get("exception")
    if isinstance(exc, Exception):
        return translate_write(exc, index, doing)
    err = item.get("error")
    if bulk_error_type(err) == "cluster_block_exception":
        return blocked(_reason(err), index, doing)
    return ClusterError(f"{doing} failed with HTTP {item.get('status')}: {bulk_error_type(err) or 'error'}: "
                        f"{_reason(err)}")


def translate_write(exc: Exception, index: str, doing: str) -> HybridSearchError:
    """``engine.translate`` that reads a block as a block: the engine answers a write block with HTTP 403, which
    would otherwise read as missing privileges."""
    if error_type_of(exc) == "cluster_block_exception":
        from hybridsearch.engine.errors import reason_of

        return blocked(reason_of(exc).removeprefix("cluster_block_exception: "), index, doing)
    return translate(exc, doing)


@contextmanager
def write_errors(index: str, doing: str) -> Iterator[None]:
    """``engine_errors`` for requests that change ``index``: a block becomes IndexBlocked."""
    try:
        yield
    except API_ERRORS as exc:
        raise translate_write(exc, index, doing) from exc

