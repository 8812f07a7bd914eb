#!/usr/bin/env bash
# A private Slurm 22.05 cluster on loopback for the Slurm executor tests,
# never the host's own Slurm:
#   eval "$(.ci/slurm.sh)"         # start (or reuse) it; sets SLURM_CONF, ALLOT_TEST_SLURM_PARTITION
#   .ci/slurm.sh stop [--purge]    # cancel its jobs, stop its daemons by PID; --purge deletes it
#   .ci/slurm.sh ctld-stop | ctld-start   # stop its slurmctld alone (by its PID), start it again
#                                   # on the same config and state (the fleet tests' outage)
# ALLOT_SLURM_INSTANCE=b (or `start b`, `stop b [--purge]`, `ctld-stop b`, ...) is a second,
# separate cluster for the fleet tests: its own ClusterName, ports, munged, state directory,
# SLURM_CONF and PIDs; it exports ALLOT_TEST_SLURM_CONF_B and ALLOT_TEST_SLURM_PARTITION_B
# (and leaves SLURM_CONF alone). The default instance also exports ALLOT_TEST_SLURM_CONF.
# Two fake nodes (node1, node2) of 4 fake GPUs each, all on 127.0.0.1: one
# slurmd per node (`slurmd -N`), a private munged with its own key and
# socket, no accounting database (unless asked: below). Everything, config included, lives under
# this checkout's private state directory (.ci/lib.sh); every client and
# daemon reads SLURM_CONF / `-f` from there, ports are free ones chosen at
# start, and daemons are stopped by the PID files this script recorded.
# Installs the Debian packages when missing (as root); creates no key or
# user where one exists. Diagnostics go to stderr; any failure is fatal.
#
# With accounting:
#   eval "$(.ci/slurm.sh start [instance] --accounting)"   # or ALLOT_SLURM_ACCOUNTING=1
# the same cluster also runs a private MariaDB and slurmdbd (.ci/slurm-accounting.sh
# says how they are kept private), so that sacct, sacctmgr, sshare and
# priority/multifactor with fair share work: QOS normal/high/low, accounts
# root -> org -> {teamA (share 3), teamB (share 1)}, users root, daemon and nobody
# (the host's own), typed GPUs (node1 gpu:h100:4, node2 gpu:a100:4), multifactor
# weights (age 1000, fair share 10000, QOS 5000, GRES/gpu 100), decay half-life
# 10 minutes. It also exports ALLOT_TEST_SLURM_ACCOUNTING[_B]=1. The mode is
# part of the running cluster: a start that asks for the other mode restarts it
# (its jobs and accounting records are lost). `stop` stops slurmdbd and MariaDB
# too (by PID), `--purge` deletes their data. Without accounting nothing
# changes: no database, GPUs gpu:fake:4, priority/basic, and jobs of any user.
# .ci/slurm-roundtrip.sh runs a seeded trace of jobs on such a cluster and dumps
# what sacct, sacctmgr, sshare, sprio and scontrol say.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

NODES=2
GPUS=4
PARTITION=allot
cmd=${1:-start}
[ $# -gt 0 ] && shift
# The instance: an argument after the command that is not an option, else the environment.
INSTANCE=${ALLOT_SLURM_INSTANCE:-}
PURGE=0
ACCOUNTING=0
[ "${ALLOT_SLURM_ACCOUNTING:-0}" = 1 ] && ACCOUNTING=1
for arg in "$@"; do
  case "$arg" in
    --purge) PURGE=1 ;;
    --accounting) ACCOUNTING=1 ;;
    --*) ci_die "unknown option $arg" ;;
    *) INSTANCE=$arg ;;
  esac
done
[ "$INSTANCE" = a ] && INSTANCE=
case "$INSTANCE" in
  "" | [b-z]) ;;
  *) ci_die "unknown instance $INSTANCE (use b … z)" ;;
esac
BASE=$CI_STATE/slurm${INSTANCE:+-$INSTANCE}
CLUSTER_NAME=allot-test${INSTANCE:+-$INSTANCE}
export SLURM_CONF=$BASE/etc/slurm.conf
M=$BASE/munge
MODE=plain
[ $ACCOUNTING = 1 ] && MODE=accounting
. "$(dirname "$0")/slurm-accounting.sh"

# What the tests read: SLURM_CONF for the default instance (as before),
# ALLOT_TEST_SLURM_CONF[_B], ALLOT_TEST_SLURM_PARTITION[_B] and the private munged's socket
# ALLOT_TEST_MUNGE_SOCKET[_B] for every one.
print_env() {
  local suffix=${INSTANCE:+_$(echo "$INSTANCE" | tr a-z A-Z)}
  [ -z "$INSTANCE" ] && echo "export SLURM_CONF=$SLURM_CONF"
  echo "export ALLOT_TEST_SLURM_CONF$suffix=$SLURM_CONF"
  echo "export ALLOT_TEST_SLURM_PARTITION$suffix=$PARTITION"
  echo "export ALLOT_TEST_MUNGE_SOCKET$suffix=$BASE/munge/run/munge.socket"
  [ $ACCOUNTING = 1 ] && echo "export ALLOT_TEST_SLURM_ACCOUNTING$suffix=1"
  return 0
}

