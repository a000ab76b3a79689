"""Pure request building: input checks (:func:`plan`), the lists' ``_msearch`` lines, how widely kNN looks."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from hybridsearch.engine.dialect import Dialect
from hybridsearch.errors import QueryError
from hybridsearch.index.metadata import MetadataFields
from hybridsearch.index.visibility import visible_filter
from hybridsearch.query.filters import Filter, filter_dsl
from hybridsearch.query.results import Mode
from hybridsearch.query.window import HIGHLIGHTED_FIELD, PASSAGE_FIELDS, highlight_body
from hybridsearch.settings import QuerySettings

MODES: tuple[str, ...] = get_args(Mode)
SOURCE_FIELDS = ["doc_id", "chunk_id", "position", "parent_id", "parent_text", "title", "text", "metadata"]
PASSAGES = "passages"  # the list of each BM25 document's best-matching chunk; it ranks nothing
JOINED_FIELD = "section_all"  # a section's title and text (``copy_to`` in the chunk template)
_DROP_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn"}
_ASCII_CONTROLS = str.maketrans({i: " " for i in (*range(32), 127)})  # ASCII's only _DROP_CATEGORIES

# num_candidates (docs/scale.md): BASE_CANDIDATES up to BASE_SHARD_CHUNKS a shard, then (chunks / BASE) ** GROWTH
# times as many, at most MAX_CANDIDATES (what the engines take). Quantized vectors rescore k × DEFAULT_OVERSAMPLE
# candidates on their floats: at 3 × k the whole list fusion reads matches exact search (recall@200 ≥ 0.989 on SciFact,
# NFCorpus and 300k synthetic chunks; at 1 × k only its top 10 does, and 3-13 % of the 200 are missing)
BASE_CANDIDATES = 200
BASE_SHARD_CHUNKS = 350_000
GROWTH = 0.5
MAX_CANDIDATES = 10_000
DEFAULT_OVERSAMPLE = 3.0
QUANTIZED_PREFIXES = ("int8_", "int4_", "bbq_")  # Elasticsearch's names; OpenSearch's ``sq`` is ``int8_hnsw``


def searchable(ch: str) -> bool:
    """Whether ``ch`` can be a search term, as the standard analyzer keeps it: a letter, digit or "other symbol"."""
    return ch.isalnum() or unicodedata.category(ch) == "So"


def _drop_odd(text: str) -> str:
    return "".join(" " if unicodedata.category(ch) in _DROP_CATEGORIES else ch for ch in text)


def _normalised(raw: str) -> str:
    """NFKC with odd characters made spaces (ASCII: only its controls, in one pass)."""
    if raw.isascii():
        return raw.translate(_ASCII_CONTROLS)
    return _drop_odd(unicodedata.normalize("NFKC", _drop_odd(raw)))


def clean_query(text: object, max_chars: int) -> tuple[str, bool]:
    """The query as searched (NFKC, odd characters as spaces, whitespace collapsed, cut at a space before
    ``max_chars``) and whether it was cut. Raises QueryError for a non-string or nothing searchable."""
    if not isinstance(text, str):
        raise QueryError(f"the query must be a string, got {type(text).__name__}")
    raw = text[: max_chars * 4]  # a huge input costs little; the cut below is the documented one
    q = " ".join(_normalised(raw).split())
    if not any(searchable(ch) for ch in q):
        raise QueryError("the query is empty: give some words to search for")
    truncated = len(text) > len(raw) or len(q) > max_chars
    if len(q) > max_chars:
        cut = q.rfind(" ", 0, max_chars + 1)
        q = q[: cut if cut > max_chars // 2 else max_chars].rstrip()
    return q, truncated


@dataclass(frozen=True)
class Plan:
    """Everything a search needs, checked (:func:`plan`)."""

    query: str
    truncated: bool
    mode: Mode
    k: int
    page: int
    rerank: bool
    explain: bool
    tenant: str | None = None  # every list is filtered to it
    filter_clause: dict[str, Any] | None = None  # the caller's filters as DSL (the query log records it)
    highlight: bool = False  # the passages' matches wanted as highlights (the engine's highlighter: it costs)
    state_index: str | None = None  # the prefix's ingest state: documents being written are not searched
    depth: int | None = None  # hits each list returns (:func:`list_size`); None: its own k, as fusion wants

    @property
    def wants_vector(self) -> bool:
        return self.mode in ("hybrid", "dense")


def plan(
    q: QuerySettings, tenant: str | None, query: object, *, k: int = 10, mode: str = "hybrid",
    filters: Filter | Mapping[str, Any] | None = None, rerank: bool = True, explain: bool = False, page: int = 1,
    state_index: str | None = None, metadata: MetadataFields | None = None, highlight: bool = False,
) -> Plan:
    """The checked :class:`Plan` of ``search``'s arguments. Raises QueryError."""
    if mode not in MODES:
        raise QueryError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= q.max_k:
        raise QueryError(f"k must be an integer from 1 to {q.max_k} (HSP_QUERY__MAX_K), got {k!r}")
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise QueryError(f"page must be an integer from 1, got {page!r}")
    text, truncated = clean_query(query, q.max_query_chars)
    return Plan(query=text, truncated=truncated, mode=mode, k=k, page=page, rerank=rerank,  # type: ignore[arg-type]
                explain=explain, tenant=tenant, filter_clause=filter_dsl(filters, metadata), state_index=state_index,
                highlight=highlight)


