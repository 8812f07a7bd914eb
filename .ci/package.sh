#!/usr/bin/env bash
# The Debian packages, built and checked without touching the host:
#
#   bash .ci/package.sh [BINARY]     # default: target/debug/allot
#
#   * packaging/deb/build.sh builds allot and allot-dbgsym from BINARY (CI
#     packages its debug build, so no release build is needed here);
#   * the binary is stripped, carries a debug link and a build id, and the
#     dbgsym package holds its debug info;
#   * the unit passes `systemd-analyze verify` in a temp root (the package
#     unpacked there, beside copies of the host's *.target units; the
#     host's /etc/systemd is never read as the unit's root);
#   * the package is unpacked into a temp root with `dpkg -x`; the
#     maintainer scripts parse (`sh -n`);
#   * the README's quick start runs with the unpacked binary: a store, an
#     admin token, `allot serve` on a free port in a temp dir, a workload
#     submitted and finished, the queue and /metrics; and the packaged
#     /etc/allot/allot.toml starts a server too (its executor `none`);
#   * `dpkg -i` and `dpkg --purge` run for real in a throwaway root (an
#     overlay of / in a private mount namespace, so the host's users, /etc,
#     units and dpkg database do not change; checked): the postinst makes
#     the allot user and /var/lib/allot, the unit's command serves as that
#     user, SIGHUP (the unit's ExecReload) and `allot admin reload` reload,
#     and the purge keeps the store.
#
# Every process it starts is stopped by its recorded PID; its temp dir is
# removed at the end.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"
log() { ci_log "$*"; }

bin=${1:-${CARGO_TARGET_DIR:-$CI_ROOT/target}/debug/allot}
[ -x "$bin" ] || ci_die "no allot binary at $bin (cargo build -p allot)"
for tool in dpkg-deb objcopy readelf systemd-analyze curl; do
  command -v "$tool" >/dev/null || ci_die "$tool is not installed"
done

