"""The agreement record: the lean query encoder's check against the ingestion encoder, made once, kept on disk.

Whether the lean ONNX query encoder (:mod:`.lean`) gives the ingestion encoder's vectors is measured on the probe
texts (:data:`.query.PROBES`) by the process that has the model loaded anyway (the first search without a record,
an ``hsp ingest``, ``hsp demo``) and written as a small JSON file beside the ONNX file in its cache folder
(``<HSP_ONNX_CACHE>/<model fingerprint>/query-agreement-<key>.json``, one per query prompt, quantisation and
ingestion backend). A later process reads it instead of loading torch to check again.

A record is only used when everything it was made with is still so (:meth:`Agreement.stale`): the model folder's
fingerprint, the ONNX file (size and modification time), the prompt, the quantisation, the ingestion backend, the
probe texts, the lean encoder's reading of the folder (:class:`.lean.LeanSpec`), the vector size, and the
onnxruntime and tokenizers versions. The record keeps the lowest cosine and largest difference; whether that is
good enough is decided when it is read (``MIN_COSINE``), so a record of disagreement is written too.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RECORD_VERSION = 1
#: the packages whose versions must be the record's for it to be used
CHECKED_PACKAGES = ("onnxruntime", "tokenizers")
#: recorded for people, not checked
NOTED_PACKAGES = ("torch", "sentence-transformers", "transformers")


def package_versions(names: tuple[str, ...] = CHECKED_PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (``"none"`` for a missing one), read without importing them."""
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "none"
    return found


def digest(texts: tuple[str, ...]) -> str:
    """A short hash of the probe texts (a record made on other texts is stale)."""
    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]


def record_path(cache_folder: Path, prompt: str, quantized: bool, reference: str) -> Path:
    """The record's file for this prompt, quantisation and ingestion backend in the export's cache folder."""
    key = hashlib.sha256(json.dumps([prompt, quantized, reference]).encode()).hexdigest()[:12]
    return cache_folder / f"query-agreement-{key}.json"


@dataclass(frozen=True)
class Agreement:
    """One record: what was compared (``reference``: the ingestion backend, torch or onnx; the lean encoder's
    ``lean`` spec and ONNX file), on what (``probes`` texts, their ``probes_digest``; ``prompt``), and the result."""

    min_cosine: float
    max_abs_diff: float
    probes: int
    probes_digest: str
    prompt: str
    quantized: bool
    reference: str
    model: str
    fingerprint: str
    onnx_file: str
    onnx_size: int
    onnx_mtime_ns: int
    dims: int
    lean: dict[str, Any]
    versions: dict[str, str]
    recorded_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    version: int = RECORD_VERSION

    @property
    def date(self) -> str:
        """The day it was recorded (``2026-12-02``)."""
        return self.recorded_at[:10]

    def stale(self, expected: Agreement) -> str | None:
        """Why this record does not describe ``expected`` (the same fields, measured now; its result, date and
        non-checked versions are ignored), or None."""
        if self.version != RECORD_VERSION:
            return f"record version {self.version}"
        mine, now = asdict(self), asdict(expected)
        for name in ("fingerprint", "onnx_file", "onnx_size", "onnx_mtime_ns", "prompt", "quantized", "reference",
                     "probes", "probes_digest", "lean", "dims"):
            if mine[name] != now[name]:
                return f"its {name} was {mine[name]!r}, now {now[name]!r}"
        for package in CHECKED_PACKAGES:
            if self.versions.get(package) != expected.versions.get(package):
                return f"made with {package} {self.versions.get(package)}, now {expected.versions.get(package)}"
        return None


def onnx_identity(path: Path, cache_folder: Path) -> tuple[str, int, int]:
    """``(file, size, modification time)`` of the ONNX file a record is about: ``file`` is its name when it lies in
    the record's ``cache_folder`` (an export), else its full path (a catalogue folder's own file). Raises OSError."""
    st = path.stat()
    name = path.name if path.parent == cache_folder else str(path)
    return name, st.st_size, st.st_mtime_ns


def read_record(path: Path) -> Agreement | None:
    """The record at ``path``, or None when there is none or it cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Agreement(**data)
    except (OSError, ValueError, TypeError):
        return None


def write_record(path: Path, record: Agreement) -> None:
    """Write ``record`` to ``path`` atomically (a reader sees the old file or the new one). Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".query-agreement-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(record), f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
