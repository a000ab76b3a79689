#!/usr/bin/env bash
# Start, stop or inspect a local single-node Elasticsearch or OpenSearch with no Docker.
#
#   ops/es-local.sh start    fetch (once), unpack (once) and start a node; a no-op when one answers
#   ops/es-local.sh stop     stop the node this script started (by pid)
#   ops/es-local.sh status   print the cluster health, exit 1 when no node (or another engine) answers
#   ops/es-local.sh url      print the URL to export as HSP_ES_URL
#   ops/es-local.sh env      print export lines: a secured node's URL, CA, superuser and test users; a plain
#                            node's HSP_ES_URL; and HSP_ENGINE (eval "$(ops/es-local.sh env)")
#   ops/es-local.sh version  print the engine and version chosen, e.g. "opensearch 3.5.0"
#
#   Every command takes --engine NAME (or HSP_ENGINE=NAME; default elasticsearch) and acts on that engine's
#   node only (its own folders and pid file; start and status check what answers on the port is that engine):
#     elasticsearch   org.elasticsearch.distribution.integ-test-zip:elasticsearch:9.3.2:zip (HSP_ES_VERSION)
#                     on the Temurin JDK 21+ (ES_JAVA_HOME);
#     elasticsearch8  org.elasticsearch.distribution.integ-test-zip:elasticsearch:8.19.8:zip (HSP_ES8_VERSION)
#                     on Java 17 (ES_JAVA_HOME; this zip bundles no JDK);
#     opensearch      org.opensearch.distribution.integ-test-zip:opensearch:3.5.0:zip (HSP_OPENSEARCH_VERSION)
#                     and the plugin org.opensearch.plugin:opensearch-knn:3.5.0.0:zip (HSP_KNN_VERSION),
#                     installed with bin/opensearch-plugin install --batch when unpacked, on the Temurin JDK 21+
#                     (JAVA_HOME and OPENSEARCH_JAVA_HOME; OPENSEARCH_JAVA_HOME to choose it). Its zip has no
#                     security plugin: --secure is refused (exit 2). The k-NN zip has no native libraries:
#                     only the "lucene" k-NN engine works (faiss and nmslib crash the node).
#   Engine-specific parts live in ops/es-engines.sh.
#
#   ops/es-local.sh cluster start            start an N-node cluster on loopback (HSP_ES_NODES, default 3)
#   ops/es-local.sh cluster stop             stop every node of it (SIGTERM, by pid)
#   ops/es-local.sh cluster kill NODE        SIGKILL one node (NODE: node-2 or 2) - a crash, no clean shutdown
#   ops/es-local.sh cluster stop NODE        stop one node cleanly
#   ops/es-local.sh cluster restart NODE     start one node again (after kill/stop) and wait until it rejoined
#   ops/es-local.sh cluster status           nodes, health and shard allocation; exit 1 when no node answers
#   ops/es-local.sh cluster url              every node's URL, comma-separated (export as HSP_ES_URL)
#   ops/es-local.sh cluster pid NODE         the pid of one node (empty when it is not running)
#
#   The cluster: HTTP ports HSP_ES_CLUSTER_PORT (9210) .. +N-1, transport ports HTTP+100, heap HSP_ES_HEAP
#   (512m for cluster nodes unless set), discovery.seed_hosts listing every node's transport address and
#   cluster.initial_master_nodes on the very first start only (every node master- and data-eligible), no
#   discovery.type: single-node. Security is off for the cluster (plain HTTP on 127.0.0.1 only).
#   Folders: $HSP_CACHE/es/cluster-<version>-<port>/node-<i>; `cluster wipe` deletes them (nodes stopped).
#   Cluster mode is for HSP_ENGINE=elasticsearch only: `cluster start|restart` refuse elasticsearch8 and
#   opensearch (exit 2).
#
#   start --secure (or HSP_ES_SECURE=1): TLS on HTTP, the elastic superuser and file-realm users and roles
#   (ops/security/es-secure.sh, roles from ops/security/roles.yml); then eval "$(ops/es-local.sh env)".
#   Works the same on elasticsearch and elasticsearch8 (same certutil flags and settings); opensearch refuses it.
#
# It fetches the engine's own integ-test-zip distribution from Maven Central with Maven,
# checks its SHA-512 against the pinned value below, unpacks it under $HSP_CACHE (default
# ~/.cache/hybridsearch, outside the repo) and runs it as the unprivileged user $HSP_ES_USER
# (neither engine runs as root) with security off, loopback only, single node and an explicit heap.
# Folders: $HSP_CACHE/es/<elasticsearch|opensearch>-<version> (unpacked), node-<version>-<port> (the default
# engine's node) or node-<engine>-<version>-<port> (the others'), so engines never share data.
#
# Environment: HSP_ENGINE, HSP_ES_VERSION, HSP_ES8_VERSION, HSP_OPENSEARCH_VERSION, HSP_KNN_VERSION,
# HSP_ES_PORT (9200 for every engine), HSP_ES_HEAP (1g), HSP_CACHE, HSP_ES_USER (hspes), HSP_M2_REPO (the
# Maven repository the zips are fetched into; default ~/.m2/repository), ES_JAVA_HOME / OPENSEARCH_JAVA_HOME
# (default: a JDK under /usr/lib/jvm as above), HSP_ES_SHA512 / HSP_KNN_SHA512 (for an unpinned version).
#
# The SHA-512 pins below are the only integrity check: the registry serves these zips without
# .sha1/.md5 files, so Maven's own strict checksum mode (-C) cannot be used and is not.
# Each pin was computed with sha512sum from the zip as Maven Central served it.
set -euo pipefail

