"""All configuration in one pydantic-settings tree: keyword arguments, then ``HSP_`` environment variables with
``__`` between nested names (``HSP_INDEX__PREFIX=team-a``), then ``.env``, then the defaults below; docs/operations.md
("Settings") says what each one does. Invalid values raise ConfigError naming the variable (:func:`load_settings`)."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hybridsearch.cluster_url import Node, parse_nodes
from hybridsearch.errors import ConfigError

ENV_PREFIX = "HSP_"
DEFAULT_EMBEDDING_MODEL = "bge-small-en-v1.5"


class ClusterSettings(BaseModel):
    """How to reach the cluster, Elasticsearch or OpenSearch (``HSP_ES__*``)."""

    url: str = "http://127.0.0.1:9200"
    engine: Literal["auto", "elasticsearch", "opensearch"] = "auto"
    api_key: SecretStr | None = None
    username: str | None = None
    password: SecretStr | None = None
    ca_certs: Path | None = None
    verify_certs: bool = True
    request_timeout: float = Field(30.0, gt=0)
    max_retries: int = Field(3, ge=0)

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes ``url`` names, each with the credentials its URL carried (kept apart from its address)."""
        return parse_nodes(self.url)

    @field_validator("ca_certs")
    @classmethod
    def _check_ca_certs(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_file():
            raise ValueError(f"CA certificate file {str(v)!r} does not exist (or is not a file)")
        return v

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        parse_nodes(v)  # ValueError: one line, credentials masked
        return v


class IndexSettings(BaseModel):
    """Index names, shape and vector options (``HSP_INDEX__*``)."""

    prefix: str = Field("hsp", pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    version: int = Field(1, ge=1)
    shards: int = Field(1, ge=1)
    replicas: int = Field(0, ge=0)
    refresh_interval: str = "1s"
    analyzer: str = "auto"
    similarity: Literal["cosine", "dot_product"] = "cosine"
    index_options: Literal["hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw", "flat", "int8_flat"] = "int8_hnsw"
    hnsw_m: int = Field(16, ge=2, le=512)
    ef_construction: int = Field(100, ge=10, le=3200)
    tenant: str | None = None
    bm25_unit: Literal["section", "chunk"] = "section"
    section_words: int = Field(500, ge=50)
    metadata_fields: dict[str, Literal["long", "double", "date", "keyword", "boolean"]] = Field(default_factory=dict)

    @field_validator("metadata_fields")
    @classmethod
    def _check_metadata_keys(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not re.fullmatch(r"[A-Za-z0-9_@$-][A-Za-z0-9_@$-]{0,100}", key):
                raise ValueError(f"metadata key {key!r}: letters, digits, _ @ $ - only (no dots), at most 101")
        return v

    @property
    def bm25_section_words(self) -> int | None:
        """Section size in words a new index scores BM25 on, or None for chunk-level BM25."""
        return self.section_words if self.bm25_unit == "section" else None

    @property
    def alias(self) -> str:
        """Read alias the query layer searches: ``<prefix>-chunks``."""
        return f"{self.prefix}-chunks"

    def versioned(self, version: int | None = None) -> str:
        """Concrete index name ``<prefix>-chunks-v<N>``."""
        return f"{self.alias}-v{version or self.version}"

    @property
    def query_log(self) -> str:
        return f"{self.prefix}-query-log"

    @property
    def ingest_runs(self) -> str:
        return f"{self.prefix}-ingest-runs"

    @property
    def ingest_state(self) -> str:
        """The index of documents being written (hidden from readers) and the prefix's ingest lease."""
        return f"{self.prefix}-ingest-state"


class EmbeddingSettings(BaseModel):
    """The bi-encoder (``HSP_EMBEDDING__*``)."""

    model: str = DEFAULT_EMBEDDING_MODEL
    dims: int = Field(384, ge=1, le=4096)
    batch_size: int = Field(32, ge=1)
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    backend: Literal["auto", "torch", "onnx"] = "auto"
    onnx_quantized: bool = False
    query_max_tokens: int | None = Field(None, ge=8)
    prepend_title: bool = True
    query_cache_size: int = Field(1024, ge=0)
    query_prompt: str | None = None
    passage_prompt: str | None = None


class ChunkingSettings(BaseModel):
    """How documents are cut (``HSP_CHUNKING__*``)."""

    strategy: Literal["paragraph", "sentence", "token", "fixed", "parent_child"] = "paragraph"
    max_tokens: int = Field(200, ge=16)
    overlap: float = Field(0.12, ge=0.0, lt=0.5)
    parent_max_tokens: int = Field(800, ge=32)


class IngestSettings(BaseModel):
    """Ingestion workers (``HSP_INGEST__*``)."""

    workers: int = Field(1, ge=1)
    bulk_chunk_size: int = Field(200, ge=1)
    bulk_max_retries: int = Field(5, ge=0)
    bulk_initial_backoff: float = Field(0.5, gt=0)
    bulk_max_backoff: float = Field(30.0, gt=0)
    queue_size: int = Field(8, ge=1)
    lease_wait_s: float = Field(0.0, ge=0)
    sync_max_delete: float = Field(0.2, ge=0, le=1)
    dead_letter_dir: Path = Path("dead-letter")


class QuerySettings(BaseModel):
    """The query layer (``HSP_QUERY__*``)."""

    bm25_k: int = Field(100, ge=1, le=1000)
    knn_k: int = Field(100, ge=1, le=1000)
    num_candidates: int | None = Field(None, ge=1, le=10000)
    rescore_oversample: float | None = Field(None, ge=0, le=10)
    fusion: Literal["auto", "rrf", "zscore", "minmax"] = "auto"
    rrf_k: int = Field(60, ge=1)
    knn_share: float = Field(0.5, ge=0, le=1)
    title_boost: float = Field(1.0, ge=0)
    operator: Literal["or", "and"] = "or"
    tie_breaker: float = Field(0.5, ge=0, le=1)
    max_k: int = Field(100, ge=1)
    max_query_chars: int = Field(2000, ge=16)
    collapse: bool = True
    bm25_unit: Literal["auto", "chunk"] = "auto"
    bm25_fields: Literal["auto", "separate"] = "auto"
    knn_overfetch: float = Field(2.0, ge=1.0, le=10.0)
    best_passage: bool = True
    passage_k: int = Field(50, ge=1, le=1000)
    hybrid_overlap: bool = True
    log_queries: bool = True
    redact: bool = False


class RerankerSettings(BaseModel):
    """The cross-encoder stage (``HSP_RERANKER__*``)."""

    enabled: bool = True
    url: str | None = None
    model: str = "cross-encoder/ms-marco-MiniLM-L-6-v2"
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    batch_size: int = Field(32, ge=1)
    max_length: int | None = Field(None, ge=8)
    depth: int = Field(30, ge=1, le=200)
    blend: float | None = Field(None, ge=0, le=1)
    timeout: float = Field(5.0, gt=0)
    token: SecretStr | None = None
    max_passages: int = Field(256, ge=1)
    max_passage_chars: int = Field(20000, ge=1)
    max_body_bytes: int = Field(4_000_000, ge=1024)
    batch_window_ms: float = Field(5.0, ge=0)
    micro_batching: bool = True
    max_batch_pairs: int = Field(256, ge=1)
    max_queue: int = Field(32, ge=1)
    max_queue_wait: float = Field(4.0, gt=0)
    header_timeout: float = Field(5.0, gt=0)
    body_timeout: float = Field(10.0, gt=0)
    max_connections: int = Field(256, ge=1)


class ModelsSettings(BaseModel):
    """Where models come from (``HSP_MODELS__*``); see ``hsp models list`` and docs/models.md."""

    allow_download: bool = False
    cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "hybridsearch")

    @field_validator("cache_dir")
    @classmethod
    def _check_cache_dir(cls, v: Path) -> Path:
        return v.expanduser()


class Settings(BaseSettings):
    """Root of the settings tree; see the module docstring for where values come from."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        env_file=".env",
        extra="ignore",
        validate_default=True,
    )

    es_url: str | None = None  # shortcuts for es.url, models.cache_dir and (an explicit 0) models.allow_download
    cache: str | None = Field(None, validation_alias="HSP_CACHE")
    hf_hub_offline: str | None = Field(None, validation_alias="HF_HUB_OFFLINE")
    es: ClusterSettings = ClusterSettings()
    index: IndexSettings = IndexSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    ingest: IngestSettings = IngestSettings()
    query: QuerySettings = QuerySettings()
    reranker: RerankerSettings = RerankerSettings()
    models: ModelsSettings = ModelsSettings()

    @field_validator("es_url")
    @classmethod
    def _check_es_url(cls, v: str | None) -> str | None:
        if v:
            parse_nodes(v)  # checked here, so that a bad one is reported as HSP_ES_URL
        return v

    @model_validator(mode="after")
    def _apply_shortcuts(self) -> Settings:
        if self.es_url:
            self.es = self.es.model_copy(update={"url": self.es_url})
        if self.cache:
            self.models = self.models.model_copy(update={"cache_dir": Path(self.cache).expanduser()})
        offline = (self.hf_hub_offline or "").strip().lower()
        if "allow_download" not in self.models.model_fields_set and offline in {"0", "false", "no", "off"}:
            self.models = self.models.model_copy(update={"allow_download": True})
        return self


def load_settings(**overrides: object) -> Settings:
    """Build :class:`Settings` from the environment; raises ConfigError naming the bad variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(f"{ENV_PREFIX}{'__'.join(str(p).upper() for p in e['loc'])}: "
                             f"{str(e['msg']).removeprefix('Value error, ')}" for e in exc.errors())
        raise ConfigError(f"invalid settings: {problems}") from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, read once. Raises ConfigError."""
    return load_settings()
