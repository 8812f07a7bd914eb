#!/usr/bin/env bash
# A private Kubernetes control plane on loopback for the Kubernetes executor
# tests and benchmarks, never a cluster found through a kubeconfig:
#   .ci/k8s.sh build            # build it from the Go module proxy (once; skipped when built)
#   eval "$(.ci/k8s.sh)"         # build if needed, start (or reuse) it; sets ALLOT_TEST_K8S_*
#   .ci/k8s.sh stop [--purge]    # stop its processes by the PIDs recorded; --purge deletes its state
#   .ci/k8s.sh kueue             # (benchmarks) build and start Kueue v0.17 on the running plane
# etcd, kube-apiserver (token auth + RBAC), kube-controller-manager (the Job
# controller, pod garbage collector, node lifecycle …) and kwok (fake nodes:
# a pod bound to one runs and finishes after its annotated delay); no kubelet,
# no container runtime, no kube-scheduler (Allot binds its pods itself; the
# benchmark's Kueue runs need one: K8S_SCHEDULER=1). Nodes are created by the
# tests, each test its own (label allot.dev/test=<name>).
# Binaries: $ALLOT_K8S_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/allot-k8s),
# built by `go build` from published modules: Kubernetes v1.37.2, etcd v3.7.3,
# kwok v0.8.0 (cold: ~11.5 minutes on 2 cores; warm: 0 s). State, certificates,
# tokens and logs live under this checkout's private state directory
# (.ci/lib.sh); ports are free ones chosen at start. Two static tokens:
# ALLOT_TEST_K8S_ADMIN_TOKEN (system:masters, for the tests' own set-up) and
# ALLOT_TEST_K8S_TOKEN (user "allot", group "allot": no right until a test binds
# Allot's ClusterRole to it; also as a file, ALLOT_TEST_K8S_TOKEN_FILE), and
# ALLOT_TEST_K8S_USER_TOKEN (user "alice", a researcher with no right until a
# test grants some). Diagnostics go to stderr; any failure is fatal.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

K8S=${K8S:-1.37.2}
ETCD=${ETCD:-3.7.3}
KWOK=${KWOK:-0.8.0}
KUEUE=${KUEUE:-0.17.0}
CACHE=${ALLOT_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/allot-k8s}
BIN=$CACHE/bin
BASE=$CI_STATE/k8s
cmd=${1:-start}

log() { ci_log "$*"; }

