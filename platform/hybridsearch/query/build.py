"""Pure request building: input checks (:func:`plan`), the BM25, passage and kNN bodies and their ``_msearch``
lines, and how widely kNN looks (:func:`knn_width`; the measurements behind it are in docs/scale.md)."""

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
#: Fields fetched for each hit; the vector and offsets stay on the server.
SOURCE_FIELDS = ["doc_id", "chunk_id", "position", "parent_id", "parent_text", "title", "text", "metadata"]
#: The list of each BM25 document's best-matching chunk (:func:`passage_body`); it ranks nothing.
PASSAGES = "passages"
#: The field a section's title and text are copied into (``copy_to`` in the chunk template).
JOINED_FIELD = "section_all"
_DROP_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn"}
#: ASCII's only characters in :data:`_DROP_CATEGORIES` (controls), for :func:`_normalised`'s fast path
_ASCII_CONTROLS = str.maketrans({i: " " for i in (*range(32), 127)})

#: candidates enough for a shard of up to :data:`BASE_SHARD_CHUNKS` chunks (docs/scale.md)
BASE_CANDIDATES = 200
BASE_SHARD_CHUNKS = 350_000
#: how candidates grow with a shard beyond that: ``(chunks / BASE_SHARD_CHUNKS) ** GROWTH`` times as many
GROWTH = 0.5
#: the most candidates an engine takes (Elasticsearch and OpenSearch refuse more)
MAX_CANDIDATES = 10_000
#: rescoring of quantized vectors when the engine has it: ``k`` × this many candidates rescored
DEFAULT_OVERSAMPLE = 1.0
#: vector index options whose stored vectors are quantized (Elasticsearch names; OpenSearch's ``sq`` is ``int8_hnsw``)
QUANTIZED_PREFIXES = ("int8_", "int4_", "bbq_")


def searchable(ch: str) -> bool:
    """Whether ``ch`` can be a search term: a letter, a digit, or an "other symbol" (emoji, ©, ★), as the
    standard analyzer keeps them (punctuation and math/currency/modifier symbols it drops)."""
    return ch.isalnum() or unicodedata.category(ch) == "So"


def _drop_odd(text: str) -> str:
    return "".join(" " if unicodedata.category(ch) in _DROP_CATEGORIES else ch for ch in text)


def _normalised(raw: str) -> str:
    """NFKC with odd characters made spaces (ASCII: only its controls, in one pass)."""
    if raw.isascii():
        return raw.translate(_ASCII_CONTROLS)
    return _drop_odd(unicodedata.normalize("NFKC", _drop_odd(raw)))


def clean_query(text: object, max_chars: int) -> tuple[str, bool]:
    """The query as searched (NFKC, odd characters as spaces, whitespace collapsed, cut at the last space before
    ``max_chars``) and whether it was cut. Raises QueryError for a non-string or nothing :func:`searchable` left."""
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
    """The checked :class:`Plan` of ``search``'s arguments (``tenant``: every search is filtered to it;
    ``state_index``: the prefix's ingest state; ``metadata``: the index's typed metadata fields). Raises QueryError."""
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
    """What the BM25 list scores on the searched index (:func:`bm25_scope`): ``sections`` or chunks; over sections,
    ``joined`` (:data:`JOINED_FIELD`) or ``multi_match`` over title and text, and whether the passage list
    (:func:`passage_body`) finds each hit's chunk (``passages``)."""

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
    """The :class:`Bm25Scope` for an index with ``section_words`` (its ``_meta``): sections where it has them, results
    are collapsed per document and ``bm25_unit`` is auto; joined over sections unless ``bm25_fields`` is separate."""
    sections = section_words is not None and q.collapse and q.bm25_unit == "auto"
    return Bm25Scope(sections, sections and q.bm25_fields == "auto", q.best_passage)


