"""What a reranker training run is given (:class:`TrainingConfig`) and what it measured (:class:`TrainResult`).

Shared by the trainer (:mod:`.reranker`) and the card writer (:mod:`.card`), which import this module
and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from hybridsearch.settings import DEFAULT_EMBEDDING_MODEL
from hybridsearch.training.negatives import Strategy


class TrainingConfig(BaseModel):
    """Everything that decides a trained model; defaults match ``hsp train-reranker``."""

    dataset: Path
    split: str = "train"
    out: Path
    base: str = DEFAULT_EMBEDDING_MODEL
    negatives: int = Field(3, ge=0, description="mined negatives per training query")
    depth: int = Field(30, ge=1, le=100, description="hybrid candidates per query to mine from (= rerank depth)")
    strategy: Strategy = "sample"
    epochs: int = Field(4, ge=1)
    batch_size: int = Field(16, ge=1)
    max_length: int = Field(128, ge=16, le=512)
    lr: float = Field(1e-4, gt=0)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    val_fraction: float = Field(0.15, ge=0, lt=1)
    seed: int = 42
    limit_queries: int | None = Field(None, ge=1)
    allow_test: bool = False
    device: str = "auto"
    keep: Literal["last", "best"] = Field(
        "last", description="weights to save: the last epoch's (annealed; default) or the epoch with the best "
                            "served validation nDCG@10 (noisy when there are few validation queries)")

    @property
    def loss_name(self) -> str:
        """The sentence-transformers loss trained with (recorded in the card)."""
        return "BinaryCrossEntropyLoss"


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
