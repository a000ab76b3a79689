#!/usr/bin/env bash
# Start, stop or inspect a local single-node Elasticsearch with no Docker.
#
#   ops/es-local.sh start    fetch (once), unpack (once) and start a node; a no-op when one answers
#   ops/es-local.sh stop     stop the node this script started (by pid)
#   ops/es-local.sh status   print the cluster health, exit 1 when no node answers
#   ops/es-local.sh url      print the URL to export as HSP_ES_URL
#   ops/es-local.sh env      print export lines for a secured node's URL, CA, superuser and test users
#
#   start --secure (or HSP_ES_SECURE=1): TLS on HTTP, the elastic superuser and file-realm users and roles
#   (ops/security/es-secure.sh, roles from ops/security/roles.yml); then eval "$(ops/es-local.sh env)".
#
# It fetches Elasticsearch's own integ-test-zip distribution from Maven Central with Maven,
# checks its SHA-512 against the pinned value below, unpacks it under $HSP_CACHE (default
# ~/.cache/hybridsearch, outside the repo) and runs it as the unprivileged user $HSP_ES_USER
# (Elasticsearch refuses to run as root) with security off, loopback only and an explicit heap.
#
# Environment: HSP_ES_VERSION, HSP_ES_PORT (9200), HSP_ES_HEAP (1g), HSP_CACHE, HSP_ES_USER
# (hspes), HSP_M2_REPO (the Maven repository the zip is fetched into; default ~/.m2/repository),
# ES_JAVA_HOME (default: the Temurin 21+ JDK under /usr/lib/jvm).
#
# The SHA-512 pin below is the only integrity check: the registry serves these zips without
# .sha1/.md5 files, so Maven's own strict checksum mode (-C) cannot be used and is not.
set -euo pipefail

ES_VERSION="${HSP_ES_VERSION:-9.3.2}"
# SHA-512 of org.elasticsearch.distribution.integ-test-zip:elasticsearch:9.3.2:zip
ES_SHA512_9_3_2="3808f6d3156c5c08b864323aee33eb3abcb369979fea36949ff002bb8d851bc6bad7646826db9ccc614160b074d7da6da87e6b3144b9c0cb77c060f01c3e579a"
PORT="${HSP_ES_PORT:-9200}"
HEAP="${HSP_ES_HEAP:-1g}"
CACHE="${HSP_CACHE:-$HOME/.cache/hybridsearch}"
M2_REPO="${HSP_M2_REPO:-$HOME/.m2/repository}"
ES_USER="${HSP_ES_USER:-hspes}"
HOME_DIR="$CACHE/es/elasticsearch-$ES_VERSION"
NODE_DIR="$CACHE/es/node-$ES_VERSION-$PORT"
PID_FILE="$NODE_DIR/es.pid"
URL="http://127.0.0.1:$PORT"
COORDS="org.elasticsearch.distribution.integ-test-zip:elasticsearch:$ES_VERSION:zip"
for arg in "$@"; do if [[ "$arg" == --secure ]]; then HSP_ES_SECURE=1; fi; done
# shellcheck source=ops/security/es-secure.sh
source "$(dirname "$0")/security/es-secure.sh"
if secure_mode; then URL="https://127.0.0.1:$PORT"; fi

log() { printf '[es-local] %s\n' "$*" >&2; }

es_curl() { local o; mapfile -t o < <(secure_curl_opts); curl "${o[@]}" "$@"; }

health() { es_curl -fsS --max-time 2 "$URL/_cluster/health" 2>/dev/null; }

