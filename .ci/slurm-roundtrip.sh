#!/usr/bin/env bash
# A seeded trace of sleep jobs on a private Slurm cluster with accounting, and
# what Slurm's own tools then say about it (real sacct, sacctmgr, sshare,
# sprio, squeue and scontrol outputs, for the importers' and the Slurm policy
# model's tests):
#   .ci/slurm-roundtrip.sh OUTDIR [--seed N] [--keep]
# As root. Starts instance `r` of .ci/slurm.sh afresh (purged first) with --accounting (its
# own ClusterName allot-test-r, ports, munged, MariaDB and slurmdbd; never the
# host's Slurm, nor the tests' default instance), submits the trace, waits
# until every job has ended, dumps, checks the dump's invariants, and stops the
# cluster (by its PIDs; --keep leaves it running, `.ci/slurm.sh stop r --purge`
# deletes it).
#
# The trace (a plan drawn from the seed with Python's random.Random, so the
# same seed gives the same plan; start times and priorities are Slurm's own):
# ~40 `sbatch --wrap 'sleep S'` jobs over ~60 s of submissions by root, daemon
# and nobody (`--uid/--gid`; users of the host, no user is added) in accounts
# teamA/teamB and QOS normal/high/low, with real `--time` limits (minutes) and
# GPUs untyped (gpu:N) or typed (gpu:h100:N, gpu:a100:N), plus:
# a job array (rt-array, 6 elements, at most 2 at once), a job that hits its
# time limit (rt-timeout: TIMEOUT), one held and cancelled before it starts
# (rt-cancelled), one requeued while it runs (rt-requeue: `scontrol requeue`,
# then StartTime=now to lift the BeginTime Slurm puts on a requeued job), one
# that fails (rt-fail: exit 3), one on two nodes (rt-twonode) and one waiting
# on another's success (rt-dependent: afterok). The whole run takes about three
# minutes.
#
# OUTDIR gets:
#   plan.tsv, submitted.tsv   the plan and the job id each entry got; events.tsv:
#                             the requeue and cancel actions (epoch seconds)
#   sacct-epoch.txt           SLURM_TIME_FORMAT=%s sacct --allusers --allocations
#                             --duplicates --parsable2 --starttime=… --endtime=…
#                             --format=JobIDRaw,JobID,…,Flags (the command of
#                             crates/allot-trace/tests/fixtures/slurm-real/README.md)
#   sacct-iso.txt             the same without SLURM_TIME_FORMAT (the host's local time)
#   sacct-iso-berlin.txt      the same with TZ=Europe/Berlin (local time, no offset)
#   sacct-steps-epoch.txt     the same without --allocations (job steps too)
#   sacct-cancelled-epoch.txt the same with --state=CANCELLED (the held job cancelled
#                             before it was eligible is only there)
#   sacctmgr-assoc-tree.txt   sacctmgr show assoc format=Cluster,Account,ParentName,User,Share --parsable2
#   sacctmgr-assoc.txt        sacctmgr show assoc --parsable2
#   sacctmgr-qos.txt          sacctmgr show qos --parsable2
#   sshare.txt                sshare -a -l --parsable2, once every job has ended
#   scontrol-show-nodes.txt   scontrol show nodes --oneliner
#   scontrol-show-config.txt  scontrol show config (the priority weights)
#   sprio-T.txt, squeue-start-T.txt   sprio -l and squeue --start while jobs
#                             wait, T seconds after the first submission
# and the check at the end fails loudly unless: every submitted job has its
# records (each array element its own; the held one in sacct-cancelled-epoch.txt),
# no job is left pending or running, the
# requeued job has a REQUEUED record and a COMPLETED one under one JobIDRaw, the
# time-limit job is TIMEOUT, the held job CANCELLED without a start, the failed
# job FAILED with exit code 3, every started job's AllocTRES has gres/gpu, a
# typed request's ReqTRES its gres/gpu:TYPE, and the two-node job ran on both.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

OUT=
SEED=1
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) SEED=${2:?--seed needs a number}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -*) ci_die "unknown option $1" ;;
    *) OUT=$1; shift ;;
  esac
done
[ -n "$OUT" ] || ci_die "usage: $0 OUTDIR [--seed N] [--keep]"
[ "$(id -u)" = 0 ] || ci_die "must run as root (jobs are submitted for other users with --uid)"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SLURM_SH="$(dirname "$0")/slurm.sh"

FORMAT=JobIDRaw,JobID,JobName,User,UID,Group,Account,QOS,Partition,Cluster,Submit,Eligible,Start,End,ElapsedRaw,TimelimitRaw,Suspended,State,ExitCode,DerivedExitCode,ReqTRES,AllocTRES,NNodes,NodeList,Priority,Reservation,Flags

