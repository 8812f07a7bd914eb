#!/usr/bin/env bash
# Reproduces docs/results.md "Impact steering": the fleet scenario
# (ai2-fleet) and the Ai2-like lab (ai2), each at 1,024 GPUs and 7 days of
# arrivals, stopped at day 7 (--until 7d: a saturated week), seeds 1-3,
# `allot` only, in three columns: the generator's config (every impact 1), olmo at impact 3
# and tulu at impact 2 with impact_weighting off (IMP-1, IMP-2 act), and the
# same with impact_weighting on (IMP-3 too). Writes out/impact-fleet/ and
# out/impact-ai2/ (summary.md, summary.json, report.html) and prints each
# summary with its wall time and each team's delivered share.
set -euo pipefail
cd "$(dirname "$0")/.."
allot=${ALLOT_BIN:-target/release/allot}
vary=(--vary impact:ai2/olmo=3 --vary impact:ai2/tulu=2 --vary contract.impact_weighting=off,on)
run() {
  local name=$1
  shift
  local start=$SECONDS
  "$allot" compare "$@" --gpus 1024 --days 7 --until 7d --seeds 3 --policies allot "${vary[@]}" --out "out/$name" > /dev/null
  echo "## $name: $((SECONDS - start)) s wall"
  cat "out/$name/summary.md"
  # Delivered share per team (mean ± 95% half-width), from summary.json.
  python3 - "out/$name/summary.json" <<'PY'
import json, sys
cols = json.load(open(sys.argv[1]))
for acc in ["ai2/olmo", "ai2/tulu", "ai2/molmo", "ai2/prior"]:
    cells = [f"{c['accounts'][acc]['delivered_share']:.3f} ± {c['ci95']['accounts'][acc]['delivered_share']:.3f}" for c in cols]
    print(f"| {acc} delivered | " + " | ".join(cells) + " |")
PY
  echo
}
run impact-fleet --scenario ai2-fleet
run impact-ai2 --scenario ai2
