"""An on-disk cache of passage vectors for building the same collection again (``hsp eval``): one SQLite file (WAL)
per model identity, keyed by the hash of prompt and text, float32 rows. Hits never load the model; single queries
pass through uncached; a broken cache warns once and is bypassed.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from hybridsearch.embedding.encoder import Embedder, TextTokenizer
from hybridsearch.embedding.models import Prompts, resolve_model, resolve_prompts
from hybridsearch.embedding.onnx import fingerprint
from hybridsearch.settings import EmbeddingSettings, ModelsSettings

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)
LOOKUP_CHUNK = 500  # keys per SELECT (SQLite builds before 3.32 allow 999 variables)
T = TypeVar("T")


def model_identity(cfg: EmbeddingSettings, models: ModelsSettings, prompts: Prompts | None = None) -> str:
    """What decides a text's vector besides the text: the model (a folder by its :func:`.onnx.fingerprint`), dims,
    backend and the passage prompt (named only where there is one)."""
    where = resolve_model(cfg.model, models)
    if Path(where).is_dir():
        where += "@" + fingerprint(Path(where))
    quantized = cfg.backend != "torch" and cfg.onnx_quantized
    identity = f"{where}|dims={cfg.dims}|backend={cfg.backend}|quantized={quantized}"
    passage = (prompts if prompts is not None else resolve_prompts(cfg, models)).passage
    return identity + (f"|passage_prompt={passage!r}" if passage else "")


def cache_key(text: str, prompt: str = "") -> bytes:
    """The row key of ``text`` embedded after ``prompt``: ``sha256(text)`` without a prompt, else the hash of the
    prompt and the text apart, so it never equals a text's key without a prompt."""
    data = text.encode("utf-8", "surrogatepass")
    if not prompt:
        return hashlib.sha256(data).digest()
    return hashlib.sha256(b"\x00prompt\x00" + prompt.encode("utf-8", "surrogatepass") + b"\x00" + data).digest()


class CachedEmbedder(Embedder):
    """``inner`` with an on-disk cache in front of :meth:`encode` and :meth:`encode_queries`, in
    ``<folder>/<model name>-<hash of its identity>.sqlite`` (``folder``: ``<cache_dir>/embeddings`` unless given);
    ``from_cache`` and ``embedded`` count their vectors."""

    def __init__(self, inner: Embedder, folder: str | Path | None = None) -> None:
        super().__init__(inner.cfg, inner.models)
        self.inner = inner
        self.identity = model_identity(inner.cfg, inner.models, inner.prompts)
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(inner.cfg.model).name)[:60] or "model"
        digest = hashlib.sha256(self.identity.encode()).hexdigest()[:16]
        where = Path(folder).expanduser() if folder is not None else inner.models.cache_dir / "embeddings"
        self.path = where / f"{name}-{digest}.sqlite"
        self.from_cache = self.embedded = 0
        self._db: sqlite3.Connection | None = None
        self._db_lock = threading.Lock()
        self._broken = False

    @property
    def model(self) -> SentenceTransformer:
        return self.inner.model

    @property
    def prompts(self) -> Prompts:
        return self.inner.prompts

    @property
    def max_seq_length(self) -> int:
        return self.inner.max_seq_length

    def tokenizer(self) -> TextTokenizer:
        return self.inner.tokenizer()

    def encode_query(self, text: str) -> np.ndarray:
        return self.inner.encode_query(text)

    def clear_cache(self) -> None:
        self.inner.clear_cache()

    def stats(self) -> dict[str, Any]:
        return {"path": str(self.path), "from_cache": self.from_cache, "embedded": self.embedded}

    def encode(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        return self._through(texts, self.prompts.passage, self.inner.encode, batch_size)

    def encode_queries(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        return self._through(texts, self.prompts.query, self.inner.encode_queries, batch_size)

    def _through(self, texts: list[str], prompt: str, embed: Callable[[list[str], int | None], np.ndarray],
                 batch_size: int | None) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.cfg.dims), dtype=np.float32)
        keys = [cache_key(t, prompt) for t in texts]
        found = self._db_call(lambda db: self._lookup(db, keys)) or {}
        hits = sum(k in found for k in keys)
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in found}  # one per distinct text
        if missing:
            fresh = dict(zip(missing, np.asarray(embed(list(missing.values()), batch_size), dtype=np.float32),
                             strict=True))
            rows = [(k, np.asarray(v, dtype="<f4").tobytes()) for k, v in fresh.items()]
            self._db_call(lambda db: db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows))
            found.update(fresh)
        self.from_cache, self.embedded = self.from_cache + hits, self.embedded + len(texts) - hits
        return np.stack([found[k] for k in keys])

    def close(self) -> None:
        with self._db_lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _db_call(self, work: Callable[[sqlite3.Connection], T]) -> T | None:
        """``work`` in one transaction; on a database error warn once and embed without the cache from then on."""
        with self._db_lock:
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
            for attempt in range(20):
                try:  # switching a new file to WAL answers "locked" at once while another connection opens it
                    db.execute("PRAGMA journal_mode=WAL")
                    with db:
                        db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) "
                                   "WITHOUT ROWID")
                        db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
                        db.execute("INSERT OR IGNORE INTO meta VALUES ('model', ?)", (self.identity,))
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or attempt == 19:
                        db.close()
                        raise
                    time.sleep(0.05 * (attempt + 1))
            self._db = db
        return self._db
