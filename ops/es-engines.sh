# Sourced by ops/es-local.sh: what differs between the engines HSP_ENGINE (or --engine) chooses.
#
#   elasticsearch    Elasticsearch $HSP_ES_VERSION (9.3.2), Java 21+ (Temurin)     bin/elasticsearch, ES_PATH_CONF
#   elasticsearch8   Elasticsearch $HSP_ES8_VERSION (8.19.8), Java 17              bin/elasticsearch, ES_PATH_CONF
#   opensearch       OpenSearch $HSP_OPENSEARCH_VERSION (3.5.0) + opensearch-knn   bin/opensearch, OPENSEARCH_PATH_CONF
#                    $HSP_KNN_VERSION (3.5.0.0), Java 21+ (Temurin)
#
# es-local.sh sets ES_VERSION and the SHA-512 pins before sourcing this file; this file sets ENGINE, VERSION,
# DIST (the zip's top folder and binary: elasticsearch or opensearch), COORDS (and KNN_COORDS) and the Java
# wanted, and defines the engine-specific steps: engine_yml, engine_plugins, engine_env, find_java, identity.
# shellcheck shell=bash

case "$ENGINE" in
  elasticsearch)
    VERSION="$ES_VERSION"; DIST=elasticsearch; JAVA_MIN=21; JAVA_MAX=999 ;;
  elasticsearch8)
    VERSION="${HSP_ES8_VERSION:-8.19.8}"; DIST=elasticsearch; JAVA_MIN=17; JAVA_MAX=17 ;;
  opensearch)
    VERSION="${HSP_OPENSEARCH_VERSION:-3.5.0}"; DIST=opensearch; JAVA_MIN=21; JAVA_MAX=999
    KNN_VERSION="${HSP_KNN_VERSION:-$VERSION.0}"
    KNN_COORDS="org.opensearch.plugin:opensearch-knn:$KNN_VERSION:zip" ;;
  *) echo "[es-local] unknown engine '$ENGINE' (HSP_ENGINE or --engine): elasticsearch, elasticsearch8 or opensearch" >&2
     exit 2 ;;
esac
if [[ "$DIST" == opensearch ]]; then
  COORDS="org.opensearch.distribution.integ-test-zip:opensearch:$VERSION:zip"
else
  COORDS="org.elasticsearch.distribution.integ-test-zip:elasticsearch:$VERSION:zip"
fi

# The SHA-512 pinned for coordinates $1 (group:artifact:version:zip); an unpinned one is refused unless the
# variable named $2 gives it (HSP_ES_SHA512 for the engine's zip, HSP_KNN_SHA512 for the k-NN plugin).
pinned_sha512() {
  local av=${1#*:}; av=${av%:zip}
  case "$av" in
    elasticsearch:9.3.2) echo "$ES_SHA512_9_3_2" ;;
    elasticsearch:8.19.8) echo "$ES_SHA512_8_19_8" ;;
    opensearch:3.5.0) echo "$OS_SHA512_3_5_0" ;;
    opensearch-knn:3.5.0.0) echo "$KNN_SHA512_3_5_0_0" ;;
    *) [[ -n "${!2:-}" ]] && { echo "${!2}"; return; }
       log "no SHA-512 is pinned for $1: pin it in $0 or set $2"; exit 4 ;;
  esac
}