# A fresh cluster: job ids from 1 (a restart keeps slurmctld's job id counter,
# even with -c), an empty accounting database.
bash "$SLURM_SH" stop r --purge >/dev/null
eval "$(bash "$SLURM_SH" start r --accounting)"
export SLURM_CONF=$ALLOT_TEST_SLURM_CONF_R
[ $KEEP = 1 ] || trap 'bash "$SLURM_SH" stop r || true' EXIT

# The plan: offset (s after the first submission), name, user, group, account,
# QOS, GPUs (--gres), nodes, time limit (min), sleep (s), extra sbatch options.
python3 - "$SEED" >"$OUT/plan.tsv" <<'EOF'
import random, sys
r = random.Random(int(sys.argv[1]))
users = [("root", "root", ["teamA", "teamB"]), ("daemon", "daemon", ["teamA"]), ("nobody", "nogroup", ["teamB"])]
gres = ["gpu:1", "gpu:1", "gpu:2", "gpu:2", "gpu:4", "gpu:h100:1", "gpu:h100:2", "gpu:a100:1", "gpu:a100:4"]
rows = []
def row(offset, name, user, account, qos, g, nodes, limit, sleep, extra="-"):
    rows.append((offset, name, user[0], user[1], account, qos, g, nodes, limit, sleep, extra))
gpu_seconds = 0
for i in range(36):
    # Three bursts (queueing, then priorities at work) and a trickle between.
    offset = r.choice([0, 0, 0, 20, 20, 40]) + r.randint(0, 4)
    u = r.choice(users)
    g = r.choice(gres)
    sleep = r.randint(3, 15)
    gpu_seconds += int(g.rsplit(":", 1)[1]) * sleep
    row(offset, f"rt-{i:02d}", u, r.choice(u[2]), r.choices(["normal", "high", "low"], [6, 2, 2])[0],
        g, 1, r.randint(1, 3), sleep)
root, daemon, nobody = users
row(1, "rt-array", daemon, "teamA", "normal", "gpu:1", 1, 1, 4, "--array=0-5%2")
row(2, "rt-timeout", nobody, "teamB", "normal", "gpu:1", 1, 1, 600)
row(2, "rt-cancelled", root, "teamB", "low", "gpu:2", 1, 2, 5, "--hold")
row(3, "rt-requeue", root, "teamA", "high", "gpu:h100:1", 1, 2, 40)
row(5, "rt-fail", daemon, "teamA", "normal", "gpu:1", 1, 1, 2, "exit3")
row(6, "rt-twonode", root, "teamA", "normal", "gpu:2", 2, 1, 6)
row(8, "rt-dependent", nobody, "teamB", "normal", "gpu:a100:1", 1, 1, 3, "after:rt-twonode")
rows.sort(key=lambda x: (x[0], x[1]))
print("#offset\tname\tuser\tgroup\taccount\tqos\tgres\tnodes\ttime_min\tsleep_s\textra")
for x in rows:
    print("\t".join(map(str, x)))
print(f"# {len(rows)} entries, {gpu_seconds} GPU-seconds of sleep in the rt-NN jobs", file=sys.stderr)
EOF

declare -A JOB
t0=$(date +%s)
printf '#name\tjobid\tsubmitted_at\n' >"$OUT/submitted.tsv"
printf '#at\taction\tjobid\n' >"$OUT/events.tsv"
captures=(10 45 90)
capture() {
  local t=$1
  sprio -l >"$OUT/sprio-$t.txt" 2>&1 || true
  squeue --start >"$OUT/squeue-start-$t.txt" 2>&1 || true
}
state() { squeue -h -j "$1" -o %T 2>/dev/null || true; }
# The job id an entry of the plan got, once it is submitted.
id_of() {
  local _
  for _ in $(seq 600); do
    awk -F'\t' -v n="$1" '$1 == n { print $2; f = 1 } END { exit !f }' "$OUT/submitted.tsv" && return 0
    sleep 0.2
  done
  ci_die "$1 was never submitted"
}
# Beside the submissions: the held job is cancelled after a few seconds of
# waiting; the requeued one once it has run for a few seconds.
actions() {
  local c q _
  c=$(id_of rt-cancelled)
  sleep 3
  scancel "$c"
  printf '%s\tscancel\t%s\n' "$(date +%s)" "$c" >>"$OUT/events.tsv"
  q=$(id_of rt-requeue)
  for _ in $(seq 600); do [ "$(state "$q")" = RUNNING ] && break; sleep 0.2; done
  [ "$(state "$q")" = RUNNING ] || ci_die "rt-requeue never started"
  sleep 4
  scontrol requeue "$q"
  printf '%s\trequeue\t%s\n' "$(date +%s)" "$q" >>"$OUT/events.tsv"
  # Slurm gives a requeued job a BeginTime ~2 minutes on; lifting it at once
  # fails its launch ("Job credential revoked"), a few seconds later works.
  for _ in $(seq 150); do [ "$(state "$q")" = PENDING ] && break; sleep 0.2; done
  sleep 4
  scontrol update JobId="$q" StartTime=now
  printf '%s\trelease-begin-time\t%s\n' "$(date +%s)" "$q" >>"$OUT/events.tsv"
}
actions &
actor=$!