find_java() {
  if [[ -n "${ES_JAVA_HOME:-}" ]]; then echo "$ES_JAVA_HOME"; return; fi
  local d v
  for d in /usr/lib/jvm/temurin-*-jdk* /usr/lib/jvm/*; do
    [[ -x "$d/bin/java" ]] || continue
    v=$("$d/bin/java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
    if [[ -n "$v" && "$v" -ge 21 ]]; then echo "$d"; return; fi
  done
  log "no Java 21+ found: install a Temurin JDK 21+ and set ES_JAVA_HOME"; exit 3
}

# SHA-512 pinned for the version asked for; an unpinned version is refused rather than run unchecked.
pinned_sha512() {
  case "$ES_VERSION" in
    9.3.2) echo "$ES_SHA512_9_3_2" ;;
    *) [[ -n "${HSP_ES_SHA512:-}" ]] && { echo "$HSP_ES_SHA512"; return; }
       log "no SHA-512 is pinned for Elasticsearch $ES_VERSION: pin it in $0 or set HSP_ES_SHA512"; exit 4 ;;
  esac
}

fetch() {
  local want; want=$(pinned_sha512)
  local zip="$M2_REPO/org/elasticsearch/distribution/integ-test-zip/elasticsearch/$ES_VERSION/elasticsearch-$ES_VERSION.zip"
  if [[ ! -f "$zip" ]]; then
    command -v mvn >/dev/null || { log "Maven (mvn) is needed to fetch $COORDS: apt-get install -y maven"; exit 3; }
    log "fetching $COORDS from Maven Central into $M2_REPO (about 5 s on a fast link)"
    mvn -B -q dependency:get -Dmaven.repo.local="$M2_REPO" -Dartifact="$COORDS" -Dtransitive=false >&2 \
      || { log "Maven could not fetch $COORDS; retry with: $0 start"; exit 3; }
  fi
  local got; got=$(sha512sum "$zip" | cut -d' ' -f1)
  if [[ "$got" != "$want" ]]; then
    rm -f "$zip"
    log "SHA-512 mismatch for $zip (got ${got:0:16}…, pinned ${want:0:16}…): the file was deleted; run $0 start to fetch it again"
    exit 4
  fi
  echo "$zip"
}

ensure_user() {
  if [[ $(id -u) -ne 0 ]]; then return; fi
  id -u "$ES_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$ES_USER"
}

install() {
  [[ -x "$HOME_DIR/bin/elasticsearch" ]] && return
  local zip; zip=$(fetch)
  mkdir -p "$CACHE/es"
  log "unpacking $(du -h "$zip" | cut -f1) zip into $CACHE/es"
  rm -rf "$HOME_DIR.tmp" && mkdir -p "$HOME_DIR.tmp"
  unzip -q "$zip" -d "$HOME_DIR.tmp"
  mv "$HOME_DIR.tmp/elasticsearch-$ES_VERSION" "$HOME_DIR" && rm -rf "$HOME_DIR.tmp"
}

write_config() {
  mkdir -p "$NODE_DIR"/{data,logs,config}
  cp -r "$HOME_DIR/config/." "$NODE_DIR/config/"
  cat > "$NODE_DIR/config/elasticsearch.yml" <<YML
cluster.name: hybridsearch-local
node.name: local-$PORT
path.data: $NODE_DIR/data
path.logs: $NODE_DIR/logs
network.host: 127.0.0.1
http.port: $PORT
transport.port: $((PORT + 100))
discovery.type: single-node
xpack.security.enabled: $(secure_mode && echo true || echo false)
xpack.ml.enabled: false
action.destructive_requires_name: false
cluster.routing.allocation.disk.watermark.low: 1gb
cluster.routing.allocation.disk.watermark.high: 512mb
cluster.routing.allocation.disk.watermark.flood_stage: 256mb
YML
  # Extra settings for tests, e.g. thread_pool.write.queue_size: 2
  if [[ -n "${HSP_ES_EXTRA_YML:-}" ]]; then printf '%s\n' "$HSP_ES_EXTRA_YML" >> "$NODE_DIR/config/elasticsearch.yml"; fi
  printf -- '-Xms%s\n-Xmx%s\n' "$HEAP" "$HEAP" > "$NODE_DIR/config/jvm.options.d/heap.options"
  if secure_mode; then secure_setup; fi
  if [[ $(id -u) -eq 0 ]]; then chown -R "$ES_USER" "$NODE_DIR"; fi
}

start() {
  if health >/dev/null; then log "a node already answers at $URL"; echo "$URL"; return 0; fi
  if [[ "${HSP_ES_SECURE:-0}" != 1 ]]; then rm -f "$SEC_MARK"; URL="http://127.0.0.1:$PORT"; fi
  secure_refuse_plain_node
  ensure_user; install
  local java; java=$(find_java)
  write_config
  local t0=$SECONDS
  log "starting Elasticsearch $ES_VERSION on $URL (heap $HEAP, java $java)"
  local cmd=(env ES_JAVA_HOME="$java" ES_PATH_CONF="$NODE_DIR/config" ES_JAVA_OPTS="${ES_JAVA_OPTS:-}"
             "$HOME_DIR/bin/elasticsearch" -d -p "$PID_FILE")
  if [[ $(id -u) -eq 0 ]]; then
    # The node's user must be able to reach the unpacked node: let it traverse every folder above it.
    local d="$CACHE/es"
    while [[ "$d" != "/" && -n "$d" ]]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
    chmod o+rx "$CACHE/es" 2>/dev/null || true
    runuser -u "$ES_USER" -- "${cmd[@]}" >"$NODE_DIR/logs/stdout.log" 2>&1
  else
    "${cmd[@]}" >"$NODE_DIR/logs/stdout.log" 2>&1
  fi
  local deadline=$((SECONDS + ${HSP_ES_START_TIMEOUT:-180}))
  until es_curl -fsS --max-time 2 "$URL/_cluster/health?wait_for_status=yellow&timeout=1s" >/dev/null 2>&1; do
    if (( SECONDS > deadline )); then log "node did not become ready; last log lines:"; tail -n 40 "$NODE_DIR/logs/"*.log >&2 || true; exit 5; fi
    sleep 1
  done
  log "ready in $((SECONDS - t0)) s"
  echo "$URL"
}

stop() {
  if [[ -f "$PID_FILE" ]]; then
    local pid; pid=$(cat "$PID_FILE")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -9 "$pid" 2>/dev/null || true
      log "stopped pid $pid"
    fi
    rm -f "$PID_FILE"
  else
    log "no pid file at $PID_FILE: nothing to stop"
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) health || { log "no node answers at $URL"; exit 1; }; echo ;;
  url) echo "$URL" ;;
  env) secure_env ;;
  *) echo "usage: $0 start|stop|restart|status|url|env [--secure]" >&2; exit 2 ;;
esac
