"""All configuration in one pydantic-settings tree: keyword arguments, then ``HSP_`` environment variables with
``__`` between nested names (``HSP_INDEX__PREFIX=team-a``), then ``.env``, then the defaults below. Shortcuts:
``HSP_ES_URL`` (``es.url``), ``HSP_CACHE`` (``models.cache_dir``), an explicit ``HF_HUB_OFFLINE=0``
(``models.allow_download``). Invalid values raise ConfigError naming the variable (:func:`load_settings`).
"""

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
DEFAULT_RERANKER_MODEL = "cross-encoder/ms-marco-MiniLM-L-6-v2"


class ClusterSettings(BaseModel):
    """How to reach the cluster, Elasticsearch or OpenSearch (``HSP_ES__*``)."""

    url: str = Field("http://127.0.0.1:9200", description="node URL(s), comma-separated (hybridsearch.cluster_url)")
    engine: Literal["auto", "elasticsearch", "opensearch"] = Field(
        "auto", description="which engine serves the cluster; auto asks it (GET /)")
    api_key: SecretStr | None = Field(None, description="encoded API key (id:key base64)")
    username: str | None = None
    password: SecretStr | None = None
    ca_certs: Path | None = Field(None, description="CA certificate file for https clusters")
    verify_certs: bool = True
    request_timeout: float = Field(30.0, gt=0, description="seconds per request")
    max_retries: int = Field(3, ge=0, description="retries on 429/502/503/504 and connection errors")

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

    prefix: str = Field("hsp", pattern=r"^[a-z0-9][a-z0-9_.-]*$", description="prefix of every index and alias")
    version: int = Field(1, ge=1, description="version N of <prefix>-chunks-v<N> that ensure_index creates")
    shards: int = Field(1, ge=1)
    replicas: int = Field(0, ge=0)
    refresh_interval: str = "1s"
    analyzer: str = Field("auto", description="analyzer of title and text; auto: english where the cluster has it")
    similarity: Literal["cosine", "dot_product"] = "cosine"
    index_options: Literal["hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw", "flat", "int8_flat"] = "int8_hnsw"
    hnsw_m: int = Field(16, ge=2, le=512)
    ef_construction: int = Field(100, ge=10, le=3200)
    tenant: str | None = Field(None, description="when set, every search is filtered to this tenant")
    bm25_unit: Literal["section", "chunk"] = Field(
        "section", description="what BM25 scores in a new index: documents cut into sections, or chunks")
    section_words: int = Field(500, ge=50, description="most words of one BM25 section (whole chunks)")
    metadata_fields: dict[str, Literal["long", "double", "date", "keyword", "boolean"]] = Field(
        default_factory=dict, description="typed metadata of a new index as JSON {key: type}, indexed as meta.<key> "
        "so ranges compare as that type; a value not of its type fails its document")

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

    model: str = Field(DEFAULT_EMBEDDING_MODEL, description="catalogue name, Hub name or local folder")
    dims: int = Field(384, ge=1, le=4096)
    batch_size: int = Field(32, ge=1)
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    backend: Literal["auto", "torch", "onnx"] = Field(
        "auto", description="auto: ONNX Runtime on CPU, torch on a GPU or where ONNX cannot serve; onnx, torch insist")
    onnx_quantized: bool = Field(False, description="with ONNX: int8-quantised weights")
    query_max_tokens: int | None = Field(None, ge=8, description="most word pieces of a search query embedded (prompt "
                                         "and special tokens included); unset or larger: the model's own limit")
    prepend_title: bool = Field(True, description="embed 'title. text' rather than text alone")
    query_cache_size: int = Field(1024, ge=0, description="LRU entries of query embeddings")
    query_prompt: str | None = Field(
        None, description="text put before every query embedded; unset: the model's own, empty: none")
    passage_prompt: str | None = Field(
        None, description="text put before every chunk embedded (recorded in the index's _meta); unset: the model's "
        "own, empty: none")


class ChunkingSettings(BaseModel):
    """How documents are cut (``HSP_CHUNKING__*``)."""

    strategy: Literal["paragraph", "sentence", "token", "fixed", "parent_child"] = "paragraph"
    max_tokens: int = Field(200, ge=16, description="upper bound in model word pieces")
    overlap: float = Field(0.12, ge=0.0, lt=0.5, description="share of a chunk repeated in the next")
    parent_max_tokens: int = Field(800, ge=32)


class IngestSettings(BaseModel):
    """Ingestion workers (``HSP_INGEST__*``)."""

    workers: int = Field(1, ge=1, description="embedding processes")
    bulk_chunk_size: int = Field(200, ge=1, description="actions per _bulk request")
    bulk_max_retries: int = Field(5, ge=0)
    bulk_initial_backoff: float = Field(0.5, gt=0)
    bulk_max_backoff: float = Field(30.0, gt=0)
    queue_size: int = Field(8, ge=1, description="batches buffered between pipeline stages")
    lease_wait_s: float = Field(0.0, ge=0, description="seconds a run waits for another run's ingest lease (0: refuse)")
    sync_max_delete: float = Field(0.2, ge=0, le=1, description="largest share of a source's documents "
                                   "hsp ingest --sync deletes without --force")
    dead_letter_dir: Path = Path("dead-letter")


