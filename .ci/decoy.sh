#!/usr/bin/env bash
# A decoy "host": the Slurm and PostgreSQL that a real cluster host runs,
# which the test command must leave exactly as it found them.
#   .ci/decoy.sh start    # CI only (CI=true), and only on a machine with no Slurm config
#                         # and no running PostgreSQL: so the decoy itself never harms a host
#   .ci/decoy.sh check    # same daemons (PIDs), byte-identical config, its job still runs,
#                         # its node still drained, no role or database added
#   .ci/decoy.sh remove   # stops and deletes everything `start` made
# Slurm: config in the default location (/etc/slurm/slurm.conf), Slurm's
# default controller port, the host's munge key and socket, two nodes, one
# running job and one drained node. PostgreSQL: a cluster registered under
# /etc/postgresql (pg_createcluster), as a distribution's is.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

D=/tmp/allot-decoy
CONF=/etc/slurm/slurm.conf
PGNAME=allot-decoy
cmd=${1:-}

slurm() { SLURM_CONF=$CONF "$@"; }
pg_version() { ls /usr/lib/postgresql | sort -V | tail -1; }
decoy_psql() { runuser -u postgres -- psql -X -q -tA -p "$(cat "$D/pg.port")" -d postgres -c "$1"; }

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

# What must not change, one line per fact.
snapshot() {
  local f
  for f in "$D"/pids/*.pid; do echo "pid $(basename "$f" .pid) $(cat "$f") $(proc_facts "$(cat "$f")")"; done
  for f in /etc/slurm/* /etc/munge/munge.key /etc/postgresql/"$(pg_version)"/$PGNAME/*; do
    [ -f "$f" ] && echo "file $f $(sha256sum < "$f" | cut -c1-64)"
  done
  echo "job $(cat "$D/job") $(slurm squeue -h -j "$(cat "$D/job")" -o %T 2>&1)"
  echo "node decoy2 $(slurm sinfo -h -N -n decoy2 -o %T 2>&1)"
  echo "postmaster $(head -1 /var/lib/postgresql/"$(pg_version)"/$PGNAME/postmaster.pid 2>&1)"
  # Every registered cluster (the decoy's and any other): same ports, same status.
  pg_lsclusters -h | awk '{print "cluster", $1, $2, $3, $4}'
  echo "roles $(decoy_psql 'SELECT string_agg(rolname, $$,$$ ORDER BY rolname) FROM pg_roles')"
  echo "databases $(decoy_psql 'SELECT string_agg(datname, $$,$$ ORDER BY datname) FROM pg_database')"
}

start() {
  [ "${CI:-}" = true ] || ci_die "the decoy runs only in CI (CI=true): it plays a host's own Slurm and PostgreSQL"
  [ "$(id -u)" = 0 ] || ci_die "must run as root"
  [ ! -e "$CONF" ] || ci_die "this machine has a Slurm config ($CONF): no decoy on a real host"
  ci_apt_install slurmctld slurmd slurm-client munge postgresql
  local v
  v=$(pg_version)
  if pg_lsclusters -h | awk '$4 == "online"' | grep -q .; then
    ci_die "a PostgreSQL cluster runs on this machine: no decoy on a real host"
  fi
  pg_lsclusters -h | awk '{print $2}' | grep -qx "$PGNAME" && ci_die "a cluster named $PGNAME exists already"
  mkdir -p "$D"/{pids,state,log,spool}
  chown -R slurm:slurm "$D/state" "$D/log"
  chmod 755 "$D" "$D/log"

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

  pg_createcluster "$v" "$PGNAME" --start >&2
  pg_lsclusters -h | awk -v n="$PGNAME" '$2 == n {print $3}' > "$D/pg.port"
  for _ in $(seq 50); do pg_isready -q -p "$(cat "$D/pg.port")" && break; sleep 0.2; done
  snapshot > "$D/before"
  grep -q "job $(cat "$D/job") RUNNING" "$D/before" || { cat "$D/before" >&2; ci_die "the decoy's job does not run"; }
  grep -Eq "node decoy2 drain" "$D/before" || { cat "$D/before" >&2; ci_die "the decoy's node is not drained"; }
  ci_log "decoy host up: Slurm at $CONF (job $(cat "$D/job"), decoy2 drained), PostgreSQL $v/$PGNAME on port $(cat "$D/pg.port")"
}

check() {
  [ -s "$D/before" ] || ci_die "no decoy to check (run start first)"
  snapshot > "$D/after"
  if ! diff -u "$D/before" "$D/after" >&2; then
    ci_die "the tests changed the decoy host (above: - before, + after)"
  fi
  ci_log "the decoy host is untouched: $(wc -l < "$D/after") facts the same"
}

remove() {
  [ -d "$D" ] || exit 0
  if [ -s "$D/job" ] && [ -e "$D/slurm.conf.ours" ]; then slurm scancel "$(cat "$D/job")" 2>/dev/null || true; fi
  ci_stop_pidfiles "$D"/pids/slurmd-*.pid
  ci_stop_pidfiles "$D/pids/slurmctld.pid"
  ci_stop_pidfiles "$D/pids/munged.pid"
  [ -e "$D/slurm.conf.ours" ] && rm -f "$CONF"
  [ -e "$D/munge.key.ours" ] && rm -f /etc/munge/munge.key
  if pg_lsclusters -h | awk '{print $2}' | grep -qx "$PGNAME"; then pg_dropcluster --stop "$(pg_version)" "$PGNAME"; fi
  rm -rf "$D"
  ci_log "decoy host removed"
}

case "$cmd" in
  start) start ;;
  check) check ;;
  remove) remove ;;
  *) ci_die "usage: $0 start | check | remove" ;;
esac
