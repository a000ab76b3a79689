"""The one retry rule of the package (a leaf: imports no other part).

Which HTTP answers are worth sending again (:data:`RETRIED_STATUSES`) and how long to wait between tries
(:func:`backoff_s`) are defined here once: the engine client's own retries, the bulk writer and the reranker
client read them from here. Loops that retry are written with ``tenacity``, never by hand.
"""

from __future__ import annotations

#: statuses that a later try of the same request can get past: too many requests, and a gateway or node that
#: is busy or restarting. A 500 is an error in the request or the engine and is not retried.
RETRIED_STATUSES: tuple[int, ...] = (429, 502, 503, 504)


def backoff_s(attempt: int, initial_s: float, max_s: float) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): ``initial_s * 2**(attempt-1)``, at most ``max_s``."""
    return float(min(max_s, initial_s * 2 ** (attempt - 1)))
