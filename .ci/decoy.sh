#!/usr/bin/env bash
# The host the tests run on, as a real cluster host is: a Slurm and a
# PostgreSQL of its own, which the test command must leave exactly as it
# found them.
#   .ci/decoy.sh start    # CI only (CI=true): records what must not change.
#                         # Where the host has no Slurm config, a decoy Slurm is made in its
#                         # place (config in /etc/slurm, a running job, a drained node); where
#                         # no PostgreSQL cluster runs, a decoy cluster is registered. Where
#                         # the host has its own, its own are what is guarded: nothing of the
#                         # host's is started, changed or stopped, by this script either.
#   .ci/decoy.sh check    # the same facts: daemons (PID and start time), byte-identical
#                         # config, the same allot-named jobs in the host's queue and the same
#                         # nodes out of service, no role or database added
#   .ci/decoy.sh remove   # stops and deletes what `start` made (only that)
# ALLOT_DECOY_DIR (default /tmp/allot-decoy) is where the record lives; a
# second record of the same host (CI takes one) sees a decoy as a host's own.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

D=${ALLOT_DECOY_DIR:-/tmp/allot-decoy}
CONF=/etc/slurm/slurm.conf
PGNAME=allot-decoy
cmd=${1:-}

slurm() { SLURM_CONF=$CONF timeout 60 "$@"; }
pg_version() { ls /usr/lib/postgresql | sort -V | tail -1; }
online_clusters() { pg_lsclusters -h 2>/dev/null | awk '$4 == "online"'; }

# A process's start time and whether it runs (a zombie, or a PID reused by
# another process, is not the same daemon).
proc_facts() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo "gone"; return; }
  stat=${stat##*) }
  set -- $stat
  [ "$1" = Z ] && { echo "zombie"; return; }
  echo "started-at ${20}"
}

# A key of slurm.conf (keys are case-insensitive; the last one counts), or $2.
conf_value() {
  local v
  v=$(awk -F= -v k="$(echo "$1" | tr A-Z a-z)" \
    '{ sub(/#.*/, ""); key = tolower($1); gsub(/[ \t]/, "", key) } key == k { sub(/^[^=]*=/, ""); gsub(/^[ \t]+|[ \t]+$/, ""); val = $0 } END { print val }' \
    "$CONF" 2>/dev/null || true)
  echo "${v:-$2}"
}

