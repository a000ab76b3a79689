#!/usr/bin/env bash
# Run the whole test suite against a real Elasticsearch node.
#
# Sets up the virtual environment (ops/setup.sh), starts a local node unless HSP_ES_URL points at
# one (ops/es-local.sh), then runs pytest with any extra arguments, e.g. `ops/test.sh tests/unit`.
#
# The node it starts listens on port 9250 (HSP_TEST_ES_PORT) and is secured (`ops/es-local.sh start
# --secure`: TLS, the elastic superuser, team users; HSP_ES_SECURE=0 for a plain one): the whole suite runs as the superuser over TLS, and
# tests/integration/test_security.py as the team users. With HSP_ES_URL given, those tests need
# HSP_TEST_SECURITY_ENV (eval "$(ops/es-local.sh env)"); without it they skip, or fail when CI is set.
# HSP_ENGINE (elasticsearch, elasticsearch8 or opensearch; ops/es-local.sh) chooses the engine of the node it
# starts, and is exported to the tests; an opensearch node starts plain (its zip has no security plugin).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
VENV=$(ops/setup.sh)
if [[ -z "${HSP_ES_URL:-}" ]]; then
  # Its own port (9250), so the demo's plain node on 9200 can keep running beside it.
  export HSP_ES_PORT="${HSP_TEST_ES_PORT:-9250}" HSP_ENGINE="${HSP_ENGINE:-elasticsearch}"
  secure=1; if [[ "$HSP_ENGINE" == opensearch ]]; then secure=0; fi
  HSP_ES_URL=$(HSP_ES_SECURE="${HSP_ES_SECURE:-$secure}" ops/es-local.sh start)
  export HSP_ES_URL
  # a secured node: its CA, superuser and the security tests' env file (only the URL for a plain node)
  if sec_env=$(ops/es-local.sh env 2>/dev/null); then eval "$sec_env"; fi
fi
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TOKENIZERS_PARALLELISM=false
set +e
"$VENV/bin/python" -m pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi
exit $rc
