#!/usr/bin/env bash
# Starts a real Slurm 22.05 cluster on loopback for the Slurm executor tests
# and prints what they need:
#   eval "$(.ci/slurm.sh)"   # sets ALLOT_TEST_SLURM_PARTITION
# Two fake nodes (node1, node2) of 4 fake GPUs each, all on 127.0.0.1: one
# slurmd per node (`slurmd -N`), munge for auth, no accounting database.
# Installs the Debian packages when missing (as root). Reuses a cluster this
# script started before when it is healthy. Diagnostics go to stderr; any
# failure is fatal.
set -euo pipefail
log() { echo "slurm.sh: $*" >&2; }

NODES=2
GPUS=4
BASE=${ALLOT_SLURM_BASE:-/tmp/allot-slurm}
CONF_DIR=/etc/slurm
PARTITION=allot

[ "$(id -u)" = 0 ] || { log "must run as root (slurmd runs as root)"; exit 1; }

ready() {
  [ -s "$BASE/run/slurmctld.pid" ] && kill -0 "$(cat "$BASE/run/slurmctld.pid")" 2>/dev/null || return 1
  [ "$(sinfo -h -N -p "$PARTITION" -t idle,mixed,allocated -o '%N' 2>/dev/null | sort -u | wc -l)" -ge "$NODES" ]
}

# The cluster's slurm.conf.
conf() {
  cat <<EOF
ClusterName=allot-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=6817
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups on a CI machine: plain process tracking.
ProctrackType=proctrack/linuxproc
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
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
PriorityType=priority/basic
MpiDefault=none
NodeName=DEFAULT CPUs=8 Sockets=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=8000 Gres=gpu:fake:$GPUS State=UNKNOWN
EOF
  for i in $(seq 1 $NODES); do
    echo "NodeName=node$i NodeHostname=node$i NodeAddr=127.0.0.1 Port=$((17000 + i))"
  done
  echo "PartitionName=$PARTITION Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
}

if ready && [ "$(conf)" = "$(cat "$CONF_DIR/slurm.conf" 2>/dev/null)" ]; then
  log "reusing the running cluster ($BASE)"
  echo "export ALLOT_TEST_SLURM_PARTITION=$PARTITION"
  exit 0
fi

pkgs=(slurmctld slurmd slurm-client munge)
missing=()
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >&2
  # Keep the packages' init scripts from starting daemons with their default config.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  apt-get install -y --no-install-recommends "${missing[@]}" >&2
  rm -f /usr/sbin/policy-rc.d
fi

# Stop what an earlier run of this script left (a stale or unhealthy cluster).
for f in "$BASE"/run/slurmd-*.pid "$BASE/run/slurmctld.pid"; do
  [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
done
for _ in $(seq 50); do pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || break; sleep 0.2; done
pkill -KILL -x slurmd 2>/dev/null || true
pkill -KILL -x slurmctld 2>/dev/null || true

mkdir -p "$BASE"/{state,log,spool,run,dev} "$CONF_DIR"
chown -R slurm:slurm "$BASE/state" "$BASE/log"
chmod 755 "$BASE" "$BASE/log"

if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi
mkdir -p /run/munge /var/lib/munge /var/log/munge
chown munge:munge /run/munge /var/lib/munge /var/log/munge
chmod 755 /run/munge
if ! munge -n >/dev/null 2>&1; then
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n | unmunge >/dev/null || { log "munge does not work"; exit 1; }

conf > "$CONF_DIR/slurm.conf"
# Slurm 22.05 drops file-less GPUs: each fake GPU is a placeholder character
# device (1:3, the same as /dev/null), so jobs get CUDA_VISIBLE_DEVICES.
for g in $(seq 0 $((GPUS - 1))); do
  [ -c "$BASE/dev/nvidia$g" ] || mknod "$BASE/dev/nvidia$g" c 1 3
done
cat > "$CONF_DIR/gres.conf" <<EOF
AutoDetect=off
NodeName=node[1-$NODES] Name=gpu Type=fake File=$BASE/dev/nvidia[0-$((GPUS - 1))]
EOF
chmod 644 "$CONF_DIR/slurm.conf" "$CONF_DIR/gres.conf"

log "starting slurmctld and $NODES slurmd"
slurmctld -c
for _ in $(seq 50); do [ -s "$BASE/run/slurmctld.pid" ] && break; sleep 0.1; done
for i in $(seq 1 $NODES); do
  mkdir -p "$BASE/spool/node$i"
  slurmd -N "node$i"
done
for _ in $(seq 300); do
  ready && break
  kill -0 "$(cat "$BASE/run/slurmctld.pid" 2>/dev/null || echo 999999)" 2>/dev/null \
    || { log "slurmctld died:"; tail -20 "$BASE/log/slurmctld.log" >&2; exit 1; }
  sleep 0.2
done
ready || { sinfo -N -l >&2; log "the nodes did not become idle"; exit 1; }
log "cluster up: $(sinfo -h -N -p "$PARTITION" -o '%N %T %G' | tr '\n' ' ')"
echo "export ALLOT_TEST_SLURM_PARTITION=$PARTITION"