ES_VERSION="${HSP_ES_VERSION:-9.3.2}"
# SHA-512 of org.elasticsearch.distribution.integ-test-zip:elasticsearch:9.3.2:zip
ES_SHA512_9_3_2="3808f6d3156c5c08b864323aee33eb3abcb369979fea36949ff002bb8d851bc6bad7646826db9ccc614160b074d7da6da87e6b3144b9c0cb77c060f01c3e579a"
# SHA-512 of org.elasticsearch.distribution.integ-test-zip:elasticsearch:8.19.8:zip
ES_SHA512_8_19_8="fa56c50fa80080f19bb9875348b019785e2ec53848168f007d40d81ca3cb70316b45f53f20bb63cc2913ddad703711ce70f67dae5533cc5fd9db84d3f89f5241"
# SHA-512 of org.opensearch.distribution.integ-test-zip:opensearch:3.5.0:zip
OS_SHA512_3_5_0="ca4c739cb0457de59df464f8f01eafb962ba140c41a649d29a2f5306cb59b436d76742a8e710c1493f3a68080e5f55fe5f9bf929cc3b0a6e04c6f87061a2e2a3"
# SHA-512 of org.opensearch.plugin:opensearch-knn:3.5.0.0:zip
KNN_SHA512_3_5_0_0="eb93646b9fc589ab69756bb628f7e5c0eb98e7dc2b41fe0f45a9dcd1bd694f179f714d469e8609995836ff95076fd5583502fdb2de98b10410fd93743bd83acc"

