#!/usr/bin/env bash
# Check that the environment is consistent, every import in platform/ is a declared dependency, the
# package keeps its shape (no import circles, the reranker serves only; pyproject's [tool.importlinter]), and
# the package and the ops/ scripts type-check.
#
#   ops/check-deps.sh [VENV]     (default: the environment ops/setup.sh makes)
#
# pip check: installed packages agree with each other's requirements. deptry: each module platform/
# imports is declared in pyproject.toml (not only present because something else pulled it in).
# lint-imports: the import contracts in pyproject.toml. mypy: pyproject's [tool.mypy] (strict) on the package
# and on ops/bench/*.py, so a script that calls something the package renamed or removed fails here, not when run.
# Importing every module of the package, and building the async client, is tests/unit/test_dependencies.py.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VENV="${1:-${HSP_VENV:-$HOME/.cache/hybridsearch/venv}}"
cd "$root"
"$VENV/bin/python" -m pip check || { echo "[check-deps] pip check failed; fix with: ops/setup.sh" >&2; exit 1; }
"$VENV/bin/deptry" platform || { echo "[check-deps] declare the imports above in pyproject.toml" >&2; exit 1; }
"$VENV/bin/lint-imports" --no-cache || { echo "[check-deps] an import breaks a contract above (docs/architecture.md)" >&2; exit 1; }
"$VENV/bin/python" -m mypy platform/hybridsearch ops/bench/*.py || { echo "[check-deps] type errors above (mypy)" >&2; exit 1; }
# The client libraries by their public interfaces only: no private attribute of elasticsearch, elastic_transport or
# opensearchpy named in the package or its tests (their next release may change any of them).
if grep -rnE "_AIOHTTP_AVAILABLE|node_pool|opensearchpy\._async|importlib\.reload|elastic_transport\._" platform tests; then
    echo "[check-deps] the lines above name a private part of a client library; use its public interface" >&2; exit 1
fi