class QuerySettings(BaseModel):
    """The query layer (``HSP_QUERY__*``)."""

    bm25_k: int = Field(100, ge=1, le=1000)
    knn_k: int = Field(100, ge=1, le=1000)
    num_candidates: int | None = Field(
        None, ge=1, le=10000, description="kNN candidates per shard; unset: chosen from the largest shard and k")
    rescore_oversample: float | None = Field(
        None, ge=0, le=10, description="quantized vectors rescored on their float vectors, k x this many, where the "
        "engine can; unset: 1, 0: off")
    fusion: Literal["auto", "rrf", "zscore", "minmax"] = Field(
        "auto", description="auto: the fusion recorded in the index's _meta, else RRF; rrf, zscore or minmax: "
        "override it")
    rrf_k: int = Field(60, ge=1)
    knn_share: float = Field(0.5, ge=0, le=1, description="the kNN list's share of the fusion weights")
    title_boost: float = Field(1.0, ge=0)
    operator: Literal["or", "and"] = "or"
    tie_breaker: float = Field(0.5, ge=0, le=1, description="multi_match: share of the other field's score added")
    max_k: int = Field(100, ge=1, description="largest k a caller may ask for")
    max_query_chars: int = Field(2000, ge=16, description="longer queries are truncated")
    collapse: bool = Field(True, description="keep only the best chunk of each document")
    bm25_unit: Literal["auto", "chunk"] = Field(
        "auto", description="auto: BM25 over the index's unit (sections when collapsed); chunk: over chunks")
    bm25_fields: Literal["auto", "separate"] = Field(
        "auto", description="over sections: auto = title and text as one field where the index has it; separate = "
        "multi_match over title and text")
    knn_overfetch: float = Field(2.0, ge=1.0, le=10.0, description="with collapse, kNN gathers knn_k × this many")
    best_passage: bool = Field(True, description="BM25 over sections: show each hit's best-matching chunk (one more "
                               "search in the same _msearch); false: the section's first chunk")
    passage_k: int = Field(50, ge=1, le=1000, description="documents the passage search finds a chunk for")
    hybrid_overlap: bool = Field(True, description="send BM25 at once and kNN when the query vector is ready; "
                                 "false: one _msearch after embedding")
    log_queries: bool = True
    redact: bool = Field(False, description="log a hash instead of the query text")


class RerankerSettings(BaseModel):
    """The cross-encoder stage (``HSP_RERANKER__*``)."""

    enabled: bool = True
    url: str | None = Field(None, description="reranker service URL; unset = in-process when a model loads")
    model: str = DEFAULT_RERANKER_MODEL
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    batch_size: int = Field(32, ge=1)
    max_length: int | None = Field(
        None, ge=8, description="tokens per (query, passage) pair; unset: the model card's, else 512")
    depth: int = Field(30, ge=1, le=200, description="fused hits sent to the reranker")
    blend: float | None = Field(
        None, ge=0, le=1, description="reranker share of the reranked top's order (min-max of both scores); "
        "unset: the model card's, else 1")
    timeout: float = Field(5.0, gt=0, description="seconds before the search gives up on the reranker")
    token: SecretStr | None = Field(None, description="bearer token the service requires")
    max_passages: int = Field(256, ge=1)
    max_passage_chars: int = Field(20000, ge=1)
    max_body_bytes: int = Field(4_000_000, ge=1024)
    batch_window_ms: float = Field(5.0, ge=0, description="service micro-batching window")
    micro_batching: bool = Field(True, description="service: score concurrent requests together")
    max_batch_pairs: int = Field(256, ge=1, description="service: most (query, passage) pairs per model call")
    max_queue: int = Field(32, ge=1, description="service: most requests waiting; more get 503 at once")
    max_queue_wait: float = Field(4.0, gt=0, description="service: most seconds a request waits in the queue "
                                  "(shortened by its own budget); older ones get 503")
    header_timeout: float = Field(5.0, gt=0, description="service: seconds to send a request's headers, else 408")
    body_timeout: float = Field(10.0, gt=0, description="service: seconds to send a request's body, else 408")
    max_connections: int = Field(256, ge=1, description="service: most open connections; one more gets 503")


class ModelsSettings(BaseModel):
    """Where models come from (``HSP_MODELS__*``); see ``hsp models list`` and docs/models.md."""

    allow_download: bool = Field(False, description="download a model that is not on this machine from the Hugging "
                                 "Face Hub; off: such a model fails at once naming the fix")
    cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "hybridsearch",
                            description="fetched models, ONNX exports, model file records and the embedding cache "
                            "(HSP_CACHE)")

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

    es_url: str | None = Field(None, description="shortcut for es.url (HSP_ES_URL)")
    cache: str | None = Field(None, validation_alias="HSP_CACHE", description="shortcut for models.cache_dir")
    hf_hub_offline: str | None = Field(None, validation_alias="HF_HUB_OFFLINE",
                                       description="an explicit 0 (or false) allows downloads unless "
                                       "models.allow_download is set")
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