ENGINE="${HSP_ENGINE:-elasticsearch}"
args=()
while (( $# )); do
  case "$1" in
    --engine) [[ $# -ge 2 ]] || { echo "[es-local] --engine needs a name: elasticsearch, elasticsearch8 or opensearch" >&2; exit 2; }
              ENGINE=$2; shift 2 ;;
    --engine=*) ENGINE=${1#--engine=}; shift ;;
    --secure) HSP_ES_SECURE=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- "${args[@]}"
# shellcheck source=ops/es-engines.sh
source "$(dirname "$0")/es-engines.sh"

PORT="${HSP_ES_PORT:-9200}"
HEAP="${HSP_ES_HEAP:-1g}"
CACHE="${HSP_CACHE:-$HOME/.cache/hybridsearch}"
M2_REPO="${HSP_M2_REPO:-$HOME/.m2/repository}"
ES_USER="${HSP_ES_USER:-hspes}"
HOME_DIR="$CACHE/es/$DIST-$VERSION"
NODE_TAG="$VERSION"; [[ "$ENGINE" == elasticsearch ]] || NODE_TAG="$ENGINE-$VERSION"
NODE_DIR="$CACHE/es/node-$NODE_TAG-$PORT"
PID_FILE="$NODE_DIR/es.pid"
URL="http://127.0.0.1:$PORT"
if [[ "$DIST" == opensearch && "${HSP_ES_SECURE:-0}" == 1 && "${1:-start}" != stop ]]; then
  echo "[es-local] OpenSearch's integ-test zip has no security plugin: --secure (HSP_ES_SECURE=1) is not available with HSP_ENGINE=opensearch; start it without" >&2
  exit 2
fi
# shellcheck source=ops/security/es-secure.sh
source "$(dirname "$0")/security/es-secure.sh"
if secure_mode; then URL="https://127.0.0.1:$PORT"; fi

log() { printf '[es-local] %s\n' "$*" >&2; }

es_curl() { local o; mapfile -t o < <(secure_curl_opts); curl "${o[@]}" "$@"; }

health() { es_curl -fsS --max-time 2 "$URL/_cluster/health" 2>/dev/null; }

# Fetch coordinates $1 (group:artifact:version:zip) into the Maven repository once, check the SHA-512 pinned
# for them (or given in the variable named $2), print the zip's path.
fetch() {
  local coords=$1 want; want=$(pinned_sha512 "$1" "$2") || exit $?
  local g a v; IFS=: read -r g a v _ <<<"$coords"
  local zip="$M2_REPO/${g//.//}/$a/$v/$a-$v.zip"
  if [[ ! -f "$zip" ]]; then
    command -v mvn >/dev/null || { log "Maven (mvn) is needed to fetch $coords: apt-get install -y maven"; exit 3; }
    log "fetching $coords from Maven Central into $M2_REPO (about 5 s on a fast link)"
    # Batch mode, no colour; jansi.noreset keeps Maven 3.8's console library from writing reset codes (ESC[0m) on exit
    MAVEN_OPTS="${MAVEN_OPTS:-} -Djansi.noreset=true" mvn -B -q -Dstyle.color=never dependency:get \
      -Dmaven.repo.local="$M2_REPO" -Dartifact="$coords" -Dtransitive=false >&2 \
      || { log "Maven could not fetch $coords; retry with: $0 start"; exit 3; }
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
  [[ -x "$HOME_DIR/bin/$DIST" ]] && return
  local zip plugin; zip=$(fetch "$COORDS" HSP_ES_SHA512); plugin=$(engine_fetch_plugins)
  mkdir -p "$CACHE/es"
  log "unpacking $(du -h "$zip" | cut -f1) zip into $CACHE/es"
  rm -rf "$HOME_DIR.tmp" && mkdir -p "$HOME_DIR.tmp"
  unzip -q "$zip" -d "$HOME_DIR.tmp"
  engine_plugins "$HOME_DIR.tmp/$DIST-$VERSION" "$plugin"
  mv "$HOME_DIR.tmp/$DIST-$VERSION" "$HOME_DIR" && rm -rf "$HOME_DIR.tmp"
}

write_config() {
  mkdir -p "$NODE_DIR"/{data,logs,config}
  cp -r "$HOME_DIR/config/." "$NODE_DIR/config/"
  engine_fix_config "$NODE_DIR"
  cat > "$NODE_DIR/config/$DIST.yml" <<YML
cluster.name: hybridsearch-local
node.name: local-$PORT
path.data: $NODE_DIR/data
path.logs: $NODE_DIR/logs
network.host: 127.0.0.1
http.port: $PORT
transport.port: $((PORT + 100))
discovery.type: single-node
$(engine_yml "$(secure_mode && echo true || echo false)")
YML
  # Extra settings for tests, e.g. thread_pool.write.queue_size: 2
  if [[ -n "${HSP_ES_EXTRA_YML:-}" ]]; then printf '%s\n' "$HSP_ES_EXTRA_YML" >> "$NODE_DIR/config/$DIST.yml"; fi
  printf -- '-Xms%s\n-Xmx%s\n' "$HEAP" "$HEAP" > "$NODE_DIR/config/jvm.options.d/heap.options"
  if secure_mode; then secure_setup; fi
  if [[ $(id -u) -eq 0 ]]; then chown -R "$ES_USER" "$NODE_DIR"; fi
}

# Start the node whose folder is $1 (config in $1/config) as a daemon writing its pid to $2, with Java $3.
launch() {
  local dir=$1 pid_file=$2 java=$3
  local envs; mapfile -t envs < <(engine_env "$dir" "$java")
  local cmd=(env "${envs[@]}" "$HOME_DIR/bin/$DIST" -d -p "$pid_file")
  if [[ $(id -u) -eq 0 ]]; then
    # The node's user must be able to reach the unpacked node: let it traverse every folder above it.
    local d="$CACHE/es"
    while [[ "$d" != "/" && -n "$d" ]]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
    chmod o+rx "$CACHE/es" 2>/dev/null || true
    runuser -u "$ES_USER" -- "${cmd[@]}" >"$dir/logs/stdout.log" 2>&1
  else
    "${cmd[@]}" >"$dir/logs/stdout.log" 2>&1
  fi
}

# Exit 6 when what answers at $URL is another engine or version than the one chosen.
same_engine() {
  local got; got=$(identity "$URL")
  if [[ -n "$got" && "$got" != "$DIST $VERSION" ]]; then
    log "$got answers at $URL, not $ENGINE ($DIST $VERSION): stop it first (ops/es-local.sh --engine ... stop) or use another HSP_ES_PORT"
    exit 6
  fi
}

start() {
  if health >/dev/null; then same_engine; log "a node already answers at $URL"; echo "$URL"; return 0; fi
  if [[ "${HSP_ES_SECURE:-0}" != 1 ]]; then rm -f "$SEC_MARK"; URL="http://127.0.0.1:$PORT"; fi
  secure_refuse_plain_node
  ensure_user; install
  local java; java=$(find_java)
  write_config
  local t0=$SECONDS
  log "starting $ENGINE $VERSION on $URL (heap $HEAP, java $java)"
  launch "$NODE_DIR" "$PID_FILE" "$java"
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

# ------------------------------------------------------------------------------------- cluster

C_NODES="${HSP_ES_NODES:-3}"
C_PORT="${HSP_ES_CLUSTER_PORT:-9210}"
C_HEAP="${HSP_ES_HEAP:-512m}"
C_DIR="$CACHE/es/cluster-$NODE_TAG-$C_PORT"

c_port() { echo $((C_PORT + $1 - 1)); }
c_url() { echo "http://127.0.0.1:$(c_port "$1")"; }
c_urls() { local i out=(); for i in $(seq 1 "$C_NODES"); do out+=("$(c_url "$i")"); done; (IFS=,; echo "${out[*]}"); }
c_pid_file() { echo "$C_DIR/node-$1/es.pid"; }

# The node's number from "node-2" or "2"; exits 2 for anything else.
c_index() {
  local n=${1:-}; n=${n#node-}
  if [[ ! "$n" =~ ^[0-9]+$ ]] || (( n < 1 || n > C_NODES )); then
    echo "no node ${1:-(none given)}: name one of node-1 .. node-$C_NODES" >&2; exit 2
  fi
  echo "$n"
}

c_running_pid() {  # the pid of node $1 when its process lives, else nothing
  local f; f=$(c_pid_file "$1")
  [[ -f "$f" ]] || return 0
  local pid; pid=$(cat "$f")
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}

# Any node's answer to a GET of path $1 (the first node that answers).
c_get() {
  local i
  for i in $(seq 1 "$C_NODES"); do
    curl -fsS --max-time 3 "$(c_url "$i")$1" 2>/dev/null && return 0
  done
  return 1
}

c_write_config() {
  local i=$1 dir="$C_DIR/node-$1" seeds=() masters=() j
  for j in $(seq 1 "$C_NODES"); do seeds+=("\"127.0.0.1:$(( $(c_port "$j") + 100 ))\""); masters+=("\"node-$j\""); done
  local fresh=0
  [[ -d "$dir/data/_state" ]] || fresh=1
  mkdir -p "$dir"/{data,logs,config}
  cp -r "$HOME_DIR/config/." "$dir/config/"
  cat > "$dir/config/elasticsearch.yml" <<YML
cluster.name: hybridsearch-cluster-$C_PORT
node.name: node-$i
path.data: $dir/data
path.logs: $dir/logs
network.host: 127.0.0.1
http.port: $(c_port "$i")
transport.port: $(( $(c_port "$i") + 100 ))
discovery.seed_hosts: [$(IFS=,; echo "${seeds[*]}")]
$(engine_yml false)
YML
  # Bootstrap only a brand-new cluster: a node that already holds cluster state must rejoin, not re-elect.
  if (( fresh )); then echo "cluster.initial_master_nodes: [$(IFS=,; echo "${masters[*]}")]" >> "$dir/config/elasticsearch.yml"; fi
  if [[ -n "${HSP_ES_EXTRA_YML:-}" ]]; then printf '%s\n' "$HSP_ES_EXTRA_YML" >> "$dir/config/elasticsearch.yml"; fi
  printf -- '-Xms%s\n-Xmx%s\n' "$C_HEAP" "$C_HEAP" > "$dir/config/jvm.options.d/heap.options"
  if [[ $(id -u) -eq 0 ]]; then chown -R "$ES_USER" "$dir"; fi
}

# Only the default engine starts clusters (elasticsearch8 and opensearch: single nodes only).
c_engine() {
  if [[ "$ENGINE" != elasticsearch ]]; then
    log "cluster mode runs HSP_ENGINE=elasticsearch only, not $ENGINE: start a single node (ops/es-local.sh start)"; exit 2
  fi
}

c_launch() {
  local i=$1 java=$2
  if [[ -n "$(c_running_pid "$i")" ]]; then log "node-$i already runs (pid $(c_running_pid "$i"))"; return 0; fi
  c_write_config "$i"
  log "starting node-$i on $(c_url "$i") (transport $(( $(c_port "$i") + 100 )), heap $C_HEAP)"
  launch "$C_DIR/node-$i" "$(c_pid_file "$i")" "$java"
}

# Wait until $1 nodes are in the cluster and its health is at least yellow.
c_wait_nodes() {
  local want=$1 deadline=$((SECONDS + ${HSP_ES_START_TIMEOUT:-240}))
  until c_get "/_cluster/health?wait_for_nodes=$want&wait_for_status=yellow&timeout=1s" 2>/dev/null \
        | grep -q '"timed_out":false'; do
    if (( SECONDS > deadline )); then
      log "the cluster did not reach $want nodes; last log lines:"
      tail -n 20 "$C_DIR"/node-*/logs/hybridsearch-cluster-*.log >&2 2>/dev/null || true; exit 5
    fi
    sleep 1
  done
}

c_stop_node() {  # $1 node number, $2 signal (TERM or KILL)
  local i=$1 sig=$2 pid; pid=$(c_running_pid "$i")
  if [[ -z "$pid" ]]; then log "node-$i is not running"; return 0; fi
  kill -s "$sig" "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
  if [[ "$sig" == KILL ]]; then log "killed node-$i (pid $pid, SIGKILL)"; else log "stopped node-$i (pid $pid)"; fi
}

cluster() {
  local action=${1:-status}; shift || true
  case "$action" in
    start)
      c_engine; ensure_user; install
      local java t0=$SECONDS i; java=$(find_java)
      # In parallel: a daemonising node returns only once it found a master (or after 30 s), so starting
      # them one by one would wait on every node before the quorum exists.
      local pids=()
      for i in $(seq 1 "$C_NODES"); do c_launch "$i" "$java" & pids+=($!); done
      for i in "${pids[@]}"; do wait "$i" || { log "a node failed to launch (see $C_DIR/node-*/logs/stdout.log)"; exit 5; }; done
      c_wait_nodes "$C_NODES"
      log "$C_NODES-node cluster ready in $((SECONDS - t0)) s"
      c_urls ;;
    stop)
      if [[ -n "${1:-}" ]]; then local n; n=$(c_index "$1"); c_stop_node "$n" TERM; return; fi
      local i; for i in $(seq 1 "$C_NODES"); do c_stop_node "$i" TERM; done ;;
    kill) local n; n=$(c_index "${1:-}"); c_stop_node "$n" KILL ;;
    restart)
      local i java t0=$SECONDS; i=$(c_index "${1:-}"); c_engine; java=$(find_java)
      c_stop_node "$i" TERM
      c_launch "$i" "$java"
      c_wait_nodes "$C_NODES"
      log "node-$i rejoined in $((SECONDS - t0)) s" ;;
    status)
      c_get "/_cat/nodes?v&h=name,ip,port,node.role,master,heap.percent" || { log "no node of the cluster answers"; exit 1; }
      c_get "/_cluster/health?pretty" ;;
    url) c_urls ;;
    pid) local n; n=$(c_index "${1:-}"); c_running_pid "$n" ;;
    wipe)
      local i; for i in $(seq 1 "$C_NODES"); do
        if [[ -n "$(c_running_pid "$i")" ]]; then log "node-$i still runs: cluster stop first"; exit 1; fi
      done
      rm -rf "$C_DIR"; log "deleted $C_DIR" ;;
    *) echo "usage: $0 cluster start|stop [NODE]|kill NODE|restart NODE|status|url|pid NODE|wipe" >&2; exit 2 ;;
  esac
}

case "${1:-start}" in
  cluster) shift; cluster "$@" ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) health >/dev/null || { log "no node answers at $URL"; exit 1; }; (same_engine) || exit 1; health; echo ;;
  url) echo "$URL" ;;
  env) if [[ "${HSP_ES_SECURE:-0}" == 1 ]] || secure_mode; then secure_env; else echo "export HSP_ES_URL=$URL"; fi
       echo "export HSP_ENGINE=$ENGINE" ;;
  version) echo "$ENGINE $VERSION" ;;
  *) echo "usage: $0 start|stop|restart|status|url|env|version [--secure] [--engine NAME] | cluster ..." >&2; exit 2 ;;
esac
