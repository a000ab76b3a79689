"""Fine-tune the bi-encoder on a collection's own judgments (``hsp train-embedder``; docs/embedder-training.md).

Rows mined through the hybrid search train with ``MultipleNegativesRankingLoss``; dense retrieval of held-out
queries is measured before training (epoch 0) and after each epoch. Texts carry the base model's prompts."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybridsearch.embedding.encoder import Embedder, load_sentence_transformer
from hybridsearch.embedding.models import Prompts, pick_device
from hybridsearch.progress import ProgressSink, Task
from hybridsearch.training.config import EmbedderConfig, EmbedderEpoch, EmbedderResult
from hybridsearch.training.embedder_data import (
    DenseValidation,
    Row,
    build_rows,
    dense_metrics,
    pool_priority,
    rows_as_columns,
    scan_chunks,
    validation_pool,
)
from hybridsearch.training.negatives import Collected, SplitData, relevant_ids

if TYPE_CHECKING:
    from hybridsearch.engine import EngineClient
    from hybridsearch.settings import ModelsSettings, Settings

Encode = Callable[[list[str]], np.ndarray]
ENCODE_SLICE = 256


def encode_all(encode: Encode, texts: Sequence[str], desc: str, progress: ProgressSink | None = None) -> np.ndarray:
    """``encode`` over ``texts`` in slices, advancing task ``desc`` on ``progress``."""
    advance = Task(progress, desc, len(texts)).advance
    parts: list[np.ndarray] = []
    for i in range(0, len(texts), ENCODE_SLICE):
        part = list(texts[i:i + ENCODE_SLICE])
        parts.append(np.asarray(encode(part), dtype=np.float32))
        advance(len(part))
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def model_encoder(model: Any, batch_size: int, prompt: str = "") -> Encode:
    """Unit vectors of ``prompt + text`` from a SentenceTransformer (its ``default_prompt_name`` never applied)."""
    def encode(texts: list[str]) -> np.ndarray:
        return np.asarray(model.encode(texts, prompt=prompt, batch_size=batch_size, normalize_embeddings=True,
                                       convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)
    return encode


def prompted_columns(columns: Mapping[str, list[str]], prompts: Prompts) -> dict[str, list[str]]:
    """The trainer's columns with the query prompt before each ``anchor``, the passage prompt before the others."""
    def prompt_of(column: str) -> str:
        return prompts.query if column == "anchor" else prompts.passage

    return {c: [prompt_of(c) + t for t in texts] if prompt_of(c) else list(texts) for c, texts in columns.items()}


def record_prompts(model: Any, prompts: Prompts) -> None:
    """Set ``model``'s prompt table (saved in its ``config_sentence_transformers.json``) to ``prompts``, no default."""
    model.prompts = {k: v for k, v in (("query", prompts.query), ("passage", prompts.passage)) if v}
    model.default_prompt_name = None


def validate(val: DenseValidation, queries: Encode, chunks: Encode,
             progress: ProgressSink | None = None) -> dict[str, float]:
    """:func:`~hybridsearch.training.embedder_data.dense_metrics` with vectors from the two encoders."""
    return dense_metrics(val, queries(val.queries),
                         encode_all(chunks, [ch.text for ch in val.chunks], "validation: embedding chunks", progress))


def base_similarities(encode: Encode, data: SplitData, got: Collected, qids: Sequence[str],
                      queries: Encode, progress: ProgressSink | None = None) -> dict[str, dict[str, float]]:
    """Per training query, the base model's cosine with each of its candidates and positive passages."""
    texts: dict[str, str] = {}
    for qid in qids:
        texts.update({f"{qid}\t{c.doc_id}": c.text for c in got.candidates.get(qid, ())})
        texts.update({f"{qid}\t{d}": got.positive_passages[(qid, d)] for d in relevant_ids(data.qrels[qid])
                      if (qid, d) in got.positive_passages})
    unique = sorted(set(texts.values()))
    vecs = dict(zip(unique, encode_all(encode, unique, "base model similarities", progress), strict=True))
    qvecs = dict(zip(qids, queries([data.queries[q] for q in qids]), strict=True)) if qids else {}
    out: dict[str, dict[str, float]] = {}
    for key, text in texts.items():
        qid, doc = key.split("\t", 1)
        out.setdefault(qid, {})[doc] = float(np.dot(qvecs[qid], vecs[text]))
    return out


