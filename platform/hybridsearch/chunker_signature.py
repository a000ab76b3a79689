"""The name of a chunker and its parameters, in chunk ids and the index ``_meta``: a leaf, so that the index
package and ingestion both use it. Bump ``ALGORITHM_VERSION`` whenever the same settings would cut differently."""

from __future__ import annotations

from hybridsearch.settings import ChunkingSettings

ALGORITHM_VERSION = 1


def chunker_signature(cfg: ChunkingSettings) -> str:
    """The chunker and its parameters, e.g. ``paragraph-200-0.12-v1``: chunks cut another way get other ids."""
    parent = f"-{cfg.parent_max_tokens}" if cfg.strategy == "parent_child" else ""
    return f"{cfg.strategy}-{cfg.max_tokens}{parent}-{cfg.overlap:g}-v{ALGORITHM_VERSION}"
