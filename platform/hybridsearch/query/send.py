"""Sending a plan's searches: the I/O between the query vector and the fused window, for both clients.

bm25 and dense searches send one ``_msearch`` (dense after embedding the query). A hybrid search does not let
BM25 wait for the vector: its BM25 ``_msearch`` (with the passage list over sections: ``build.passage_body``) goes
at once (a worker thread of the sync client, an asyncio
task of the async one) while the query is embedded, and its kNN ``_msearch`` as soon as the vector is ready,
so it lasts about max(BM25, embed + kNN) instead of embed + max(BM25, kNN). The lines are those of the one
``_msearch`` of both lists (:func:`~hybridsearch.query.build.searches`), so answers and fusion are the same;
so are the errors: a failed request raises through ``engine_errors`` and a failed item through
``check_response``, BM25's before kNN's, and an embedding that fails raises as before (BM25's answer dropped).

Timings: ``embed_ms`` is the embedding; ``search_ms`` the searches' time after it: for hybrid, from the
vector being ready (kNN sent) to both answers being in, so that the stages still add up to ``total_ms``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hybridsearch.engine import AsyncEngineClient, EngineClient, engine_errors
from hybridsearch.query.build import Plan
from hybridsearch.query.results import Timings

if TYPE_CHECKING:
    import numpy as np

Json = dict[str, Any]
#: ``lines(name, vector)``: the ``_msearch`` lines of the plan's lists that need no vector (``text``: BM25 and its
#: passage list), of its ``knn`` list, or of ``all`` of them (``build.list_search``).
Lines = Callable[[str, "np.ndarray | None"], list[Json]]
Encode = Callable[[str], "np.ndarray"]


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


def answers(outcomes: list[Any]) -> list[Json]:
    """The items of each ``_msearch`` in order (the text lists' first), or the first failure raised."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return [item for outcome in outcomes for item in outcome["responses"]]


def _embed(encode: Encode, p: Plan, t: Timings) -> np.ndarray:
    t0 = time.perf_counter()
    vector = encode(p.query)
    t.embed_ms = _ms(t0)
    return vector


def send(es: EngineClient, pool: concurrent.futures.Executor, p: Plan, t: Timings, lines: Lines,
         encode: Encode, what: str, overlap: bool = True) -> list[Json]:
    """The answers of ``p``'s lists (``_msearch`` items in ``build.list_names`` order), with ``t.embed_ms`` and
    ``t.search_ms``; ``pool`` runs hybrid's BM25 request, ``what`` names the search in errors, ``overlap=False``
    (``HSP_QUERY__HYBRID_OVERLAP``) sends hybrid as one ``_msearch`` after embedding. Raises like
    ``engine_errors``."""
    if p.mode != "hybrid" or not overlap:
        body = lines("all", _embed(encode, p, t) if p.wants_vector else None)
        t0 = time.perf_counter()
        with engine_errors(what):
            responses: list[Json] = es.msearch(searches=body)["responses"]
        t.search_ms = _ms(t0)
        return responses
    bm25 = pool.submit(es.msearch, searches=lines("text", None))
    try:
        vector = _embed(encode, p, t)
    except BaseException:
        bm25.cancel()  # most likely in flight already: its answer is dropped
        raise
    body = lines("knn", vector)
    t0 = time.perf_counter()
    try:
        knn: Any = es.msearch(searches=body)
    except Exception as exc:  # noqa: BLE001 - raised by answers(), after BM25's outcome
        knn = exc
    concurrent.futures.wait([bm25])
    t.search_ms = _ms(t0)
    with engine_errors(what):
        return answers([bm25.exception() or bm25.result(), knn])


async def send_async(es: AsyncEngineClient, p: Plan, t: Timings, lines: Lines, encode: Encode,
                     what: str, overlap: bool = True) -> list[Json]:
    """:func:`send` on the asyncio client; the embedding runs in a worker thread."""
    async def embed() -> np.ndarray:
        t0 = time.perf_counter()
        vector = await asyncio.to_thread(encode, p.query)
        t.embed_ms = _ms(t0)
        return vector

    if p.mode != "hybrid" or not overlap:
        body = lines("all", await embed() if p.wants_vector else None)
        t0 = time.perf_counter()
        with engine_errors(what):
            responses: list[Json] = (await es.msearch(searches=body))["responses"]
        t.search_ms = _ms(t0)
        return responses
    bm25 = asyncio.ensure_future(es.msearch(searches=lines("text", None)))
    try:
        vector = await embed()
    except BaseException:
        bm25.cancel()
        await asyncio.gather(bm25, return_exceptions=True)  # its answer or error is dropped
        raise
    body = lines("knn", vector)
    t0 = time.perf_counter()
    knn, bm25_answer = await asyncio.gather(es.msearch(searches=body), bm25, return_exceptions=True)
    t.search_ms = _ms(t0)
    with engine_errors(what):
        return answers([bm25_answer, knn])
