"""Everything the package imports resolves in the installed environment (CI builds that from nothing)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import hybridsearch
from hybridsearch.engine import AsyncEngineClient, EngineInfo, EngineKind
from hybridsearch.settings import load_settings

MODULES = sorted(m.name for m in pkgutil.walk_packages(hybridsearch.__path__, prefix="hybridsearch."))


def test_the_package_has_modules_to_check() -> None:
    assert "hybridsearch.cli.main" in MODULES and len(MODULES) > 30


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


async def _build_and_close(engine: EngineKind) -> None:
    client = AsyncEngineClient(load_settings(es_url="http://127.0.0.1:1").es, EngineInfo(engine))
    assert await client.raw() is not None  # the library's client, built without asking the cluster
    await client.close()


@pytest.mark.parametrize("engine", ["elasticsearch", "opensearch"])
def test_async_client_builds_without_a_cluster(engine: EngineKind) -> None:
    """Each engine's asyncio client builds (httpx for Elasticsearch, aiohttp for OpenSearch, imported then: see
    ``engine/libraries.py``); a missing extra fails here, not in a user's search."""
    import asyncio

    asyncio.run(_build_and_close(engine))


def test_the_search_path_loads_no_aiohttp_pyarrow_or_numpy_and_leaves_them_importable() -> None:
    """A fresh interpreter that imports the search client and the command line (what ``hsp search --mode bm25``
    imports) has not loaded the optional packages the client libraries would import eagerly, nor numpy (the
    encoder's), and can still import them afterwards."""
    code = ("import sys, hybridsearch.query.client, hybridsearch.cli.main, hybridsearch.cli.search; "
            "loaded = [m for m in ('aiohttp', 'pyarrow', 'numpy') if m in sys.modules]; "
            "import aiohttp, pyarrow, numpy; print(loaded)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
