"""The one retry rule of the package (a leaf): which HTTP answers are worth sending again. Retry loops read it
from here and are written with ``tenacity`` (``wait_exponential`` for the waits), never by hand."""

from __future__ import annotations

#: too many requests, and a gateway or node that is busy or restarting (a 500 is an error, not retried)
RETRIED_STATUSES: tuple[int, ...] = (429, 502, 503, 504)