def list_size(p: Plan, k: int) -> int:
    """Hits a list of ``k`` (``bm25_k``, ``knn_k``) returns for ``p``: all ``k`` unless ``p.depth`` asks for fewer."""
    return k if p.depth is None else max(1, min(k, p.depth))


def _common(q: QuerySettings, size: int) -> dict[str, Any]:
    body: dict[str, Any] = {"size": size, "_source": SOURCE_FIELDS, "track_total_hits": False}
    if q.collapse:
        body["collapse"] = {"field": "doc_id"}
    return body


def search_filters(p: Plan) -> list[dict[str, Any]]:
    """The plan's tenant term and filter, and :func:`visible_filter` (the one read path)."""
    tenant = [] if p.tenant is None else [{"term": {"tenant": p.tenant}}]
    return [*tenant, *([] if p.filter_clause is None else [p.filter_clause]), visible_filter(p.state_index)]


@dataclass(frozen=True)
class Bm25Scope:
    """What the BM25 list scores: ``sections`` or chunks, ``joined`` (:data:`JOINED_FIELD`) or title and text, and
    whether the passage list finds each hit's chunk (``passages``)."""

    sections: bool = False
    joined: bool = False
    passages: bool = True

    @property
    def unit(self) -> str:
        return "section" if self.sections else "chunk"

    @property
    def finds_passages(self) -> bool:
        return self.sections and self.passages


CHUNKS = Bm25Scope()


def bm25_scope(q: QuerySettings, section_words: int | None) -> Bm25Scope:
    """The :class:`Bm25Scope` for an index with ``section_words`` (its ``_meta``), as the settings allow."""
    sections = section_words is not None and q.collapse and q.bm25_unit == "auto"
    return Bm25Scope(sections, sections and q.bm25_fields == "auto", q.best_passage)


def bm25_body(q: QuerySettings, p: Plan, scope: Bm25Scope = CHUNKS) -> dict[str, Any]:
    """A ``match`` on the joined field, else ``multi_match`` over the (boosted) title and the text, filtered."""
    match: dict[str, Any]
    if scope.joined:
        match = {"match": {JOINED_FIELD: {"query": p.query, "operator": q.operator}}}
    else:
        title, text = ("section_title", "section_text") if scope.sections else ("title", "text")
        fields = [f"{title}^{q.title_boost:g}", text]
        match = {"multi_match": {"query": p.query, "fields": fields, "type": "best_fields",
                                 "tie_breaker": q.tie_breaker, "operator": q.operator}}
    body = _common(q, list_size(p, q.bm25_k))
    body["query"] = {"bool": {"must": [match], "filter": search_filters(p)}}
    return body


def passage_body(q: QuerySettings, p: Plan) -> dict[str, Any]:
    """The passage list: each BM25 document's best chunk by text, any query word (no one chunk may hold all)."""
    body: dict[str, Any] = {
        "size": q.passage_k, "_source": PASSAGE_FIELDS if p.highlight else [*PASSAGE_FIELDS, HIGHLIGHTED_FIELD],
        "track_total_hits": False, "collapse": {"field": "doc_id"},
        "query": {"bool": {"must": [{"match": {HIGHLIGHTED_FIELD: {"query": p.query, "operator": "or"}}}],
                           "filter": search_filters(p)}}}
    if p.highlight:
        body["highlight"] = highlight_body()
    return body