daemon_pidfiles() { echo "$BASE/run/slurmctld.pid"; ls "$BASE"/run/slurmd-*.pid 2>/dev/null || true; }

# Cancels this cluster's jobs (only this cluster's: SLURM_CONF is ours).
cancel_jobs() {
  ci_pid_alive "$BASE/run/slurmctld.pid" || return 0
  local ids _
  ids=$(squeue -h -o %i 2>/dev/null || true)
  [ -n "$ids" ] && echo "$ids" | xargs -r scancel --full >/dev/null 2>&1 || true
  for _ in $(seq 50); do [ -z "$(squeue -h -o %i 2>/dev/null || true)" ] && break; sleep 0.2; done
}

stop_cluster() {
  cancel_jobs
  # slurmd first (they take their job steps with them), then slurmctld.
  mapfile -t slurmds < <(ls "$BASE"/run/slurmd-*.pid 2>/dev/null || true)
  ci_stop_pidfiles "${slurmds[@]}"
  ci_stop_pidfiles "$BASE/run/slurmctld.pid"
  # The accounting daemons (if any) after slurmctld, which sends them its last records.
  acct_stop
  ci_stop_pidfiles "$BASE/run/munged.pid"
}

if [ "$cmd" = stop ]; then
  [ -d "$BASE" ] || exit 0
  ci_log "stopping the private Slurm cluster ($BASE)"
  stop_cluster
  if [ $PURGE = 1 ]; then rm -rf "$BASE"; fi
  exit 0
fi
if [ "$cmd" = ctld-stop ]; then
  # slurmctld alone, by its recorded PID (its PID file goes with it: kept aside
  # so that ctld-start knows this cluster was started).
  [ -s "$BASE/run/slurmctld.pid" ] || ci_die "no slurmctld of $BASE runs"
  ci_log "stopping slurmctld of $BASE (pid $(head -1 "$BASE/run/slurmctld.pid"))"
  ci_stop_pidfiles "$BASE/run/slurmctld.pid"
  exit 0
fi
if [ "$cmd" = ctld-start ]; then
  [ -s "$SLURM_CONF" ] || ci_die "$BASE has no cluster: start it first"
  ci_pid_alive "$BASE/run/slurmctld.pid" && exit 0
  ci_log "starting slurmctld of $BASE again (its saved state: jobs and nodes)"
  slurmctld -f "$SLURM_CONF"
  for _ in $(seq 100); do
    ci_pid_alive "$BASE/run/slurmctld.pid" && sinfo -h >/dev/null 2>&1 && exit 0
    sleep 0.2
  done
  tail -20 "$BASE/log/slurmctld.log" >&2
  ci_die "slurmctld of $BASE did not come back"
fi
[ "$cmd" = start ] || ci_die "usage: $0 [start [--accounting] | stop [--purge] | ctld-stop | ctld-start] [instance]"
[ "$(id -u)" = 0 ] || ci_die "must run as root (slurmd runs as root)"

ready() {
  ci_pid_alive "$BASE/run/slurmctld.pid" && ci_pid_alive "$BASE/run/munged.pid" || return 1
  [ "$(cat "$BASE/mode" 2>/dev/null || echo plain)" = "$MODE" ] || return 1
  if [ $ACCOUNTING = 1 ]; then acct_ready || return 1; fi
  [ "$(sinfo -h -N -p "$PARTITION" -t idle,mixed,allocated -o '%N' 2>/dev/null | sort -u | wc -l)" -ge "$NODES" ]
}

if [ -s "$SLURM_CONF" ] && ready; then
  ci_log "reusing the private cluster ($BASE)"
  print_env
  exit 0
fi

ci_apt_install slurmctld slurmd slurm-client munge
[ $ACCOUNTING = 1 ] && ci_apt_install slurmdbd mariadb-server
id slurm >/dev/null 2>&1 || ci_die "the slurm user does not exist (the slurmctld package creates it)"
id munge >/dev/null 2>&1 || ci_die "the munge user does not exist (the munge package creates it)"
ci_state_dir
# Whatever an earlier run of this checkout left (stale or unhealthy).
[ -d "$BASE" ] && stop_cluster

mkdir -p "$BASE"/{etc,state,log,spool,run,dev}
rm -f "$BASE/mode" "$BASE/etc/slurmdbd.conf" "$BASE/run/accounting.ports"
chown -R slurm:slurm "$BASE/state" "$BASE/log"
chmod 755 "$BASE" "$BASE/log" "$BASE/etc"

# A private munged: its own key, socket, PID and log, under $BASE/munge
# (the socket's directories must be searchable by all; the key's is private).
mkdir -p "$M/key" "$M/run"
if [ ! -s "$M/key/munge.key" ]; then
  mungekey --create --keyfile="$M/key/munge.key" >&2
fi
chown -R munge:munge "$M"
chmod 755 "$M" "$M/run"
chmod 700 "$M/key"
chmod 400 "$M/key/munge.key"
runuser -u munge -- /usr/sbin/munged --socket="$M/run/munge.socket" --key-file="$M/key/munge.key" \
  --pid-file="$M/run/munged.pid" --log-file="$M/munged.log" --seed-file="$M/munged.seed"
