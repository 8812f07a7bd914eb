#!/usr/bin/env bash
# Kueue on the benchmark's control plane (side by side with Allot):
#   bench/k8s/kueue.sh BASE KUEUE_BIN VERSION
# BASE: the plane's state directory as `.ci/k8s.sh` lays it out (port,
# pki/ca.crt, pki/admin.token, kubeconfig, log/); KUEUE_BIN: the
# kueue manager binary (`.ci/k8s.sh kueue` builds it from the Go module
# proxy); VERSION: its version (0.17.0), whose CRDs are read from the Go module.
#
# * CRDs from sigs.k8s.io/kueue@vVERSION/config/components/crd/bases, applied
#   and waited for until served (the manager exits if they are not).
# * No webhooks (no cert manager here): internal cert management off, a
#   self-signed certificate in BASE/kueue/certs for the webhook server that
#   nothing calls; Jobs must be created with `suspend: true` by the submitter.
# * The manager reads a metrics certificate from the fixed path
#   /etc/kueue/metrics/certs (hard-coded in Kueue's main). This script writes
#   one there only after marking BASE/kueue.certs.ours (`.ci/k8s.sh stop`
#   removes the files when the mark is there), and refuses to overwrite
#   certificate files it did not write.
# * Health and webhook ports: free loopback ports chosen now.
# * The manager's PID goes to BASE/kueue.pid (`.ci/k8s.sh stop` stops it).
# * Placement is kube-scheduler's (Kueue admits on quota): if the plane runs
#   no kube-scheduler, one is started with GPU bin-packing scoring
#   (kube-scheduler.yaml beside this file; PID in BASE/scheduler.pid, which
#   `.ci/k8s.sh stop` stops); if the plane already runs one (K8S_SCHEDULER=1),
#   it is kept and a note says that its scoring is the default one.
# * Then kueue-queues.yaml (ResourceFlavor, a ClusterQueue per team in one
#   cohort, LocalQueues) is applied; side_by_side.py rescales its quotas.
# Needs: go (for the module's CRDs), openssl, python3 with PyYAML, curl;
# root, or write access to /etc/kueue/metrics/certs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "kueue.sh: $*" >&2; }
die() { log "$*"; exit 1; }

