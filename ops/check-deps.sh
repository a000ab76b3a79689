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
#
# No history: the code, tests, docs and scripts describe today, so nothing in platform/, tests/, docs/, README.md or
# ops/ names a work item. The rule: the word issue, stop, PR or pull request (any case, singular or plural) followed
# by a number, after a space or '#' (or both). A link to another project's issue is fine, because in a URL the
# number follows a slash (github.com/OWNER/REPO/issues/NUMBER); so are ids such as "doc#3" and numbered steps or
# items without those words. The pattern below is written so that it does not match itself.
# No test imports another test file: shared helpers live in support modules under tests/ (conftest.py, standin.py,
# recorded_engine.py, corpora.py...), whose names do not start with test_.
# No staging field of an earlier write protocol: an index of another format is refused, not carried.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VENV="${1:-${HSP_VENV:-$HOME/.cache/hybridsearch/venv}}"
cd "$root"
history='\b(issues?|stops?|PRs?|pull requests?) ?#? ?[0-9]+'
if grep -rnIiE --exclude-dir=__pycache__ --exclude-dir=.venv "$history" platform tests docs README.md ops; then
  echo "[check-deps] the lines above name a work item: say what the code or the figure is today, by topic" >&2
  exit 1
fi
if grep -rnE --include='*.py' --include='*.json' 'pending_run' platform mappings; then
  echo "[check-deps] the lines above carry an earlier protocol's field: refuse such an index instead (hsp index migrate)" >&2
  exit 1
fi
if grep -rnE --include='*.py' '^\s*(from|import) test_' tests; then
  echo "[check-deps] a test imports another test file above: move what they share into a support module in tests/" >&2
  exit 1
fi
"$VENV/bin/python" -m pip check || { echo "[check-deps] pip check failed; fix with: ops/setup.sh" >&2; exit 1; }
"$VENV/bin/deptry" platform || { echo "[check-deps] declare the imports above in pyproject.toml" >&2; exit 1; }
"$VENV/bin/lint-imports" --no-cache || { echo "[check-deps] an import breaks a contract above (docs/architecture.md)" >&2; exit 1; }
"$VENV/bin/python" -m mypy platform/hybridsearch ops/bench/*.py || { echo "[check-deps] type errors above (mypy)" >&2; exit 1; }
# One tokenizer per model: only embedding/encoder.py builds one (the chunker and every encoder take it from there).
if grep -rnE --include='*.py' "AutoTokenizer|Tokenizer\.from_(file|str|pretrained)|PreTrainedTokenizer" platform/hybridsearch \
    | grep -vE "^platform/hybridsearch/embedding/(encoder|fetch)\.py:"; then
  echo "[check-deps] a second tokenizer above: take the embedder's (Embedder.tokenizer, embedding/encoder.py)" >&2; exit 1
fi
# The client libraries by their public interfaces only: no private attribute of elasticsearch or elastic_transport
# named in the package or its tests (their next release may change any of them).
if grep -rnE --include='*.py' "_AIOHTTP_AVAILABLE|node_pool|importlib\.reload|elastic_transport\._" platform tests; then
    echo "[check-deps] the lines above name a private part of a client library; use its public interface" >&2; exit 1
fi
