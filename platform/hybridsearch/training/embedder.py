"""Fine-tune the bi-encoder on a collection's own judgments (``hsp train-embedder``; docs/embedder-training.md).

Rows mined through the hybrid search train with ``MultipleNegativesRankingLoss``; dense retrieval of held-out
queries is measured before training (epoch 0) and after each epoch. Texts carry the base model's prompts."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybridsearch.embedding.encoder import Embedder, load_sentence_transformer
from hybridsearch.embedding.models import Prompts, pick_device
from hybridsearch.engine import engine_errors
from hybridsearch.index.visibility import scan_visible
from hybridsearch.progress import ProgressSink, Task
from hybridsearch.training.config import (
    Chunk,
    DenseValidation,
    EmbedderConfig,
    EmbedderEpoch,
    EmbedderResult,
    RowStats,
)
from hybridsearch.training.negatives import (
    Candidate,
    Collected,
    Qrels,
    SplitData,
    Strategy,
    dedupe,
    pick_negatives,
    query_rng,
    relevant_ids,
    with_positives,
)

if TYPE_CHECKING:
    from hybridsearch.engine import EngineClient
    from hybridsearch.settings import ModelsSettings, Settings

VALIDATION_METRICS = ("ndcg@10", "recall@10", "mrr@10")


@dataclass(frozen=True)
class Row:
    """One training example: a query, one judged-relevant passage and ``negatives`` mined passages."""

    qid: str
    query: str
    positive_id: str
    positive: str
    negative_ids: tuple[str, ...]
    negatives: tuple[str, ...]


def negative_pool(
    candidates: Sequence[Candidate], relevant: set[str], positives: Sequence[str], *, skip_top: int = 0,
    similarity: Mapping[str, float] | None = None, positive_similarity: float | None = None,
    margin: float | None = None,
) -> tuple[list[Candidate], dict[str, int]]:
    """The non-relevant candidates that may be negatives, in rank order, and the dropped counts: the first ``skip_top``
    (``top``), a positive's text (``duplicate``), ``similarity > margin × positive_similarity`` (``similar``)."""
    dropped = {"top": 0, "duplicate": 0, "similar": 0}
    texts = set(positives)
    pool: list[Candidate] = []
    for cand in (c for c in dedupe(candidates) if c.doc_id not in relevant):
        if dropped["top"] < skip_top:
            dropped["top"] += 1
        elif cand.text in texts:
            dropped["duplicate"] += 1
        elif (margin is not None and similarity is not None and positive_similarity is not None
              and cand.doc_id in similarity and similarity[cand.doc_id] > margin * positive_similarity):
            dropped["similar"] += 1
        else:
            pool.append(cand)
    return pool, dropped


def build_rows(
    qids: Iterable[str], queries: Mapping[str, str], qrels: Qrels, candidates: Mapping[str, Sequence[Candidate]],
    positive_passages: Mapping[tuple[str, str], str], *, negatives: int, seed: int, strategy: Strategy = "sample",
    skip_top: int = 0, similarity: Mapping[str, Mapping[str, float]] | None = None, margin: float | None = None,
) -> tuple[list[Row], RowStats]:
    """Training rows for ``qids``: one per judged-relevant document with a passage, each with ``negatives`` mined
    negatives (distinct while the pool lasts; ``margin`` against the least similar positive). Seeded per query."""
    rows: list[Row] = []
    stats = RowStats()
    for qid, judged, cands, positives in with_positives(qids, qrels, candidates, positive_passages, stats):
        sims = (similarity or {}).get(qid)
        pos_sims = [sims[d] for d, _ in positives if sims is not None and d in sims]
        pool, dropped = negative_pool(cands, judged, [t for _, t in positives], skip_top=skip_top, similarity=sims,
                                      positive_similarity=min(pos_sims) if pos_sims else None, margin=margin)
        stats.dropped_top += dropped["top"]
        stats.dropped_duplicate += dropped["duplicate"]
        stats.dropped_similar += dropped["similar"]
        rng = query_rng(seed, qid)
        # different negatives for the rows of one query while the pool lasts
        drawn = pick_negatives(pool, min(len(pool), negatives * len(positives)), rng=rng, strategy=strategy)
        rng.shuffle(drawn)
        made = 0
        for i, (doc_id, text) in enumerate(positives):
            negs = drawn[i * negatives:(i + 1) * negatives]
            if len(negs) < negatives:
                negs = pick_negatives(pool, negatives, rng=rng, strategy=strategy)
                stats.rows_reusing_negatives += bool(negs)
            if negatives and not negs:
                stats.rows_without_negatives += 1
                continue
            rows.append(Row(qid, queries[qid], doc_id, text, tuple(c.doc_id for c in negs),
                            tuple(c.text for c in negs)))
            made += 1
        if made:
            stats.queries += 1
            stats.rows += made
    return rows, stats


