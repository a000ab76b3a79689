"""Everything the package imports resolves in the installed environment (CI builds that from nothing)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import hybridsearch
from hybridsearch.engine import AsyncEngineClient, EngineInfo, EngineKind, engine_errors, request
from hybridsearch.errors import ClusterUnavailable
from hybridsearch.settings import load_settings

MODULES = sorted(m.name for m in pkgutil.walk_packages(hybridsearch.__path__, prefix="hybridsearch."))


def test_the_package_has_modules_to_check() -> None:
    assert "hybridsearch.cli.main" in MODULES and len(MODULES) > 30


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


async def _send_to_nobody(engine: EngineKind) -> str:
    client = AsyncEngineClient(load_settings(es_url="http://127.0.0.1:1", es={"max_retries": 0}).es, EngineInfo(engine))
    try:
        with engine_errors("get alias"):
            await client.send(request.get_alias("any"))
    except ClusterUnavailable as exc:
        return type(exc).__name__
    finally:
        await client.close()
    return "answered"


@pytest.mark.parametrize("engine", ["elasticsearch", "opensearch"])
def test_an_asyncio_client_sends_and_fails_as_a_connection_failure(engine: EngineKind) -> None:
    """Each engine's asyncio client builds and sends (both on aiohttp); a missing extra fails here, not in a
    user's search, and a node that does not answer is a ClusterUnavailable."""
    import asyncio

    assert asyncio.run(_send_to_nobody(engine)) == "ClusterUnavailable"
