"""Training data from judgments: positives from one split's qrels (never ``test`` unless told to), hard negatives
from our own hybrid search (:class:`IndexMiner`), likely unjudged relevant documents filtered out."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from hybridsearch.engine import engine_errors, request
from hybridsearch.errors import ClusterError, ConfigError
from hybridsearch.eval.datasets import check_split, load_collection
from hybridsearch.index.versions import checked_live_index
from hybridsearch.index.visibility import visible_filter
from hybridsearch.progress import ProgressSink, Task
from hybridsearch.query.window import passage_text

if TYPE_CHECKING:
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.engine import EngineClient
    from hybridsearch.settings import Settings

Strategy = Literal["sample", "top"]
Qrels = Mapping[str, Mapping[str, int]]
PassageFn = Callable[[Mapping[str, Any]], str]  # a stored chunk's title and text -> the text trained on
_WORD = re.compile(r"[a-z0-9]+")
INF = float("inf")


@dataclass(frozen=True)
class Candidate:
    """One retrieved document: its id, the passage text a reranker would score and its fused score."""

    doc_id: str
    text: str
    score: float = 0.0
    bm25_rank: int | None = None  # rank in the BM25 list (None: not in it)
    knn_rank: int | None = None  # rank in the kNN list


@dataclass(frozen=True)
class NegativePolicy:
    """Which non-relevant candidates :func:`filter_negatives` drops: the fused top ``skip_top``; those both BM25 and
    kNN rank above the best positive; near-duplicates of a positive (word Jaccard >= ``max_overlap``)."""

    skip_top: int = 0
    skip_above_positive: bool = True
    max_overlap: float = 0.6

    def describe(self) -> str:
        """One line for cards and logs."""
        parts = []
        if self.skip_top:
            parts.append(f"fused ranks 1-{self.skip_top} skipped")
        if self.skip_above_positive:
            parts.append("candidates both BM25 and kNN rank above the best judged positive skipped")
        if self.max_overlap < 1.0:
            parts.append(f"near-duplicates of a positive (word Jaccard >= {self.max_overlap:g}) skipped")
        return "; ".join(parts) or "no filter"


NO_FILTER = NegativePolicy(0, False, 1.0)  # every non-relevant candidate may be a negative


@dataclass
class FilterStats:
    """How many non-relevant candidates each rule of a :class:`NegativePolicy` removed."""

    considered: int = 0
    kept: int = 0
    skipped_top: int = 0
    skipped_above_positive: int = 0
    skipped_duplicate: int = 0

    def add(self, other: FilterStats) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def words(text: str) -> frozenset[str]:
    """Lower-cased alphanumeric words of ``text``."""
    return frozenset(_WORD.findall(text.lower()))


def overlap(a: Iterable[str], b: Iterable[str]) -> float:
    """Jaccard similarity of two word sets (0 when both are empty)."""
    sa, sb = set(a), set(b)
    union = len(sa | sb)
    return len(sa & sb) / union if union else 0.0


def _ranks(cand: Candidate) -> tuple[float, float]:
    return cand.bm25_rank or INF, cand.knn_rank or INF


def positive_ranks(candidates: Sequence[Candidate], relevant: set[str]) -> tuple[float, float] | None:
    """Best BM25 and kNN rank among the positives in ``candidates`` (inf for a list without one); None: none there."""
    found = [_ranks(c) for c in candidates if c.doc_id in relevant]
    return (min(b for b, _ in found), min(k for _, k in found)) if found else None


def filter_negatives(candidates: Sequence[Candidate], relevant: set[str], positive_passages: Sequence[str],
                     policy: NegativePolicy) -> tuple[list[Candidate], FilterStats]:
    """The non-relevant ``candidates`` that ``policy`` lets serve as negatives, and how many each rule removed."""
    stats = FilterStats()
    ranks = positive_ranks(candidates, relevant) if policy.skip_above_positive else None
    pos_words = [words(p) for p in positive_passages] if policy.max_overlap < 1.0 else []
    kept: list[Candidate] = []
    for rank, cand in enumerate(candidates, start=1):
        if cand.doc_id in relevant:
            continue
        stats.considered += 1
        if rank <= policy.skip_top:
            stats.skipped_top += 1
        elif ranks is not None and all(mine < best for mine, best in zip(_ranks(cand), ranks, strict=True)):
            stats.skipped_above_positive += 1
        elif pos_words and max(overlap(words(cand.text), p) for p in pos_words) >= policy.max_overlap:
            stats.skipped_duplicate += 1
        else:
            kept.append(cand)
    stats.kept = len(kept)
    return kept, stats


@dataclass(frozen=True)
class Pair:
    """One training example; ``label`` 1 = judged relevant, 0 = mined negative."""

    qid: str
    query: str
    doc_id: str
    passage: str
    label: int


@dataclass
class ValidationQuery:
    """A held-out query with its fused candidates (in fused order) and its judgments."""

    qid: str
    query: str
    candidates: list[Candidate]
    relevant: dict[str, int]


@dataclass
class Tally:
    """The counts :func:`with_positives` keeps: judged-relevant documents without a passage, queries left out."""

    positives_missing: int = 0
    skipped_queries: list[str] = field(default_factory=list)


@dataclass
class PairStats(Tally):
    """What :func:`build_pairs` made and what it had to skip."""

    queries: int = 0
    positives: int = 0
    negatives: int = 0
    filtered: FilterStats = field(default_factory=FilterStats)


def relevant_ids(judgments: Mapping[str, int]) -> set[str]:
    """Documents judged relevant (grade > 0) for one query."""
    return {doc_id for doc_id, grade in judgments.items() if grade > 0}


def dedupe(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Keep the first (best-ranked) candidate of each document."""
    first: dict[str, Candidate] = {}
    for cand in candidates:
        first.setdefault(cand.doc_id, cand)
    return list(first.values())


