"""Training rows and validation data for a fine-tuned bi-encoder (``hsp train-embedder``); no model in here."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hybridsearch.engine import engine_errors
from hybridsearch.index.visibility import scan_visible
from hybridsearch.training.negatives import (
    Candidate,
    Qrels,
    Strategy,
    Tally,
    dedupe,
    pick_negatives,
    query_rng,
    relevant_ids,
    with_positives,
)

if TYPE_CHECKING:
    from hybridsearch.engine import EngineClient
    from hybridsearch.settings import Settings

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
