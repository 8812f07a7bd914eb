#!/usr/bin/env bash
# What containment costs per attempt: N trivial workloads (`true`, one GPU
# each, 2 nodes x 4 GPUs) submitted one after another through the CLI to a
# fresh `allot serve`, timed until all have finished.
#   scripts/contain-bench.sh N                 # contained (run as root)
#   RUNAS=nobody scripts/contain-bench.sh N    # the same server as nobody, --allow-uncontained
# Uses target/debug/allot (or $ALLOT_BIN); a temporary directory, removed after.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100}
BIN=${ALLOT_BIN:-$PWD/target/debug/allot}
d=$(mktemp -d)
chmod 777 "$d"
cat > "$d/c.toml" <<'T'
[cluster]
name = "bench"
[[cluster.pools]]
name = "gpu"
gpu = "H100"
nodes = 2
gpus_per_node = 4
[[accounts]]
path = "org/a"
share = 1
[contract]
scheduling_interval = "1s"
grace = "1s"
T
tok=$("$BIN" token create --db "sqlite://$d/a.db" --role admin --name root 2>/dev/null)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
serve=("$BIN" serve --config "$d/c.toml" --db "sqlite://$d/a.db" --listen "127.0.0.1:$port" --data-dir "$d/data" --single-user)
if [ -n "${RUNAS:-}" ]; then
  chown -R "$RUNAS" "$d"
  setpriv --reuid="$RUNAS" --regid="$(id -g "$RUNAS")" --clear-groups "${serve[@]}" --allow-uncontained 2> "$d/log" &
else
  "${serve[@]}" 2> "$d/log" &
fi
pid=$!
until (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.05; done
export ALLOT_SERVER="http://127.0.0.1:$port" ALLOT_TOKEN="$tok" ALLOT_CLIENT_CONFIG="$d/none"
t0=$(date +%s.%N)
for _ in $(seq "$N"); do "$BIN" submit --account org/a --gpus 1 -- true > /dev/null; done
while [ "$("$BIN" queue --state finished --json | grep -cE '"state": *"finished"')" -lt "$N" ]; do sleep 0.1; done
t1=$(date +%s.%N)
kill "$pid"
wait "$pid" 2> /dev/null || true
group=$(grep -o 'allot-[0-9a-f]\{16\}' "$d/log" | head -1 || true)
[ -n "$group" ] && rmdir /sys/fs/cgroup/*/"$group" 2> /dev/null || true
rm -rf "$d"
echo "$N workloads submitted and finished in $(echo "$t1 - $t0" | bc) s ($([ -n "${RUNAS:-}" ] && echo uncontained || echo contained))"