def train_embedder(rows: Sequence[Row], val: DenseValidation | None, cfg: EmbedderConfig, *,
                   base_scores: dict[str, float] | None, progress: ProgressSink | None, prompts: Prompts,
                   models: ModelsSettings) -> tuple[Any, EmbedderResult]:
    """Fine-tune ``cfg.base`` on ``rows``; returns the model (best or last epoch, with ``prompts``) and what
    happened. ``base_scores``: the validation figures of the base (epoch 0)."""
    from datasets import Dataset
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import set_seed

    from hybridsearch.training.callbacks import EpochKeeper, evaluator, fit

    device = pick_device(cfg.device)
    set_seed(cfg.seed)
    model = load_sentence_transformer(cfg.base, models, device)
    serve_length = int(model.max_seq_length or 512)
    model.max_seq_length = cfg.max_seq_length or serve_length
    result = EmbedderResult(device=device)
    if val is not None and base_scores is not None:
        result.epochs.append(_epoch(0, base_scores, None))

    def measure(model: Any) -> dict[str, float]:  # at the served sequence length
        assert val is not None
        trained_length, model.max_seq_length = model.max_seq_length, serve_length
        try:
            return validate(val, model_encoder(model, cfg.batch_size * 2, prompts.query),
                            model_encoder(model, cfg.batch_size * 2, prompts.passage), progress)
        finally:
            model.max_seq_length = trained_length

    validation = evaluator(measure, "ndcg@10") if val is not None else None
    keeper = EpochKeeper(model, snapshot=cfg.keep == "best" and validation is not None, sink=progress)
    train_ds = Dataset.from_dict(prompted_columns(rows_as_columns(rows, cfg.negatives), prompts))
    result.steps, result.seconds = fit(
        model, train_ds, MultipleNegativesRankingLoss(model), validation, keeper, epochs=cfg.epochs,
        batch_size=cfg.batch_size, lr=cfg.lr, warmup_ratio=cfg.warmup_ratio, seed=cfg.seed, device=device,
        logging_steps=max(1, min(10, len(rows) // cfg.batch_size // 5 or 1)),
        batch_sampler=BatchSamplers.NO_DUPLICATES)  # a query twice in a batch is its own false negative
    result.validation_seconds = validation.seconds if validation is not None else 0.0
    result.epochs += [_epoch(e, m, loss) for e, m, loss in keeper.epochs]
    kept = keeper.kept_epoch(cfg.keep)
    result.best_epoch = cfg.epochs if kept is None else kept
    model.max_seq_length = serve_length
    record_prompts(model, prompts)
    return model, result


def _epoch(epoch: int, metrics: Mapping[str, float], loss: float | None) -> EmbedderEpoch:
    return EmbedderEpoch(epoch, metrics.get("ndcg@10"), metrics.get("recall@10"), metrics.get("mrr@10"), loss)


def run_embedder_training(cfg: EmbedderConfig, settings: Settings, *, es: EngineClient | None = None,
                          embedder: Embedder | None = None, cache_dir: Path | None = None,
                          progress: ProgressSink | None = None) -> dict[str, Any]:
    """Load the split, mine rows from the index, train, save to ``cfg.out``; returns the card. ``cache_dir``: the
    embedding cache of the base model. Raises ConfigError, IndexNotFound, ModelError, ClusterError."""
    from hybridsearch.embedding.cache import CachedEmbedder
    from hybridsearch.engine import EngineClient
    from hybridsearch.eval.datasets import check_disjoint
    from hybridsearch.ingest.chunking import embed_text
    from hybridsearch.training.card import make_embedder_card, save_model
    from hybridsearch.training.negatives import IndexMiner, collect, load_split, no_pairs

    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    data = load_split(cfg.dataset, cfg.split, allow_test=cfg.allow_test, limit=cfg.limit_queries)
    disjoint_from = check_disjoint(cfg.dataset, data.queries) if cfg.split != "test" else []
    prepend = settings.embedding.prepend_title
    started = time.perf_counter()
    with contextlib.nullcontext(es) if es is not None else contextlib.closing(EngineClient(settings.es)) as client:
        miner = IndexMiner(client, settings, embedder, passage=lambda t, x: embed_text(t, x, prepend))
        got = collect(miner, data, depth=cfg.depth, val_fraction=cfg.val_fraction, seed=cfg.seed,
                      progress=progress)
        chunks = scan_chunks(client, settings, miner.index)
    mining = time.perf_counter() - started

    base_cfg = settings.embedding.model_copy(update={"model": cfg.base})
    inner = embedder if embedder is not None and embedder.cfg == base_cfg else Embedder(base_cfg, settings.models)
    prompts = inner.prompts
    base = CachedEmbedder(inner, cache_dir)
    try:
        sims = (base_similarities(base.encode, data, got, got.train_qids, base.encode_queries, progress)
                if cfg.margin else None)
        rows, stats = build_rows(got.train_qids, data.queries, data.qrels, got.candidates, got.positive_passages,
                                 negatives=cfg.negatives, seed=cfg.seed, strategy=cfg.strategy,
                                 skip_top=cfg.skip_top, similarity=sims, margin=cfg.margin)
        if not rows:
            raise no_pairs()
        val, base_scores = None, None
        val_qids = [q for q in got.val_qids if relevant_ids(data.qrels[q])]
        if val_qids:
            priority = pool_priority(val_qids, data.qrels, got.candidates)
            pool, full = validation_pool(chunks, priority, cfg.val_corpus, cfg.seed)
            val = DenseValidation(val_qids, [data.queries[q] for q in val_qids],
                                  {q: data.qrels[q] for q in val_qids}, pool, full, len(chunks))
            base_scores = validate(val, base.encode_queries, base.encode, progress)
    finally:
        base.close()
    filtering = time.perf_counter() - started - mining
    model, result = train_embedder(rows, val, cfg, base_scores=base_scores, progress=progress, prompts=prompts,
                                   models=settings.models)
    card = make_embedder_card(cfg, data, got, stats, val, result, model, settings.models, disjoint_from=disjoint_from,
                              seconds={"mining": mining, "negatives_and_baseline": filtering},
                              extra={"index": miner.index, "prefix": settings.index.prefix,
                                     "prompts": {"query": prompts.query, "passage": prompts.passage}})
    save_model(model, cfg.out, card, settings.models)
    return card