def bm25_fields(q: QuerySettings, scope: Bm25Scope = CHUNKS) -> list[str]:
    """The fields BM25 scores: :data:`JOINED_FIELD`, or the (boosted) title and the text of sections or chunks."""
    if scope.joined:
        return [JOINED_FIELD]
    title, text = ("section_title", "section_text") if scope.sections else ("title", "text")
    return [f"{title}^{q.title_boost:g}", text]


def bm25_body(q: QuerySettings, p: Plan, scope: Bm25Scope = CHUNKS) -> dict[str, Any]:
    """A ``match`` on the joined field, else ``multi_match`` (best_fields) over :func:`bm25_fields`, filtered by
    :func:`search_filters`. Over sections only a section's first chunk matches, so each hit stands for its section."""
    match: dict[str, Any]
    if scope.joined:
        match = {"match": {JOINED_FIELD: {"query": p.query, "operator": q.operator}}}
    else:
        match = {"multi_match": {"query": p.query, "fields": bm25_fields(q, scope), "type": "best_fields",
                                 "tie_breaker": q.tie_breaker, "operator": q.operator}}
    body = _common(q, list_size(p, q.bm25_k))
    body["query"] = {"bool": {"must": [match], "filter": search_filters(p)}}
    return body


def passage_body(q: QuerySettings, p: Plan) -> dict[str, Any]:
    """The passage list, which picks each BM25 document's chunk to show: BM25 over each chunk's text, any query word
    (a section may hold every word while no one chunk does), the same filters, ``passage_k`` documents."""
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
    """``num_candidates`` for ``k`` neighbours on shards of at most ``shard_chunks`` chunks (None: unknown):
    :data:`BASE_CANDIDATES`, grown past :data:`BASE_SHARD_CHUNKS`, a multiple of 50, from ``k`` to
    :data:`MAX_CANDIDATES`."""
    wanted = float(BASE_CANDIDATES)
    if shard_chunks is not None and shard_chunks > BASE_SHARD_CHUNKS:
        wanted *= (shard_chunks / BASE_SHARD_CHUNKS) ** GROWTH
    return min(MAX_CANDIDATES, max(k, 50 * math.ceil(wanted / 50)))


def knn_width(q: QuerySettings, k: int, shard_chunks: int | None, *, quantized: bool, can_rescore: bool) -> KnnWidth:
    """The width of a kNN search for ``k`` neighbours on an index whose largest shard holds ``shard_chunks`` chunks
    (None: unknown), whose vectors are ``quantized`` or not, on an engine that ``can_rescore`` them or not."""
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
        nc = min(MAX_CANDIDATES, max(nc, math.ceil(k * oversample)))
        why += f"; quantized vectors rescored on their floats ({oversample:g} × k)"
    return KnnWidth(nc, oversample, why)


def knn_size(q: QuerySettings) -> int:
    """How many nearest chunks kNN gathers: ``knn_k``, times ``knn_overfetch`` with ``collapse``."""
    return min(10_000, math.ceil(q.knn_k * q.knn_overfetch)) if q.collapse else q.knn_k


def text_lines(q: QuerySettings, alias: str, p: Plan, scope: Bm25Scope = CHUNKS) -> list[dict[str, Any]]:
    """The ``_msearch`` lines on ``alias`` of ``p``'s lists that need no query vector: BM25 and, where ``scope``
    finds them, its passage list; none for dense."""
    if p.mode not in ("hybrid", "bm25"):
        return []
    lines = [{"index": alias}, bm25_body(q, p, scope)]
    return [*lines, {"index": alias}, passage_body(q, p)] if scope.finds_passages else lines


def knn_lines(q: QuerySettings, alias: str, p: Plan, vector: Iterable[float], dialect: Dialect,
              width: KnnWidth | None = None) -> list[dict[str, Any]]:
    """The ``_msearch`` lines on ``alias`` of ``p``'s kNN list for the query ``vector``: the engine's kNN search with
    :func:`search_filters` as a pre-filter, gathering :func:`knn_size` chunks; ``width``: as the index check chose
    it (None: an index of unknown size on an engine that does not rescore)."""
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
