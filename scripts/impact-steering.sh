#!/usr/bin/env bash
# Reproduces docs/results.md "Impact steering" into out/impact/: the Ai2-like
# lab (256 GPUs, 3 days of arrivals, seeds 1-3) with olmo at impact 3 and
# tulu at impact 2 (others 1), under allot with equal impacts (before), with
# the impacts and impact_weighting off, and with impact_weighting on.
set -euo pipefail
cd "$(dirname "$0")/.."
allot=${ALLOT_BIN:-target/release/allot}
out=out/impact
mkdir -p "$out"
for s in 1 2 3; do
  $allot trace gen --scenario ai2 --gpus 256 --days 3 --seed $s --out "$out/t$s.csv" --config-out "$out/c$s.toml"
  sed -e 's|^path = "ai2/olmo"$|path = "ai2/olmo"\nimpact = 3|' \
      -e 's|^path = "ai2/tulu"$|path = "ai2/tulu"\nimpact = 2|' "$out/c$s.toml" > "$out/off$s.toml"
  sed 's|^\[contract\]$|[contract]\nimpact_weighting = "on"|' "$out/off$s.toml" > "$out/on$s.toml"
  for v in c off on; do
    $allot compare --config "$out/$v$s.toml" --trace "$out/t$s.csv" --policies allot --out "$out/r-$v$s" > /dev/null
  done
done
python3 - "$out" <<'PY'
import re, statistics, sys
out = sys.argv[1]
def rows(p):
    d = {}
    for line in open(p):
        m = re.match(r"\| (.+?) \| (.+?) \|( (.+?) \|)?", line)
        if m: d[m.group(1)] = line.strip().split("|")[1:-1]
    return d
def num(x):
    try: return float(x)
    except ValueError: return None
measures = ["impact", "occupancy", "budget attainment", "Jain index", "preemptions", "overhead fraction"]
accounts = ["ai2/olmo", "ai2/tulu", "ai2/molmo", "ai2/prior"]
print("| measure | equal impacts | impacts, weighting off | impacts, weighting on |")
print("|---|---:|---:|---:|")
for m in measures + [a + " delivered" for a in accounts]:
    cells = []
    for v in ["c", "off", "on"]:
        xs = []
        for s in (1, 2, 3):
            r = rows(f"{out}/r-{v}{s}/summary.md")
            key = m.replace(" delivered", "")
            col = 2 if m.endswith("delivered") else 1
            xs.append(num(r[key][col].strip()))
        mean = statistics.mean(xs)
        half = 4.303 * statistics.stdev(xs) / 3 ** 0.5
        cells.append(f"{mean:.3f} ± {half:.3f}" if mean < 10 else f"{mean:.0f} ± {half:.0f}")
    print(f"| {m} | " + " | ".join(cells) + " |")
PY
