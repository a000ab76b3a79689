# Sourced by ops/es-local.sh for `start --secure` (or HSP_ES_SECURE=1): a node with x-pack security on.
#
#   * TLS on HTTP with a CA and a node certificate (127.0.0.1, localhost) made by elasticsearch-certutil;
#   * the `elastic` superuser, password from the keystore's bootstrap.password (generated, or HSP_ES_ELASTIC_PASSWORD);
#   * file-realm roles from ops/security/roles.yml (the file docs/operations.md shows) and users for them:
#     team-a (hsp-team-a), team-b (hsp-team-b), searcher-a (hsp-searcher-a), passwords generated.
#
# Everything generated lives in $NODE_DIR/security and is made once per node folder; each start copies it into
# the node's config again (write_config refreshes that folder). What clients and tests need is written to
# $NODE_DIR/security/security.env (`ops/es-local.sh env` prints it as export lines):
#   HSP_ES_URL, HSP_ES__USERNAME, HSP_ES__PASSWORD, HSP_ES__CA_CERTS   (the superuser, for ordinary tests)
#   HSP_TEST_SECURITY_ENV                                             (this file, for the secured tests)
#   HSP_TEST_USERS="team-a:hsp-team-a team-b:hsp-team-b searcher-a:hsp-searcher-a"
#   HSP_TEST_PASSWORD_TEAM_A, HSP_TEST_PASSWORD_TEAM_B, HSP_TEST_PASSWORD_SEARCHER_A
#   HSP_TEST_URL_PASSWORD_FILE: the password of the user url-test (role hsp-team-a), which holds every character
#     that splits or escapes a URL, a space and non-ASCII (kept in a file of its own: it does not survive a shell
#     env line); tests/integration/test_secrets.py signs in with it
# shellcheck shell=bash

SEC_DIR="$NODE_DIR/security"
SEC_ENV="$SEC_DIR/security.env"
SEC_MARK="$NODE_DIR/secure"
SEC_ROLES="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/roles.yml"
SEC_USERS="team-a:hsp-team-a team-b:hsp-team-b searcher-a:hsp-searcher-a"
SEC_URL_PASSWORD="$SEC_DIR/url-test.password"

# True when this node runs (or is to start) secured.
secure_mode() { [[ "${HSP_ES_SECURE:-0}" == 1 || -f "$SEC_MARK" ]]; }

secure_password() { tr -dc 'A-Za-z0-9' </dev/urandom | head -c 24 || true; }

# curl options that reach the secured node as the superuser (nothing when the node is plain).
secure_curl_opts() {
  if secure_mode && [[ -f "$SEC_ENV" ]]; then
    local pw; pw=$(sed -n 's/^HSP_ES__PASSWORD=//p' "$SEC_ENV")
    printf '%s\n' --cacert "$SEC_DIR/ca.crt" -u "elastic:$pw"
  fi
}

secure_tool() {  # run an elasticsearch-* tool against the node's config folder
  local tool=$1; shift
  # a UTF-8 locale, whatever the caller's: the JVM decodes arguments (url-test's non-ASCII password) by the locale
  LC_ALL=C.UTF-8 ES_JAVA_HOME="$(find_java)" ES_PATH_CONF="$NODE_DIR/config" "$HOME_DIR/bin/elasticsearch-$tool" "$@"
}

