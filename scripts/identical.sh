#!/usr/bin/env bash
# Writes every output the simulator's decisions reach into one directory, so
# that two builds can be compared byte for byte (`diff -r`): `allot sim`
# stdout, --json, --workloads and --log, and `allot compare` reports, on the
# example (with its events, to the end and --until 3d), two generated
# Ai2-like traces (seeds 1 and 2, all four policies) and Philly at 512 GPUs.
#
#   ALLOT_BIN=target/release/allot bash scripts/identical.sh OUT_DIR
#   diff -r OUT_DIR_BEFORE OUT_DIR_AFTER
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
allot="$(realpath "${ALLOT_BIN:-$here/target/release/allot}")"
out="${1:?usage: identical.sh OUT_DIR}"
traces="${ALLOT_TRACES:-$here/../shared/traces}"
mkdir -p "$out"
cd "$out" # relative paths: reports name their inputs
ex="$here/examples"

sim() { # name, then allot sim arguments
  local name="$1"; shift
  "$allot" sim "$@" --json "$name.json" --workloads "$name.workloads.csv" \
    --log "$name.log.jsonl" > "$name.stdout"
}

for until in "" 3d; do
  sim "example${until:+-$until}" --config "$ex/cluster.toml" --trace "$ex/trace.csv" \
    --events "$ex/events.csv" ${until:+--until $until}
done
for seed in 1 2; do
  "$allot" trace gen --gpus 1024 --days 4 --seed "$seed" \
    --out "ai2-$seed.csv" --config-out "ai2-$seed.toml" > /dev/null
  for p in fifo fifo-backfill priority allot; do
    sim "ai2-$seed-$p" --config "ai2-$seed.toml" --trace "ai2-$seed.csv" --policy "$p"
  done
done
if [ -f "$traces/philly_pollux.csv" ]; then
  "$allot" trace import --format philly-pollux "$traces/philly_pollux.csv" --gpus 512 \
    --out "philly.csv" --config-out "philly.toml" > /dev/null
  for p in priority fifo-backfill allot; do
    sim "philly-$p" --config "philly.toml" --trace "philly.csv" --policy "$p"
  done
  "$allot" compare --config "philly.toml" --trace "philly.csv" \
    --policies priority,fifo-backfill,allot --out "philly-compare" > /dev/null
fi
"$allot" compare --config "$ex/cluster.toml" --trace "$ex/trace.csv" --events "$ex/events.csv" \
  --out "example-compare" > /dev/null
echo "outputs in $PWD"