while IFS=$'\t' read -r offset name user group account qos gres nodes limit sleep extra; do
  case "$offset" in \#*) continue ;; esac
  while [ $(($(date +%s) - t0)) -lt "$offset" ]; do sleep 0.2; done
  while [ ${#captures[@]} -gt 0 ] && [ $(($(date +%s) - t0)) -ge "${captures[0]}" ]; do
    capture "${captures[0]}"
    captures=("${captures[@]:1}")
  done
  cmd="sleep $sleep"
  opts=()
  case "$extra" in
    -) ;;
    exit3) cmd="sleep $sleep; exit 3" ;;
    after:*) opts+=("--dependency=afterok:${JOB[${extra#after:}]}") ;;
    *) opts+=("$extra") ;;
  esac
  id=$(sbatch --parsable -J "$name" --uid="$user" --gid="$group" -A "$account" --qos="$qos" \
    --gres="$gres" -N "$nodes" -t "$limit" -o /dev/null -e /dev/null --chdir=/tmp "${opts[@]}" \
    --wrap "$cmd") || ci_die "sbatch of $name failed"
  JOB[$name]=$id
  printf '%s\t%s\t%s\n' "$name" "$id" "$(date +%s)" >>"$OUT/submitted.tsv"
done <"$OUT/plan.tsv"

wait "$actor" || ci_die "the cancel and requeue actions failed (above)"

