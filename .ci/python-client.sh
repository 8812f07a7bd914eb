#!/usr/bin/env bash
# A client nobody here wrote: generates a Python client from the served
# OpenAPI document (/v1/openapi.json) with openapi-python-client, installs it
# and runs .ci/python-client/check.py, which uses only that client to
# submit, list, show and cancel a workload and to list accounts and nodes.
# Any warning of the generator fails the run (--fail-on-warning): what the
# generator cannot read is a fault of the document, fixed at its source
# (the utoipa annotations of crates/allot-server), never in generated code.
#
#   bash .ci/python-client.sh
#
# Starts its own `allot serve` (executor none, SQLite: .ci/lib.sh's
# ci_serve_none) on a free port in its own temp dir and stops it by PID.
# openapi-python-client (and poetry-core, to install the generated package)
# come from PyPI into a private venv under the cache dir ($ALLOT_CACHE,
# default ~/.cache/allot); the generated client is installed there without
# the network.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"
log() { ci_log "$*"; }

generator=0.29.1
poetry_core=2.5.0
cache=${ALLOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/allot}
venv="$cache/python-client-$generator"
ci_venv "$venv" "openapi-python-client==$generator" "poetry-core==$poetry_core"

tmp=$(mktemp -d)
trap 'ci_serve_stop; rm -rf "$tmp"' EXIT

ci_serve_none "$tmp"
pid=$CI_SERVE_PID url=$CI_SERVE_URL
curl -fsS "$url/v1/openapi.json" -o "$tmp/openapi.json" || ci_die "allot serve does not serve $url/v1/openapi.json"

log "generating the client from $url/v1/openapi.json (openapi-python-client $generator)"
# The generator formats its output with ruff, which the venv has.
(cd "$tmp" && PATH="$venv/bin:$PATH" "$venv/bin/openapi-python-client" generate --path openapi.json \
  --config "$CI_ROOT/.ci/python-client/config.yaml" --output-path allot-client --fail-on-warning) \
  || ci_die "openapi-python-client could not generate a client from the document without warnings (above)"
# The last run's client goes first; this one's dependencies (httpx, attrs)
# came with the generator's.
"$venv/bin/pip" uninstall -q -y allot-client 2>/dev/null || true
"$venv/bin/pip" install -q --no-index --no-build-isolation "$tmp/allot-client" \
  || ci_die "the generated client does not install"
"$venv/bin/python" -c 'import allot_client' || ci_die "the generated client does not import"

log "running .ci/python-client/check.py against $url (server pid $pid)"
status=0
ALLOT_SERVER=$url ALLOT_TOKEN=$CI_SERVE_TOKEN "$venv/bin/python" .ci/python-client/check.py || status=$?
if ! kill -0 "$pid" 2>/dev/null; then
  log "allot serve died during the run:"; cat "$tmp/server.log" >&2; exit 1
fi
if [ $status != 0 ]; then
  log "the server's log:"; tail -50 "$tmp/server.log" >&2
fi
exit "$status"