for _ in $(seq 50); do [ -s "$M/run/munged.pid" ] && break; sleep 0.1; done
cp "$M/run/munged.pid" "$BASE/run/munged.pid"
for _ in $(seq 50); do munge -S "$M/run/munge.socket" -n >/dev/null 2>&1 && break; sleep 0.1; done
munge -S "$M/run/munge.socket" -n | unmunge -S "$M/run/munge.socket" >/dev/null \
  || ci_die "the private munged does not work ($M/munged.log)"

[ $ACCOUNTING = 1 ] && acct_ports
read -r ctld_port node_ports <<<"$(ci_free_ports $((NODES + 1)))"
read -r -a node_ports <<<"$node_ports"

cat > "$SLURM_CONF" <<EOF
# Allot's private test cluster ($CI_ROOT); written by .ci/slurm.sh
ClusterName=$CLUSTER_NAME
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=slurm
AuthType=auth/munge
AuthInfo=socket=$M/run/munge.socket
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups on a CI machine: a step's processes are its process group.
# (proctrack/linuxproc finds them by walking the process tree when it
# signals: a task's child forked during the walk, or orphaned by its
# parent's death, escaped the step's TERM and KILL and outlived its job,
# which stayed COMPLETING: a gang member's failure under load was seen
# only when the orphan ended. A signal to a process group reaches every
# member, orphans included.)
ProctrackType=proctrack/pgid
TaskPlugin=task/none
# The fake nodes claim more than the machine has.
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
# Heterogeneous jobs (uneven allocations) start from the backfill scheduler.
SchedulerParameters=sched_interval=1,bf_interval=1,defer_batch=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
GresTypes=gpu
# Allot decides; Slurm only runs. No Slurm-side preemption.
PreemptType=preempt/none
KillWait=2
MinJobAge=300
MessageTimeout=10
SlurmdTimeout=60
InactiveLimit=0
MpiDefault=none
NodeName=DEFAULT CPUs=8 Sockets=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=8000 State=UNKNOWN
EOF
if [ $ACCOUNTING = 1 ]; then
  acct_slurm_conf >> "$SLURM_CONF"
else
  printf '%s\n' AccountingStorageType=accounting_storage/none JobCompType=jobcomp/none \
    PriorityType=priority/basic >> "$SLURM_CONF"
fi
# The GPU type of node i: fake without accounting; with it, as at a site with two
# generations (what sacct's TRES and the importers see).
gpu_type() {
  if [ $ACCOUNTING = 1 ]; then
    case $1 in 1) echo h100 ;; *) echo a100 ;; esac
  else
    echo fake
  fi
}
for i in $(seq 1 $NODES); do
  echo "NodeName=node$i NodeHostname=node$i NodeAddr=127.0.0.1 Port=${node_ports[$((i - 1))]} Gres=gpu:$(gpu_type "$i"):$GPUS" \
    >> "$SLURM_CONF"
done
echo "PartitionName=$PARTITION Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" \
  >> "$SLURM_CONF"
# Slurm 22.05 drops file-less GPUs: each fake GPU is a placeholder character
# device (1:3, the same as /dev/null), so jobs get CUDA_VISIBLE_DEVICES.
for g in $(seq 0 $((GPUS - 1))); do
  [ -c "$BASE/dev/nvidia$g" ] || mknod "$BASE/dev/nvidia$g" c 1 3
done
echo AutoDetect=off > "$BASE/etc/gres.conf"
for i in $(seq 1 $NODES); do
  echo "NodeName=node$i Name=gpu Type=$(gpu_type "$i") File=$BASE/dev/nvidia[0-$((GPUS - 1))]" \
    >> "$BASE/etc/gres.conf"
done
chmod 644 "$SLURM_CONF" "$BASE/etc/gres.conf"
echo "$MODE" > "$BASE/mode"
# slurmdbd and sacctmgr read the config above (ports, munge socket).
if [ $ACCOUNTING = 1 ]; then
  acct_start_daemons
  acct_associations
fi

ci_log "starting slurmctld (port $ctld_port) and $NODES slurmd (ports ${node_ports[*]})"
slurmctld -f "$SLURM_CONF" -c
for _ in $(seq 50); do [ -s "$BASE/run/slurmctld.pid" ] && break; sleep 0.1; done
for i in $(seq 1 $NODES); do
  mkdir -p "$BASE/spool/node$i"
  slurmd -f "$SLURM_CONF" -N "node$i"
done
for _ in $(seq 300); do
  ready && break
  ci_pid_alive "$BASE/run/slurmctld.pid" || { tail -20 "$BASE/log/slurmctld.log" >&2; ci_die "slurmctld died"; }
  sleep 0.2
done
ready || { sinfo -N -l >&2; ci_die "the nodes did not become idle"; }
ci_log "cluster $CLUSTER_NAME up: $(sinfo -h -N -p "$PARTITION" -o '%N %T %G' | tr '\n' ' ')"
print_env
