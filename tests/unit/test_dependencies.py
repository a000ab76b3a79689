"""Everything the package imports resolves in the installed environment (CI builds that from nothing)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import hybridsearch
from hybridsearch.engine import connect_async
from hybridsearch.settings import load_settings

MODULES = sorted(m.name for m in pkgutil.walk_packages(hybridsearch.__path__, prefix="hybridsearch."))


def test_the_package_has_modules_to_check() -> None:
    assert "hybridsearch.cli.main" in MODULES and len(MODULES) > 30


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


async def _build_and_close() -> None:
    client = connect_async(load_settings(es_url="http://127.0.0.1:1").es)
    await client.close()


def test_async_client_builds_without_a_cluster() -> None:
    """AsyncElasticsearch needs aiohttp (elasticsearch[async]); a missing extra fails here, not in a user's search."""
    import asyncio

    asyncio.run(_build_and_close())
