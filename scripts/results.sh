#!/usr/bin/env bash
# Reproduces every comparison in docs/results.md into out/results/.
# Needs the public traces in ../shared/traces (see that directory's README).
set -euo pipefail
cd "$(dirname "$0")/.."
traces=${ALLOT_TRACES_DIR:-../shared/traces}
out=out/results
mkdir -p "$out"
[ -n "${ALLOT_BIN:-}" ] || cargo build --release --locked -q -p allot
allot=${ALLOT_BIN:-target/release/allot}

# 1. Philly (82,247 jobs, 15 virtual clusters) on 512 GPUs: the trace's mean
#    demand is 374 busy GPUs, so the cluster is busy with real bursts.
$allot trace import --format philly-pollux "$traces/philly_pollux.csv" --gpus 512 \
  --out "$out/philly.csv" --config-out "$out/philly.toml"
$allot compare --config "$out/philly.toml" --trace "$out/philly.csv" \
  --policies priority,fifo-backfill,allot --out "$out/philly"

# 2. Alibaba openb (8,152 pods; fractional GPUs rounded up to whole ones)
#    on 40 GPUs: the pods' mean demand is ~17 busy GPUs on a 6,212-GPU
#    cluster, so the real node list would show no contention at all.
$allot trace import --format alibaba-openb "$traces/alibaba_openb_pods.csv" --gpus 40 \
  --out "$out/alibaba.csv" --config-out "$out/alibaba.toml"
$allot compare --config "$out/alibaba.toml" --trace "$out/alibaba.csv" \
  --policies priority,fifo-backfill,allot --out "$out/alibaba"

# 3. The Ai2-like generator: 1,024 GPUs, 30 days, 3 seeds.
$allot compare --scenario ai2 --gpus 1024 --days 30 --seeds 3 \
  --policies priority,fifo-backfill,allot --out "$out/ai2"

# 4. The fleet: the Ai2-like lab on five clusters (384 to 88 GPUs, 1,024 in
#    all), 35% of workloads pinned to their team's home cluster: the legacy
#    model (team pools per cluster), Allot with budgets split per cluster (one
#    scheduler per cluster) and Allot with one fleet-wide ledger.
$allot compare --scenario ai2-fleet --gpus 1024 --days 7 --until 7d --seeds 3 \
  --policies priority,allot-split,allot --out "$out/fleet"
