#!/usr/bin/env bash
# Property-based API test: schemathesis generates requests from the served
# OpenAPI document (/v1/openapi.json) and checks every answer against it:
# no 5xx, documented status codes, content types, headers and schemas.
#
#   bash .ci/schemathesis.sh            # ALLOT_ST_EXAMPLES=N per operation (default 100)
#
# DELETE /v1/tokens/{name} is left out: names read from GET /v1/tokens would
# revoke the run's own token (tests/authz.rs covers revocation).
#
# Starts its own `allot serve` (executor none, SQLite) on a free port in its
# own temp dir and stops it by PID. schemathesis is installed from PyPI into
# a private venv under the cache dir ($ALLOT_CACHE, default ~/.cache/allot).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"
log() { ci_log "$*"; }

version=4.32.5
examples=${ALLOT_ST_EXAMPLES:-100}
cache=${ALLOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/allot}
venv="$cache/schemathesis-$version"
if [ ! -x "$venv/bin/st" ]; then
  log "installing schemathesis $version into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==$version"
fi

# ALLOT_BIN: an `allot` binary already built (CI passes the test run's).
if [ -n "${ALLOT_BIN:-}" ]; then
  bin=$ALLOT_BIN
else
  cargo build --locked -q -p allot
  bin="${CARGO_TARGET_DIR:-target}/debug/allot"
fi
[ -x "$bin" ] || ci_die "no allot binary at $bin"

tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

cat >"$tmp/cluster.toml" <<'EOF'
[cluster]
name = "schemathesis"
[[cluster.pools]]
name = "gpu"
gpu = "H100"
nodes = 2
gpus_per_node = 4
[[accounts]]
path = "org/a"
[[accounts]]
path = "org/b"
[contract]
scheduling_interval = "1s"
interactive_max_gpus = 4
EOF
db="sqlite://$tmp/allot.db"
token=$("$bin" token create --db "$db" --role admin --name root 2>/dev/null)
port=$(ci_free_ports 1)
ALLOT_LOG=warn "$bin" serve --config "$tmp/cluster.toml" --db "$db" --listen "127.0.0.1:$port" \
  --executor none --data-dir "$tmp/data" 2>"$tmp/server.log" &
pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/v1/health" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/server.log" >&2; ci_die "allot serve exited"; }
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/v1/health" >/dev/null || ci_die "allot serve does not answer"

log "running $examples examples per operation against 127.0.0.1:$port (server pid $pid)"
status=0
# From the temp dir: schemathesis keeps a cache in its working directory.
(cd "$tmp" && "$venv/bin/st" run "http://127.0.0.1:$port/v1/openapi.json" \
  --header "Authorization: Bearer $token" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,unsupported_method \
  --phases examples,coverage,fuzzing,stateful --max-examples "$examples" --seed 1 --no-shrink \
  --workers 1 --request-timeout 10 \
  --exclude-method DELETE \
  --report junit --report-dir "$tmp/report") || status=$?
if ! kill -0 "$pid" 2>/dev/null; then
  log "allot serve died during the run:"; cat "$tmp/server.log" >&2; exit 1
fi
if grep -q "ERROR" "$tmp/server.log"; then
  log "server errors during the run:"; grep "ERROR" "$tmp/server.log" | head -20 >&2
fi
exit "$status"
