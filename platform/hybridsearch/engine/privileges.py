"""Which index privileges the credentials hold, asked the way the engine can answer (or not at all).

Elasticsearch answers ``_security/user/_has_privileges`` for any authenticated user, API keys included; with
security off the API answers with an error instead and there is nothing to check. OpenSearch's security plugin
(absent from many clusters) has no such API, so nothing is asked there: a write the role refuses still fails
with HTTP 403 naming the action. :class:`IndexPrivileges` is the one shape both give;
:func:`hybridsearch.index.access.check_privileges` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: why nothing was checked, in words for people (``hsp doctor`` prints them)
SECURITY_OFF = "security is off on this cluster: nothing to check"
NO_API = ("not checked ahead on OpenSearch (its security plugin has no _has_privileges); a write the role refuses "
          "still fails with HTTP 403, naming the action")


@dataclass(frozen=True)
class IndexPrivileges:
    """The engine's answer: ``checked`` False when it cannot say ahead (``unchecked_because`` says why);
    otherwise who asked (``user``) and, per index name, whether each privilege is held (``granted``)."""

    checked: bool
    user: str | None = None
    granted: dict[str, dict[str, bool]] = field(default_factory=dict)
    unchecked_because: str | None = None

    @classmethod
    def unchecked(cls, why: str) -> IndexPrivileges:
        return cls(checked=False, unchecked_because=why)

    @classmethod
    def from_answer(cls, body: Mapping[str, Any]) -> IndexPrivileges:
        """Read Elasticsearch's ``_has_privileges`` answer (``{"username": ..., "index": {name: {priv: bool}}}``)."""
        index = body.get("index") or {}
        return cls(checked=True, user=body.get("username"),
                   granted={name: {p: bool(ok) for p, ok in privs.items()} for name, privs in index.items()})

    def missing(self) -> dict[str, list[str]]:
        """``{privilege: [names lacking it]}`` (``{}`` when every privilege is held, or nothing was checked)."""
        out: dict[str, list[str]] = {}
        for name, privs in self.granted.items():
            for priv, held in privs.items():
                if not held:
                    out.setdefault(priv, []).append(name)
        return out