# The PID files of the Slurm and munge daemons that serve $CONF: where its
# config says (a per-node %n or %h is any node), munged's Debian default.
slurm_pidfiles() {
  local f
  for f in "$(conf_value SlurmctldPidFile /var/run/slurmctld.pid)" \
           "$(conf_value SlurmdPidFile /var/run/slurmd.pid)"; do
    f=${f//%n/*}
    f=${f//%h/*}
    compgen -G "$f" || true
  done
  [ -s "$D/pids/munged.pid" ] && echo "$D/pids/munged.pid"
  compgen -G /run/munge/munged.pid || true
}

pidfile_fact() {
  local pid
  pid=$(head -1 "$1" 2>/dev/null | tr -d ' ') || true
  echo "pid $1 ${pid:-none} $( [ -n "$pid" ] && proc_facts "$pid" || echo none)"
}

psql_on() { runuser -u postgres -- env PGCONNECT_TIMEOUT=10 timeout 30 psql -X -q -tA -p "$1" -d postgres -c "$2" 2>&1 | paste -sd' '; }

# What must not change, one line per fact.
snapshot() {
  local f
  # Slurm: its config and munge key, its daemons, the jobs the tests would
  # have named, the nodes out of service (a test that drained or resumed the
  # host's node shows here).
  for f in /etc/slurm/* /etc/munge/munge.key; do
    [ -f "$f" ] && echo "file $f $(sha256sum < "$f" | cut -c1-64)"
  done
  if [ -e "$CONF" ]; then
    for f in $(slurm_pidfiles | sort -u); do pidfile_fact "$f"; done
    slurm squeue -h -a -o '%i %j %T' 2>&1 | awk '$2 ~ /^allot/ || /error/ {print "slurm-job", $0}' | sort || true
    slurm sinfo -h -N -o '%N %T %E' 2>&1 \
      | awk '$2 !~ /^(idle|mixed|allocated|completing)$/ {print "slurm-node", $0}' | sort -u || true
  fi
  # PostgreSQL: every registered cluster (port and status), its config, its
  # postmaster, and the roles and databases of each that runs.
  pg_lsclusters -h 2>/dev/null | awk '{print "cluster", $1, $2, $3, $4}' || true
  for f in /etc/postgresql/*/*/*; do
    [ -f "$f" ] && echo "file $f $(sha256sum < "$f" | cut -c1-64)"
  done
  online_clusters | while read -r ver name port _ _ data _; do
    pidfile_fact "$data/postmaster.pid"
    echo "roles $ver/$name $(psql_on "$port" 'SELECT string_agg(rolname, $$,$$ ORDER BY rolname) FROM pg_roles')"
    echo "databases $ver/$name $(psql_on "$port" 'SELECT string_agg(datname, $$,$$ ORDER BY datname) FROM pg_database')"
  done
}

# A decoy Slurm where the host has none: config in the default location
# (/etc/slurm/slurm.conf), Slurm's default controller port, the host's munge
# key and socket, two nodes, one running job and one drained node.
start_slurm_decoy() {
  # munge as a host runs it: the default key and socket.
  if ! munge -n >/dev/null 2>&1; then
    [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key; touch "$D/munge.key.ours"; }
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge "$D/munge"
    runuser -u munge -- /usr/sbin/munged --pid-file="$D/munge/munged.pid"
    for _ in $(seq 50); do [ -s "$D/munge/munged.pid" ] && munge -n >/dev/null 2>&1 && break; sleep 0.1; done
    cp "$D/munge/munged.pid" "$D/pids/munged.pid"
  fi
  munge -n | unmunge >/dev/null || ci_die "the decoy's munge does not work"

  mkdir -p "$D"/{state,log,spool}
  chown -R slurm:slurm "$D/state" "$D/log"
  chmod 755 "$D" "$D/log"
  mkdir -p /etc/slurm
  cat > "$CONF" <<EOF
# The decoy host's own Slurm (Allot's .ci/decoy.sh): the tests must not touch it.
ClusterName=decoy
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=$D/state
SlurmctldPidFile=$D/pids/slurmctld.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdPidFile=$D/pids/slurmd-%n.pid
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmdSpoolDir=$D/spool/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
NodeName=DEFAULT CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName=decoy1 NodeHostname=decoy1 NodeAddr=127.0.0.1 Port=6818
NodeName=decoy2 NodeHostname=decoy2 NodeAddr=127.0.0.1 Port=6819
PartitionName=main Nodes=decoy[1-2] Default=YES MaxTime=INFINITE State=UP
EOF
  touch "$D/slurm.conf.ours"
  slurmctld -c
  slurmd -N decoy1
  slurmd -N decoy2
  for _ in $(seq 150); do
    [ "$(slurm sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)" -ge 2 ] && break
    sleep 0.2
  done
  [ "$(slurm sinfo -h -N -t idle -o %N | wc -l)" -ge 2 ] || { slurm sinfo -N -l >&2; ci_die "the decoy's nodes did not come up"; }
  slurm sbatch --parsable --nodelist=decoy1 --chdir=/tmp --output=/dev/null --job-name=allot-decoy-host-job \
    --wrap='sleep 100000' > "$D/job"
  slurm scontrol update NodeName=decoy2 State=DRAIN Reason=decoy-maintenance
  for _ in $(seq 100); do [ "$(slurm squeue -h -j "$(cat "$D/job")" -o %T)" = RUNNING ] && break; sleep 0.1; done
}

# A decoy PostgreSQL where none runs: a cluster registered under
# /etc/postgresql (pg_createcluster), as a distribution's is.
start_pg_decoy() {
  pg_lsclusters -h | awk '{print $2}' | grep -qx "$PGNAME" && ci_die "a cluster named $PGNAME exists already"
  pg_createcluster "$(pg_version)" "$PGNAME" --start >&2
  touch "$D/pg.ours"
  local port
  port=$(pg_lsclusters -h | awk -v n="$PGNAME" '$2 == n {print $3}')
  for _ in $(seq 50); do pg_isready -q -p "$port" && break; sleep 0.2; done
}

start() {
  [ "${CI:-}" = true ] || ci_die "the decoy runs only in CI (CI=true): it plays a host's own Slurm and PostgreSQL"
  [ "$(id -u)" = 0 ] || ci_die "must run as root"
  [ ! -e "$D" ] || ci_die "$D exists: remove it first (.ci/decoy.sh remove)"
  ci_apt_install slurmctld slurmd slurm-client munge postgresql
  mkdir -p "$D/pids"
  local slurm_is pg_is
  if [ -e "$CONF" ]; then
    slurm_is="the host's own ($CONF)"
  else
    start_slurm_decoy
    slurm_is="a decoy at $CONF (job $(cat "$D/job"), decoy2 drained)"
  fi
  if online_clusters | grep -q .; then
    pg_is="the host's own ($(online_clusters | awk '{printf "%s%s/%s on port %s", sep, $1, $2, $3; sep = ", "}'))"
  else
    start_pg_decoy
    pg_is="a decoy, $(pg_version)/$PGNAME"
  fi
  snapshot > "$D/before"
  if [ -e "$D/slurm.conf.ours" ]; then
    grep -q "slurm-job $(cat "$D/job") allot-decoy-host-job RUNNING" "$D/before" \
      || { cat "$D/before" >&2; ci_die "the decoy's job does not run"; }
    grep -Eq "slurm-node decoy2 drain" "$D/before" || { cat "$D/before" >&2; ci_die "the decoy's node is not drained"; }
  fi
  ci_log "guarding the host: Slurm is $slurm_is; PostgreSQL is $pg_is; $(wc -l < "$D/before") facts recorded in $D/before"
}

check() {
  [ -s "$D/before" ] || ci_die "no record at $D to check (run start first)"
  snapshot > "$D/after"
  if ! diff -u "$D/before" "$D/after" >&2; then
    ci_die "the tests changed the host (above: - before, + after)"
  fi
  ci_log "the host is untouched: $(wc -l < "$D/after") facts the same"
}

remove() {
  [ -d "$D" ] || exit 0
  if [ -e "$D/slurm.conf.ours" ]; then
    [ -s "$D/job" ] && { slurm scancel "$(cat "$D/job")" 2>/dev/null || true; }
    ci_stop_pidfiles "$D"/pids/slurmd-*.pid
    ci_stop_pidfiles "$D/pids/slurmctld.pid"
    rm -f "$CONF"
  fi
  ci_stop_pidfiles "$D/pids/munged.pid"
  [ -e "$D/munge.key.ours" ] && rm -f /etc/munge/munge.key
  [ -e "$D/pg.ours" ] && pg_dropcluster --stop "$(pg_version)" "$PGNAME"
  rm -rf "$D"
  ci_log "the record at $D and what it made are removed"
}

case "$cmd" in
  start) start ;;
  check) check ;;
  remove) remove ;;
  *) ci_die "usage: $0 start | check | remove" ;;
esac
