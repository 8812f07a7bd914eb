#!/usr/bin/env bash
# A private PostgreSQL for the store tests, never the host's own clusters:
#   eval "$(.ci/postgres.sh)"        # start (or reuse) it; sets ALLOT_TEST_PG_URL, ALLOT_TEST_PG_CTL
#   .ci/postgres.sh stop [--purge]   # stop it (by its PID file); --purge deletes it
# A throwaway cluster made with initdb under this checkout's private state
# directory (.ci/lib.sh), run as the postgres user on a free loopback port
# with its socket in that directory, a random password, and nothing
# registered under /etc/postgresql. A later run of the same checkout reuses
# it. Installs PostgreSQL from Debian's packages only when it is missing.
# Diagnostics go to stderr; any failure is fatal.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

PG=$CI_STATE/postgres
DATA=$PG/data
cmd=${1:-start}

pg_bin() {
  local v
  v=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -1)
  [ -n "$v" ] && [ -x "/usr/lib/postgresql/$v/bin/postgres" ] || return 1
  echo "/usr/lib/postgresql/$v/bin"
}
as_pg() { runuser -u postgres -- "$@"; }

if [ "$cmd" = stop ]; then
  if [ -s "$DATA/postmaster.pid" ] && bin=$(pg_bin); then
    ci_log "stopping the private PostgreSQL ($DATA)"
    as_pg "$bin/pg_ctl" -D "$DATA" -m fast -w stop >&2 || true
  fi
  if [ "${2:-}" = --purge ]; then rm -rf "$PG"; fi
  exit 0
fi
[ "$cmd" = start ] || ci_die "usage: $0 [start | stop [--purge]]"
[ "$(id -u)" = 0 ] || ci_die "must run as root (the cluster runs as the postgres user)"

bin=$(pg_bin) || { ci_apt_install postgresql; bin=$(pg_bin) || ci_die "no PostgreSQL under /usr/lib/postgresql"; }
id postgres >/dev/null 2>&1 || ci_die "the postgres user does not exist (the postgresql package creates it)"
ci_state_dir

if [ ! -s "$DATA/PG_VERSION" ]; then
  ci_log "creating a private cluster in $DATA"
  rm -rf "$PG"
  mkdir -p "$PG/run"
  head -c 18 /dev/urandom | base64 | tr '+/' '-_' > "$PG/password"
  chmod 600 "$PG/password"
  install -m 600 -o postgres "$PG/password" "$PG/pwfile"
  chown postgres "$PG" "$PG/run"
  chmod 700 "$PG"
  as_pg "$bin/initdb" -D "$DATA" -U allot --pwfile="$PG/pwfile" --auth=scram-sha-256 -E UTF8 >&2
  rm -f "$PG/pwfile"
  echo "include_if_exists = 'allot-ci.conf'" >> "$DATA/postgresql.conf"
fi
password=$(cat "$PG/password")

if ci_pid_alive "$DATA/postmaster.pid" && [ -s "$PG/port" ] \
   && "$bin/pg_isready" -q -h 127.0.0.1 -p "$(cat "$PG/port")"; then
  ci_log "reusing the private cluster on port $(cat "$PG/port")"
else
  port=$(ci_free_ports 1)
  cat > "$DATA/allot-ci.conf" <<EOF
# written by Allot's .ci/postgres.sh at each start
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PG/run'
fsync = on
EOF
  chown postgres "$DATA/allot-ci.conf"
  echo "$port" > "$PG/port"
  ci_log "starting the private cluster on 127.0.0.1:$port"
  as_pg "$bin/pg_ctl" -D "$DATA" -l "$PG/log" -w -t 60 start >&2 \
    || { tail -20 "$PG/log" >&2; ci_die "PostgreSQL did not start"; }
fi
port=$(cat "$PG/port")
export PGPASSWORD=$password
psql_admin() { psql -v ON_ERROR_STOP=1 -q -h 127.0.0.1 -p "$port" -U allot -d postgres "$@"; }
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = 'allot_test'")" != 1 ]; then
  psql_admin -c "CREATE DATABASE allot_test" >&2
fi
echo "export ALLOT_TEST_PG_URL=postgres://allot:$password@127.0.0.1:$port/allot_test"
echo "export ALLOT_TEST_PG_CTL='runuser -u postgres -- $bin/pg_ctl -D $DATA -w'"