@dataclass(frozen=True)
class KnnWidth:
    """How widely one kNN search looks: ``num_candidates`` per shard, ``oversample`` (None: no rescoring), why."""

    num_candidates: int
    oversample: float | None
    reason: str


def is_quantized(index_options_type: str | None) -> bool:
    """Whether vectors indexed with this ``index_options.type`` are searched in a quantized form."""
    return bool(index_options_type) and str(index_options_type).startswith(QUANTIZED_PREFIXES)


def auto_candidates(k: int, shard_chunks: int | None) -> int:
    """``num_candidates`` for ``k`` neighbours on shards of at most ``shard_chunks`` chunks (None: unknown)."""
    wanted = float(BASE_CANDIDATES)
    if shard_chunks is not None and shard_chunks > BASE_SHARD_CHUNKS:
        wanted *= (shard_chunks / BASE_SHARD_CHUNKS) ** GROWTH
    return min(MAX_CANDIDATES, max(k, 50 * math.ceil(wanted / 50)))


def knn_width(q: QuerySettings, k: int, shard_chunks: int | None, *, quantized: bool, can_rescore: bool) -> KnnWidth:
    """The width of a kNN search for ``k`` neighbours, the largest shard holding ``shard_chunks`` chunks (or None)."""
    if q.num_candidates is not None:
        nc = min(MAX_CANDIDATES, max(k, q.num_candidates))
        why = f"num_candidates {nc} (HSP_QUERY__NUM_CANDIDATES)"
    else:
        nc = auto_candidates(k, shard_chunks)
        size = "shard size not known" if shard_chunks is None else f"largest shard {shard_chunks:,} chunks"
        why = f"num_candidates {nc} for k {k} ({size})"
    oversample: float | None = None
    if q.rescore_oversample == 0:
        why += "; no rescoring (HSP_QUERY__RESCORE_OVERSAMPLE=0)"
    elif not quantized:
        why += "; float vectors, nothing to rescore"
    elif not can_rescore:
        why += "; quantized vectors, not rescored (the engine cannot)"
    else:
        oversample = q.rescore_oversample or DEFAULT_OVERSAMPLE
        wider = min(MAX_CANDIDATES, max(nc, math.ceil(k * oversample)))
        why += f"; quantized vectors rescored on their floats ({oversample:g} × k" + (
            f", num_candidates raised to {wider})" if wider > nc else ")")
        nc = wider
    return KnnWidth(nc, oversample, why)


def knn_size(q: QuerySettings) -> int:
    """How many nearest chunks kNN gathers: ``knn_k``, times ``knn_overfetch`` with ``collapse``."""
    return min(10_000, math.ceil(q.knn_k * q.knn_overfetch)) if q.collapse else q.knn_k


def text_lines(q: QuerySettings, alias: str, p: Plan, scope: Bm25Scope = CHUNKS) -> list[dict[str, Any]]:
    """The ``_msearch`` lines of ``p``'s lists that need no vector: BM25 and, where ``scope`` has it, passages."""
    if p.mode not in ("hybrid", "bm25"):
        return []
    lines = [{"index": alias}, bm25_body(q, p, scope)]
    return [*lines, {"index": alias}, passage_body(q, p)] if scope.finds_passages else lines


def knn_lines(q: QuerySettings, alias: str, p: Plan, vector: Iterable[float], dialect: Dialect,
              width: KnnWidth | None = None) -> list[dict[str, Any]]:
    """The ``_msearch`` lines of ``p``'s kNN list for ``vector``, pre-filtered (``width`` None: not rescored)."""
    k = knn_size(q)
    width = width or knn_width(q, k, None, quantized=False, can_rescore=False)
    body = _common(q, list_size(p, q.knn_k))
    body.update(dialect.knn_search("embedding", list(vector), k, max(width.num_candidates, k), search_filters(p),
                                   width.oversample))
    return [{"index": alias}, body]


def list_names(p: Plan, scope: Bm25Scope = CHUNKS) -> list[str]:
    """The lists ``p`` searches, in order: ``bm25``, its ``passages`` where ``scope`` finds them, ``knn``."""
    text = ["bm25", PASSAGES] if scope.finds_passages else ["bm25"]
    return [*(text if p.mode in ("hybrid", "bm25") else []), *(["knn"] if p.wants_vector else [])]
