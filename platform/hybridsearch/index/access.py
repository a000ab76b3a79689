"""What the cluster lets the platform write: the privileges an operation needs, checked before its first write
(:func:`require_privileges`), and write blocks read as IndexBlocked with the fix (roles: docs/operations.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hybridsearch.engine import API_ERRORS, Request, Sender, error_type_of, status_of, translate
from hybridsearch.engine.errors import reason_of
from hybridsearch.errors import AccessDenied, ClusterError, HybridSearchError, IndexBlocked
from hybridsearch.settings import IndexSettings

# What each kind of operation needs on the names it touches.
CREATE = ("create_index", "manage", "view_index_metadata")  # indices with explicit mappings, alias, mapping updates
INGEST = (*CREATE, "read", "write")  # chunks (bulk, deletes), change detection, refresh, ingest-run documents
MOVE_ALIAS = ("manage", "view_index_metadata")  # rollback and swaps
DROP = ("delete_index", "view_index_metadata")
#: why privileges were not checked, in words for people (``hsp doctor`` prints them)
SECURITY_OFF = "security is off on this cluster: nothing to check"
NO_API = ("not checked ahead on OpenSearch (its security plugin has no _has_privileges); a write the role refuses "
          "still fails with HTTP 403, naming the action")


def chunk_names(index: IndexSettings) -> list[str]:
    """The read alias and every chunk index version: ``<prefix>-chunks*``."""
    return [f"{index.alias}*"]


def prefix_names(index: IndexSettings) -> list[str]:
    """Everything the platform writes for a prefix: chunk indices and alias, and the log indices."""
    return [*chunk_names(index), index.query_log, index.ingest_runs, index.ingest_state]


@dataclass(frozen=True)
class Privileges:
    """Who asked, whether the engine checked (``unchecked``: why not), what is missing where."""

    user: str | None
    enforced: bool
    missing: dict[str, list[str]] = field(default_factory=dict)  # privilege -> names lacking it
    unchecked: str | None = None

    def describe(self) -> str:
        """``create_index, write on team-b-chunks*, team-b-query-log``."""
        names = sorted({n for ns in self.missing.values() for n in ns})
        return f"{', '.join(sorted(self.missing))} on {', '.join(names)}"


def check_privileges(es: Sender, names: list[str], privileges: tuple[str, ...]) -> Privileges:
    """Which of ``privileges`` the credentials lack on ``names``. Raises ClusterError (401, 403, no answer)."""
    try:
        if not es.engine.has_privileges_api:
            return Privileges(user=None, enforced=False, unchecked=NO_API)
        answer = es.send(Request("POST", "/_security/user/_has_privileges",
                                 body={"index": [{"names": names, "privileges": list(privileges)}]}))
    except API_ERRORS as exc:
        if status_of(exc) in (401, 403) or status_of(exc) is None:
            raise translate(exc, "check privileges") from exc
        return Privileges(user=None, enforced=False, unchecked=SECURITY_OFF)  # the API answers an error
    missing: dict[str, list[str]] = {}
    for name, held in (answer.get("index") or {}).items():
        for privilege in (p for p, ok in held.items() if not ok):
            missing.setdefault(privilege, []).append(name)
    return Privileges(user=answer.get("username"), enforced=True, missing=missing)


def require_privileges(es: Sender, names: list[str], privileges: tuple[str, ...], doing: str) -> Privileges:
    """Raise AccessDenied (one line, ``missing`` set) unless the credentials hold every privilege on every name."""
    got = check_privileges(es, names, privileges)
    if got.missing:
        raise AccessDenied(doing, user=got.user, missing=got.missing)
    return got


_BLOCKED_INDEX = re.compile(r"index \[([^\]]+)\] blocked by")
FLOOD_STAGE = "index.blocks.read_only_allow_delete"
#: the index settings that refuse writes when true
WRITE_BLOCKS = ("index.blocks.write", "index.blocks.read_only", FLOOD_STAGE)


def unblock_fix(index: str, block: str) -> str:
    """How block ``block`` (``index.blocks.write``, ``cluster.blocks.read_only``...) on ``index`` is lifted."""
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
    """IndexBlocked, with its fix, for a ``cluster_block_exception`` of ``reason`` (``index [x] blocked by: ...``)."""
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
    """The typed error of one failed bulk item (``{"error": ..., "status": ...}``)."""
    err = item.get("error")
    if bulk_error_type(err) == "cluster_block_exception":
        return blocked(_reason(err), index, doing)
    return ClusterError(f"{doing} failed with HTTP {item.get('status')}: {bulk_error_type(err) or 'error'}: "
                        f"{_reason(err)}")


def translate_write(exc: Exception, index: str, doing: str) -> HybridSearchError:
    """``engine.translate``, a block read as IndexBlocked."""
    if error_type_of(exc) == "cluster_block_exception":
        return blocked(reason_of(exc).removeprefix("cluster_block_exception: "), index, doing)
    return translate(exc, doing)


@contextmanager
def write_errors(index: str, doing: str) -> Iterator[None]:
    """``engine_errors`` for requests that change ``index``, a block read as IndexBlocked."""
    try:
        yield
    except API_ERRORS as exc:
        raise translate_write(exc, index, doing) from exc