java_major() { "$1/bin/java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1; }

# The JDK for this engine: ES_JAVA_HOME (elasticsearch engines) or OPENSEARCH_JAVA_HOME when set (it must be
# Java $JAVA_MIN+), else the first JDK under /usr/lib/jvm in [JAVA_MIN, JAVA_MAX], Temurin first.
find_java() {
  local given=${ES_JAVA_HOME:-}
  if [[ "$DIST" == opensearch ]]; then given=${OPENSEARCH_JAVA_HOME:-}; fi
  local d v want="Java $JAVA_MIN"; (( JAVA_MAX > JAVA_MIN )) && want="Java $JAVA_MIN+"
  if [[ -n "$given" ]]; then
    v=$(java_major "$given" 2>/dev/null || true)
    if [[ -z "$v" || "$v" -lt "$JAVA_MIN" ]]; then log "$given is not Java $JAVA_MIN+ (what $ENGINE $VERSION needs)"; exit 3; fi
    echo "$given"; return
  fi
  for d in /usr/lib/jvm/temurin-*-jdk* /usr/lib/jvm/*; do
    [[ -x "$d/bin/java" ]] || continue
    v=$(java_major "$d")
    if [[ -n "$v" ]] && (( v >= JAVA_MIN && v <= JAVA_MAX )); then echo "$d"; return; fi
  done
  if [[ "$DIST" == opensearch ]]; then
    log "no $want found for $ENGINE: install a Temurin JDK 21+ and set OPENSEARCH_JAVA_HOME"
  else
    log "no $want found for $ENGINE: install one (e.g. openjdk-17 or Temurin 21+) and set ES_JAVA_HOME"
  fi
  exit 3
}

# Settings every local node gets, single or in a cluster: deletes by wildcard allowed (tests clean up by
# prefix), disk watermarks in bytes so that a nearly full laptop disk does not block writes; on
# Elasticsearch also no ML and security on or off ($1: true/false; OpenSearch's zip has no security plugin).
engine_yml() {
  if [[ "$DIST" == elasticsearch ]]; then printf 'xpack.ml.enabled: false\nxpack.security.enabled: %s\n' "$1"; fi
  cat <<'YML'
action.destructive_requires_name: false
cluster.routing.allocation.disk.watermark.low: 1gb
cluster.routing.allocation.disk.watermark.high: 512mb
cluster.routing.allocation.disk.watermark.flood_stage: 256mb
YML
}

# Fetch plugins before unpacking (so a bad pin fails early); install them into the unpacked home $1.
engine_fetch_plugins() { if [[ "$DIST" == opensearch ]]; then fetch "$KNN_COORDS" HSP_KNN_SHA512; fi; }
engine_plugins() {
  local home=$1 zip=$2 java
  [[ -n "$zip" ]] || return 0
  java=$(find_java)
  log "installing opensearch-knn $KNN_VERSION (bin/opensearch-plugin install --batch)"
  JAVA_HOME="$java" OPENSEARCH_JAVA_HOME="$java" OPENSEARCH_PATH_CONF="$home/config" \
    "$home/bin/opensearch-plugin" install --batch "file://$zip" >&2
}

# The node's config folder $1 after it was copied from the home: OpenSearch's jvm.options writes the GC log,
# error files and heap dumps relative to the home (root's, not writable by the node's user): into the node's.
engine_fix_config() {
  local dir=$1
  mkdir -p "$dir/config/jvm.options.d"
  if [[ "$DIST" == opensearch ]]; then
    sed -i -e "s#=logs/#=$dir/logs/#g; s#HeapDumpPath=data#HeapDumpPath=$dir/data#" "$dir/config/jvm.options"
  fi
}

# The environment the start script of node folder $1 needs, with Java $2, as NAME=value words for env(1).
engine_env() {
  local dir=$1 java=$2
  if [[ "$DIST" == opensearch ]]; then
    printf '%s\n' "JAVA_HOME=$java" "OPENSEARCH_JAVA_HOME=$java" "OPENSEARCH_PATH_CONF=$dir/config" \
      "OPENSEARCH_JAVA_OPTS=${OPENSEARCH_JAVA_OPTS:-}"
  else
    printf '%s\n' "ES_JAVA_HOME=$java" "ES_PATH_CONF=$dir/config" "ES_JAVA_OPTS=${ES_JAVA_OPTS:-}"
  fi
}

# "opensearch 3.5.0" or "elasticsearch 9.3.2": what answers at $1 (nothing when no node answers). Not from GET /:
# Elasticsearch's integ-test zip lacks the module that serves it (405); OpenSearch marks every response with an
# X-OpenSearch-Version header (Elasticsearch with X-Elastic-Product).
identity() {
  local out num dist=elasticsearch
  out=$(es_curl -fsS -D - --max-time 2 "$1/_nodes/_local?filter_path=nodes.*.version" 2>/dev/null) || return 0
  if grep -qi '^x-opensearch-version:' <<<"$out"; then dist=opensearch; fi
  num=$(grep -o '"version" *: *"[^"]*"' <<<"$out" | head -n1 | sed 's/.*"\([^"]*\)"$/\1/')
  echo "$dist $num"
}
