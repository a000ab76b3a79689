"""Pure request building: input checks, the BM25 and kNN bodies, and the ``_msearch`` payload.

Shared by :class:`~hybridsearch.query.client.SearchClient` and its async twin; nothing here does I/O.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from hybridsearch.engine.dialect import Dialect
from hybridsearch.errors import QueryError
from hybridsearch.index.metadata import MetadataFields
from hybridsearch.index.visibility import visible_filter
from hybridsearch.query.candidates import KnnWidth, knn_width
from hybridsearch.query.filters import Filter, filter_clauses, filter_summary
from hybridsearch.query.passages import HIGHLIGHTED_FIELD, PASSAGE_FIELDS, highlight_body
from hybridsearch.query.results import Mode
from hybridsearch.settings import QuerySettings

MODES: tuple[str, ...] = get_args(Mode)
#: Fields fetched for each hit; the vector and offsets stay on the server.
SOURCE_FIELDS = ["doc_id", "chunk_id", "position", "parent_id", "parent_text", "title", "text", "metadata"]
#: The list of each BM25 document's best-matching chunk (:func:`passage_body`); it ranks nothing.
PASSAGES = "passages"
_DROP_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn"}


def searchable(ch: str) -> bool:
    """Whether ``ch`` can be a search term: a letter, a digit, or an "other symbol" (emoji, ©, ★).

    The standard analyzer makes tokens of letters, digits and emoji (``🔥`` is an ``<EMOJI>`` token),
    and drops punctuation and math/currency/modifier symbols (``$``, ``+``, ``→``), so a query of
    only those finds nothing by BM25 and is refused; So is the closest Unicode category to emoji.
    """
    return ch.isalnum() or unicodedata.category(ch) == "So"


def _drop_odd(text: str) -> str:
    return "".join(" " if unicodedata.category(ch) in _DROP_CATEGORIES else ch for ch in text)


#: ASCII's only characters in :data:`_DROP_CATEGORIES` (controls), for :func:`_normalised`'s fast path
_ASCII_CONTROLS = str.maketrans({i: " " for i in (*range(32), 127)})


def _normalised(raw: str) -> str:
    """NFKC with odd characters made spaces; ASCII text (most queries) takes one C-level pass: NFKC leaves it
    as it is and its only odd characters are the controls."""
    if raw.isascii():
        return raw.translate(_ASCII_CONTROLS)
    return _drop_odd(unicodedata.normalize("NFKC", _drop_odd(raw)))


def clean_query(text: object, max_chars: int) -> tuple[str, bool]:
    """The query as searched, and whether it was truncated.

    Unicode is NFKC-normalised; control, format (zero-width, bidi), surrogate, private-use and
    unassigned characters become spaces; whitespace runs collapse to one space. Text longer than
    ``max_chars`` is cut at the last space before the limit (or at the limit). Raises QueryError
    for a non-string or a query with nothing searchable left (see :func:`searchable`).
    """
    if not isinstance(text, str):
        raise QueryError(f"the query must be a string, got {type(text).__name__}")
    # Cut early so a huge input costs little; the later cut is the documented one.
    raw = text[: max_chars * 4]
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
    """Everything a search needs, checked: built by :func:`plan`, consumed by the clients."""

    query: str
    truncated: bool
    mode: Mode
    k: int
    page: int
    rerank: bool
    explain: bool
    filters: list[dict[str, Any]] = field(default_factory=list)
    highlight: bool = False  # the passages' matches wanted as highlights (the engine's highlighter: it costs)
    filter_log: dict[str, Any] | None = None
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
    """Check the arguments of ``search`` and build a :class:`Plan` (``tenant``: the tenant every search is
    filtered to, ``index.tenant``; ``state_index``: the prefix's ingest state, whose hidden documents are never
    searched, :mod:`hybridsearch.index.visibility`; ``metadata``: the searched index's typed metadata fields, which
    metadata filters are checked against and sent to). Raises QueryError."""
    if mode not in MODES:
        raise QueryError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= q.max_k:
        raise QueryError(f"k must be an integer from 1 to {q.max_k} (HSP_QUERY__MAX_K), got {k!r}")
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise QueryError(f"page must be an integer from 1, got {page!r}")
    text, truncated = clean_query(query, q.max_query_chars)
    clauses = filter_clauses(filters, tenant, metadata)
    return Plan(query=text, truncated=truncated, mode=mode, k=k, page=page, rerank=rerank,  # type: ignore[arg-type]
                explain=explain, filters=clauses, filter_log=filter_summary(filters, metadata), state_index=state_index,
                highlight=highlight)


def list_size(p: Plan, k: int) -> int:
    """Hits a list of ``k`` (``bm25_k``, ``knn_k``) returns for ``p``: all ``k`` unless ``p.depth`` asks for fewer.
    A search of one list asks for what its page and rerank need (``SearchCore``): the top of a list does not depend
    on how many hits are fetched after it, and every hit fetched costs the engine and the client its fields."""
    return k if p.depth is None else max(1, min(k, p.depth))


def _common(q: QuerySettings, size: int) -> dict[str, Any]:
    body: dict[str, Any] = {"size": size, "_source": SOURCE_FIELDS, "track_total_hits": False}
    if q.collapse:
        body["collapse"] = {"field": "doc_id"}
    return body


def search_filters(p: Plan) -> list[dict[str, Any]]:
    """The plan's filters plus :func:`~hybridsearch.index.visibility.visible_filter`: chunks of a document that is still
    being written are never searched (the one read path every reader shares)."""
    return [*p.filters, visible_filter(p.state_index)]


#: The field a section's title and text are copied into (``copy_to`` in the chunk template): BM25 scores them as
#: one field, as Pyserini's one-field BEIR runs do.
JOINED_FIELD = "section_all"


@dataclass(frozen=True)
class Bm25Scope:
    """What the BM25 list scores on the searched index (:func:`bm25_scope`): ``sections`` (each section's
    first chunk carries the section's title and text) and, over sections, ``joined`` (title and text as one
    field, :data:`JOINED_FIELD`) or not (``multi_match`` over both, ``title_boost`` and ``tie_breaker``);
    ``passages``: over sections, whether the passage list (:func:`passage_body`) finds each hit's chunk."""

    sections: bool = False
    joined: bool = False
    passages: bool = True

    @property
    def unit(self) -> str:
        return "section" if self.sections else "chunk"

    @property
    def finds_passages(self) -> bool:
        """Whether BM25 searches send the passage list: over sections, unless ``best_passage`` is off."""
        return self.sections and self.passages


