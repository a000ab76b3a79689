"""Load the two client libraries without what they import eagerly and the platform never uses through them.

``elastic_transport`` imports aiohttp for its asyncio node, ``elasticsearch`` imports pyarrow for its Arrow
serializer, httpx imports its own command line (click, rich's syntax highlighter, pygments) and ``opensearchpy``
imports aiohttp for its asyncio client, whenever those are installed (aiohttp comes with the libraries' ``[async]``
extras, pyarrow with ``datasets``). That was ~0.35 s of every ``hsp search`` started from a shell (``python -X
importtime``), for code a synchronous search never runs: it never asks for Arrow answers, and aiohttp is needed
only once an asyncio client is built, which loads it then (:func:`ready_aiohttp_node`,
:func:`hybridsearch.engine.connect.os_async_client`).

Importing this module (``hybridsearch.engine`` does, before anything else) imports both libraries with those
modules hidden (``sys.modules[name] = None`` makes an import of ``name`` fail as if it were not installed, which
both libraries handle), then unhides them: a later ``import aiohttp`` or ``import pyarrow`` in the same process
works as usual. A module already imported before is left alone (the libraries then see it as they always did).
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: what the client libraries import if installed and a synchronous search never runs (aiohttp: loaded by the first
#: asyncio client, :func:`ready_aiohttp_node`, :func:`hybridsearch.engine.connect.os_async_client`)
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

_aiohttp_lock = threading.Lock()


def ready_aiohttp_node() -> None:
    """Make ``elastic_transport``'s aiohttp node usable, before an asyncio Elasticsearch client is built.

    When the transport was loaded with aiohttp hidden, its node module holds "aiohttp is not installed"; loading
    that module again (``importlib.reload``: the same module object, its code run again) imports aiohttp and
    sets its globals, which the node class already subclassed in :mod:`hybridsearch.engine.connect` reads. The
    aiohttp node, not httpx's, because it serves concurrent searches better: hybrid searches through
    ``AsyncSearchClient`` on one node, aiohttp against httpx, p50 / p99 / queries per second, 16 at a time 240 /
    425 ms / 65 against 324 / 952 ms / 44, 64 at a time 917 / 1,222 ms / 74 against 1,208 / 4,596 ms / 44."""
    from elastic_transport._node import _http_aiohttp as node_module

    with _aiohttp_lock:
        if not node_module._AIOHTTP_AVAILABLE:
            importlib.reload(node_module)
