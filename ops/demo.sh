#!/usr/bin/env bash
# The first command on a fresh machine: set up, start a cluster, ingest a real corpus, answer queries.
#
#   ops/demo.sh                 # 3,000 stdlib documents (a few minutes on 2 cores)
#   ops/demo.sh --limit 0       # the whole standard library (~5,000 documents)
#   ops/demo.sh -q "read a csv file"   # extra arguments go to `hsp demo`
#
# 1. ops/setup.sh makes the virtual environment (~/.cache/hybridsearch/venv).
# 2. A cluster: HSP_ES_URL when it answers; else a node already answering on 127.0.0.1:${HSP_ES_PORT:-9200};
#    else `docker compose up -d --wait elasticsearch` where a Docker engine answers; else
#    ops/es-local.sh start (Elasticsearch's integ-test-zip from Maven Central, a local JDK 21+).
#    HSP_ENGINE=opensearch (or elasticsearch8) starts that engine instead (ops/es-local.sh); use another
#    HSP_ES_PORT when a node of another engine already answers on 9200.
# 3. `hsp demo`: index the running interpreter's standard-library documentation, run sample queries.
# Afterwards `hsp search "…"` searches the same index (HSP_ES_URL as printed at the end).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

say() { printf '[demo] %s\n' "$*" >&2; }
answers() { curl -fsS --max-time 3 "$1/_cluster/health" >/dev/null 2>&1; }
# On any failure: the one command that fixes (or retries) the step that failed.
fix="$0 $*"
trap 'rc=$?; [[ $rc -ne 0 ]] && say "failed (exit $rc). Fix: $fix"; exit $rc' EXIT

say "step 1/3: the virtual environment (ops/setup.sh; 2-3 minutes the first time, seconds after)"
t0=$SECONDS
fix="ops/setup.sh && $0 $*"
VENV=$(ops/setup.sh)
say "environment ready in $((SECONDS - t0)) s: $VENV"

say "step 2/3: a cluster (a local node starts in 20-40 s; fetching it the first time adds a few seconds)"
t0=$SECONDS
fix="ops/es-local.sh restart && $0 $*"
port="${HSP_ES_PORT:-9200}"
local_url="http://127.0.0.1:$port"
if [[ -n "${HSP_ES_URL:-}" ]] && answers "$HSP_ES_URL"; then
  say "using the cluster at HSP_ES_URL=$HSP_ES_URL"
elif answers "$local_url"; then
  HSP_ES_URL="$local_url"
  say "a node already answers at $HSP_ES_URL: using it"
elif [[ "${HSP_ENGINE:-elasticsearch}" == elasticsearch ]] && command -v docker >/dev/null 2>&1 \
    && docker info >/dev/null 2>&1; then
  say "Docker answers: docker compose up -d --wait elasticsearch"
  HSP_ES_PORT="$port" docker compose up -d --wait elasticsearch >&2
  HSP_ES_URL="$local_url"
else
  say "no Docker engine: starting a local node with ops/es-local.sh"
  HSP_ES_URL=$(ops/es-local.sh start)
fi
export HSP_ES_URL
say "cluster ready in $((SECONDS - t0)) s at $HSP_ES_URL"

say "step 3/3: hsp demo $* (embeds the standard library's documentation: a few minutes on 2 cores)"
fix="HSP_ES_URL=$HSP_ES_URL $VENV/bin/hsp doctor   (names what is wrong and how to fix it; then run $0 again: it resumes)"
"$VENV/bin/hsp" demo "$@"

say "done. Search the same index yourself:"
printf '    source %s/bin/activate\n    export HSP_ES_URL=%s\n    hsp search "how do I parse JSON"\n' \
  "$VENV" "$HSP_ES_URL" >&2
