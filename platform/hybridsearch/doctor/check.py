"""What every doctor check returns: a :class:`Check` (area, name, status, what it found, the fix), and
:func:`problem`, which reads a check's error as what went wrong and how to fix it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from hybridsearch.errors import HybridSearchError

Status = Literal["OK", "WARN", "FAIL", "SKIP"]


@dataclass
class Check:
    """One line of the doctor's report."""

    area: str
    name: str
    status: Status
    detail: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: the fix of an error that names none: Elasticsearch refused for a reason of its own
REFUSED = "Elasticsearch refused the request: its log says why (`hsp -v doctor` shows the request)"


def problem(exc: HybridSearchError) -> tuple[str, str]:
    """(what went wrong, how to fix it) for an error of a check: the error's own ``problem`` and ``fix``."""
    return exc.problem or str(exc), exc.fix or REFUSED
