#!/usr/bin/env bash
# A store written by an earlier allot, for the upgrade test
# (crates/allot-server/tests/upgrade.rs, docs/operations.md#upgrade).
#
#   scripts/schema-fixtures.sh COMMIT OUT
#   scripts/schema-fixtures.sh c8d0680 crates/allot-server/tests/fixtures/schema
#
# COMMIT is a commit of this repository whose newest SQLite migration is
# schema version V (take the last commit at which V was the newest:
# `git log --diff-filter=A -- crates/allot-server/src/store/migrations/sqlite/`).
# The script builds that commit's `allot` (debug, --locked, under nice, in a
# temporary worktree removed afterwards; CARGO_TARGET_DIR is reused between
# runs so later builds are incremental, default target-old beside the
# repository), or uses ALLOT_BIN if set (a binary built from COMMIT). With it,
# on a free loopback port, a temporary data directory and COMMIT's
# examples/cluster.toml (scheduling every second, one second of grace), it
#   * creates an admin token (`allot token create --db`),
#   * submits a workload that finishes, one that fails, one held and then
#     cancelled, and one held (still pending at the end); an allot without
#     `submit --hold` (before schema 14) gets instead one `sleep 600` that
#     is cancelled once it runs, and none held,
#   * waits until the first two have ended (attempts and usage have rows),
#   * stops the server with SIGTERM (by the PID it started).
# Then it writes into OUT:
#   vVV.sqlite        the store, vacuumed, in rollback-journal mode
#   vVV.cluster.toml  the config it was served with
#   vVV.toml          what it holds: commit, admin token, workload ids, rows
# The CLI changed over time; what differs per version (--single-user,
# --allow-uncontained, --hold) is read from the old binary's --help.
# Needs git, cargo, curl, python3 and sqlite3. Touches only its own
# temporary directory, its worktree and OUT; stops only the server it started.
set -euo pipefail