build() {
  command -v go >/dev/null || ci_die "go is needed to build the control plane (Go 1.26 or newer)"
  mkdir -p "$BIN" "$CACHE/src"
  export GOFLAGS=-mod=mod
  local staging=0.${K8S#1.} v=k8s.io/component-base/version minor=${K8S#1.}
  minor=${minor%%.*}
  # k8s.io/kubernetes points its staging modules (k8s.io/api, client-go, …) at
  # ./staging in its own go.mod: a module that depends on it replaces every
  # one of them with the published v0.<minor>.<patch>.
  if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ] || [ ! -x "$BIN/kube-scheduler" ]; then
    local src=$CACHE/src/kube
    mkdir -p "$src"/{apiserver,controller-manager,scheduler}
    (
      cd "$src"
      go mod download -json "k8s.io/kubernetes@v$K8S" >/dev/null
      local kmod
      kmod=$(go env GOMODCACHE)/k8s.io/kubernetes@v$K8S/go.mod
      { printf 'module allot.test/kube\n\ngo 1.26\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S"
        sed -n '/^replace (/,/^)/p' "$kmod" | awk '/=>/ {printf "\t%s => %s v'"$staging"'\n", $1, $1}'
        echo ')'; } > go.mod
      for c in apiserver:NewAPIServerCommand controller-manager:NewControllerManagerCommand scheduler:NewSchedulerCommand; do
        local dir=${c%%:*} fn=${c#*:}
        printf 'package main\n\nimport (\n\t"os"\n\t_ "time/tzdata"\n\n\t"k8s.io/component-base/cli"\n\t"k8s.io/kubernetes/cmd/kube-%s/app"\n)\n\nfunc main() { os.Exit(cli.Run(app.%s())) }\n' "$dir" "$fn" > "$dir/main.go"
      done
      go mod tidy
      for dir in apiserver controller-manager scheduler; do
        [ -x "$BIN/kube-$dir" ] && continue
        log "building kube-$dir v$K8S"
        # Without a version the binaries say v0.0.0-master, which clients
        # that check the server's version (Kueue) refuse to parse.
        go build -ldflags "-X $v.gitVersion=v$K8S -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
          -o "$BIN/kube-$dir.part" "./$dir"
        mv "$BIN/kube-$dir.part" "$BIN/kube-$dir"
      done
    )
  fi
  # etcd's main package sits in a module with replace directives: build
  # etcdmain from a two-line main instead.
  if [ ! -x "$BIN/etcd" ]; then
    local src=$CACHE/src/etcd
    mkdir -p "$src"
    (
      cd "$src"
      printf 'module allot.test/etcd\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD" > go.mod
      printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' > main.go
      go mod tidy
      log "building etcd v$ETCD"
      go build -o "$BIN/etcd.part" . && mv "$BIN/etcd.part" "$BIN/etcd"
    )
  fi
  if [ ! -x "$BIN/kwok" ]; then
    log "building kwok v$KWOK"
    GOBIN=$BIN go install "sigs.k8s.io/kwok/cmd/kwok@v$KWOK"
  fi
  # kwok's stages: node initialisation and lease heartbeats, and the general
  # pod stages whose annotations set each pod's delays.
  if [ ! -s "$CACHE/stages.yaml" ]; then
    go mod download -json "sigs.k8s.io/kwok@v$KWOK" >/dev/null
    local k f
    k=$(go env GOMODCACHE)/sigs.k8s.io/kwok@v$KWOK/kustomize/stage
    for f in "$k"/node/fast/node-initialize.yaml "$k"/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml "$k"/pod/general/pod-*.yaml; do
      echo '---'
      cat "$f"
    done > "$CACHE/stages.yaml.part"
    mv "$CACHE/stages.yaml.part" "$CACHE/stages.yaml"
  fi
}

built() {
  local b
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do [ -x "$BIN/$b" ] || return 1; done
  [ -s "$CACHE/stages.yaml" ]
}

alive() { [ -f "$BASE/$1.pid" ] && kill -0 "$(cat "$BASE/$1.pid")" 2>/dev/null; }

print_env() {
  cat <<V
export ALLOT_TEST_K8S_URL=https://127.0.0.1:$(cat "$BASE/port")
export ALLOT_TEST_K8S_CA=$BASE/pki/ca.crt
export ALLOT_TEST_K8S_ADMIN_TOKEN=$(cat "$BASE/pki/admin.token")
export ALLOT_TEST_K8S_TOKEN=$(cat "$BASE/pki/allot.token")
export ALLOT_TEST_K8S_TOKEN_FILE=$BASE/pki/allot.token
export ALLOT_TEST_K8S_USER_TOKEN=$(cat "$BASE/pki/alice.token")
export ALLOT_TEST_K8S_KUBECONFIG=$BASE/kubeconfig
V
}

start() {
  built || build
  ci_state_dir
  if alive apiserver && alive etcd && alive controller-manager && alive kwok; then
    log "reusing the running plane under $BASE"
    print_env
    return
  fi
  stop_plane
  rm -rf "$BASE"
  mkdir -p "$BASE"/{pki,etcd,log}
  cd "$BASE"
  local ports port etcd_port peer_port
  read -r port etcd_port peer_port <<<"$(ci_free_ports 3)"
  echo "$port" > port
  # A CA of the plane's own and a serving certificate it signed (an
  # end-entity certificate: TLS clients such as rustls refuse a CA
  # certificate presented as the server's).
  openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj /CN=allot-test-ca \
    -keyout pki/ca.key -out pki/ca.crt 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
    -keyout pki/apiserver.key -out pki/apiserver.csr 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' > pki/apiserver.ext
  openssl x509 -req -in pki/apiserver.csr -CA pki/ca.crt -CAkey pki/ca.key -CAcreateserial -days 7 \
    -extfile pki/apiserver.ext -out pki/apiserver.crt 2>/dev/null
  openssl genrsa -out pki/sa.key 2048 2>/dev/null
  openssl rsa -in pki/sa.key -pubout -out pki/sa.pub 2>/dev/null
  openssl rand -hex 16 > pki/admin.token
  openssl rand -hex 16 > pki/allot.token
  openssl rand -hex 16 > pki/alice.token
  # token,user,uid,"groups": the admin (cluster-admin), Allot and a researcher,
  # alice, who has no right until a test grants her some.
  {
    printf '%s,admin,1,"system:masters"\n' "$(cat pki/admin.token)"
    printf '%s,allot,2,"allot"\n' "$(cat pki/allot.token)"
    printf '%s,alice,3,"researchers"\n' "$(cat pki/alice.token)"
  } > pki/tokens.csv
  chmod 600 pki/*.key pki/*.token pki/tokens.csv
  cat > kubeconfig <<K
apiVersion: v1
kind: Config
clusters: [{name: it, cluster: {server: "https://127.0.0.1:$port", certificate-authority: "$BASE/pki/ca.crt"}}]
users: [{name: admin, user: {token: "$(cat pki/admin.token)"}}]
contexts: [{name: it, context: {cluster: it, user: admin}}]
current-context: it
K
  chmod 600 kubeconfig
  "$BIN/etcd" --name it --data-dir etcd \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "it=http://127.0.0.1:$peer_port" --log-level warn >log/etcd.log 2>&1 &
  echo $! > etcd.pid
  local i
  for i in $(seq 100); do curl -sf "http://127.0.0.1:$etcd_port/health" >/dev/null && break; sleep 0.1; done
  curl -sf "http://127.0.0.1:$etcd_port/health" >/dev/null || { tail log/etcd.log >&2; ci_die "etcd did not start"; }
  # --endpoint-reconciler-type none: a loopback advertise address is refused
  # by the default reconciler. The service range is bookkeeping only.
  "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
    --endpoint-reconciler-type none --service-cluster-ip-range 10.96.0.0/24 \
    --tls-cert-file pki/apiserver.crt --tls-private-key-file pki/apiserver.key \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file pki/sa.pub --service-account-signing-key-file pki/sa.key \
    --token-auth-file pki/tokens.csv --authorization-mode RBAC >log/apiserver.log 2>&1 &
  echo $! > apiserver.pid
  ready() { curl -sf --cacert pki/ca.crt -H "Authorization: Bearer $(cat pki/admin.token)" "https://127.0.0.1:$port/readyz" >/dev/null; }
  for i in $(seq 600); do ready && break; sleep 0.1; done
  ready || { tail -20 log/apiserver.log >&2; ci_die "kube-apiserver was not ready in 60 s"; }
  # The controllers a batch cluster needs; their client limits raised so
  # that they, not the scheduler under test, are never the bottleneck.
  "$BIN/kube-controller-manager" --kubeconfig kubeconfig \
    --controllers job-controller,serviceaccount-controller,serviceaccount-token-controller,namespace-controller,garbage-collector-controller,ttl-after-finished-controller,pod-garbage-collector-controller,node-lifecycle-controller,taint-eviction-controller \
    --service-account-private-key-file pki/sa.key --root-ca-file pki/ca.crt \
    --use-service-account-credentials=false --leader-elect=false \
    --kube-api-qps 500 --kube-api-burst 1000 --concurrent-job-syncs 20 \
    --bind-address 127.0.0.1 --secure-port 0 >log/controller-manager.log 2>&1 &
  echo $! > controller-manager.pid
  if [ "${K8S_SCHEDULER:-0}" = 1 ]; then
    "$BIN/kube-scheduler" --kubeconfig kubeconfig --leader-elect=false --kube-api-qps 500 --kube-api-burst 1000 \
      --bind-address 127.0.0.1 --secure-port 0 >log/scheduler.log 2>&1 &
    echo $! > scheduler.pid
  fi
  "$BIN/kwok" --kubeconfig kubeconfig --config "$CACHE/stages.yaml" \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake --node-lease-duration-seconds 40 \
    --server-address 127.0.0.1:0 >log/kwok.log 2>&1 &
  echo $! > kwok.pid
  sleep 1
  for p in controller-manager kwok; do
    alive "$p" || { tail -20 "log/$p.log" >&2; ci_die "$p exited at start"; }
  done
  log "plane up on https://127.0.0.1:$port (state and logs: $BASE)"
  print_env
}

stop_plane() {
  local p pid
  for p in kueue kwok scheduler controller-manager apiserver etcd; do
    [ -f "$BASE/$p.pid" ] || continue
    pid=$(cat "$BASE/$p.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; log "$p did not stop in 5 s: killed"; fi
    rm -f "$BASE/$p.pid"
  done
  if [ -e "$BASE/kueue.certs.ours" ]; then
    rm -f /etc/kueue/metrics/certs/tls.crt /etc/kueue/metrics/certs/tls.key "$BASE/kueue.certs.ours"
  fi
}

kueue() {
  alive apiserver || ci_die "start the plane first: eval \"\$(.ci/k8s.sh)\""
  export GOFLAGS=-mod=mod
  [ -x "$BIN/kueue" ] || { log "building kueue v$KUEUE"; GOBIN=$BIN go install "sigs.k8s.io/kueue/cmd/kueue@v$KUEUE"; }
  bash "$CI_ROOT/bench/k8s/kueue.sh" "$BASE" "$BIN/kueue" "$KUEUE"
}

case "$cmd" in
  build) build; log "built in $BIN" ;;
  start) start ;;
  env) alive apiserver || ci_die "no plane is running under $BASE: eval \"\$(.ci/k8s.sh)\""; print_env ;;
  stop)
    stop_plane
    [ "${2:-}" = --purge ] && rm -rf "$BASE"
    true
    ;;
  kueue) kueue ;;
  *) ci_die "unknown command $cmd (use build, start, env, stop [--purge], kueue)" ;;
esac