# Until every job has ended (the rest of the captures on the way).
deadline=$(($(date +%s) + 420))
while [ -n "$(squeue -h -t PD,R,CG,CF,S,RQ,RS,RH,SE,SO,ST -o %i)" ]; do
  while [ ${#captures[@]} -gt 0 ] && [ $(($(date +%s) - t0)) -ge "${captures[0]}" ]; do
    capture "${captures[0]}"
    captures=("${captures[@]:1}")
  done
  [ "$(date +%s)" -lt $deadline ] || { squeue -l >&2; ci_die "jobs still queued after 7 minutes"; }
  sleep 1
done
ci_log "every job ended after $(($(date +%s) - t0)) s"

# The window in the local time of sacct's TZ (--starttime and --endtime are local times too).
from=$((t0 - 60))
to=$(($(date +%s) + 60))
dump() {
  sacct --allusers --duplicates --parsable2 --starttime="$(date -d "@$from" +%Y-%m-%dT%H:%M:%S)" \
    --endtime="$(date -d "@$to" +%Y-%m-%dT%H:%M:%S)" --format="$FORMAT" "$@"
}
# slurmctld sends the last records to slurmdbd asynchronously: until the
# database has every job's end.
for _ in $(seq 60); do
  SLURM_TIME_FORMAT=%s dump --allocations >"$OUT/sacct-epoch.txt"
  awk -F'|' 'NR > 1 && $18 ~ /^(PENDING|RUNNING|REQUEUED|COMPLETING)$/ && $14 == "Unknown"' \
    "$OUT/sacct-epoch.txt" | grep -q . || break
  sleep 1
done
dump --allocations >"$OUT/sacct-iso.txt"
TZ=Europe/Berlin dump --allocations >"$OUT/sacct-iso-berlin.txt"
# Without --state, the window selects jobs by their eligible time: a job held
# and cancelled before it was ever eligible is not in the dumps above.
SLURM_TIME_FORMAT=%s dump --allocations --state=CANCELLED >"$OUT/sacct-cancelled-epoch.txt"
SLURM_TIME_FORMAT=%s dump >"$OUT/sacct-steps-epoch.txt"
sacctmgr show assoc format=Cluster,Account,ParentName,User,Share --parsable2 >"$OUT/sacctmgr-assoc-tree.txt"
sacctmgr show assoc --parsable2 >"$OUT/sacctmgr-assoc.txt"
sacctmgr show qos --parsable2 >"$OUT/sacctmgr-qos.txt"
sshare -a -l --parsable2 >"$OUT/sshare.txt"
scontrol show nodes --oneliner >"$OUT/scontrol-show-nodes.txt"
scontrol show config >"$OUT/scontrol-show-config.txt"
for t in "${captures[@]}"; do ci_log "no capture at ${t}s: every job had ended"; done

# The invariants of the dump.
python3 - "$OUT" "$FORMAT" <<'EOF'
import sys
out, fmt = sys.argv[1], sys.argv[2].split(",")
bad = []
lines = open(f"{out}/sacct-epoch.txt").read().splitlines()
if lines[0].split("|") != fmt:
    bad.append(f"sacct-epoch.txt: header {lines[0]!r} is not the --format asked for")
rows = [dict(zip(fmt, l.split("|"))) for l in lines[1:]]
plan = {}
for l in open(f"{out}/plan.tsv"):
    if not l.startswith("#"):
        f = l.rstrip("\n").split("\t")
        plan[f[1]] = f
jobs = {}
for l in open(f"{out}/submitted.tsv"):
    if not l.startswith("#"):
        name, jid, _ = l.split("\t")
        jobs[name] = jid
def read(path):
    ls = open(path).read().splitlines()
    if ls[0].split("|") != fmt:
        bad.append(f"{path}: header {ls[0]!r} is not the --format asked for")
    return [dict(zip(fmt, l.split("|"))) for l in ls[1:]]
cancelled = read(f"{out}/sacct-cancelled-epoch.txt")
def records(jid, rows=rows):
    return [r for r in rows if r["JobIDRaw"] == jid or r["JobID"].split("_")[0] == jid]
for name, jid in sorted(jobs.items()):
    rs = records(jid)
    if name == "rt-cancelled":
        if rs:
            print(f"slurm-roundtrip: note: {name} is in the window's dump after all", file=sys.stderr)
        rs = records(jid, cancelled)
    if not rs:
        bad.append(f"{name} (job {jid}) has no record")
        continue
    if name == "rt-array":
        elems = sorted(r["JobID"] for r in rs)
        if len(elems) != 6 or any("[" in e for e in elems):
            bad.append(f"rt-array: elements {elems}, not 6 of their own")
    for r in rs:
        if r["State"] in ("PENDING", "RUNNING") or r["End"] == "Unknown":
            bad.append(f"{name}: record {r['JobID']} has not ended ({r['State']}, End={r['End']})")
        started = r["Start"] not in ("Unknown", "None", "0")
        if started and "gres/gpu=" not in r["AllocTRES"]:
            bad.append(f"{name}: AllocTRES {r['AllocTRES']!r} of a started job has no gres/gpu")
        gres = plan[name][6]
        if gres.count(":") == 2:
            t = gres.split(":")[1]
            if f"gres/gpu:{t}=" not in r["ReqTRES"]:
                bad.append(f"{name}: asked {gres}, ReqTRES {r['ReqTRES']!r} has no gres/gpu:{t}")
    states = [r["State"] for r in rs]
    if name == "rt-requeue":
        if len(rs) < 2 or "REQUEUED" not in states or states[-1] != "COMPLETED":
            bad.append(f"rt-requeue: states {states}, not REQUEUED then COMPLETED under one JobIDRaw")
        elif len({r["JobIDRaw"] for r in rs}) != 1:
            bad.append("rt-requeue: its records have different JobIDRaw")
    if name == "rt-timeout" and states != ["TIMEOUT"]:
        bad.append(f"rt-timeout: states {states}, not TIMEOUT")
    if name == "rt-cancelled" and (not states[0].startswith("CANCELLED") or rs[0]["ElapsedRaw"] != "0"
                                   or rs[0]["Eligible"] != "Unknown"):
        bad.append(f"rt-cancelled: {states} elapsed {rs[0]['ElapsedRaw']} eligible {rs[0]['Eligible']}, "
                   "not held and cancelled before it started")
    if name == "rt-fail" and (states != ["FAILED"] or rs[0]["ExitCode"] != "3:0"):
        bad.append(f"rt-fail: {states} exit {rs[0]['ExitCode']}, not FAILED with 3:0")
    if name == "rt-twonode" and rs[0]["NNodes"] != "2":
        bad.append(f"rt-twonode: NNodes {rs[0]['NNodes']}")
for b in bad:
    print(f"slurm-roundtrip: CHECK FAILED: {b}", file=sys.stderr)
if bad:
    sys.exit(1)
print(f"slurm-roundtrip: {len(jobs)} submissions, {len(rows)} records in sacct-epoch.txt: invariants hold",
      file=sys.stderr)
EOF
ci_log "outputs in $OUT"