# has PATTERN COMMAND…: COMMAND's output matches PATTERN (read whole: a
# `| grep -q` would end the command early, and pipefail fail the step).
has() { local out; out=$("${@:2}" 2>/dev/null) || return 1; grep -q -- "$1" <<<"$out"; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

log "building the packages from $bin"
ALLOT_DEB_XZ_LEVEL=1 bash packaging/deb/build.sh "$bin" "$tmp/out" >"$tmp/built"
deb=$(sed -n 1p "$tmp/built")
dbgsym=$(sed -n 2p "$tmp/built")
has '^ Package: allot$' dpkg-deb --info "$deb" || ci_die "$deb: not the allot package"
has '^ Depends: allot (= ' dpkg-deb --info "$dbgsym" || ci_die "$dbgsym: does not depend on its allot"

root=$tmp/root
dpkg -x "$deb" "$root"
dpkg -x "$dbgsym" "$root"
dpkg-deb --control "$deb" "$tmp/control"
for s in postinst prerm postrm; do sh -n "$tmp/control/$s" || ci_die "$s does not parse"; done
[ "$(cat "$tmp/control/conffiles")" = "$(printf '/etc/allot/allot.toml\n/etc/allot/allot.env\n/etc/default/allot')" ] \
  || ci_die "conffiles: $(cat "$tmp/control/conffiles")"
[ "$(stat -c %a "$root/etc/allot/allot.env")" = 600 ] || ci_die "/etc/allot/allot.env is not 0600"

installed=$root/usr/bin/allot
log "the installed binary is stripped and linked to its debug info"
has '\.debug_info' readelf -S "$installed" && ci_die "$installed still has debug info"
has '\.gnu_debuglink' readelf -S "$installed" || ci_die "$installed has no .gnu_debuglink"
build_id=$(readelf -n "$installed" | awk '/Build ID:/ {print $3}')
debug=$root/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug
[ -n "$build_id" ] && [ -f "$debug" ] || ci_die "no debug file for build id ${build_id:-none} in $dbgsym"
has '\.debug_info' readelf -S "$debug" || ci_die "$debug has no debug info"
[ "$("$installed" --version)" = "$("$bin" --version)" ] || ci_die "the installed binary is not $bin"
for f in usr/share/bash-completion/completions/allot usr/share/zsh/vendor-completions/_allot \
  usr/share/fish/vendor_completions.d/allot.fish usr/share/man/man1/allot.1.gz \
  usr/share/man/man1/allot-serve.1.gz usr/share/man/man1/allot-db-backup.1.gz \
  usr/share/allot/grafana/allot.json usr/share/allot/prometheus/allot-rules.yml \
  usr/share/doc/allot/operations.md usr/share/doc/allot/examples/local-executor.conf; do
  [ -s "$root/$f" ] || ci_die "the package has no $f"
done
bash -n "$root/usr/share/bash-completion/completions/allot" || ci_die "the bash completions do not parse"

log "systemd-analyze verify allot.service (root $root)"
# The unit's dependencies (sysinit.target, …) come from copies of the
# host's target units in the temp root; its man page from the package.
for t in /lib/systemd/system/*.target; do cp -n "$t" "$root/lib/systemd/system/"; done
# ExecReload's /bin/kill is the host's (procps), not the package's.
install -D /bin/kill "$root/bin/kill"
verify=$(MANPATH=$root/usr/share/man systemd-analyze verify --root="$root" /lib/systemd/system/allot.service 2>&1) \
  || ci_die "systemd-analyze verify failed: $verify"
[ -z "$verify" ] || ci_die "systemd-analyze verify warns: $verify"
for d in local-executor.conf; do
  install -D -m 0644 "$root/usr/share/doc/allot/examples/$d" "$root/etc/systemd/system/allot.service.d/$d"
done
verify=$(MANPATH=$root/usr/share/man systemd-analyze verify --root="$root" /lib/systemd/system/allot.service 2>&1) \
  || ci_die "systemd-analyze verify with the local-executor drop-in failed: $verify"
[ -z "$verify" ] || ci_die "systemd-analyze verify with the local-executor drop-in warns: $verify"

# Waits for an `allot serve` started in the background to answer at $1.
wait_up() {
  local _
  for _ in $(seq 1 150); do
    curl -fsS "$1/v1/health" >/dev/null 2>&1 && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$2" >&2; ci_die "allot serve exited"; }
    sleep 0.2
  done
  cat "$2" >&2
  ci_die "allot serve does not answer at $1"
}

log "the README's quick start with the installed binary"
qs=$tmp/quickstart
mkdir -p "$qs"
# The README's own cluster.toml (the heredoc of its quick start).
awk '/^cat > cluster.toml <<.EOF.$/ {on=1; next} on && /^EOF$/ {exit} on {print}' README.md >"$qs/cluster.toml"
grep -q 'gpus_per_node = 4' "$qs/cluster.toml" || ci_die "the README's quick start has no cluster.toml heredoc"
port=$(ci_free_ports 1)
url=http://127.0.0.1:$port
(
  cd "$qs"
  export PATH="$root/usr/bin:$PATH"
  token=$(allot token create --db sqlite://allot.db --role admin --name me)
  echo "$token" >token
)
token=$(cat "$qs/token")
(cd "$qs" && exec "$installed" serve --config cluster.toml --single-user --listen "127.0.0.1:$port" >server.log 2>&1) &
pids+=($!)
wait_up "$url" "$qs/server.log"
export ALLOT_SERVER=$url ALLOT_TOKEN=$token
id=$(cd "$qs" && "$installed" submit --account lab/alice --gpus 2 -- sh -c 'echo hello from $CUDA_VISIBLE_DEVICES')
for _ in $(seq 1 100); do
  state=$("$installed" show "$id" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["workload"]["state"])')
  [ "$state" = finished ] && break
  sleep 0.2
done
[ "$state" = finished ] || { cat "$qs/server.log" >&2; ci_die "workload $id is $state, not finished"; }
has '^hello from [0-9]' "$installed" logs "$id" || ci_die "workload $id's output: $("$installed" logs "$id")"
has finished "$installed" queue --all || ci_die "allot queue --all does not list $id"
has '^allot_queue_length' curl -fsS -H "Authorization: Bearer $token" "$url/metrics" \
  || ci_die "/metrics has no allot_queue_length"
kill "${pids[-1]}" && wait "${pids[-1]}" || true

log "the packaged /etc/allot/allot.toml starts a server (executor none)"
conf=$tmp/packaged
mkdir -p "$conf"
port=$(ci_free_ports 1)
"$installed" serve --config "$root/etc/allot/allot.toml" --db "sqlite://$conf/allot.db" --data-dir "$conf/data" \
  --executor none --listen "127.0.0.1:$port" >"$conf/server.log" 2>&1 &
pids+=($!)
wait_up "http://127.0.0.1:$port" "$conf/server.log"
kill "${pids[-1]}" && wait "${pids[-1]}" || true
log "dpkg -i and --purge in a throwaway root: the maintainer scripts run, the unit's command serves and reloads"
# The throwaway root is an overlay of / in a private mount namespace: what
# dpkg, adduser and the server write goes to $tmp/overlay/upper and
# vanishes with the namespace; the host's /etc, users and dpkg database do
# not change (checked after). /run is empty there, so the postinst does not
# talk to the host's systemd.
host_users=$(getent passwd | sha256sum)
host_dpkg=$( (dpkg -s allot 2>&1 || true) | sha256sum)
ovl=$tmp/overlay
mkdir -p "$ovl/upper" "$ovl/work" "$ovl/root"
port=$(ci_free_ports 1)
OVL=$ovl DEB=$deb PORT=$port unshare --mount --propagation private bash -s >"$ovl/out" 2>&1 <<'INSTALL' \
  || { cat "$ovl/out" >&2; ci_die "the package does not install, serve, reload and purge in a throwaway root"; }
set -euo pipefail
m=$OVL/root
pid=
# The server started here is stopped by its PID whatever fails: its
# mounts end with the namespace, but a process would outlive it.
trap '[ -z "$pid" ] || { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }' EXIT
mount -t overlay overlay -o "lowerdir=/,upperdir=$OVL/upper,workdir=$OVL/work" "$m"
mount --bind /dev "$m/dev"
mount -t proc proc "$m/proc"
mount -t tmpfs tmpfs "$m/run"
mount -t tmpfs tmpfs "$m/tmp"
cp "$DEB" "$m/tmp/allot.deb"
inroot() { chroot "$m" "$@"; }
had_user=$(inroot getent passwd allot || true)
echo "== dpkg -i"
inroot dpkg -i /tmp/allot.deb
inroot dpkg -s allot | grep -q '^Status: install ok installed$'
[ -n "$had_user" ] || inroot getent passwd allot | grep -q ':/var/lib/allot:' || { echo "postinst made no allot user"; exit 1; }
[ "$(inroot stat -c '%U %a' /var/lib/allot)" = "allot 700" ] || { echo "/var/lib/allot: $(inroot stat -c '%U %a' /var/lib/allot)"; exit 1; }
[ "$(inroot stat -c '%U %a' /etc/allot/allot.env)" = "root 600" ] || { echo "allot.env: $(inroot stat -c '%U %a' /etc/allot/allot.env)"; exit 1; }
echo "== the unit's command, as the allot user (setpriv, as User= does)"
as_allot() { inroot setpriv --reuid allot --regid allot --init-groups "$@"; }
token=$(as_allot sh -c 'cd /var/lib/allot && allot token create --db sqlite:///var/lib/allot/allot.db --role admin --name ops')
# Not through the function: $! must be the server itself (chroot and
# setpriv exec), or SIGHUP would reach a subshell.
chroot "$m" setpriv --reuid allot --regid allot --init-groups sh -c "cd /var/lib/allot && exec allot serve --config /etc/allot/allot.toml --db sqlite:///var/lib/allot/allot.db \
  --data-dir /var/lib/allot/data --executor=none --listen 127.0.0.1:$PORT" >"$m/tmp/serve.log" 2>&1 &
pid=$!
up=
for _ in $(seq 1 150); do
  curl -fsS "http://127.0.0.1:$PORT/v1/health" >/dev/null 2>&1 && { up=1; break; }
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
[ -n "$up" ] || { cat "$m/tmp/serve.log"; echo "allot serve did not answer"; exit 1; }
echo "== systemctl reload: SIGHUP (ExecReload), then allot admin reload"
kill -HUP "$pid"
for _ in $(seq 1 50); do grep -q 'config reload: the file is unchanged' "$m/tmp/serve.log" && break; sleep 0.1; done
grep -q 'config reload: the file is unchanged' "$m/tmp/serve.log" || { cat "$m/tmp/serve.log"; echo "no reload after SIGHUP"; exit 1; }
kill -0 "$pid" || { echo "SIGHUP ended the server"; exit 1; }
ALLOT_SERVER=http://127.0.0.1:$PORT ALLOT_TOKEN=$token inroot allot admin reload | grep -q unchanged
kill -TERM "$pid"
wait "$pid" || true
pid=
echo "== dpkg --purge"
inroot dpkg --purge allot 2>&1 | tee "$m/tmp/purge.log"
grep -q '/var/lib/allot (the store) is kept' "$m/tmp/purge.log"
inroot test -f /var/lib/allot/allot.db || { echo "the purge removed the store"; exit 1; }
! inroot test -e /usr/bin/allot || { echo "/usr/bin/allot is left after the purge"; exit 1; }
! inroot test -e /etc/allot/allot.toml || { echo "/etc/allot/allot.toml is left after the purge"; exit 1; }
echo "== done"
INSTALL
[ "$(getent passwd | sha256sum)" = "$host_users" ] || ci_die "the host's users changed"
[ "$( (dpkg -s allot 2>&1 || true) | sha256sum)" = "$host_dpkg" ] || ci_die "the host's dpkg database changed"
log "ok: $(basename "$deb"), $(basename "$dbgsym")"