def rows_as_columns(rows: Sequence[Row], negatives: int) -> dict[str, list[str]]:
    """The trainer's dataset columns: ``anchor``, ``positive`` and ``negative_1`` … ``negative_n``."""
    cols: dict[str, list[str]] = {"anchor": [r.query for r in rows], "positive": [r.positive for r in rows]}
    for i in range(negatives):
        cols[f"negative_{i + 1}"] = [r.negatives[i] for r in rows]
    return cols


def dense_rankings(query_vecs: np.ndarray, chunk_vecs: np.ndarray, chunk_docs: Sequence[str], qids: Sequence[str],
                   k: int = 10) -> dict[str, list[str]]:
    """Per query, the top ``k`` documents by the cosine of their best chunk (vectors are unit length)."""
    scores = np.asarray(query_vecs, dtype=np.float32) @ np.asarray(chunk_vecs, dtype=np.float32).T
    depth = min(scores.shape[1], k * 8)  # a document may own several of the best chunks
    out: dict[str, list[str]] = {}
    for row, qid in zip(scores, qids, strict=True):
        top = np.argpartition(-row, depth - 1)[:depth] if depth < row.size else np.arange(row.size)
        ranked: list[str] = []
        for i in top[np.argsort(-row[top], kind="stable")]:
            doc = chunk_docs[i]
            if doc not in ranked:
                ranked.append(doc)
                if len(ranked) == k:
                    break
        out[qid] = ranked
    return out


def dense_metrics(val: DenseValidation, query_vecs: np.ndarray, chunk_vecs: np.ndarray) -> dict[str, float]:
    """nDCG@10, Recall@10 and MRR@10 of dense retrieval for ``val`` (``hsp eval``'s metric code)."""
    from hybridsearch.eval.metrics import evaluate

    rankings = dense_rankings(query_vecs, chunk_vecs, [c.doc_id for c in val.chunks], val.qids)
    means, _ = evaluate(val.qrels, rankings, VALIDATION_METRICS)
    return means


def pool_priority(val_qids: Sequence[str], qrels: Qrels, candidates: Mapping[str, Sequence[Candidate]]) -> list[str]:
    """Documents for the validation pool: the judged-relevant ones of ``val_qids``, then their candidates by rank."""
    order = dict.fromkeys(d for q in val_qids for d in sorted(relevant_ids(qrels.get(q, {}))))
    lists = [dedupe(candidates.get(q, ())) for q in val_qids]
    for rank in range(max((len(c) for c in lists), default=0)):
        order.update(dict.fromkeys(c[rank].doc_id for c in lists if rank < len(c)))
    return list(order)


def validation_pool(chunks: Sequence[Chunk], priority: Sequence[str], cap: int,
                    seed: int) -> tuple[list[Chunk], bool]:
    """``(chunks, whole index)``: all ``chunks`` when at most ``cap`` (or ``cap`` is 0), else the ``priority``
    documents' chunks while they fit, then a seeded sample of the others."""
    if cap == 0 or len(chunks) <= cap:
        return list(chunks), True
    by_doc: dict[str, list[Chunk]] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    kept: list[Chunk] = []
    used: set[str] = set()
    for doc in priority:
        part = by_doc.get(doc, [])
        if len(kept) + len(part) > cap:
            break
        kept += part
        used.add(doc)
    others = [c for c in chunks if c.doc_id not in used]
    sample = random.Random(seed).sample(range(len(others)), min(cap - len(kept), len(others)))
    return kept + [others[i] for i in sorted(sample)], False


def scan_chunks(es: EngineClient, settings: Settings, index: str) -> list[Chunk]:
    """Every chunk of ``index`` (the tenant's, when one is set) as the text ingestion embeds, in a stable order."""
    from hybridsearch.ingest.chunking import chunk_embed_text

    filters = [{"term": {"tenant": settings.index.tenant}}] if settings.index.tenant else []
    found: list[tuple[str, Chunk]] = []
    with engine_errors(f"read the chunks of {index}"):
        for hit in scan_visible(es, index, filters=filters, source=["doc_id", "title", "title_cut", "text"]):
            src = hit["_source"]
            text = chunk_embed_text(src, settings.embedding.prepend_title)
            found.append((str(hit["_id"]), Chunk(str(src.get("doc_id", hit["_id"])), text)))
    return [c for _, c in sorted(found, key=lambda x: x[0])]


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
    return {c: [(prompts.query if c == "anchor" else prompts.passage) + t for t in texts]
            for c, texts in columns.items()}


def record_prompts(model: Any, prompts: Prompts) -> None:
    """Set ``model``'s prompt table (saved in its ``config_sentence_transformers.json``) to ``prompts``, no default."""
    model.prompts = {k: v for k, v in (("query", prompts.query), ("passage", prompts.passage)) if v}
    model.default_prompt_name = None


def validate(val: DenseValidation, queries: Encode, chunks: Encode,
             progress: ProgressSink | None = None) -> dict[str, float]:
    """:func:`dense_metrics` with vectors from the two encoders."""
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
        miner = IndexMiner(client, settings, embedder,
                           passage=lambda src: embed_text(src.get("title"), src.get("text") or "", prepend))
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