def pick_negatives(pool: Sequence[Candidate], n: int, *, rng: random.Random,
                   strategy: Strategy = "sample") -> list[Candidate]:
    """``n`` of ``pool`` in rank order: the best-ranked (``top``) or drawn (``sample``); a small pool is cycled."""
    if not pool or n <= 0:
        return []
    if len(pool) >= n:
        return list(pool[:n]) if strategy == "top" else [pool[i] for i in sorted(rng.sample(range(len(pool)), n))]
    return [pool[i % len(pool)] for i in range(n)]


def split_queries(qids: Iterable[str], val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Seeded, sorted (train, validation) split of query ids, at least one validation query when the fraction is
    above 0 and there are two. Raises ValueError outside [0, 1)."""
    if not 0 <= val_fraction < 1:
        raise ValueError(f"validation fraction must be in [0, 1), got {val_fraction}")
    ordered = sorted(set(qids))
    n_val = round(len(ordered) * val_fraction)
    if val_fraction > 0 and len(ordered) >= 2:
        n_val = max(n_val, 1)
    shuffled = ordered[:]
    random.Random(seed).shuffle(shuffled)
    val = set(shuffled[:n_val])
    return [q for q in ordered if q not in val], [q for q in ordered if q in val]


def query_rng(seed: int, qid: str) -> random.Random:
    """A generator that depends only on the seed and the query, not on the order queries come in."""
    return random.Random(f"{seed}:{qid}")


def build_pairs(
    qids: Iterable[str],
    queries: Mapping[str, str],
    qrels: Qrels,
    candidates: Mapping[str, Sequence[Candidate]],
    positive_passages: Mapping[tuple[str, str], str],
    *,
    negatives: int,
    seed: int,
    strategy: Strategy = "sample",
    policy: NegativePolicy = NO_FILTER,
) -> tuple[list[Pair], PairStats]:
    """Training pairs for ``qids``: each judged-relevant document with a passage, and ``negatives`` mined per query
    from what ``policy`` keeps. Queries without a usable positive are skipped."""
    pairs: list[Pair] = []
    stats = PairStats()
    for qid, judged, cands, found in with_positives(qids, qrels, candidates, positive_passages, stats):
        positives = [Pair(qid, queries[qid], doc_id, text, 1) for doc_id, text in found]
        pool, fstats = filter_negatives(cands, judged, [p.passage for p in positives], policy)
        stats.filtered.add(fstats)
        negs = pick_negatives(pool, min(negatives, len(pool)), rng=query_rng(seed, qid), strategy=strategy)
        pairs.extend(positives)
        pairs.extend(Pair(qid, queries[qid], c.doc_id, c.text, 0) for c in negs)
        stats.queries += 1
        stats.positives += len(positives)
        stats.negatives += len(negs)
    return pairs, stats


def with_positives(qids: Iterable[str], qrels: Qrels, candidates: Mapping[str, Sequence[Candidate]],
                   positive_passages: Mapping[tuple[str, str], str], stats: Tally,
                   ) -> Iterator[tuple[str, set[str], list[Candidate], list[tuple[str, str]]]]:
    """Per query of ``qids`` (sorted): its relevant ids, deduplicated candidates and ``(doc id, passage)`` of each
    relevant document with a passage (in the candidates or ``positive_passages``); counts the rest in ``stats``."""
    for qid in sorted(set(qids)):
        judged = relevant_ids(qrels.get(qid, {}))
        cands = dedupe(candidates.get(qid, ()))
        by_doc = {c.doc_id: c.text for c in cands}
        found = [(d, by_doc.get(d) or positive_passages.get((qid, d))) for d in sorted(judged)]
        stats.positives_missing += sum(t is None for _, t in found)
        if positives := [(d, t) for d, t in found if t is not None]:
            yield qid, judged, cands, positives
        else:
            stats.skipped_queries.append(qid)


def validation_queries(
    qids: Iterable[str], queries: Mapping[str, str], qrels: Qrels, candidates: Mapping[str, Sequence[Candidate]]
) -> list[ValidationQuery]:
    """Held-out queries with their deduplicated fused candidates (none without a judged-relevant document)."""
    out = []
    for qid in sorted(set(qids)):
        rel = {d: g for d, g in qrels.get(qid, {}).items() if g > 0}
        if rel:
            out.append(ValidationQuery(qid, queries[qid], dedupe(candidates.get(qid, ())), rel))
    return out


@dataclass
class SplitData:
    """Queries and judgments of one split, and the files they were read from."""

    split: str
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    files_read: list[str]


@dataclass
class MinedData:
    """Pairs for training, candidates for validation, and where they came from."""

    train_qids: list[str]
    val_qids: list[str]
    pairs: list[Pair]
    validation: list[ValidationQuery]
    stats: PairStats
    seconds: float
    pool: list[ValidationQuery] = field(default_factory=list)  # the train queries' candidates (for k-fold)


class Miner(Protocol):
    """Where candidates and positive passages come from (:class:`IndexMiner`; fakes in tests)."""

    def candidates(self, query: str, depth: int) -> list[Candidate]: ...

    def best_chunks(self, wanted: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str], str]: ...


def load_split(dataset: Path, split: str, *, allow_test: bool = False, limit: int | None = None) -> SplitData:
    """Queries of ``split`` with a judged-relevant document, and their qrels (first ``limit``). Raises ConfigError."""
    check_split(split, allow_test)
    coll = load_collection(dataset, split).limit(limit)
    qrels = {q: dict(j) for q, j in coll.qrels.items() if relevant_ids(j)}
    if not qrels:
        raise ConfigError(f"split {split!r} of {coll.root} judges no document relevant: nothing to train on")
    qrels_file = coll.root.resolve() / "qrels" / coll.qrels_path.name
    return SplitData(split, {q: coll.queries[q] for q in qrels}, qrels, [str(qrels_file)])


@dataclass
class Collected:
    """What the index gave for one split: the query split, each query's candidates, the missed positives' chunks."""

    train_qids: list[str]
    val_qids: list[str]
    candidates: dict[str, list[Candidate]]
    positive_passages: dict[tuple[str, str], str]
    seconds: float


def collect(miner: Miner, data: SplitData, *, depth: int = 30, val_fraction: float = 0.1, seed: int = 42,
            progress: ProgressSink | None = None) -> Collected:
    """Split ``data``'s queries and fetch their hybrid top-``depth`` and the chunks of the positives it missed."""
    started = time.perf_counter()
    train_qids, val_qids = split_queries(data.queries, val_fraction, seed)
    candidates: dict[str, list[Candidate]] = {}
    task = Task(progress, "mining hard negatives", len(data.queries))
    for qid in train_qids + val_qids:
        candidates[qid] = miner.candidates(data.queries[qid], depth)
        task.advance()
    wanted = [
        (qid, data.queries[qid], doc_id)
        for qid in train_qids
        for doc_id in sorted(relevant_ids(data.qrels[qid]))
        if doc_id not in {c.doc_id for c in candidates[qid]}
    ]
    positive_passages = miner.best_chunks(wanted) if wanted else {}
    return Collected(train_qids, val_qids, candidates, positive_passages, time.perf_counter() - started)


def mine(miner: Miner, data: SplitData, *, depth: int = 30, negatives: int = 4, val_fraction: float = 0.1,
         seed: int = 42, strategy: Strategy = "sample", policy: NegativePolicy = NO_FILTER,
         progress: ProgressSink | None = None) -> MinedData:
    """The reranker's pairs and validation lists (``pool``: the train queries', for k-fold). Raises ConfigError."""
    got = collect(miner, data, depth=depth, val_fraction=val_fraction, seed=seed, progress=progress)
    pairs, stats = build_pairs(got.train_qids, data.queries, data.qrels, got.candidates, got.positive_passages,
                               negatives=negatives, seed=seed, strategy=strategy, policy=policy)
    if not pairs:
        raise no_pairs()
    val = validation_queries(got.val_qids, data.queries, data.qrels, got.candidates)
    pool = validation_queries(got.train_qids, data.queries, data.qrels, got.candidates)
    return MinedData(got.train_qids, got.val_qids, pairs, val, stats, got.seconds, pool)


def no_pairs() -> ConfigError:
    """The error when no judged-relevant document of the training queries is in the index."""
    return ConfigError("no training pairs: none of the judged-relevant documents is in the index "
                       "(was the collection's corpus ingested under this prefix?)")


class IndexMiner:
    """Candidates (hybrid search without rerank) and positive passages from the live index of ``settings``;
    ``passage`` makes a chunk's training text (default: what the query layer hands the reranker). Raises
    IndexNotFound."""

    def __init__(self, es: EngineClient, settings: Settings, embedder: Embedder | None = None,
                 passage: PassageFn = passage_text) -> None:
        from hybridsearch.query.client import SearchClient

        self.es = es
        self.settings = settings
        self.passage = passage
        self.index = checked_live_index(es, settings)
        # No query log for mining: thousands of training queries are not user traffic.
        self.client = SearchClient(es, settings, embedder=embedder, reranker=None, log_queries=False)

    def candidates(self, query: str, depth: int) -> list[Candidate]:
        """The hybrid top-``depth`` documents for ``query``, best chunk each, in fused order."""
        result = self.client.search(query, k=depth, mode="hybrid", rerank=False)
        return dedupe(Candidate(h.doc_id, self.passage({"title": h.title, "text": h.text}), h.score,
                                h.bm25.rank if h.bm25 else None, h.knn.rank if h.knn else None)
                      for h in result.hits)

    def best_chunks(self, wanted: Sequence[tuple[str, str, str]], batch: int = 100) -> dict[tuple[str, str], str]:
        """Per ``(qid, query, doc_id)``, the document's chunk best matching the query (absent ones left out)."""
        out: dict[tuple[str, str], str] = {}
        for start in range(0, len(wanted), batch):
            part = wanted[start:start + batch]
            searches: list[dict[str, Any]] = []
            for _qid, query, doc_id in part:
                filters: list[dict[str, Any]] = [{"term": {"doc_id": doc_id}}]
                if self.settings.index.tenant:
                    filters.append({"term": {"tenant": self.settings.index.tenant}})
                searches.append({"index": self.settings.index.alias})
                searches.append({
                    "size": 1, "_source": ["doc_id", "title", "text"],
                    "query": {"bool": {"filter": [*filters, visible_filter(self.settings.index.ingest_state)],
                                       "should": [{"match": {"text": query}}]}},
                })
            with engine_errors(f"fetch judged chunks from {self.settings.index.alias}"):
                responses = self.es.send(request.msearch(searches))["responses"]
            for (qid, _query, doc_id), resp in zip(part, responses, strict=True):
                if "error" in resp:
                    raise ClusterError(f"fetching chunk of {doc_id} from {self.settings.index.alias}: {resp['error']}")
                hits = resp.get("hits", {}).get("hits", [])
                if hits:
                    src = hits[0]["_source"]
                    out[(qid, doc_id)] = self.passage(src)
        return out
