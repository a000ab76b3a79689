"""Load the two client libraries without what they import eagerly and the platform never uses through them.

``elastic_transport`` imports aiohttp for its aiohttp node and ``elasticsearch`` imports pyarrow for its Arrow
serializer whenever the two are installed (aiohttp arrives with ``opensearch-py[async]``, pyarrow with
``datasets``), and ``opensearchpy`` imports aiohttp for its asyncio client. Together that was ~0.35 s of every
``hsp search`` started from a shell (``python -X importtime``), for code no search runs: the platform's
Elasticsearch clients use urllib3 (sync) and httpx (asyncio), it never asks for Arrow answers, and OpenSearch's
asyncio client is imported by :func:`hybridsearch.engine.connect.os_async_client` when one is built.

Importing this module (``hybridsearch.engine`` does, before anything else) imports both libraries with those
modules hidden (``sys.modules[name] = None`` makes an import of ``name`` fail as if it were not installed, which
both libraries handle), then unhides them: a later ``import aiohttp`` or ``import pyarrow`` in the same process
works as usual. A module already imported before is left alone (the libraries then see it as they always did).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: what the client libraries import if installed and the platform does not use through them
UNUSED_OPTIONAL = ("aiohttp", "pyarrow", "click")


@contextmanager
def hidden(names: tuple[str, ...]) -> Iterator[None]:
    """Within the block, ``import <name>`` fails for each of ``names`` not imported yet."""
    hide = [n for n in names if n not in sys.modules]
    for name in hide:
        sys.modules[name] = None  # type: ignore[assignment]  # None in sys.modules: "not importable"
    try:
        yield
    finally:
        for name in hide:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


with hidden(UNUSED_OPTIONAL):
    import elasticsearch  # noqa: F401
    import opensearchpy  # noqa: F401
