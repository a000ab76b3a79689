#!/usr/bin/env bash
# Run the whole test suite against a real Elasticsearch node.
#
# Sets up the virtual environment (ops/setup.sh), starts a local node unless HSP_ES_URL points at
# one (ops/es-local.sh), then runs pytest with any extra arguments, e.g. `ops/test.sh tests/unit`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
VENV=$(ops/setup.sh)
if [[ -z "${HSP_ES_URL:-}" ]]; then
  HSP_ES_URL=$(ops/es-local.sh start)
  export HSP_ES_URL
fi
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TOKENIZERS_PARALLELISM=false
set +e
"$VENV/bin/python" -m pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi
exit $rc