if [ $# -ne 2 ]; then
    sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
COMMIT=$1
OUT=$2
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=$(git -C "$REPO" rev-parse --verify "$COMMIT^{commit}")
V=$(git -C "$REPO" ls-tree --name-only "$COMMIT" crates/allot-server/src/store/migrations/sqlite/ |
    sed -n 's#.*/\([0-9]\{4\}\)_.*#\1#p' | sort -n | tail -1)
if [ -z "$V" ]; then
    echo "commit $COMMIT has no SQLite migrations" >&2
    exit 2
fi
V=$((10#$V))
NAME=$(printf 'v%02d' "$V")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(dirname "$REPO")/target-old}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/allot-fixture-$NAME.XXXXXX")
PID=
WORKTREE=
cleanup() {
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
        kill -TERM "$PID" 2>/dev/null || true
        sleep 2
        kill -KILL "$PID" 2>/dev/null || true
    fi
    if [ -n "$WORKTREE" ]; then
        git -C "$REPO" worktree remove --force "$WORKTREE" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
say() { echo "schema-fixtures $NAME: $*" >&2; }

# 1. The old binary.
BIN=$TMP/allot
if [ -n "${ALLOT_BIN:-}" ]; then
    cp "$ALLOT_BIN" "$BIN"
else
    WORKTREE=$TMP/src
    git -C "$REPO" worktree add --detach "$WORKTREE" "$COMMIT" >&2
    say "building $COMMIT in $CARGO_TARGET_DIR"
    (cd "$WORKTREE" && nice -n 19 cargo build -p allot --locked >&2)
    cp "$CARGO_TARGET_DIR/debug/allot" "$BIN"
    git -C "$REPO" worktree remove --force "$WORKTREE"
    WORKTREE=
fi

# 2. Its example config, scheduling every second.
CONFIG=$TMP/cluster.toml
git -C "$REPO" show "$COMMIT:examples/cluster.toml" |
    sed -e 's/^scheduling_interval = .*/scheduling_interval = "1s"/' -e 's/^grace = .*/grace = "1s"/' >"$CONFIG"
ACCOUNT=$(sed -n 's/^path = "\(org\/llm\/pretrain\)"$/\1/p' "$CONFIG" | head -1)
if [ -z "$ACCOUNT" ]; then
    ACCOUNT=$(sed -n 's/^path = "\([^"]*\/[^"]*\)"$/\1/p' "$CONFIG" | head -1)
fi

# 3. The token, straight into the store.
DB=$TMP/allot.db
URL=sqlite://$DB
TOKEN=$("$BIN" token create --db "$URL" --role admin --name fixture-admin 2>"$TMP/token.err" | tail -1) || {
    cat "$TMP/token.err" >&2
    exit 1
}

# 4. The server, with what this version has of the flags.
HELP=$("$BIN" serve --help)
FLAGS=()
has() { grep -q -- "$1" <<<"$HELP"; }
has --single-user && FLAGS+=(--single-user)
has --allow-uncontained && FLAGS+=(--allow-uncontained)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
SERVER=http://127.0.0.1:$PORT
(cd "$TMP" && exec "$BIN" serve --config "$CONFIG" --db "$URL" --listen "127.0.0.1:$PORT" \
    --data-dir "$TMP/data" --executor local "${FLAGS[@]}" >"$TMP/server.log" 2>&1) &
PID=$!
for _ in $(seq 1 300); do
    curl -sf "$SERVER/v1/health" >/dev/null 2>&1 && break
    kill -0 "$PID" 2>/dev/null || {
        cat "$TMP/server.log" >&2
        exit 1
    }
    sleep 0.2
done
curl -sf "$SERVER/v1/health" >/dev/null || {
    say "the server did not answer within 60 s"
    cat "$TMP/server.log" >&2
    exit 1
}
say "serving $URL on $SERVER (pid $PID, ${FLAGS[*]:-no extra flags})"

# 5. Workloads, submitted from /tmp (a working directory every host has).
cli() {
    (cd /tmp && ALLOT_SERVER=$SERVER ALLOT_TOKEN=$TOKEN ALLOT_CLIENT_CONFIG=$TMP/none.toml HOME=$TMP \
        "$BIN" "$@")
}
submit() { cli submit --account "$ACCOUNT" --gpus 1 "$@" | tail -1 | tr -d '[:space:]'; }
state() {
    curl -sf -H "Authorization: Bearer $TOKEN" "$SERVER/v1/workloads/$1" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["workload"]["state"])'
}
wait_end() {
    for _ in $(seq 1 300); do
        case $(state "$1") in finished | failed | cancelled) return 0 ;; esac
        sleep 0.2
    done
    say "workload $1 did not end within 60 s (state $(state "$1"))"
    cat "$TMP/server.log" >&2
    exit 1
}
HOLD=()
cli submit --help | grep -q -- --hold && HOLD=(--hold)
FINISHED=$(submit -- sh -c 'echo fixture finished')
FAILED=$(submit -- sh -c 'echo fixture failed; exit 3')
wait_end "$FINISHED"
wait_end "$FAILED"
if [ ${#HOLD[@]} -gt 0 ]; then
    CANCELLED=$(submit --hold -- sh -c 'echo fixture cancelled')
    HELD=$(submit --hold -- sh -c 'echo fixture released')
else
    # No holds yet: a workload that runs until it is cancelled (once it
    # runs, so that it has an attempt that the cancel stops).
    CANCELLED=$(submit -- sleep 600)
    HELD=
    for _ in $(seq 1 300); do
        [ "$(state "$CANCELLED")" = running ] && break
        sleep 0.2
    done
    [ "$(state "$CANCELLED")" = running ] || {
        say "workload $CANCELLED did not start within 60 s (state $(state "$CANCELLED"))"
        cat "$TMP/server.log" >&2
        exit 1
    }
fi
cli cancel "$CANCELLED" >&2
wait_end "$CANCELLED"
say "finished $FINISHED, failed $FAILED, cancelled $CANCELLED, held ${HELD:-none}"

# 6. Stop, by the PID started above.
kill -TERM "$PID"
for _ in $(seq 1 150); do
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.2
done
if kill -0 "$PID" 2>/dev/null; then
    say "the server did not stop within 30 s of SIGTERM"
    exit 1
fi
wait "$PID" || true
PID=

# 7. The store, small and in one file.
rm -f "$OUT/$NAME.sqlite"
sqlite3 "$DB" "PRAGMA wal_checkpoint(TRUNCATE); VACUUM INTO '$OUT/$NAME.sqlite';" >/dev/null
sqlite3 "$OUT/$NAME.sqlite" "PRAGMA journal_mode = DELETE;" >/dev/null
cp "$CONFIG" "$OUT/$NAME.cluster.toml"
{
    echo "# A store of schema version $V written by allot at commit $COMMIT"
    echo "# (scripts/schema-fixtures.sh). A test store: its token is no secret."
    echo "schema = $V"
    echo "commit = \"$COMMIT\""
    echo "config = \"$NAME.cluster.toml\""
    echo "account = \"$ACCOUNT\""
    echo "token = \"$TOKEN\""
    echo "finished = \"$FINISHED\""
    echo "failed = \"$FAILED\""
    echo "cancelled = \"$CANCELLED\""
    [ -n "$HELD" ] && echo "held = \"$HELD\""
    echo
    echo "# Rows per table when it was written."
    echo "[rows]"
    for t in $(sqlite3 "$OUT/$NAME.sqlite" "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"); do
        echo "$t = $(sqlite3 "$OUT/$NAME.sqlite" "SELECT COUNT(*) FROM \"$t\"")"
    done
} >"$OUT/$NAME.toml"
say "wrote $OUT/$NAME.sqlite ($(stat -c %s "$OUT/$NAME.sqlite") bytes), $NAME.toml and $NAME.cluster.toml"
