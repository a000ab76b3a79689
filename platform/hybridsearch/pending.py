"""Chunks that are written but not yet visible: the ``pending_run`` field.

Elasticsearch has no multi-document transactions, so ingestion makes a document appear all at once
by staging it: every chunk of a new or changed document is written with ``pending_run`` set to the id
of the run writing it, and only when every chunk is acknowledged are they flipped visible (the field
set to null), chunk 0 last. Every reader filters with :func:`visible_only`, so a run stopped by
anything (SIGTERM, SIGKILL, a node restart) leaves at most invisible chunks, which the next run
reuses (:mod:`hybridsearch.ingest.commit`).

A chunk without the field (indices built before it existed, migrated copies) is visible.
"""

from __future__ import annotations

from typing import Any

PENDING_FIELD = "pending_run"


def visible_only() -> dict[str, Any]:
    """Filter clause keeping visible chunks only (also correct where the field is not mapped at all)."""
    return {"bool": {"must_not": [{"exists": {"field": PENDING_FIELD}}]}}


def pending_only() -> dict[str, Any]:
    """Filter clause keeping staged (not yet visible) chunks only."""
    return {"exists": {"field": PENDING_FIELD}}
