"""Reading the items of an ``_msearch`` answer: a failed item's reason, our error for it, the indices that answered.
Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hybridsearch.errors import ClusterError, IndexNotFound


def item_failure(resp: Mapping[str, Any]) -> str | None:
    """The engine's reason for one failed ``_msearch`` item (``type: reason``), or None."""
    err = resp.get("error")
    if not err:
        return None
    root = (err.get("root_cause") or [err])[0] if isinstance(err, dict) else {"reason": str(err)}
    return f"{root.get('type', 'error')}: {root.get('reason')}"


def check_response(resp: Mapping[str, Any], index: str) -> None:
    """Raise our error type for one failed ``_msearch`` item."""
    reason = item_failure(resp)
    if reason is None:
        return
    status = int(resp.get("status", 500))
    if status == 404:
        raise IndexNotFound(f"index or alias {index} does not exist ({reason}): run `hsp ingest` first")
    raise ClusterError(f"search on {index} failed with HTTP {status}: {reason}")


def answered_by(responses: Sequence[Mapping[str, Any]]) -> set[str]:
    """The concrete indices whose chunks the ``_msearch`` answers hold (each hit's ``_index``)."""
    return {hit["_index"] for r in responses for hit in r.get("hits", {}).get("hits", []) if "_index" in hit}
