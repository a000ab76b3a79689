"""Credentials cut out of URLs before anything prints them (a leaf: imports no other part).

A cluster or reranker URL may carry its credentials as user-info (``https://user:secret@host:9200``); every
place that shows a URL to people (``hsp doctor``, error messages, log lines, evaluation reports) passes it, or
the whole text around it, through :func:`redact_url`, so the password never reaches a terminal or a file.
"""

from __future__ import annotations

import re

#: user-info after ``scheme://``: everything up to the last ``@`` before the host (a password may hold ``@``)
_USERINFO = re.compile(r"(?<=://)[^/?#\s]*@")
#: a URL written without a scheme (``user:secret@host:9200``), as a whole string
_BARE_USERINFO = re.compile(r"^\s*[^/?#\s:]+:[^/?#\s]*@")
MASK = "***@"


def redact_url(text: str) -> str:
    """``text`` (a URL, several comma-separated, or any message holding URLs) with each URL's user-info
    replaced by ``***``: ``https://elastic:s3cret@host:9200`` → ``https://***@host:9200``."""
    text = _USERINFO.sub(MASK, text)
    if "://" not in text:
        text = _BARE_USERINFO.sub(MASK, text)
    return text
