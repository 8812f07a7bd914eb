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
# Starts its own `allot serve` (executor none, SQLite: .ci/lib.sh's
# ci_serve_none) on a free port in its own temp dir and stops it by PID.
# schemathesis is installed from PyPI into a private venv under the cache
# dir ($ALLOT_CACHE, default ~/.cache/allot).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"
log() { ci_log "$*"; }

version=4.32.5
examples=${ALLOT_ST_EXAMPLES:-100}
cache=${ALLOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/allot}
venv="$cache/schemathesis-$version"
ci_venv "$venv" "schemathesis==$version"

tmp=$(mktemp -d)
trap 'ci_serve_stop; rm -rf "$tmp"' EXIT

ci_serve_none "$tmp"
pid=$CI_SERVE_PID token=$CI_SERVE_TOKEN

log "running $examples examples per operation against $CI_SERVE_URL (server pid $pid)"
status=0
# From the temp dir: schemathesis keeps a cache in its working directory.
(cd "$tmp" && "$venv/bin/st" run "$CI_SERVE_URL/v1/openapi.json" \
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