# Make (once) the CA, the node certificate, the passwords, the keystore and the users; install them into
# the freshly written config folder and append the security settings to elasticsearch.yml.
secure_setup() {
  mkdir -p "$SEC_DIR" && chmod 700 "$SEC_DIR"
  local t0=$SECONDS
  if [[ ! -f "$SEC_DIR/node.crt" ]]; then
    log "making a CA and a node certificate for 127.0.0.1 with elasticsearch-certutil"
    local tmp; tmp=$(mktemp -d)
    secure_tool certutil ca --pem --silent --days 3650 --out "$tmp/ca.zip" >/dev/null
    unzip -q "$tmp/ca.zip" -d "$tmp"
    secure_tool certutil cert --pem --silent --days 3650 --ca-cert "$tmp/ca/ca.crt" --ca-key "$tmp/ca/ca.key" \
      --name node --ip 127.0.0.1 --dns localhost --out "$tmp/node.zip" >/dev/null
    unzip -q "$tmp/node.zip" -d "$tmp"
    cp "$tmp/ca/ca.crt" "$tmp/ca/ca.key" "$tmp/node/node.crt" "$tmp/node/node.key" "$SEC_DIR/"
    rm -rf "$tmp"
  fi
  if [[ ! -f "$SEC_ENV" ]]; then
    local elastic="${HSP_ES_ELASTIC_PASSWORD:-$(secure_password)}" spec user var
    {
      echo "# written by ops/es-local.sh start --secure; source it or pass its path as HSP_TEST_SECURITY_ENV"
      echo "HSP_ES_URL=https://127.0.0.1:$PORT"
      echo "HSP_ES__USERNAME=elastic"
      echo "HSP_ES__PASSWORD=$elastic"
      echo "HSP_ES__CA_CERTS=$SEC_DIR/ca.crt"
      echo "HSP_TEST_SECURITY_ENV=$SEC_ENV"
      echo "HSP_TEST_USERS=\"$SEC_USERS\""
      echo "HSP_TEST_URL_PASSWORD_FILE=$SEC_URL_PASSWORD"
      for spec in $SEC_USERS; do
        user=${spec%%:*}; var=$(echo "${user//-/_}" | tr '[:lower:]' '[:upper:]')
        echo "HSP_TEST_PASSWORD_$var=$(secure_password)"
      done
    } > "$SEC_ENV.tmp"
    printf '%s' "S3c#/?@:% ü✓-$(secure_password)" > "$SEC_URL_PASSWORD"
    mv "$SEC_ENV.tmp" "$SEC_ENV"
    rm -f "$SEC_DIR/users" "$SEC_DIR/users_roles" "$SEC_DIR/elasticsearch.keystore"
  fi
  # The same CA and certificate in the config folder, where the node reads them.
  mkdir -p "$NODE_DIR/config/certs"
  cp "$SEC_DIR/ca.crt" "$SEC_DIR/node.crt" "$SEC_DIR/node.key" "$NODE_DIR/config/certs/"
  cp "$SEC_ROLES" "$NODE_DIR/config/roles.yml"
  if [[ ! -f "$SEC_DIR/elasticsearch.keystore" ]]; then
    rm -f "$NODE_DIR/config/elasticsearch.keystore"
    secure_tool keystore create >/dev/null
    sed -n 's/^HSP_ES__PASSWORD=//p' "$SEC_ENV" | secure_tool keystore add --stdin bootstrap.password >/dev/null
    cp "$NODE_DIR/config/elasticsearch.keystore" "$SEC_DIR/"
  fi
  cp "$SEC_DIR/elasticsearch.keystore" "$NODE_DIR/config/"
  if [[ ! -f "$SEC_DIR/users" ]]; then
    log "adding file-realm users: $SEC_USERS"
    : > "$NODE_DIR/config/users"; : > "$NODE_DIR/config/users_roles"
    local spec user role var pw
    for spec in $SEC_USERS; do
      user=${spec%%:*}; role=${spec#*:}; var=$(echo "${user//-/_}" | tr '[:lower:]' '[:upper:]')
      pw=$(sed -n "s/^HSP_TEST_PASSWORD_$var=//p" "$SEC_ENV")
      secure_tool users useradd "$user" -p "$pw" -r "$role" >/dev/null
    done
    secure_tool users useradd url-test -p "$(cat "$SEC_URL_PASSWORD")" -r hsp-team-a >/dev/null
    cp "$NODE_DIR/config/users" "$NODE_DIR/config/users_roles" "$SEC_DIR/"
  fi
  cp "$SEC_DIR/users" "$SEC_DIR/users_roles" "$NODE_DIR/config/"
  cat >> "$NODE_DIR/config/elasticsearch.yml" <<YML
xpack.security.http.ssl.enabled: true
xpack.security.http.ssl.key: certs/node.key
xpack.security.http.ssl.certificate: certs/node.crt
xpack.security.http.ssl.certificate_authorities: certs/ca.crt
xpack.security.transport.ssl.enabled: false
xpack.security.authc.realms.file.file1.order: 0
xpack.security.authc.realms.native.native1.order: 1
YML
  touch "$SEC_MARK"
  # Readable by whoever runs the tests; the node's user reads its copies in the config folder.
  chmod 755 "$SEC_DIR" && chmod 644 "$SEC_DIR/ca.crt" && chmod 600 "$SEC_DIR/ca.key" "$SEC_DIR/node.key" "$SEC_ENV" "$SEC_URL_PASSWORD"
  log "security set up in $((SECONDS - t0)) s: TLS with CA $SEC_DIR/ca.crt, users in $SEC_ENV"
}

# `ops/es-local.sh env`: export lines for the secured node (eval "$(ops/es-local.sh env)"); exit 1 when plain.
secure_env() {
  if ! secure_mode || [[ ! -f "$SEC_ENV" ]]; then
    log "no secured node at $NODE_DIR: start one with $0 start --secure"; exit 1
  fi
  sed -n 's/^\(HSP_[A-Z0-9_]*=\)/export \1/p' "$SEC_ENV"
}

# A secured start where a plain node answers on the port would only time out: say so instead.
secure_refuse_plain_node() {
  if [[ "${HSP_ES_SECURE:-0}" == 1 ]] && curl -fsS --max-time 2 "http://127.0.0.1:$PORT/_cluster/health" >/dev/null 2>&1; then
    log "a node without security answers at http://127.0.0.1:$PORT: stop it first ($0 stop) or start without --secure"
    exit 6
  fi
}
