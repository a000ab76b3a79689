"""Fusion calibrated on judgments (``hsp calibrate-fusion``): every fusion of a grid scored offline on the BM25 and
kNN lists of a split's judged queries; the default is kept unless one beats it by more than ``min_gain``."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsearch.errors import ConfigError
from hybridsearch.eval.datasets import check_disjoint, check_split
from hybridsearch.eval.metrics import evaluate
from hybridsearch.index.versions import checked_live_index, live_index, record_meta
from hybridsearch.progress import ProgressSink, Task
from hybridsearch.query.fusion import Fusion
from hybridsearch.query.results import Mode, SearchResult

if TYPE_CHECKING:
    from hybridsearch.engine import EngineClient
    from hybridsearch.settings import IndexSettings, Settings

SearchFn = Callable[[str, Mode], SearchResult]  # one mode's search (no rerank) at the depth lists are fused at
Scored = list[tuple[str, float]]  # (doc id, raw score), best first
ListsByQuery = dict[str, dict[str, Scored]]  # qid -> {"bm25": ..., "knn": ...}

RRF_KS = (1, 2, 5, 10, 20, 40, 60, 100)
SHARES = tuple(round(i / 20, 2) for i in range(21))  # the BM25 list's share of the weight
METRIC = "ndcg@10"
MIN_FOLD_QUERIES = 20  # fewer judged queries: no 2-fold check


def grid() -> list[Fusion]:
    """Every candidate: RRF per k and share, score fusion (minmax, zscore) per share; one entry per single list."""
    out = [Fusion(method="rrf", k=k, weights=(2 * s, 2 * (1 - s))) for k in RRF_KS for s in SHARES if 0 < s < 1]
    out += [Fusion(method=n, weights=(2 * s, 2 * (1 - s))) for n in ("minmax", "zscore") for s in SHARES if 0 < s < 1]
    out += [Fusion(method="rrf", weights=(1.0, 0.0)), Fusion(method="rrf", weights=(0.0, 1.0))]
    return out


def fused_rankings(fusion: Fusion, lists: ListsByQuery, qids: Sequence[str], depth: int = 100
                   ) -> dict[str, list[str]]:
    """The ranking ``fusion`` gives each query of ``qids`` from its lists (zero-weight lists left out)."""
    out: dict[str, list[str]] = {}
    for qid in qids:
        kept = {n: lst for n, lst in lists[qid].items() if fusion.weight(n) > 0}
        out[qid] = [doc for doc, _ in fusion.fuse(kept)[:depth]] if kept else []
    return out


def score(fusion: Fusion, lists: ListsByQuery, qrels: Mapping[str, Mapping[str, int]], qids: Sequence[str]) -> float:
    """Mean nDCG@10 of ``fusion`` over ``qids``."""
    means, _ = evaluate({q: qrels[q] for q in qids}, fused_rankings(fusion, lists, qids), [METRIC])
    return means[METRIC]


@dataclass
class Calibration:
    """What ``calibrate`` measured and chose; :func:`calibrate_fusion` adds where and when it recorded it."""

    chosen: Fusion
    queries: int
    scores: dict[str, float]  # Fusion.label -> mean nDCG@10 on all queries, best first
    default_score: float
    bm25_score: float
    knn_score: float
    chosen_score: float
    heldout: dict[str, float] = field(default_factory=dict)  # 2-fold: default vs chosen on unseen halves
    dataset: str = ""
    split: str = ""
    at: str = ""  # ISO time of the run
    index: str = ""
    recorded: bool = False  # in the index's _meta (not with dry_run)
    report: Path | None = None

    def meta(self) -> dict[str, Any]:
        """``_meta.fusion_calibration``: what the choice rests on."""
        return {"dataset": self.dataset, "split": self.split, "queries": self.queries, "at": self.at,
                "metric": "nDCG@10", "chosen": round(self.chosen_score, 4), "default": round(self.default_score, 4),
                "bm25": round(self.bm25_score, 4), "knn": round(self.knn_score, 4),
                **{f"heldout_{k}": round(v, 4) for k, v in self.heldout.items()}}


def choose(candidates: Sequence[Fusion], lists: ListsByQuery, qrels: Mapping[str, Mapping[str, int]],
           qids: Sequence[str], min_gain: float) -> tuple[Fusion, dict[str, float]]:
    """The best of ``candidates`` on ``qids`` (the default unless beaten by ``min_gain``) and all scores, best first."""
    default = Fusion()
    scores = {f: score(f, lists, qrels, qids) for f in (default, *candidates)}
    best = max(scores, key=lambda f: scores[f])
    chosen = best if scores[best] > scores[default] + min_gain else default
    return chosen, {f.label: v for f, v in sorted(scores.items(), key=lambda kv: -kv[1])}


def calibrate(lists: ListsByQuery, qrels: Mapping[str, Mapping[str, int]], *, min_gain: float = 0.002,
              seed: int = 13, candidates: Sequence[Fusion] | None = None) -> Calibration:
    """Choose a fusion for the queries in ``lists`` (see the module's docstring)."""
    cands = list(candidates if candidates is not None else grid())
    qids = sorted(q for q in lists if q in qrels)
    chosen, scores = choose(cands, lists, qrels, qids, min_gain)
    single = {n: score(Fusion(weights=w), lists, qrels, qids) for n, w in (("bm25", (1.0, 0.0)), ("knn", (0.0, 1.0)))}
    shuffled = qids[:]
    random.Random(seed).shuffle(shuffled)
    halves = shuffled[::2], shuffled[1::2]
    heldout: dict[str, float] = {}
    for pick, judge in (halves, halves[::-1]) if len(qids) >= MIN_FOLD_QUERIES else ():
        fold_choice, _ = choose(cands, lists, qrels, pick, min_gain)
        share = len(judge) / len(qids)
        heldout["default"] = heldout.get("default", 0.0) + share * score(Fusion(), lists, qrels, judge)
        heldout["chosen"] = heldout.get("chosen", 0.0) + share * score(fold_choice, lists, qrels, judge)
    return Calibration(chosen=chosen, queries=len(qids), scores=scores, default_score=scores[Fusion().label],
                       bm25_score=single["bm25"], knn_score=single["knn"], chosen_score=scores[chosen.label],
                       heldout=heldout)


def record_lists(search: SearchFn, queries: Mapping[str, str], *,
                 ignore_identical_ids: bool = True, on_query: Callable[[], None] | None = None) -> ListsByQuery:
    """BM25 and kNN lists (documents with their raw scores) of every query, from a one-mode search function."""
    out: ListsByQuery = {}
    modes: tuple[tuple[str, Mode], ...] = (("bm25", "bm25"), ("knn", "dense"))
    for qid, text in queries.items():
        lists: dict[str, Scored] = {}
        for name, mode in modes:
            lists[name] = []
            for h in sorted(search(text, mode).hits, key=lambda h: h.rank):
                stage = h.bm25 if name == "bm25" else h.knn
                if stage is not None and not (ignore_identical_ids and h.doc_id == qid):
                    lists[name].append((h.doc_id, stage.score))
        out[qid] = lists
        if on_query:
            on_query()
    return out


def record_fusion(es: EngineClient, cfg: IndexSettings, fusion: Fusion, *, calibration: dict[str, Any] | None = None,
                  index: str | None = None) -> str:
    """Record ``fusion`` and ``calibration`` in the ``_meta`` of ``index`` (default: the live index); returns the
    index. Raises IndexNotFound, AliasConflict, ClusterError."""
    index = index or live_index(es, cfg)
    record_meta(es, index, fusion=fusion.to_meta(), fusion_calibration=calibration)
    return index


def calibrate_fusion(dataset: Path, settings: Settings, *, split: str = "train", allow_test: bool = False,
                     prefix: str | None = None, min_gain: float = 0.002, limit_queries: int | None = None,
                     dry_run: bool = False, keep_identical_ids: bool = False, out: Path | None = None,
                     progress: ProgressSink | None = None, es: EngineClient | None = None,
                     search: SearchFn | None = None) -> Calibration:
    """Choose the fusion of ``dataset``'s index on ``split``'s judged queries, record it (unless ``dry_run``), write
    the JSON report under ``out``. Raises ConfigError, IndexNotFound, IndexMismatch, ClusterError."""
    from hybridsearch.engine import EngineClient
    from hybridsearch.eval.datasets import load_collection
    from hybridsearch.eval.harness import eval_settings

    check_split(split, allow_test, purpose="calibrate")
    if min_gain < 0:
        raise ConfigError("--min-gain must be ≥ 0")
    collection = load_collection(dataset, split).limit(limit_queries)
    if split != "test":
        check_disjoint(dataset, collection.queries, purpose="calibration")
    s = eval_settings(settings, prefix or f"eval-{collection.name}")
    with contextlib.ExitStack() as stack:
        client_es = es if es is not None else stack.enter_context(contextlib.closing(EngineClient(s.es)))
        index = checked_live_index(client_es, s)
        if search is None:
            from hybridsearch.query.client import SearchClient

            k = min(s.query.max_k, max(s.query.bm25_k, s.query.knn_k))
            client = stack.enter_context(contextlib.closing(SearchClient(client_es, s, reranker=None,
                                                                         log_queries=False)))

            def search(text: str, mode: Mode) -> SearchResult:
                return client.search(text, k=k, mode=mode, rerank=False)

        task = Task(progress, "lists", len(collection.queries))
        lists = record_lists(search, collection.queries, ignore_identical_ids=not keep_identical_ids,
                             on_query=task.advance)
        task.finish()
        cal = calibrate(lists, collection.qrels, min_gain=min_gain)
        cal.dataset, cal.split, cal.index, cal.recorded = collection.name, collection.split, index, not dry_run
        cal.at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        if not dry_run:
            record_fusion(client_es, s.index, cal.chosen, calibration=cal.meta(), index=index)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        cal.report = out / f"calibrate-{collection.name}-{collection.split}-{cal.at.replace(':', '')}.json"
        cal.report.write_text(json.dumps({"index": index, "fusion": cal.chosen.to_meta(), "calibration": cal.meta(),
                                          "grid": cal.scores}, indent=2), encoding="utf-8")
    return cal
