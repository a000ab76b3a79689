"""Write errors read as what they are: the engine answers a write block (``index.blocks.write``, the disk flood
stage, a read-only cluster) with HTTP 403, which would otherwise read as missing privileges; here it becomes
:class:`~hybridsearch.errors.IndexBlocked`, naming the index, the block and the fix (:func:`write_errors`,
:func:`item_error` for one failed bulk item)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from hybridsearch.engine import API_ERRORS, error_type_of, translate
from hybridsearch.errors import ClusterError, HybridSearchError, IndexBlocked

_BLOCKED_INDEX = re.compile(r"index \[([^\]]+)\] blocked by")


FLOOD_STAGE = "index.blocks.read_only_allow_delete"


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

