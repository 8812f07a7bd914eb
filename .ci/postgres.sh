#!/usr/bin/env bash
# Starts the local PostgreSQL cluster for the store tests and prints the URL:
#   eval "$(.ci/postgres.sh)"   # sets ALLOT_TEST_PG_URL
# Installs PostgreSQL only when it is missing; creates the role and the test
# database idempotently. Diagnostics go to stderr; any failure is fatal.
set -euo pipefail
log() { echo "postgres.sh: $*" >&2; }

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  log "PostgreSQL is not installed: installing it"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >&2
  apt-get install -y postgresql >&2
fi
version=$(ls /usr/lib/postgresql | sort -V | tail -1)
[ -n "$version" ] || { log "no PostgreSQL version under /usr/lib/postgresql"; exit 1; }
if ! pg_lsclusters -h | awk '{print $1, $2}' | grep -qx "$version main"; then
  log "creating cluster $version/main"
  pg_createcluster "$version" main >&2
fi
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}' | grep -qx online; then
  log "starting cluster $version/main"
  pg_ctlcluster "$version" main start >&2
fi
port=$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')
for _ in $(seq 1 50); do
  pg_isready -q -h 127.0.0.1 -p "$port" && break
  sleep 0.2
done
pg_isready -h 127.0.0.1 -p "$port" >&2 || { log "PostgreSQL does not accept connections on port $port"; exit 1; }

role=allot_test
password=allot_test
db=allot_test
psql_admin() { runuser -u postgres -- psql -v ON_ERROR_STOP=1 -q -p "$port" "$@"; }
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$role'")" != 1 ]; then
  log "creating role $role"
  psql_admin -c "CREATE ROLE $role LOGIN CREATEDB PASSWORD '$password'" >&2
fi
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]; then
  log "creating database $db"
  psql_admin -c "CREATE DATABASE $db OWNER $role" >&2
fi
echo "export ALLOT_TEST_PG_URL=postgres://$role:$password@127.0.0.1:$port/$db"
