"""Chunking: pure functions that cut a document's text into chunks.

Placeholder until the ingestion issue lands; only the signature used in index ``_meta`` lives here.
"""

from __future__ import annotations

from hybridsearch.settings import ChunkingSettings

ALGORITHM_VERSION = 1


def chunker_signature(cfg: ChunkingSettings) -> str:
    """Short string naming the chunker and its parameters, e.g. ``paragraph-200-0.12-v1``.

    It goes into each chunk's ``_id`` and the index ``_meta``: chunks cut another way get other ids.
    """
    return f"{cfg.strategy}-{cfg.max_tokens}-{cfg.overlap:g}-v{ALGORITHM_VERSION}"
