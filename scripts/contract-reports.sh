#!/usr/bin/env bash
# Reproduces docs/results.md "Idle reclaim and checkpoints on the signal":
# the Ai2-like lab at 256 GPUs, 7 days of arrivals stopped at day 7 (a
# saturated week), seeds 1-10, `allot` only:
# * idle reclaim (CON-9) off against the default (interactive below 5% for
#   2 h, then 30 min of warning), and the default against a tighter setting
#   (30 min, then 10 min);
# * 0%, 30% and 60% of batch work checkpointing on the signal (CON-8).
# Writes out/reclaim, out/reclaim-tight, out/on-signal-0.3, out/on-signal-0.6
# and prints the rows the section quotes.
set -euo pipefail
cd "$(dirname "$0")/.."
allot=${ALLOT_BIN:-target/release/allot}
s=(--scenario ai2 --gpus 256 --days 7 --until 7d --seeds 10 --policies allot)
"$allot" compare "${s[@]}" --vary contract.idle_threshold.interactive=0,0.05 --out out/reclaim > /dev/null
"$allot" compare "${s[@]}" --vary contract.idle_after.interactive=30m --vary contract.idle_warning.interactive=10m \
  --out out/reclaim-tight > /dev/null
for f in 0.3 0.6; do
  "$allot" compare "${s[@]}" --checkpoint-on-signal-fraction $f --out "out/on-signal-$f" > /dev/null
done
rows='^\| (measure|occupancy|utilization \||interactive p95|interactive p99|completed workloads|useful GPU-h \||preemptions|overhead)'
for d in reclaim reclaim-tight on-signal-0.3 on-signal-0.6; do
  echo "## $d"
  grep -E "$rows" "out/$d/summary.md"
done
