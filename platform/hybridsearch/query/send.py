"""Sending a plan's searches: the steps between the query vector and the fused window, for both clients.

bm25 and dense searches send one ``_msearch`` (dense after embedding the query). A hybrid search does not let
BM25 wait for the vector: its BM25 ``_msearch`` (with the passage list over sections: ``build.passage_body``) is
spawned at once (a worker thread of the sync client, an asyncio task of the async one: :class:`~.steps.Spawn`)
while the query is embedded, and its kNN ``_msearch`` goes as soon as the vector is ready, so it lasts about
max(BM25, embed + kNN) instead of embed + max(BM25, kNN). The lines are those of the one ``_msearch`` of both
lists (``build.text_lines``, then ``build.knn_lines``), so answers and fusion are the same; so are the errors: a
failed request raises through ``engine_errors`` (the client, performing it) and a failed item through
``window.check_response``, BM25's before kNN's, and an embedding that fails raises as before (BM25's answer
dropped: :class:`~.steps.Drop`).

Timings: ``embed_ms`` is the embedding; ``search_ms`` the searches' time after it: for hybrid, from the
vector being ready (kNN sent) to both answers being in, so that the stages still add up to ``total_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hybridsearch.query.build import Plan
from hybridsearch.query.results import Timings
from hybridsearch.query.steps import Drop, Embed, Join, Json, Msearch, Spawn, Steps

if TYPE_CHECKING:
    import numpy as np

#: ``knn(vector)``: the ``_msearch`` lines of the plan's kNN list for the query vector (``build.knn_lines``)
KnnLines = Callable[["np.ndarray"], list[Json]]


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


def answers(outcomes: list[Any]) -> list[Json]:
    """The items of each ``_msearch`` in order (the text lists' first), or the first failure raised."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return [item for outcome in outcomes for item in outcome["responses"]]


def embed_steps(text: str, t: Timings) -> Steps[np.ndarray]:
    """The query vector of ``text``, with ``t.embed_ms``."""
    t0 = time.perf_counter()
    vector: np.ndarray = yield Embed(text)
    t.embed_ms = _ms(t0)
    return vector


def send_steps(p: Plan, t: Timings, text: list[Json], knn: KnnLines, what: str,
               overlap: bool = True) -> Steps[list[Json]]:
    """The answers of ``p``'s lists (``_msearch`` items in ``build.list_names`` order), with ``t.embed_ms`` and
    ``t.search_ms``; ``text``: the lines of the lists that need no vector (``build.text_lines``), ``knn``: those of
    the kNN list; ``what`` names the search in errors, ``overlap=False`` (``HSP_QUERY__HYBRID_OVERLAP``) sends
    hybrid as one ``_msearch`` after embedding. Raises like ``engine_errors``."""
    if p.mode != "hybrid" or not overlap:
        body = [*text, *(knn((yield from embed_steps(p.query, t))) if p.wants_vector else [])]
        t0 = time.perf_counter()
        answer: Json = yield Msearch(body, what)
        t.search_ms = _ms(t0)
        responses: list[Json] = answer["responses"]
        return responses
    bm25 = yield Spawn(Msearch(text, what))
    try:
        body = knn((yield from embed_steps(p.query, t)))
        t0 = time.perf_counter()
        try:
            knn_answer: Any = yield Msearch(body, what)
        except Exception as exc:  # noqa: BLE001 - raised by answers(), after BM25's outcome
            knn_answer = exc
    except GeneratorExit:
        raise
    except BaseException:
        yield Drop(bm25)  # most likely in flight already: its answer or error is dropped
        raise
    try:
        bm25_answer: Any = yield Join(bm25)
    except Exception as exc:  # noqa: BLE001 - raised by answers(), first
        bm25_answer = exc
    t.search_ms = _ms(t0)
    return answers([bm25_answer, knn_answer])