[ $# -eq 3 ] || die "usage: kueue.sh BASE KUEUE_BIN VERSION"
BASE=$1 KUEUE_BIN=$2 VERSION=${3#v}
[ -x "$KUEUE_BIN" ] || die "no kueue binary at $KUEUE_BIN"
for f in port pki/admin.token kubeconfig; do
  [ -s "$BASE/$f" ] || die "$BASE/$f is missing: start the plane first (eval \"\$(.ci/k8s.sh)\")"
done
mkdir -p "$BASE/log" "$BASE/kueue/certs"
alive() { [ -s "$BASE/$1.pid" ] && kill -0 "$(cat "$BASE/$1.pid")" 2>/dev/null; }
if alive kueue; then
  log "kueue already runs under $BASE (PID $(cat "$BASE/kueue.pid")): nothing to do"
  exit 0
fi
# The apply helper talks to this plane, whatever the caller's environment says.
export ALLOT_TEST_K8S_URL="https://127.0.0.1:$(cat "$BASE/port")"
# The plane's CA (older planes had only a self-signed serving certificate).
ALLOT_TEST_K8S_CA="$BASE/pki/ca.crt"
[ -s "$ALLOT_TEST_K8S_CA" ] || ALLOT_TEST_K8S_CA="$BASE/pki/apiserver.crt"
[ -s "$ALLOT_TEST_K8S_CA" ] || die "no CA certificate under $BASE/pki: start the plane first"
export ALLOT_TEST_K8S_CA
ALLOT_TEST_K8S_ADMIN_TOKEN=$(cat "$BASE/pki/admin.token")
export ALLOT_TEST_K8S_ADMIN_TOKEN
curl -sf --cacert "$ALLOT_TEST_K8S_CA" -H "Authorization: Bearer $ALLOT_TEST_K8S_ADMIN_TOKEN" \
  "$ALLOT_TEST_K8S_URL/readyz" >/dev/null || die "the API server at $ALLOT_TEST_K8S_URL does not answer"

# CRDs of exactly this version, from the Go module (downloaded if absent).
moddir=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kueue@v$VERSION" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
crds=$moddir/config/components/crd/bases
ls "$crds"/*.yaml >/dev/null 2>&1 || die "no CRDs under $crds"

# The metrics certificate at Kueue's fixed path: ours or nobody's.
m=/etc/kueue/metrics/certs
if { [ -e "$m/tls.crt" ] || [ -e "$m/tls.key" ]; } && [ ! -e "$BASE/kueue.certs.ours" ]; then
  die "$m holds a certificate that this plane ($BASE) did not write: not overwriting it (if an earlier plane's kueue.sh left it, stop that plane with .ci/k8s.sh stop, or remove it yourself)"
fi
openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj /CN=kueue -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
  -keyout "$BASE/kueue/certs/tls.key" -out "$BASE/kueue/certs/tls.crt" 2>/dev/null
chmod 600 "$BASE/kueue/certs/tls.key"
mkdir -p "$m" || die "cannot create $m (Kueue reads its metrics certificate there: run as root)"
touch "$BASE/kueue.certs.ours"   # before writing: a half-done copy is still ours to remove
install -m 600 "$BASE/kueue/certs/tls.key" "$m/tls.key"
install -m 644 "$BASE/kueue/certs/tls.crt" "$m/tls.crt"

read -r health_port webhook_port <<<"$(python3 - <<'PY'
import socket
socks = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
)"
sed -e "s|@HEALTH_PORT@|$health_port|" -e "s|@WEBHOOK_PORT@|$webhook_port|" -e "s|@CERT_DIR@|$BASE/kueue/certs|" \
  "$here/kueue-config.yaml" > "$BASE/kueue/config.yaml"

log "applying Kueue v$VERSION's CRDs"
python3 "$here/kapply.py" "$crds"/*.yaml <(printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: kueue-system}\n')

# VisibilityOnDemand would want another certificate (its API service).
"$KUEUE_BIN" -config "$BASE/kueue/config.yaml" -kubeconfig "$BASE/kubeconfig" \
  -feature-gates VisibilityOnDemand=false >"$BASE/log/kueue.log" 2>&1 &
echo $! > "$BASE/kueue.pid"
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$health_port/readyz" >/dev/null 2>&1 && break
  alive kueue || { tail -20 "$BASE/log/kueue.log" >&2; die "the kueue manager exited at start"; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$health_port/readyz" >/dev/null 2>&1 || { tail -20 "$BASE/log/kueue.log" >&2; die "kueue not ready in 60 s"; }
log "kueue manager ready (PID $(cat "$BASE/kueue.pid"), health on 127.0.0.1:$health_port, log $BASE/log/kueue.log)"

if alive scheduler; then
  log "note: the plane's own kube-scheduler runs (K8S_SCHEDULER=1) with the default scoring, which does not score nvidia.com/gpu (pods are spread, not packed): start the plane without K8S_SCHEDULER to have this script run a GPU bin-packing one"
else
  sched=$(dirname "$KUEUE_BIN")/kube-scheduler
  [ -x "$sched" ] || die "no kube-scheduler at $sched"
  sed "s|@KUBECONFIG@|$BASE/kubeconfig|" "$here/kube-scheduler.yaml" > "$BASE/kueue/kube-scheduler.yaml"
  "$sched" --config "$BASE/kueue/kube-scheduler.yaml" --bind-address 127.0.0.1 --secure-port 0 \
    >"$BASE/log/scheduler.log" 2>&1 &
  echo $! > "$BASE/scheduler.pid"
  sleep 2
  alive scheduler || { tail -20 "$BASE/log/scheduler.log" >&2; die "kube-scheduler exited at start"; }
  log "kube-scheduler with GPU bin-packing (MostAllocated on nvidia.com/gpu) started (PID $(cat "$BASE/scheduler.pid"))"
fi

python3 "$here/kapply.py" "$here/kueue-queues.yaml"
log "kueue v$VERSION running: ResourceFlavor h100, ClusterQueues team-a..team-d in cohort org, LocalQueues in default"
