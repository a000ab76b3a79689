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
    """Each engine's asyncio client builds (both on aiohttp, imported then: ``engine/libraries.py``); a missing
    extra fails here, not in a user's search."""
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


_ASYNC_AFTER_A_LEAN_START = """
import asyncio, sys
from hybridsearch.engine import AsyncEngineClient, EngineInfo, engine_errors
from hybridsearch.errors import ClusterUnavailable
from hybridsearch.settings import load_settings
assert "aiohttp" not in sys.modules

async def main() -> None:
    cfg = load_settings(es_url="http://127.0.0.1:1", es={"max_retries": 0}).es
    client = AsyncEngineClient(cfg, EngineInfo("{engine}"))
    try:
        with engine_errors("get alias"):
            await client.indices.get_alias(name="any")
    except ClusterUnavailable:
        print(type((await client.raw()).transport.node_pool.get()).__mro__[1].__name__
              if "{engine}" == "elasticsearch" else "refused", "aiohttp" in sys.modules)
    finally:
        await client.close()

asyncio.run(main())
"""


@pytest.mark.parametrize(("engine", "node"), [("elasticsearch", "AiohttpHttpNode"), ("opensearch", "refused")])
def test_an_asyncio_client_loads_aiohttp_when_built_and_sends_through_it(engine: str, node: str) -> None:
    """After a start without aiohttp (above), the first asyncio client loads it: a request goes through the aiohttp
    node and fails as a connection failure (ClusterUnavailable), not as a missing package."""
    code = _ASYNC_AFTER_A_LEAN_START.replace("{engine}", engine)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [node, "True"]
