"""What a training run is given and what it measured, for the reranker and the embedder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from hybridsearch.settings import DEFAULT_EMBEDDING_MODEL
from hybridsearch.training.negatives import NegativePolicy, Strategy, Tally

Loss = Literal["lambda", "bce"]
LOSS_NAMES = {"lambda": "LambdaLoss (NDCGLoss2++ weighting, listwise over each query's positives and negatives)",
              "bce": "BinaryCrossEntropyLoss (pointwise)"}


class _RunConfig(BaseModel):
    """What both trainers are given: the collection, the split, the folder to write and the shared knobs."""

    dataset: Path
    split: str = "train"
    out: Path
    base: str = DEFAULT_EMBEDDING_MODEL
    depth: int = Field(30, ge=1, le=100)  # hybrid candidates per query to mine from
    strategy: Strategy = "sample"
    skip_top: int = Field(0, ge=0)  # fused ranks never used as negatives
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    seed: int = 42
    limit_queries: int | None = Field(None, ge=1)
    allow_test: bool = False
    device: str = "auto"


class TrainingConfig(_RunConfig):
    """Everything that decides a trained reranker; defaults match ``hsp train-reranker``."""

    negatives: int = Field(4, ge=0)  # mined negatives per training query
    epochs: int = Field(2, ge=1)  # with folds, the most tried (the final fit stops at the chosen count)
    batch_size: int = Field(16, ge=1)
    max_length: int = Field(128, ge=16, le=512)
    lr: float = Field(1e-4, gt=0)
    loss: Loss = "lambda"
    folds: int = Field(3, ge=0, le=10)  # k-fold selection of epochs and blend; 0: one --val-fraction slice
    min_gain: float = 0.0  # with folds: serve the fused order unless the nested gain estimate is above this
    skip_above_positive: bool = True
    max_overlap: float = Field(0.6, gt=0, le=1)  # word Jaccard with a positive that makes a duplicate (1: off)
    val_fraction: float = Field(0.15, ge=0, lt=1)
    keep: Literal["last", "best"] = "last"  # the weights saved: the last epoch's, or the best served epoch's

    @property
    def policy(self) -> NegativePolicy:
        """Which mined candidates may be negatives (:func:`hybridsearch.training.negatives.filter_negatives`)."""
        return NegativePolicy(self.skip_top, self.skip_above_positive, self.max_overlap)

    @property
    def cross_validating(self) -> bool:
        return self.folds >= 2


@dataclass
class EpochResult:
    epoch: int
    ndcg_at_10: float | None = None
    mrr_at_10: float | None = None
    train_loss: float | None = None
    blend: float | None = None
    blend_ndcg_at_10: float | None = None


@dataclass
class TrainResult:
    epochs: list[EpochResult] = field(default_factory=list)
    best_epoch: int | None = None
    fused: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    device: str = "cpu"
    steps: int = 0
    cv: dict[str, Any] | None = None  # reranker.CVSummary.as_dict() when chosen by k-fold
    cv_seconds: float = 0.0


class EmbedderConfig(_RunConfig):
    """Everything that decides a fine-tuned bi-encoder; defaults match ``hsp train-embedder``."""

    negatives: int = Field(1, ge=0, le=8)  # mined hard negatives per (query, positive) row
    # a likely false negative: the base model's similarity to the query above margin × the positive's
    margin: float | None = Field(0.95, gt=0, le=1)
    epochs: int = Field(2, ge=1)
    batch_size: int = Field(32, ge=2)
    max_seq_length: int | None = Field(None, ge=16, le=512)  # tokens per text while training (None: the base's)
    lr: float = Field(3e-5, gt=0)
    val_fraction: float = Field(0.2, ge=0, lt=1)
    val_corpus: int = Field(2000, ge=0)  # chunks the validation ranks (0: the whole index)
    threads: int | None = Field(None, ge=1)  # torch CPU threads (None: torch's choice)
    keep: Literal["last", "best"] = "best"


@dataclass
class EmbedderEpoch:
    """Dense retrieval on the validation queries after ``epoch`` (0: the base model)."""

    epoch: int
    ndcg_at_10: float | None = None
    recall_at_10: float | None = None
    mrr_at_10: float | None = None
    train_loss: float | None = None


@dataclass
class EmbedderResult:
    epochs: list[EmbedderEpoch] = field(default_factory=list)
    best_epoch: int | None = None
    seconds: float = 0.0
    validation_seconds: float = 0.0
    device: str = "cpu"
    steps: int = 0


@dataclass
class RowStats(Tally):
    """What :func:`build_rows` made and left out."""

    queries: int = 0
    rows: int = 0
    dropped_top: int = 0
    dropped_similar: int = 0
    dropped_duplicate: int = 0
    rows_without_negatives: int = 0
    rows_reusing_negatives: int = 0


@dataclass
class Chunk:
    doc_id: str
    text: str


@dataclass
class DenseValidation:
    """Held-out queries with their judgments and the chunks to rank (``full_corpus``: every chunk of the index)."""

    qids: list[str]
    queries: list[str]
    qrels: dict[str, dict[str, int]]
    chunks: list[Chunk]
    full_corpus: bool
    index_chunks: int

    @property
    def documents(self) -> int:
        return len({c.doc_id for c in self.chunks})