CHUNKS = Bm25Scope()


def bm25_on_sections(q: QuerySettings, section_words: int | None) -> bool:
    """Whether BM25 scores sections: the index has them (``section_words``, from its ``_meta``), results are
    collapsed per document and ``bm25_unit`` is auto. Chunk-level results keep chunk-level BM25."""
    return section_words is not None and q.collapse and q.bm25_unit == "auto"


def has_joined_field(properties: Mapping[str, Any]) -> bool:
    """Whether an index's mapping ``properties`` copy both section fields into :data:`JOINED_FIELD` (indices built
    before it existed do not, and a field added later would hold nothing for the documents already written)."""
    def copies(name: str) -> bool:
        to = (properties.get(name) or {}).get("copy_to") or []
        return JOINED_FIELD in ([to] if isinstance(to, str) else to)
    return JOINED_FIELD in properties and copies("section_title") and copies("section_text")


def bm25_scope(q: QuerySettings, section_words: int | None, properties: Mapping[str, Any]) -> Bm25Scope:
    """The :class:`Bm25Scope` for an index with ``section_words`` (its ``_meta``) and mapping ``properties``:
    sections per :func:`bm25_on_sections`; joined where the index has the field and ``bm25_fields`` is auto."""
    sections = bm25_on_sections(q, section_words)
    return Bm25Scope(sections, sections and q.bm25_fields == "auto" and has_joined_field(properties), q.best_passage)


def bm25_fields(q: QuerySettings, scope: Bm25Scope = CHUNKS) -> list[str]:
    """The fields BM25 scores: :data:`JOINED_FIELD`, or the title (boosted by ``title_boost``) and text of the
    sections or of each chunk."""
    if scope.joined:
        return [JOINED_FIELD]
    title, text = ("section_title", "section_text") if scope.sections else ("title", "text")
    return [f"{title}^{q.title_boost:g}", text]


