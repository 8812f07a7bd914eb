#!/usr/bin/env bash
# Reproduces every comparison in docs/results.md into out/results/.
# Needs the public traces in traces/ (docs/traces.md: sources, licences,
# download commands), or in ALLOT_TRACES_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
traces=${ALLOT_TRACES_DIR:-traces}
out=out/results
mkdir -p "$out"
[ -n "${ALLOT_BIN:-}" ] || cargo build --release --locked -q -p allot
allot=${ALLOT_BIN:-target/release/allot}
# Each step's wall time goes to stderr.
step_start=$SECONDS
step_done() { echo "results.sh: step $1 took $((SECONDS - step_start)) s" >&2; step_start=$SECONDS; }

# 1. Philly (82,247 jobs, 15 virtual clusters) on 512 GPUs: the trace's mean
#    demand is 374 busy GPUs, so the cluster is busy with real bursts.
$allot trace import --format philly-pollux "$traces/philly_pollux.csv" --gpus 512 \
  --out "$out/philly.csv" --config-out "$out/philly.toml"
$allot compare --config "$out/philly.toml" --trace "$out/philly.csv" \
  --policies priority,fifo-backfill,slurm,allot --out "$out/philly"

# 1b. The slurm baseline with the weights many sites use (fair share first,
#     age second), beside the defaults' column: the trace has no slurm.conf.
slurm_weighted() {
  cp "$out/$1.toml" "$out/$1-fairshare.toml"
  printf '\n[slurm]\nweight_age = 1000\nweight_fairshare = 10000\n' >>"$out/$1-fairshare.toml"
  $allot sim --config "$out/$1-fairshare.toml" --trace "$out/$1.csv" --policy slurm \
    --json "$out/$1-slurm-fairshare.json" >"$out/$1-slurm-fairshare.txt"
}
slurm_weighted philly

step_done 1

# 2. Alibaba openb (8,152 pods; fractional GPUs rounded up to whole ones)
#    on 40 GPUs: the pods' mean demand is ~17 busy GPUs on a 6,212-GPU
#    cluster, so the real node list would show no contention at all.
$allot trace import --format alibaba-openb "$traces/alibaba_openb_pods.csv" --gpus 40 \
  --out "$out/alibaba.csv" --config-out "$out/alibaba.toml"
$allot compare --config "$out/alibaba.toml" --trace "$out/alibaba.csv" \
  --policies priority,fifo-backfill,slurm,allot --out "$out/alibaba"
slurm_weighted alibaba

step_done 2

# 3. The Ai2-like generator: 1,024 GPUs, 30 days, 3 seeds.
$allot compare --scenario ai2 --gpus 1024 --days 30 --seeds 3 \
  --policies priority,fifo-backfill,slurm,allot --out "$out/ai2"
# 3b. The slurm baseline with fair share weighted first (as in 1b), on the
#     same seeds: the second column of this comparison (the first is the
#     defaults' again).
$allot compare --scenario ai2 --gpus 1024 --days 30 --seeds 3 --policies slurm \
  --vary slurm.weight_fairshare=10000 --vary slurm.weight_age=1000 --out "$out/ai2-slurm-fairshare"

step_done 3

# 4. The fleet: the Ai2-like lab on five clusters (384 to 88 GPUs, 1,024 in
#    all), 35% of workloads pinned to their team's home cluster: the legacy
#    model (team pools per cluster), Slurm as multi-cluster sites run it (one
#    controller, fair share and backfill per cluster: slurm-split, with
#    Slurm's defaults and, as 1b, with fair share weighted first), Allot with
#    budgets split per cluster (one scheduler per cluster) and Allot with one
#    fleet-wide ledger.
$allot compare --scenario ai2-fleet --gpus 1024 --days 7 --until 7d --seeds 3 \
  --policies priority,slurm-split,allot-split,allot --out "$out/fleet"
$allot compare --scenario ai2-fleet --gpus 1024 --days 7 --until 7d --seeds 3 --policies slurm-split \
  --vary slurm.weight_fairshare=10000 --vary slurm.weight_age=1000 --out "$out/fleet-slurm-fairshare"

step_done 4

