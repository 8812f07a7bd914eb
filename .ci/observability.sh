#!/usr/bin/env bash
# The shipped dashboard and alert rules against a real server:
#
#   * `promtool check rules` and `promtool test rules` on
#     deploy/prometheus/allot-rules.yml (each alert fires on what should
#     fire it, a healthy server fires none);
#   * `promtool check metrics` on a running `allot serve`'s /metrics (the
#     Prometheus text format, with every account's series: an admin token),
#     after work was submitted, run, cancelled and a budget set;
#   * deploy/grafana/allot.json is valid JSON with panels, and every
#     `allot_…` name it or the rules use is a series that /metrics serves.
#
# Starts its own `allot serve` (.ci/lib.sh's ci_serve_none: executor none,
# SQLite, a free loopback port, its own temp dir) and stops it by its PID.
# promtool comes from Debian's `prometheus` package, installed when missing
# (no service is started: lib.sh's policy-rc.d). ALLOT_BIN: the binary to
# serve (CI passes the test run's), else one is built.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"
log() { ci_log "$*"; }

command -v promtool >/dev/null || ci_apt_install prometheus
command -v promtool >/dev/null || ci_die "promtool is not installed (Debian package prometheus)"

rules=deploy/prometheus/allot-rules.yml
dashboard=deploy/grafana/allot.json
log "promtool check rules $rules"
promtool check rules "$rules"
log "promtool test rules ${rules%.yml}.test.yml"
promtool test rules "${rules%.yml}.test.yml"

tmp=$(mktemp -d)
trap 'ci_serve_stop; rm -rf "$tmp"' EXIT
ci_serve_none "$tmp"
bin=${ALLOT_BIN:-${CARGO_TARGET_DIR:-$CI_ROOT/target}/debug/allot}
cli() { ALLOT_SERVER=$CI_SERVE_URL ALLOT_TOKEN=$CI_SERVE_TOKEN "$bin" "$@"; }

# Work of every kind, so that every family has series: one attempt runs
# (the none executor holds its GPUs), one is cancelled while running, one
# waits, and org/a has a budget it burns.
cli budget set org/a 10 >/dev/null
cli submit --account org/a --gpus 4 -- sleep 600 >/dev/null
cancelled=$(cli submit --account org/b --gpus 4 -- sleep 600)
cli submit --account org/b --gpus 8 -- sleep 600 >/dev/null
for _ in $(seq 1 50); do
  [ "$(cli show "$cancelled" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["workload"]["state"])')" = running ] && break
  sleep 0.2
done
cli cancel "$cancelled" >/dev/null
sleep 3

metrics="$tmp/metrics.txt"
curl -fsS -H "Authorization: Bearer $CI_SERVE_TOKEN" "$CI_SERVE_URL/metrics" >"$metrics"
log "promtool check metrics on $CI_SERVE_URL/metrics ($(grep -vc '^#' "$metrics") samples)"
if ! promtool check metrics <"$metrics"; then
  log "promtool check metrics failed on:"; cat "$metrics" >&2; exit 1
fi

log "$dashboard and $rules use only series /metrics serves"
python3 - "$metrics" "$dashboard" "$rules" <<'EOF'
import json, re, sys
metrics, dashboard, rules = sys.argv[1:4]
served = set()
for line in open(metrics):
    if line.startswith("# TYPE "):
        served.add(line.split()[2])
    elif line.strip() and not line.startswith("#"):
        served.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
empty = sorted(n for n in served if n.startswith("allot_") and not any(
    l.startswith(n) for l in open(metrics) if not l.startswith("#")))
if empty:
    print(f"declared, no sample yet (work of that kind did not happen here): {', '.join(empty)}")

def names(text):
    return set(re.findall(r"\ballot_[a-z0-9_]+", text))

try:
    board = json.load(open(dashboard))
except json.JSONDecodeError as e:
    sys.exit(f"{dashboard}: not valid JSON: line {e.lineno} column {e.colno}: {e.msg}")
exprs = []
def walk(panels):
    for p in panels:
        walk(p.get("panels", []))
        for t in p.get("targets", []):
            exprs.append((p.get("title", "?"), t.get("expr", "")))
walk(board.get("panels", []))
if len(exprs) < 10 or any(not e for _, e in exprs):
    sys.exit(f"{dashboard}: {len(exprs)} queries, some empty: {exprs}")
bad = [(title, n) for title, e in exprs for n in sorted(names(e)) if n not in served]
rule_text = open(rules).read()
bad += [("rules", n) for n in sorted(names(rule_text)) if n not in served]
if bad:
    sys.exit("series not served by /metrics: " + "; ".join(f"{where}: {n}" for where, n in bad))
used = set().union(*(names(e) for _, e in exprs))
print(f"{len(exprs)} dashboard queries over {len(used)} series, {len(names(rule_text))} in the rules: all served")
EOF
kill -0 "$CI_SERVE_PID" 2>/dev/null || { cat "$tmp/server.log" >&2; ci_die "allot serve died during the run"; }
log "ok"
