# Shared by the .ci service scripts (sourced, not run).
#
# Every service the tests use is the run's own: it lives under one private
# state directory per checkout, listens on free loopback ports chosen at
# start, and is stopped by the PIDs the scripts recorded, never by name.
# Nothing under /etc is written; a host's own Slurm, munge or PostgreSQL is
# never read, changed or stopped.

CI_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# One state directory per checkout (a hash of its path), in /tmp so that the
# service users (postgres, slurm, munge) can reach it.
CI_STATE=${ALLOT_CI_STATE:-/tmp/allot-ci-$(printf %s "$CI_ROOT" | sha1sum | cut -c1-12)}

ci_log() { echo "$(basename "$0"): $*" >&2; }
ci_die() { ci_log "$*"; exit 1; }

# Creates the state directory, or checks that an existing one is this
# checkout's (it records the checkout it belongs to).
ci_state_dir() {
  if [ -e "$CI_STATE/owner" ]; then
    [ "$(cat "$CI_STATE/owner")" = "$CI_ROOT" ] \
      || ci_die "$CI_STATE belongs to $(cat "$CI_STATE/owner"), not to $CI_ROOT: set ALLOT_CI_STATE"
  else
    mkdir -p "$CI_STATE"
    chmod 755 "$CI_STATE"
    echo "$CI_ROOT" > "$CI_STATE/owner"
  fi
}

# N free TCP ports on 127.0.0.1 (bound and released at once; nothing else
# on this machine is asked to move).
ci_free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Is something listening on 127.0.0.1:PORT?
ci_port_busy() {
  python3 - "$1" <<'EOF'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(0)
sys.exit(1)
EOF
}

ci_installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

# Installs the missing Debian packages among "$@". The packages' init
# scripts are kept from starting daemons with their default config by a
# policy-rc.d that is written only when the host has none, and removed only
# when this function wrote it.
ci_apt_install() {
  local missing=() p
  for p in "$@"; do ci_installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || ci_die "must run as root to install ${missing[*]}"
  ci_log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >&2
  local ours=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# written by Allot'"'"'s test scripts for one apt-get install\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    ours=1
  fi
  local rc=0
  apt-get install -y --no-install-recommends "${missing[@]}" >&2 || rc=$?
  [ $ours = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || ci_die "apt-get install ${missing[*]} failed"
}

# Is the process in the PID file alive?
ci_pid_alive() { [ -s "$1" ] && kill -0 "$(head -1 "$1")" 2>/dev/null; }

# SIGTERM to the PIDs of the given PID files, up to 10 s, then SIGKILL.
ci_stop_pidfiles() {
  local f pid pids=()
  for f in "$@"; do
    [ -s "$f" ] || continue
    pid=$(head -1 "$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  local _ alive
  for _ in $(seq 100); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2>/dev/null && { ci_log "SIGKILL $pid"; kill -KILL "$pid" 2>/dev/null || true; }
  done
  rm -f "$@"
}

# A private Python venv at $1 with the pinned packages "${@:2}" from PyPI,
# made once (marked complete at the end, so a failed install is redone);
# python3-venv comes from Debian's packages when python3 cannot make one.
ci_venv() {
  local venv=$1
  shift
  [ -e "$venv/.complete" ] && return 0
  python3 -c 'import ensurepip, venv' 2>/dev/null || ci_apt_install python3-venv
  ci_log "installing $* into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv" || ci_die "python3 -m venv $venv failed"
  "$venv/bin/pip" install -q "$@" || { rm -rf "$venv"; ci_die "pip install $* into $venv failed"; }
  touch "$venv/.complete"
}

# An `allot serve` of a script's own for its API checks (.ci/schemathesis.sh,
# .ci/python-client.sh), in the directory $1: the `none` executor (attempts
# hold their GPUs until cancelled), SQLite, two nodes of four H100s,
# accounts org/a and org/b, a scheduling pass every second, a grace of one
# second, on a free loopback port. Sets CI_SERVE_PID (as soon as it runs;
# ci_serve_stop stops it by that PID), CI_SERVE_URL and CI_SERVE_TOKEN (an
# admin token); its log is $1/server.log. ALLOT_BIN: an `allot` binary
# already built (CI passes the test run's), else one is built.
ci_serve_none() {
  local dir=$1 bin db port
  if [ -n "${ALLOT_BIN:-}" ]; then
    bin=$ALLOT_BIN
  else
    (cd "$CI_ROOT" && cargo build --locked -q -p allot)
    bin="${CARGO_TARGET_DIR:-$CI_ROOT/target}/debug/allot"
  fi
  [ -x "$bin" ] || ci_die "no allot binary at $bin"
  cat >"$dir/cluster.toml" <<'TOML'
[cluster]
name = "ci"
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
grace = "1s"
interactive_max_gpus = 4
TOML
  db="sqlite://$dir/allot.db"
  CI_SERVE_TOKEN=$("$bin" token create --db "$db" --role admin --name root 2>"$dir/token.log") \
    || { cat "$dir/token.log" >&2; ci_die "allot token create failed"; }
  port=$(ci_free_ports 1)
  ALLOT_LOG=warn "$bin" serve --config "$dir/cluster.toml" --db "$db" --listen "127.0.0.1:$port" \
    --executor none --single-user --data-dir "$dir/data" 2>"$dir/server.log" &
  CI_SERVE_PID=$!
  CI_SERVE_URL="http://127.0.0.1:$port"
  local _
  for _ in $(seq 1 100); do
    curl -fsS "$CI_SERVE_URL/v1/health" >/dev/null 2>&1 && return 0
    kill -0 "$CI_SERVE_PID" 2>/dev/null || { cat "$dir/server.log" >&2; ci_die "allot serve exited"; }
    sleep 0.1
  done
  ci_die "allot serve does not answer at $CI_SERVE_URL"
}

# Stops the server ci_serve_none started, if it did.
ci_serve_stop() {
  if [ -n "${CI_SERVE_PID:-}" ]; then
    kill "$CI_SERVE_PID" 2>/dev/null || true
    wait "$CI_SERVE_PID" 2>/dev/null || true
  fi
}