# 5. Assumption sweep: the Philly trace records no checkpoints, and the
#    import assumes every batch job checkpoints hourly (which favours the
#    policies that preempt). The same comparison with no checkpoints, every
#    4 h and hourly. ALLOT_SWEEP_UNTIL (e.g. 60d; the trace's first 14 days
#    hold only 22 jobs) cuts every run there for a quicker, smaller sweep;
#    unset, the whole trace is replayed.
sweep_until=${ALLOT_SWEEP_UNTIL:-}
until_args=()
[ -z "$sweep_until" ] || until_args=(--until "$sweep_until")
for ckpt in 0 14400 3600; do
  $allot trace import --format philly-pollux "$traces/philly_pollux.csv" --gpus 512 --checkpoint-s "$ckpt" \
    --out "$out/philly-ckpt$ckpt.csv" --config-out "$out/philly-ckpt$ckpt.toml"
  $allot compare --config "$out/philly-ckpt$ckpt.toml" --trace "$out/philly-ckpt$ckpt.csv" \
    --policies priority,fifo-backfill,slurm,allot "${until_args[@]}" --out "$out/sweep-ckpt$ckpt" >/dev/null
done
{
  echo "| checkpoints | policy | completed | unfinished | preemptions | lost to preemption (fraction of assigned) | useful GPU-h | queue p95 (h) | budget attainment |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  for ckpt in 0 14400 3600; do
    case $ckpt in 0) label="none" ;; 14400) label="every 4 h" ;; 3600) label="hourly" ;; esac
    jq -r --arg c "$label" '.[] | "| \($c) | \(.policy) | \(.metrics.completed_workloads) | \(.metrics.unfinished_workloads) | \(.metrics.preemptions) | \(.metrics.preemption_overhead_fraction * 1000 | round / 1000) | \(.metrics.useful_gpu_hours | round) | \(if .metrics.queue_time_s then (.metrics.queue_time_s.p95 / 360 | round / 10) else "-" end) | \(if .metrics.budget_attainment then (.metrics.budget_attainment * 1000 | round / 1000) else "-" end) |"' \
      "$out/sweep-ckpt$ckpt/summary.json"
  done
} >"$out/sweep-checkpoints.md"
step_done 5
cat "$out/sweep-checkpoints.md"

# 6. Preemption overhead (docs/results.md, "Preemption overhead"): the swap
#    margin (CON-11) and the checkpoint wait (CON-12) as curves on the fleet,
#    the Ai2-like lab and Philly, and kept claims (CON-10) on the fleet. Each --vary run also holds the
#    base contract's column, so each curve is measured in one sitting.
$allot compare --scenario ai2-fleet --gpus 1024 --days 7 --until 7d --seeds 3 --policies allot \
  --vary contract.swap_margin=0.1,0.2,0.35,0.5,0.65 --out "$out/fleet-swap-margin"
$allot compare --scenario ai2-fleet --gpus 1024 --days 7 --until 7d --seeds 3 --policies allot \
  --vary contract.keep_claims=off,on --out "$out/fleet-keep-claims"
$allot compare --scenario ai2 --gpus 1024 --days 30 --seeds 3 --policies allot \
  --vary contract.swap_margin=0.2,0.35,0.5 --out "$out/ai2-swap-margin"
$allot compare --config "$out/philly.toml" --trace "$out/philly.csv" --policies allot \
  --vary contract.swap_margin=0.2,0.35,0.5 --out "$out/philly-swap-margin"
# 6b. Swaps that wait for a due checkpoint (CON-12), alone and with a margin.
$allot compare --scenario ai2-fleet --gpus 1024 --days 7 --until 7d --seeds 3 --policies allot \
  --vary contract.checkpoint_wait=10m,30m --out "$out/fleet-checkpoint-wait"
$allot compare --scenario ai2-fleet --gpus 1024 --days 7 --until 7d --seeds 3 --policies allot \
  --vary contract.checkpoint_wait=30m --vary contract.swap_margin=0.2,0.35 --out "$out/fleet-checkpoint-wait-margin"
$allot compare --scenario ai2 --gpus 1024 --days 30 --seeds 3 --policies allot \
  --vary contract.checkpoint_wait=10m,30m --out "$out/ai2-checkpoint-wait"
$allot compare --config "$out/philly.toml" --trace "$out/philly.csv" --policies allot \
  --vary contract.checkpoint_wait=10m,30m --out "$out/philly-checkpoint-wait"
step_done 6
