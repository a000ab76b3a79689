"""The one retry rule of the package (a leaf): which HTTP answers are worth sending again, and how long to wait.
Retry loops read them from here and are written with ``tenacity``, never by hand.
"""

from __future__ import annotations

#: too many requests, and a gateway or node that is busy or restarting (a 500 is an error, not retried)
RETRIED_STATUSES: tuple[int, ...] = (429, 502, 503, 504)


def backoff_s(attempt: int, initial_s: float, max_s: float) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): ``initial_s * 2**(attempt-1)``, at most ``max_s``."""
    return float(min(max_s, initial_s * 2 ** (attempt - 1)))
