"""Typed search results, the query layer's contract with its users: every hit says where it stood at each stage."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

Mode = Literal["hybrid", "bm25", "dense"]


class RerankOutcome(StrEnum):
    """What the rerank stage did for one search; ``rerank_reason`` adds the detail for people."""

    APPLIED = "applied"
    DISABLED = "disabled"  # no reranker: switched off, none configured, or it could not be built
    SKIPPED = "skipped"  # not requested, or no hits to rerank
    FAILED = "failed"  # the reranker raised or returned unusable scores: fused order kept
    NO_MODEL = "no_model"  # no usable cross-encoder on this machine (RerankerModelError): fused order kept
    TIMED_OUT = "timed_out"  # no answer within reranker.timeout: fused order kept


class PassageSource(StrEnum):
    """Why a hit shows the chunk it shows (its text is what the reranker scores)."""

    KNN = "knn"  # the chunk kNN found nearest to the query
    BM25 = "bm25"  # the chunk BM25 scored (BM25 over chunks)
    BM25_BEST_CHUNK = "bm25_best_chunk"  # BM25 over sections: the document's chunk that best matches the query
    SECTION_FIRST_CHUNK = "section_first_chunk"  # BM25 over sections, no better chunk found: the section's first


class Highlight(BaseModel):
    """One stretch of a hit's ``text`` that matched the query (the engine's highlighter, read as data)."""

    start: int = Field(description="offset of the first character in Hit.text")
    end: int = Field(description="offset after the last character in Hit.text")
    term: str = Field(description="the matched text, Hit.text[start:end]")


class StageScore(BaseModel):
    """A hit's rank (from 1) and raw score in one stage; ``None`` when absent from that stage."""

    rank: int
    score: float


class Hit(BaseModel):
    """One result: a chunk (or its parent) with per-stage ranks and scores."""

    doc_id: str
    chunk_id: str
    title: str | None = None
    text: str
    position: int | None = Field(None, description="the chunk's place in its document, from 0")
    passage: PassageSource | None = Field(None, description="why this chunk is the one shown (and reranked); "
                                          "set on every hit a search returns")
    highlights: list[Highlight] = Field(default_factory=list, description="where text matched the query: BM25 "
                                        "over sections, the best-matching chunk shown, search(highlight=True); "
                                        "else empty")
    parent_id: str | None = None
    parent_text: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    score: float = Field(description="final score: the rerank score when reranked (the blended score when "
                                     "the rerank blend is below 1), else the fused score")
    rank: int = Field(description="final rank, from 1, over the whole fused window")
    bm25: StageScore | None = None
    knn: StageScore | None = None
    fused: StageScore | None = None
    rerank: StageScore | None = None
    explanation: list[str] | None = Field(None, description="human-readable reasons, with explain=True")


class Timings(BaseModel):
    """Milliseconds spent per stage."""

    embed_ms: float = 0.0
    search_ms: float = 0.0
    fusion_ms: float = 0.0
    rerank_ms: float = 0.0
    total_ms: float = 0.0


class SearchResult(BaseModel):
    """Answer to one ``search`` call."""

    query: str
    mode: Mode
    index: str
    k: int
    page: int = 1
    hits: list[Hit]
    candidates: int = Field(description="distinct hits in the window before paging (a search of one list fetches "
                            "only what its page and rerank show)")
    reranked: bool = False
    rerank_outcome: RerankOutcome = Field(RerankOutcome.SKIPPED, description="what the rerank stage did")
    rerank_reason: str | None = Field(None, description="detail for people: why the rerank stage did not run or "
                                                        "was cut short; None when applied")
    rerank_blend: float | None = Field(None, description="reranker share in the final order of the reranked top "
                                                         "(1 = reranker order only); None when not reranked")
    truncated_query: bool = False
    fusion: str | None = Field(None, description="how the lists were fused and where that came from (the index's "
                                                 "_meta, the settings or the default); None for one list")
    knn_width: str | None = Field(None, description="how widely the kNN search looked: num_candidates per shard, "
                                  "rescoring of quantized vectors, and why (hybridsearch.query.build); None "
                                  "without a kNN list")
    timings: Timings = Field(default_factory=Timings)


class WhyReport(BaseModel):
    """Where one document fell at each stage of one query (``SearchClient.why``, ``hsp search --why``)."""

    query: str
    doc_id: str
    mode: Mode
    index: str
    chunks_in_index: int = Field(description="chunks of the document in the index, ignoring filters")
    chunks_matching_filters: int = Field(description="of those, chunks the filters (and tenant) let through")
    bm25: StageScore | None = None
    knn: StageScore | None = None
    fused: StageScore | None = None
    rerank: StageScore | None = None
    chunk_id: str | None = Field(None, description="the chunk the search shows for the document (and reranks)")
    passage: PassageSource | None = Field(None, description="why that chunk; None when the document is not a hit")
    highlights: list[Highlight] = Field(default_factory=list, description="where that chunk matched the query")
    final_rank: int | None = Field(None, description="rank in the fused (and reranked) window, from 1")
    candidates: int = 0
    reranked: bool = False
    rerank_outcome: RerankOutcome = RerankOutcome.SKIPPED
    rerank_reason: str | None = None
    notes: list[str] = Field(default_factory=list, description="one line per stage, for people")
