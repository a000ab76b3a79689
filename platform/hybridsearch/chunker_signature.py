"""The name of a chunker and its parameters (``paragraph-200-0.12-v1``), in chunk ids and the index ``_meta``.

A leaf module: the index mapping (:mod:`hybridsearch.index.spec`) and ingestion both need the signature,
and neither should import the other for it. Bump ``ALGORITHM_VERSION`` whenever the same settings
would cut text differently.
"""

from __future__ import annotations

from hybridsearch.settings import ChunkingSettings

ALGORITHM_VERSION = 1


def chunker_signature(cfg: ChunkingSettings) -> str:
    """Short string naming the chunker and its parameters, e.g. ``paragraph-200-0.12-v1``.

    It goes into each chunk's ``_id`` and the index ``_meta``: chunks cut another way get other ids.
    """
    sig = f"{cfg.strategy}-{cfg.max_tokens}-{cfg.overlap:g}-v{ALGORITHM_VERSION}"
    if cfg.strategy == "parent_child":
        sig = f"{cfg.strategy}-{cfg.max_tokens}-{cfg.parent_max_tokens}-{cfg.overlap:g}-v{ALGORITHM_VERSION}"
    return sig
