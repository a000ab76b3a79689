"""An on-disk cache of vectors for embedding the same texts again (``hsp eval``, training): one SQLite file (WAL)
per model identity, float32 rows keyed by the hash of prompt and text. A broken cache warns once and is bypassed."""

from __future__ import annotations

import hashlib
import logging
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_incrementing

from hybridsearch.embedding.encoder import Embedder, OnnxEncoder
from hybridsearch.embedding.models import resolve_model, resolve_prompts
from hybridsearch.embedding.onnx import fingerprint
from hybridsearch.settings import EmbeddingSettings, ModelsSettings

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)
LOOKUP_CHUNK = 500  # keys per SELECT (SQLite builds before 3.32 allow 999 variables)
T = TypeVar("T")


def model_identity(cfg: EmbeddingSettings, models: ModelsSettings) -> str:
    """What decides a vector besides the text: model (a folder by its fingerprint), dims, backend, passage prompt."""
    where = resolve_model(cfg.model, models)
    if Path(where).is_dir():
        where += "@" + fingerprint(Path(where))
    quantized = cfg.backend != "torch" and cfg.onnx_quantized
    identity = f"{where}|dims={cfg.dims}|backend={cfg.backend}|quantized={quantized}"
    passage = resolve_prompts(cfg, models).passage
    return identity + (f"|passage_prompt={passage!r}" if passage else "")


def cache_key(text: str, prompt: str = "") -> bytes:
    """The row key of ``text`` after ``prompt``: never the same as another prompt's (or no prompt's) key."""
    data = text.encode("utf-8", "surrogatepass")
    if not prompt:
        return hashlib.sha256(data).digest()
    return hashlib.sha256(b"\x00prompt\x00" + prompt.encode("utf-8", "surrogatepass") + b"\x00" + data).digest()


class CachedEmbedder(Embedder):
    """``inner`` behind ``<folder or cache_dir/embeddings>/<model name>-<identity hash>.sqlite``; ``from_cache`` and
    ``embedded`` count its vectors."""

    def __init__(self, inner: Embedder, folder: str | Path | None = None) -> None:
        super().__init__(inner.cfg, inner.models)
        self.inner = inner
        self.identity = model_identity(inner.cfg, inner.models)
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(inner.cfg.model).name)[:60] or "model"
        digest = hashlib.sha256(self.identity.encode()).hexdigest()[:16]
        where = Path(folder).expanduser() if folder is not None else inner.models.cache_dir / "embeddings"
        self.path = where / f"{name}-{digest}.sqlite"
        self.from_cache = self.embedded = 0
        self._db: sqlite3.Connection | None = None
        self._broken = False

    @property
    def model(self) -> SentenceTransformer:
        return self.inner.model

    @property
    def onnx(self) -> OnnxEncoder | None:
        return self.inner.onnx

    def encode_query(self, text: str) -> np.ndarray:
        return self.inner.encode_query(text)

    def clear_cache(self) -> None:
        self.inner.clear_cache()

    def stats(self) -> dict[str, Any]:
        return {"path": str(self.path), "from_cache": self.from_cache, "embedded": self.embedded}

    def embed(self, texts: list[str], prompt: str, batch_size: int | None = None,
              max_tokens: int | None = None) -> np.ndarray:
        """The inner embedder's vectors, read from the cache where stored (a query window passes through)."""
        if max_tokens is not None:
            return self.inner.embed(texts, prompt, batch_size, max_tokens)
        if not texts:
            return np.zeros((0, self.cfg.dims), dtype=np.float32)
        keys = [cache_key(t, prompt) for t in texts]
        found = self._db_call(lambda db: self._lookup(db, keys)) or {}
        hits = sum(k in found for k in keys)
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in found}  # one per distinct text
        if missing:
            vectors = np.asarray(self.inner.embed(list(missing.values()), prompt, batch_size), dtype=np.float32)
            fresh = dict(zip(missing, vectors, strict=True))
            rows = [(k, np.asarray(v, dtype="<f4").tobytes()) for k, v in fresh.items()]
            self._db_call(lambda db: db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows))
            found.update(fresh)
        self.from_cache, self.embedded = self.from_cache + hits, self.embedded + len(texts) - hits
        return np.stack([found[k] for k in keys])

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _db_call(self, work: Callable[[sqlite3.Connection], T]) -> T | None:
        """``work`` in one transaction; on a database error warn once and embed without the cache from then on."""
        with self._lock:
            if self._broken:
                return None
            try:
                with self._conn() as db:
                    return work(db)
            except sqlite3.Error as exc:
                log.warning("embedding cache %s unusable (%s); embedding without it", self.path, exc)
                self._broken = True
                return None

    def _lookup(self, db: sqlite3.Connection, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        """The stored vectors of ``keys`` (rows of the wrong length count as missing)."""
        unique = list(dict.fromkeys(keys))
        out: dict[bytes, np.ndarray] = {}
        for i in range(0, len(unique), LOOKUP_CHUNK):
            part = unique[i:i + LOOKUP_CHUNK]
            rows = db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(part))})", part)
            out.update((k, np.frombuffer(v, dtype="<f4").astype(np.float32)) for k, v in rows
                       if len(v) == 4 * self.cfg.dims)
        return out

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            # switching a new file to WAL answers "locked" at once while another connection opens it
            locked = retry_if_exception(lambda e: isinstance(e, sqlite3.OperationalError) and "locked" in str(e))
            try:
                for attempt in Retrying(retry=locked, stop=stop_after_attempt(20), wait=wait_incrementing(0.05, 0.05),
                                        reraise=True):
                    with attempt:
                        db.execute("PRAGMA journal_mode=WAL")
                        db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) "
                                   "WITHOUT ROWID")
            except sqlite3.Error:
                db.close()
                raise
            self._db = db
        return self._db
