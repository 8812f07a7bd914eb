#!/usr/bin/env bash
# A private OpenID Connect provider for the dashboard's single sign-on test
# (crates/allot-server/tests/dashboard_sso.rs), never a real one:
#   eval "$(.ci/oidc.sh)"        # start (or reuse) it; sets ALLOT_TEST_OIDC_ISSUER
#   .ci/oidc.sh stop [--purge]   # stop it (by its PID file); --purge deletes its venv
# oidc-provider-mock from PyPI, installed into a private venv under this
# checkout's state directory (.ci/lib.sh), on a free loopback port, with
# nonces required. It accepts any client id and secret; a test sets each
# person's claims with PUT /users/{sub}. Diagnostics go to stderr; any
# failure is fatal.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

version=0.3.4
DIR=$CI_STATE/oidc
PID=$DIR/pid
cmd=${1:-start}

if [ "$cmd" = stop ]; then
  if [ -s "$PID" ]; then
    ci_log "stopping the private OpenID Connect provider (pid $(head -1 "$PID"))"
    ci_stop_pidfiles "$PID"
  fi
  if [ "${2:-}" = --purge ]; then rm -rf "$DIR"; fi
  exit 0
fi
[ "$cmd" = start ] || ci_die "usage: $0 [start | stop [--purge]]"
ci_state_dir
mkdir -p "$DIR"
ci_venv "$DIR/venv-$version" "oidc-provider-mock==$version"

issuer() { echo "http://127.0.0.1:$(cat "$DIR/port")"; }
answers() { curl -fsS "$(issuer)/.well-known/openid-configuration" >/dev/null 2>&1; }

if ci_pid_alive "$PID" && [ -s "$DIR/port" ] && answers; then
  ci_log "reusing the private OpenID Connect provider at $(issuer)"
else
  ci_stop_pidfiles "$PID"
  port=$(ci_free_ports 1)
  echo "$port" > "$DIR/port"
  ci_log "starting the private OpenID Connect provider on 127.0.0.1:$port"
  NO_COLOR=1 setsid "$DIR/venv-$version/bin/oidc-provider-mock" --host 127.0.0.1 --port "$port" \
    --require-nonce >"$DIR/log" 2>&1 < /dev/null &
  echo $! > "$PID"
  for _ in $(seq 1 100); do
    answers && break
    ci_pid_alive "$PID" || { tail -20 "$DIR/log" >&2; ci_die "oidc-provider-mock exited"; }
    sleep 0.1
  done
  answers || { tail -20 "$DIR/log" >&2; ci_die "oidc-provider-mock does not answer at $(issuer)"; }
fi
echo "export ALLOT_TEST_OIDC_ISSUER=$(issuer)"