def bm25_body(q: QuerySettings, p: Plan, scope: Bm25Scope = CHUNKS) -> dict[str, Any]:
    """A ``match`` on the joined field, else ``multi_match`` (best_fields, ``tie_breaker``) over
    :func:`bm25_fields`; filters (:func:`search_filters`) in ``bool.filter``. Over sections only the first
    chunk of each section matches, so the list ranks sections (whole documents, unless long) and each hit
    stands for its document."""
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
    """The passage list: BM25 over each chunk's text, the same filters (:func:`search_filters`), collapsed per
    document, ``passage_k`` documents; with ``p.highlight`` the text highlighted
    (:func:`~hybridsearch.query.passages.highlight_body`).

    It ranks nothing: it picks, for each document the BM25 list over sections found, the chunk to show
    (:mod:`hybridsearch.query.passages`). So it scores the text alone (a document's title is the same on all its
    chunks and cannot choose between them; every hit is a chunk whose text matched), and matches any query word
    (operator ``or``) whatever ``operator`` says: under ``and`` a section may hold every word while no one chunk
    does, and its best chunk is still wanted. Only what differs between a document's chunks comes back
    (:data:`~hybridsearch.query.passages.PASSAGE_FIELDS`, and the text: inside the highlight when there is one);
    the rest is the BM25 hit's.
    """
    body: dict[str, Any] = {
        "size": q.passage_k, "_source": PASSAGE_FIELDS if p.highlight else [*PASSAGE_FIELDS, HIGHLIGHTED_FIELD],
        "track_total_hits": False, "collapse": {"field": "doc_id"},
        "query": {"bool": {"must": [{"match": {HIGHLIGHTED_FIELD: {"query": p.query, "operator": "or"}}}],
                           "filter": search_filters(p)}}}
    if p.highlight:
        body["highlight"] = highlight_body()
    return body


def knn_size(q: QuerySettings) -> int:
    """How many nearest chunks the kNN search gathers: ``knn_k``, times ``knn_overfetch`` with ``collapse`` (the
    best chunk of each document is kept, so about ``knn_k`` distinct documents remain)."""
    return min(10_000, math.ceil(q.knn_k * q.knn_overfetch)) if q.collapse else q.knn_k


def knn_body(q: QuerySettings, p: Plan, vector: Iterable[float], dialect: Dialect,
             width: KnnWidth | None = None) -> dict[str, Any]:
    """The engine's kNN search (``dialect``: Elasticsearch's top-level ``knn``, OpenSearch's ``knn`` query) with
    the same filters (:func:`search_filters`) as a pre-filter, gathering :func:`knn_size` chunks and returning up
    to ``knn_k`` hits; ``width``: its ``num_candidates`` and rescoring as the index check chose them
    (:mod:`.candidates`; None: as for an index of unknown size on an engine that does not rescore).
    """
    k = knn_size(q)
    width = width or knn_width(q, k, None, quantized=False, can_rescore=False)
    body = _common(q, list_size(p, q.knn_k))
    body.update(dialect.knn_search("embedding", list(vector), k, max(width.num_candidates, k), search_filters(p),
                                   width.oversample))
    return body


def list_search(q: QuerySettings, alias: str, p: Plan, name: str, vector: Iterable[float] | None,
                dialect: Dialect, scope: Bm25Scope = CHUNKS, width: KnnWidth | None = None) -> list[dict[str, Any]]:
    """The ``_msearch`` header/body lines on ``alias`` of one list (``bm25``, ``passages``, ``knn``), of the
    lists of ``p`` that need no vector (``text``: BM25 and, over sections, its passage list), or of ``all`` of
    ``p``'s lists (:func:`list_names`) in one round trip; ``scope``: what BM25 scores (:func:`bm25_body`)."""
    if name in ("all", "text"):
        names = [n for n in list_names(p, scope) if name == "all" or n != "knn"]
        return [line for n in names for line in list_search(q, alias, p, n, vector, dialect, scope, width)]
    if name == "bm25":
        return [{"index": alias}, bm25_body(q, p, scope)]
    if name == PASSAGES:
        return [{"index": alias}, passage_body(q, p)]
    if vector is None:
        raise QueryError(f"mode {p.mode} needs a query vector")
    return [{"index": alias}, knn_body(q, p, vector, dialect, width)]


def list_names(p: Plan, scope: Bm25Scope = CHUNKS) -> list[str]:
    """The lists ``p`` searches, in this order: ``bm25`` (hybrid, bm25), its ``passages`` where ``scope`` finds
    them (:func:`passage_body`), then ``knn`` (hybrid, dense)."""
    text = ["bm25", PASSAGES] if scope.finds_passages else ["bm25"]
    return [*(text if p.mode in ("hybrid", "bm25") else []), *(["knn"] if p.wants_vector else [])]


def searches(q: QuerySettings, alias: str, p: Plan, vector: Iterable[float] | None,
             dialect: Dialect, scope: Bm25Scope = CHUNKS) -> tuple[list[str], list[dict[str, Any]]]:
    """Names of the lists (:func:`list_names`) and the ``_msearch`` header/body lines of all of them on ``alias``,
    in one round trip (a hybrid search sends the same lines as two requests: :mod:`.send`)."""
    return list_names(p, scope), list_search(q, alias, p, "all", vector, dialect, scope)
