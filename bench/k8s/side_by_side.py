#!/usr/bin/env python3
"""Allot and Kueue side by side on one Kubernetes control plane (issue 17).

One run: K kwok nodes x 8 GPUs, then a seeded mixed workload of thousands of
batch/v1 Jobs for several teams, arriving so that demand stays at least twice
the capacity for the whole load window (~20 minutes); the scheduler under
test (--scheduler kueue | allot) admits them. Measured from the API server's
watch streams (Jobs and pods of this run), not from the scheduler:

* decision latency: Job created (the POST answered) -> Job unsuspended
  (spec.suspend false seen on the Job watch), p50/p90/p99;
* time from the first submission to a full cluster (every GPU of the bench
  nodes held by a Running pod of this run; also 90/95/99 %);
* each team's GPU share over time (Running pods' GPU limits, sampled every
  --sample seconds) against its entitlement, and against its demand-aware
  fair share (entitlements water-filled over each team's unfinished demand):
  mean absolute deviation over the steady part, per-team mean share;
* Jobs completed, preemptions (a Job re-suspended after it ran; for Kueue
  also its Workloads' eviction counts by reason).

Prints a table and writes everything (figures, per-job records, samples) as
JSON with --out. `--report A.json [B.json]` prints the table of earlier runs
side by side. `--dry-run` prints the workload only. Python 3.11 stdlib and
PyYAML; the plane's env from `eval "$(.ci/k8s.sh)"`. See README.md.
"""
import argparse
import http.client
import json
import math
import os
import queue
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kapply  # noqa: E402

GPU = "nvidia.com/gpu"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
RUN_LABEL = "allot.dev/bench-run"
TEAM_LABEL = "allot.dev/bench-team"
KWOK_STAGES = ("pod-create", "pod-ready")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# The workload: deterministic given the seed and the shape arguments.

def parse_teams(text):
    """a:40:34,b:30:26,... -> [(name, entitlement fraction, arrival fraction)]"""
    teams = []
    for part in text.split(","):
        name, ent, arr = part.split(":")
        teams.append((name, float(ent), float(arr)))
    es, as_ = sum(t[1] for t in teams), sum(t[2] for t in teams)
    return [(n, e / es, a / as_) for n, e, a in teams]


def parse_sizes(text):
    """1:20,2:15,... -> [(gpus, weight)]; above --gpus-per-node a size is a gang of full-node pods."""
    return [(int(g), float(w)) for g, w in (p.split(":") for p in text.split(","))]


def make_workload(a):
    rng = random.Random(a.seed)
    cap = a.nodes * a.gpus_per_node
    teams = parse_teams(a.teams)
    sizes = parse_sizes(a.sizes)
    gpn = a.gpus_per_node
    for g, _ in sizes:
        if g > gpn and g % gpn:
            sys.exit(f"size {g}: a gang must be whole nodes of {gpn} GPUs")
    mean_gpus = sum(g * w for g, w in sizes) / sum(w for _, w in sizes)
    lo, hi = math.log(a.run_min), math.log(a.run_max)
    mean_run = (a.run_max - a.run_min) / (hi - lo) if a.run_max > a.run_min else a.run_min
    load_s = a.load_minutes * 60

    def job(offset):
        gpus = rng.choices([g for g, _ in sizes], weights=[w for _, w in sizes])[0]
        team = rng.choices([t[0] for t in teams], weights=[t[2] for t in teams])[0]
        run_s = int(round(math.exp(rng.uniform(lo, hi)) / 10.0)) * 10
        pods = gpus // gpn if gpus > gpn else 1
        return {"offset": round(offset, 3), "team": team, "gpus": gpus, "pods": pods,
                "gpus_per_pod": gpus // pods, "run_s": run_s}

    jobs = []
    # The opening backlog: --burst x capacity in GPUs, submitted at once.
    g = 0
    while g < a.burst * cap:
        j = job(0.0)
        jobs.append(j)
        g += j["gpus"]
    # Then arrivals (Poisson) at --arrival x the full cluster's throughput in
    # GPUs per second (capacity / mean run time), for the load window.
    rate = a.arrival * cap / mean_run / mean_gpus  # jobs per second
    t = rng.expovariate(rate)
    while t < load_s:
        jobs.append(job(t))
        t += rng.expovariate(rate)
    for i, j in enumerate(jobs):
        j["i"] = i
    return jobs, {"capacity_gpus": cap, "mean_gpus": mean_gpus, "mean_run_s": mean_run,
                  "arrival_jobs_per_s": rate, "load_s": load_s, "teams": teams, "sizes": sizes}


def workload_summary(jobs, info, a):
    cap = info["capacity_gpus"]
    burst = [j for j in jobs if j["offset"] == 0.0]
    out = {"jobs": len(jobs), "burst_jobs": len(burst), "burst_gpus": sum(j["gpus"] for j in burst),
           "gpus_total": sum(j["gpus"] for j in jobs), "gpu_seconds_total": sum(j["gpus"] * j["run_s"] for j in jobs),
           "pods_total": sum(j["pods"] for j in jobs)}
    # Fluid estimate of the backlog under a perfect scheduler (cluster always
    # full): demand(t) = submitted GPU-s not yet served / mean run time.
    submitted = 0.0
    k = 0
    ordered = sorted(jobs, key=lambda j: j["offset"])
    min_ratio = float("inf")
    for t in range(0, int(info["load_s"]) + 1, 5):
        while k < len(ordered) and ordered[k]["offset"] <= t:
            submitted += ordered[k]["gpus"] * ordered[k]["run_s"]
            k += 1
        backlog_gpu_s = submitted - cap * t
        min_ratio = min(min_ratio, backlog_gpu_s / info["mean_run_s"] / cap)
    out["fluid_min_demand_over_capacity"] = round(min_ratio, 2)
    per_team = {}
    for name, ent, arr in info["teams"]:
        tj = [j for j in jobs if j["team"] == name]
        per_team[name] = {"entitlement": ent, "arrival_share": arr, "jobs": len(tj),
                          "gpu_seconds": sum(j["gpus"] * j["run_s"] for j in tj)}
    out["teams"] = per_team
    by_size = {}
    for j in jobs:
        by_size[j["gpus"]] = by_size.get(j["gpus"], 0) + 1
    out["jobs_by_gpus"] = dict(sorted(by_size.items()))
    return out


# --------------------------------------------------------------------------
# Talking to the API server: one persistent HTTPS connection per thread.

class Api:
    def __init__(self):
        self.url = os.environ["ALLOT_TEST_K8S_URL"]
        u = urllib.parse.urlsplit(self.url)
        self.host, self.port = u.hostname, u.port or 443
        self.ctx = ssl.create_default_context(cafile=os.environ["ALLOT_TEST_K8S_CA"])
        self.token = os.environ["ALLOT_TEST_K8S_ADMIN_TOKEN"]
        self.local = threading.local()

    def conn(self, timeout=30):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def request(self, method, path, body=None, ctype="application/json", tries=4):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": "Bearer " + self.token, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = ctype
        last = None
        for attempt in range(tries):
            c = getattr(self.local, "c", None)
            if c is None:
                c = self.local.c = self.conn()
            try:
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                raw = r.read()
                try:
                    out = json.loads(raw or b"{}")
                except ValueError:
                    out = {"message": raw[:300].decode(errors="replace")}
                if r.status == 429 or r.status >= 500:
                    last = (r.status, out)
                    time.sleep(0.5 * (attempt + 1))
                    continue
                return r.status, out
            except (OSError, http.client.HTTPException) as e:
                last = (0, {"message": str(e)})
                try:
                    c.close()
                except Exception:
                    pass
                self.local.c = None
                time.sleep(0.2 * (attempt + 1))
        return last

    def list_all(self, path, selector=None):
        items, cont = [], None
        while True:
            q = {"limit": "500"}
            if selector:
                q["labelSelector"] = selector
            if cont:
                q["continue"] = cont
            st, out = self.request("GET", path + "?" + urllib.parse.urlencode(q))
            if st != 200:
                raise RuntimeError(f"GET {path}: {st} {out.get('message')}")
            items.extend(out.get("items", []))
            cont = out.get("metadata", {}).get("continue")
            if not cont:
                return items, out.get("metadata", {}).get("resourceVersion")


class Watch(threading.Thread):
    """A list-then-watch of one collection; every event goes to on_event(type,
    object, time received). Re-watches from the last resourceVersion when the
    server ends the stream; lists again when that version is gone (410)."""

    def __init__(self, api, path, selector, on_event, name):
        super().__init__(daemon=True, name=name)
        self.api, self.path, self.selector, self.on_event = api, path, selector, on_event
        self.stop = threading.Event()
        self.rv = None
        self.relists = 0
        self.errors = 0

    def relist(self):
        items, rv = self.api.list_all(self.path, self.selector)
        now = time.time()
        for it in items:
            self.on_event("MODIFIED", it, now)
        self.rv = rv

    def run(self):
        while not self.stop.is_set():
            try:
                if self.rv is None:
                    self.relist()
                    self.relists += 1
                q = urllib.parse.urlencode({"watch": "1", "labelSelector": self.selector, "resourceVersion": self.rv,
                                            "allowWatchBookmarks": "true", "timeoutSeconds": "600"})
                c = self.api.conn(timeout=120)
                c.request("GET", f"{self.path}?{q}", headers={"Authorization": "Bearer " + self.api.token})
                r = c.getresponse()
                if r.status == 410:
                    self.rv = None
                    continue
                if r.status != 200:
                    raise RuntimeError(f"watch {self.path}: {r.status} {r.read()[:200]}")
                for line in r:
                    if self.stop.is_set():
                        break
                    now = time.time()
                    ev = json.loads(line)
                    t, obj = ev["type"], ev["object"]
                    if t == "ERROR":
                        if obj.get("code") == 410:
                            self.rv = None
                        break
                    self.rv = obj["metadata"]["resourceVersion"]
                    if t != "BOOKMARK":
                        self.on_event(t, obj, now)
                c.close()
            except (OSError, http.client.HTTPException, ValueError, RuntimeError) as e:
                self.errors += 1
                if not self.stop.is_set():
                    log(f"watch {self.name}: {e}; re-watching")
                    time.sleep(1)


# --------------------------------------------------------------------------
# What the watches learn.

def pod_gpus(pod):
    n = 0
    for c in pod["spec"].get("containers", []):
        v = c.get("resources", {}).get("limits", {}).get(GPU)
        if v:
            n += int(v)
    return n


class State:
    def __init__(self, jobs, teams, cap, pods_per_job):
        self.lock = threading.Lock()
        self.cap = cap
        self.teams = [t[0] for t in teams]
        self.jobs = {}        # name -> record (submitter + watches)
        self.by_name = {}
        self.held = {t: 0 for t in self.teams}     # GPUs of Running pods, per team
        self.pods = {}        # pod name -> (team, gpus, held, unplaced, job)
        self.unplaced = 0     # GPUs of pods without a node
        self.held_total = 0
        self.full_at = {}     # fraction -> first time reached
        self.thresholds = (0.5, 0.9, 0.95, 0.99, 1.0)
        self.job_running = {}  # job -> Running pods
        self.pods_per_job = pods_per_job
        self.preemptions = []  # (t, job)
        self.never_suspended = 0

    # Job watch
    def on_job(self, etype, obj, t):
        name = obj["metadata"]["name"]
        with self.lock:
            j = self.jobs.get(name)
            if j is None:
                return
            if etype == "DELETED":
                j["deleted_t"] = t
                return
            susp = bool(obj["spec"].get("suspend", False))
            conds = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", []) or []}
            done = conds.get("Complete") == "True" or conds.get("Failed") == "True"
            prev = j.get("_suspended")
            if prev is None and not susp and j.get("unsuspend_t") is None:
                # Created unsuspended and never seen suspended: it was not held for admission.
                self.never_suspended += 1
            if not susp and prev is not False:
                if j.get("unsuspend_t") is None:
                    j["unsuspend_t"] = t
                else:
                    j["resumes"] = j.get("resumes", 0) + 1
            elif susp and prev is False and not done and j.get("complete_t") is None:
                j["preemptions"] = j.get("preemptions", 0) + 1
                self.preemptions.append((t, name))
            j["_suspended"] = susp
            if conds.get("Complete") == "True" and j.get("complete_t") is None:
                j["complete_t"] = t
            if conds.get("Failed") == "True" and j.get("failed_t") is None:
                j["failed_t"] = t

    # Pod watch
    def on_pod(self, etype, obj, t):
        name = obj["metadata"]["name"]
        labels = obj["metadata"].get("labels", {})
        team = labels.get(TEAM_LABEL)
        if team not in self.held:
            return
        job = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        phase = obj.get("status", {}).get("phase")
        gone = etype == "DELETED"
        held = not gone and phase == "Running"
        unplaced = not gone and phase == "Pending" and not obj["spec"].get("nodeName")
        with self.lock:
            prev = self.pods.get(name)
            g = prev[1] if prev else pod_gpus(obj)
            p_held, p_unplaced = (prev[2], prev[3]) if prev else (False, False)
            if held != p_held:
                d = g if held else -g
                self.held[team] += d
                self.held_total += d
                if job:
                    self.job_running[job] = self.job_running.get(job, 0) + (1 if held else -1)
                    jr = self.jobs.get(job)
                    if held and jr is not None:
                        if jr.get("first_pod_t") is None:
                            jr["first_pod_t"] = t
                        if jr.get("all_pods_t") is None and self.job_running[job] >= jr["pods"]:
                            jr["all_pods_t"] = t
                if held:
                    for f in self.thresholds:
                        if f not in self.full_at and self.held_total >= f * self.cap:
                            self.full_at[f] = t
            if unplaced != p_unplaced:
                self.unplaced += g if unplaced else -g
            if gone:
                self.pods.pop(name, None)
            else:
                self.pods[name] = (team, g, held, unplaced, job)

    def demand(self):
        d = {t: 0 for t in self.teams}
        for j in self.jobs.values():
            if j.get("created_t") and j.get("complete_t") is None and j.get("failed_t") is None:
                d[j["team"]] += j["gpus"]
        return d


def waterfill(cap, ent, demand):
    """Max-min fair split of cap by weights ent, no team above its demand."""
    alloc = {t: 0.0 for t in ent}
    active = {t for t in ent if demand[t] > 0}
    remaining = float(cap)
    while active and remaining > 1e-9:
        wsum = sum(ent[t] for t in active)
        give = {t: remaining * ent[t] / wsum for t in active}
        capped = {t for t in active if alloc[t] + give[t] >= demand[t]}
        if not capped:
            for t in active:
                alloc[t] += give[t]
            break
        for t in capped:
            remaining -= demand[t] - alloc[t]
            alloc[t] = float(demand[t])
            active.discard(t)
    return alloc


# --------------------------------------------------------------------------
# Set-up of the plane and of each scheduler.

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def node_body(name, gpus):
    res = {"cpu": "96", "memory": "1Ti", "pods": "110", GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                         "labels": {"kubernetes.io/hostname": name, "allot.dev/bench": "1",
                                    "nvidia.com/gpu.product": PRODUCT, "type": "kwok"},
                         "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "status": {"capacity": res, "allocatable": dict(res)}}


def ensure_nodes(api, a):
    items, _ = api.list_all("/api/v1/nodes", "allot.dev/bench=1")
    have = {n["metadata"]["name"] for n in items}
    want = [f"bench-{i:04d}" for i in range(a.nodes)]
    extra = have - set(want)
    if extra:
        sys.exit(f"{len(extra)} other nodes labelled allot.dev/bench=1 exist (e.g. {sorted(extra)[0]}): "
                 "use a fresh plane (.ci/k8s.sh stop --purge, then start it again)")
    missing = [n for n in want if n not in have]
    t0 = time.time()
    errors = []

    def create(names):
        for n in names:
            st, out = api.request("POST", "/api/v1/nodes", node_body(n, a.gpus_per_node))
            if st not in (201, 409):
                errors.append(f"{n}: {st} {out.get('message')}")
    ths = [threading.Thread(target=create, args=(missing[i::8],)) for i in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    if errors:
        sys.exit("creating nodes: " + "; ".join(errors[:3]))
    while True:
        items, _ = api.list_all("/api/v1/nodes", "allot.dev/bench=1")
        ready = sum(1 for n in items if any(c["type"] == "Ready" and c["status"] == "True"
                                             for c in n.get("status", {}).get("conditions", []) or [])
                    and n["status"].get("allocatable", {}).get(GPU) == str(a.gpus_per_node))
        if ready >= a.nodes:
            break
        if time.time() - t0 > 180:
            sys.exit(f"only {ready} of {a.nodes} bench nodes Ready after 180 s (is kwok running?)")
        time.sleep(1)
    log(f"{a.nodes} kwok nodes x {a.gpus_per_node} GPUs Ready ({len(missing)} created in {time.time() - t0:.1f} s)")


def check_fresh(api, a):
    items, _ = api.list_all(f"/apis/batch/v1/namespaces/{a.namespace}/jobs")
    if items:
        sys.exit(f"namespace {a.namespace} already holds {len(items)} Jobs: the benchmark wants a fresh plane "
                 "(.ci/k8s.sh stop --purge, start it again); --allow-existing-jobs to run anyway")


def setup_kueue(api, a, teams):
    import yaml
    st, _ = api.request("GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues")
    if st != 200:
        sys.exit("Kueue's CRDs are not served: start Kueue first (bench/k8s/kueue.sh BASE KUEUE_BIN 0.17.0, "
                 "or .ci/k8s.sh kueue)")
    docs = [d for d in yaml.safe_load_all(open(a.kueue_queues)) if d]
    cq_t = next(d for d in docs if d["kind"] == "ClusterQueue")
    lq_t = next(d for d in docs if d["kind"] == "LocalQueue")
    cap = a.nodes * a.gpus_per_node
    # Nominal quotas proportional to the entitlements and summing to the
    # capacity exactly (largest remainders); fair-sharing weight = entitlement.
    raw = {n: e * cap for n, e, _ in teams}
    quota = {n: int(math.floor(v)) for n, v in raw.items()}
    for n in sorted(raw, key=lambda n: raw[n] - quota[n], reverse=True)[:cap - sum(quota.values())]:
        quota[n] += 1
    out = [d for d in docs if d["kind"] not in ("ClusterQueue", "LocalQueue")]
    for n, e, _ in teams:
        cq = json.loads(json.dumps(cq_t))
        cq["metadata"] = {"name": f"team-{n}"}
        cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = quota[n]
        cq["spec"].setdefault("fairSharing", {})["weight"] = str(round(e * 100, 3))
        out.append(cq)
        lq = json.loads(json.dumps(lq_t))
        lq["metadata"] = {"name": f"team-{n}", "namespace": a.namespace}
        lq["spec"]["clusterQueue"] = f"team-{n}"
        out.append(lq)
    client = kapply.Client()
    kapply.apply_all(client, out)
    time.sleep(2)
    for n, _, _ in teams:
        st, cq = api.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-{n}")
        active = {c["type"]: c["status"] for c in cq.get("status", {}).get("conditions", []) or []}.get("Active")
        if active != "True":
            log(f"warning: ClusterQueue team-{n} is not Active yet ({active})")
    log("kueue queues: " + ", ".join(f"team-{n} nominal {quota[n]}" for n, _, _ in teams) + f" (cohort org, {cap} GPUs)")
    return {"nominal_quota": quota, "queues_file": a.kueue_queues, "docs": out}


def allot_bin(a):
    if a.allot_bin:
        return a.allot_bin
    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "..", "..", "target"))
    for p in (os.path.join(tgt, "release", "allot"), os.path.join(tgt, "debug", "allot"), shutil.which("allot")):
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    sys.exit("no allot binary: build one (cargo build --release -p allot) or pass --allot-bin")


def allot_config(a, teams, url, ca, token_file):
    # [contract] as examples/cluster.toml, grace from --grace, and the
    # scheduling interval and batch slice of the command line (defaults: the example's).
    acc = "\n".join(f'[[accounts]]\npath = "org/team-{n}"\nshare = {round(e * 100, 3)}\n' for n, e, _ in teams)
    return f"""# Written by bench/k8s/side_by_side.py for one benchmark run.
[contract]
budget_period = "7d"
usage_half_life = "7d"
min_slice = {{ batch = "{a.allot_min_slice}", interactive = "0s", service = "0s" }}
grace = "{a.grace}s"
interactive_max_gpus = 8
interactive_max_duration = "8h"
scheduling_interval = "{a.allot_scheduling_interval}"

[[clusters]]
name = "k8s"
[[clusters.pools]]
name = "h100"
gpu = "H100"
nodes = {a.nodes}
gpus_per_node = {a.gpus_per_node}
[clusters.executor]
kind = "kubernetes"
url = "{url}"
ca_file = "{ca}"
token_file = "{token_file}"
node_selector = "allot.dev/bench=1"
[clusters.executor.namespaces]
{a.namespace} = ["org"]

[[accounts]]
path = "org"

{acc}"""


class AllotServer:
    def __init__(self, a, teams):
        self.a, self.teams = a, teams
        self.proc = None

    def start(self, api):
        a = self.a
        bin_ = allot_bin(a)
        d = os.path.abspath(a.allot_dir)
        os.makedirs(d, exist_ok=True)
        for f in ("allot.db", "allot.db-wal", "allot.db-shm"):
            if os.path.exists(os.path.join(d, f)):
                sys.exit(f"{d} already holds a store ({f}): pass an empty --allot-dir")
        token_file = os.path.join(d, "k8s.token")
        with open(token_file, "w") as f:
            # No trailing newline: kube-rs sends the file's bytes as they are,
            # and a newline makes the Authorization header invalid.
            f.write(os.environ["ALLOT_TEST_K8S_TOKEN"].strip())
        os.chmod(token_file, 0o600)
        cfg = os.path.join(d, "allot.toml")
        with open(cfg, "w") as f:
            f.write(allot_config(a, self.teams, os.environ["ALLOT_TEST_K8S_URL"], os.environ["ALLOT_TEST_K8S_CA"], token_file))
        # Allot's manifests (admission policies, ClusterRole, and its binding
        # to user "allot"), applied as the admin; its Deployment is not: the
        # benchmark runs `allot serve` itself.
        r = subprocess.run([bin_, "kubernetes", "manifests", "--config", cfg, "--user", "allot"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{bin_} kubernetes manifests failed ({r.returncode}): {r.stderr.strip()[:500]}")
        with open(os.path.join(d, "manifests.yaml"), "w") as f:
            f.write(r.stdout)
        import yaml
        docs = kapply.flatten([x for x in yaml.safe_load_all(r.stdout) if x])
        applied, skipped = kapply.apply_all(kapply.Client(), docs, skip_kinds=("Deployment", "StatefulSet", "DaemonSet", "Pod"))
        log(f"allot manifests: applied {', '.join(applied)}" + (f"; skipped {', '.join(skipped)}" if skipped else ""))
        time.sleep(2)  # admission policies take a moment to apply
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(os.path.join(d, "server.log"), "w")
        env = dict(os.environ, ALLOT_LOG=os.environ.get("ALLOT_LOG", "info"))
        self.proc = subprocess.Popen([bin_, "serve", "--config", cfg, "--db", f"sqlite://{d}/allot.db",
                                      "--data-dir", os.path.join(d, "data"), "--listen", f"127.0.0.1:{port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        with open(os.path.join(d, "serve.pid"), "w") as f:
            f.write(f"{self.proc.pid}\n")
        import urllib.request
        for _ in range(300):
            if self.proc.poll() is not None:
                sys.exit(f"allot serve exited ({self.proc.returncode}); log: {d}/server.log")
            try:
                with urllib.request.urlopen(self.url + "/v1/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            self.stop()
            sys.exit(f"allot serve does not answer at {self.url}; log: {d}/server.log")
        log(f"allot serve up at {self.url} (PID {self.proc.pid}, {bin_}, state {d})")
        time.sleep(a.allot_settle)
        return {"binary": bin_, "config": cfg, "dir": d, "url": self.url, "manifests_applied": applied, "skipped": skipped}

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --------------------------------------------------------------------------
# The Jobs.

def job_body(j, a, run_id):
    name = job_name(run_id, j)
    ann = {"pod-complete.stage.kwok.x-k8s.io/delay": f"{j['run_s']}s",
           "pod-complete.stage.kwok.x-k8s.io/jitter-delay": f"{j['run_s']}s"}
    for stage in KWOK_STAGES:  # running as soon as bound
        ann[f"{stage}.stage.kwok.x-k8s.io/delay"] = "0s"
        ann[f"{stage}.stage.kwok.x-k8s.io/jitter-delay"] = "0s"
    labels = {RUN_LABEL: run_id, TEAM_LABEL: j["team"]}
    meta = {"name": name, "namespace": a.namespace, "labels": dict(labels), "annotations": {}}
    spec = {"parallelism": j["pods"], "completions": j["pods"],
            "template": {"metadata": {"labels": dict(labels), "annotations": ann},
                         "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": a.grace,
                                  "containers": [{"name": "train", "image": "trainer:1",
                                                  "resources": {"limits": {GPU: str(j["gpus_per_pod"])}}}]}}}
    if j["pods"] > 1:
        spec["completionMode"] = "Indexed"  # a gang: one pod per index, all at once
    if a.scheduler == "kueue":
        meta["labels"]["kueue.x-k8s.io/queue-name"] = f"team-{j['team']}"
        spec["suspend"] = True  # no Kueue webhook here to suspend it
    else:
        meta["labels"]["allot.dev/managed"] = "true"
        meta["annotations"]["allot.dev/account"] = f"org/team-{j['team']}"
        if a.expected_duration:
            meta["annotations"]["allot.dev/expected-duration"] = str(j["run_s"])
        # no suspend: Allot's admission policy suspends it at creation
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def job_name(run_id, j):
    return f"b{run_id}-{j['team']}-{j['i']:05d}"


def submit_all(api, a, run_id, jobs, state, t0, stop):
    """Dispatches each Job at t0 + its offset to --threads workers."""
    q = queue.Queue()

    def worker():
        while True:
            j = q.get()
            if j is None:
                return
            rec = state.jobs[job_name(run_id, j)]
            t = time.time()
            rec["post_t"] = t
            st, out = api.request("POST", f"/apis/batch/v1/namespaces/{a.namespace}/jobs", job_body(j, a, run_id))
            now = time.time()
            with state.lock:
                if st in (201, 409):  # 409: an earlier try that timed out was taken
                    rec["created_t"] = now
                else:
                    rec["error"] = f"{st} {out.get('message', '')[:200]}"
    ths = [threading.Thread(target=worker, daemon=True) for _ in range(a.threads)]
    for th in ths:
        th.start()
    for j in sorted(jobs, key=lambda j: (j["offset"], j["i"])):
        if stop.is_set():
            break
        delay = t0 + j["offset"] - time.time()
        if delay > 0 and stop.wait(delay):
            break
        q.put(j)
    for _ in ths:
        q.put(None)
    for th in ths:
        th.join()


# --------------------------------------------------------------------------
# Figures.

def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(math.ceil(p / 100.0 * len(xs))) - 1))
    return xs[k]


def dist(xs):
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "p50": round(pct(xs, 50), 3), "p90": round(pct(xs, 90), 3), "p99": round(pct(xs, 99), 3),
            "max": round(max(xs), 3), "mean": round(sum(xs) / len(xs), 3)}


def analyse(state, jobs, info, a, t0, samples, end_t, extra):
    cap = info["capacity_gpus"]
    ent = {n: e for n, e, _ in info["teams"]}
    recs = [state.jobs[job_name(a.run_id, j)] for j in jobs]
    created = [r for r in recs if r.get("created_t")]
    lat = [r["unsuspend_t"] - r["created_t"] for r in created if r.get("unsuspend_t")]
    # The ramp: the first jobs in submission order that together fit the capacity.
    ramp, g = [], 0
    for r in sorted(created, key=lambda r: r["created_t"]):
        if g + r["gpus"] > cap:
            break
        g += r["gpus"]
        ramp.append(r)
    ramp_lat = [r["unsuspend_t"] - r["created_t"] for r in ramp if r.get("unsuspend_t")]
    place = [r["all_pods_t"] - r["unsuspend_t"] for r in created if r.get("all_pods_t") and r.get("unsuspend_t")]
    full = {f"{int(f * 100)}%": (round(t - t0, 1) if t else None) for f, t in
            ((f, state.full_at.get(f)) for f in state.thresholds)}
    t_steady = state.full_at.get(0.95)
    steady_from = (t_steady - t0) if t_steady else a.warmup
    steady_src = "first sample at >= 95 % of the GPUs held" if t_steady else f"--warmup (never reached 95 %)"
    steady_to = min(info["load_s"], end_t - t0)
    steady = [s for s in samples if steady_from <= s["t"] <= steady_to]
    teams = {}
    for n in state.teams:
        if steady:
            share = [s["held"][n] / cap for s in steady]
            fair = [s["fair"][n] / cap for s in steady]
            used = [s["held"][n] / s["held_total"] for s in steady if s["held_total"]]
            teams[n] = {"entitlement": round(ent[n], 4),
                        "mean_share": round(sum(share) / len(share), 4),
                        "mad_vs_entitlement": round(sum(abs(x - ent[n]) for x in share) / len(share), 4),
                        "mean_fair_share": round(sum(fair) / len(fair), 4),
                        "mad_vs_fair_share": round(sum(abs(x - f) for x, f in zip(share, fair)) / len(share), 4),
                        "mean_share_of_used": round(sum(used) / len(used), 4) if used else None,
                        "min_share": round(min(share), 4), "max_share": round(max(share), 4)}
        else:
            teams[n] = {"entitlement": ent[n]}
    util = [s["held_total"] / cap for s in steady]
    dmd = [s["demand_total"] / cap for s in steady]
    done = [r for r in recs if r.get("complete_t")]
    figures = {
        "jobs_planned": len(jobs),
        "jobs_submitted": sum(1 for r in recs if r.get("post_t")),
        "jobs_created": len(created),
        "submit_errors": sum(1 for r in recs if r.get("error")),
        "submit_lateness_s": dist([r["post_t"] - (t0 + r["offset"]) for r in recs if r.get("post_t")]),
        "jobs_unsuspended": len(lat),
        "never_suspended_at_creation": state.never_suspended,
        "decision_latency_s": dist(lat),
        "decision_latency_ramp_s": dist(ramp_lat),
        "unsuspend_to_all_pods_running_s": dist(place),
        "time_to_full_s": full,
        "steady_window_s": [round(steady_from, 1), round(steady_to, 1)],
        "steady_window_from": steady_src,
        "steady_mean_utilisation": round(sum(util) / len(util), 4) if util else None,
        "steady_min_demand_over_capacity": round(min(dmd), 2) if dmd else None,
        "steady_mean_abs_dev_vs_entitlement": round(sum(t.get("mad_vs_entitlement", 0) for t in teams.values()) / len(teams), 4) if steady else None,
        "steady_mean_abs_dev_vs_fair_share": round(sum(t.get("mad_vs_fair_share", 0) for t in teams.values()) / len(teams), 4) if steady else None,
        "teams": teams,
        "jobs_completed": len(done),
        "gpu_hours_completed": round(sum(r["gpus"] * r["run_s"] for r in done) / 3600.0, 1),
        "preemptions": len(state.preemptions),
        "jobs_preempted": sum(1 for r in recs if r.get("preemptions")),
        "max_unplaced_pod_gpus": max((s["unplaced"] for s in samples), default=0),
        "mean_unplaced_pod_gpus_steady": round(sum(s["unplaced"] for s in steady) / len(steady), 1) if steady else None,
        "jobs_unsuspended_not_done_at_end": sum(1 for r in recs if r.get("unsuspend_t") and not r.get("complete_t")),
        "jobs_waiting_at_end": sum(1 for r in recs if r.get("created_t") and not r.get("unsuspend_t")),
    }
    figures.update(extra)
    return figures


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}{unit}" if abs(v) < 10 else f"{v:.1f}{unit}"
    return f"{v}{unit}"


def used_split(result):
    """Per team, over the steady window: mean share of the GPUs in use and its
    mean absolute deviation from the entitlement (how the scheduler split what
    it ran, idle GPUs aside)."""
    f = result["figures"]
    lo, hi = f["steady_window_s"]
    steady = [s for s in result["samples"] if lo <= s["t"] <= hi and s["held_total"]]
    out = {}
    for n, t in f["teams"].items():
        xs = [s["held"][n] / s["held_total"] for s in steady]
        out[n] = (sum(xs) / len(xs), sum(abs(x - t["entitlement"]) for x in xs) / len(xs)) if xs else (None, None)
    return out


def table(results):
    """Rows of figures, one column per run."""
    cols = [r["scheduler"] for r in results]
    F = [r["figures"] for r in results]
    U = [used_split(r) for r in results]
    rows = [
        ("nodes x GPUs (capacity)", [f"{r['config']['nodes']} x {r['config']['gpus_per_node']} ({r['workload']['capacity_gpus']})" for r in results]),
        ("jobs planned / created", [f"{f['jobs_planned']} / {f['jobs_created']}" for f in F]),
        ("decision latency p50 (s)", [fmt(f["decision_latency_s"].get("p50")) for f in F]),
        ("decision latency p90 (s)", [fmt(f["decision_latency_s"].get("p90")) for f in F]),
        ("decision latency p99 (s)", [fmt(f["decision_latency_s"].get("p99")) for f in F]),
        ("  ramp (first capacity's worth) p50 (s)", [fmt(f["decision_latency_ramp_s"].get("p50")) for f in F]),
        ("  ramp p99 (s)", [fmt(f["decision_latency_ramp_s"].get("p99")) for f in F]),
        ("unsuspended -> all pods Running p50 (s)", [fmt(f["unsuspend_to_all_pods_running_s"].get("p50")) for f in F]),
        ("unsuspended -> all pods Running p99 (s)", [fmt(f["unsuspend_to_all_pods_running_s"].get("p99")) for f in F]),
    ]
    for k in ("50%", "90%", "95%", "99%", "100%"):
        rows.append((f"time to {k} of GPUs held (s)", [fmt(f["time_to_full_s"].get(k)) for f in F]))
    rows += [
        ("steady window (s)", [f"{f['steady_window_s'][0]:.0f}-{f['steady_window_s'][1]:.0f}" for f in F]),
        ("steady mean utilisation", [fmt(f["steady_mean_utilisation"]) for f in F]),
        ("steady min demand / capacity", [fmt(f["steady_min_demand_over_capacity"]) for f in F]),
        ("mean |share - entitlement| (all teams)", [fmt(f["steady_mean_abs_dev_vs_entitlement"]) for f in F]),
        ("mean |share - fair share| (all teams)", [fmt(f["steady_mean_abs_dev_vs_fair_share"]) for f in F]),
    ]
    teams = list(F[0]["teams"])
    for n in teams:
        rows.append((f"team {n}: entitlement / mean share", [f"{f['teams'][n]['entitlement']:.2f} / {fmt(f['teams'][n].get('mean_share'))}" for f in F]))
        rows.append((f"team {n}: mean |share - entitlement|", [fmt(f["teams"][n].get("mad_vs_entitlement")) for f in F]))
    rows.append(("of the GPUs in use: mean |share - entitlement|",
                 [fmt(sum(u[n][1] for n in teams) / len(teams)) if all(u[n][1] is not None for n in teams) else "-" for u in U]))
    for n in teams:
        rows.append((f"  team {n}: mean share of the GPUs in use", [fmt(u[n][0]) for u in U]))
    rows += [
        ("jobs completed", [fmt(f["jobs_completed"]) for f in F]),
        ("GPU-hours completed", [fmt(f["gpu_hours_completed"]) for f in F]),
        ("preemptions (Jobs re-suspended)", [fmt(f["preemptions"]) for f in F]),
        ("Kueue Workload evictions", [fmt(f.get("kueue_evictions_total")) for f in F]),
        ("Allot: Job Complete -> its attempt over, p50 (s)",
         [fmt(f.get("allot_attempt_over_after_job_complete_s", {}).get("p50")) for f in F]),
        ("Allot: Job Complete -> its attempt over, p90 (s)",
         [fmt(f.get("allot_attempt_over_after_job_complete_s", {}).get("p90")) for f in F]),
        ("max GPUs of admitted pods without a node", [fmt(f["max_unplaced_pod_gpus"]) for f in F]),
        ("Jobs created unsuspended, never held", [fmt(f["never_suspended_at_creation"]) for f in F]),
        ("submit errors", [fmt(f["submit_errors"]) for f in F]),
        ("submission lateness p99 (s)", [fmt(f["submit_lateness_s"].get("p99")) for f in F]),
    ]
    w0 = max(len(r[0]) for r in rows)
    ws = [max(len(c), *(len(r[1][i]) for r in rows)) for i, c in enumerate(cols)]
    lines = [" " * w0 + "  " + "  ".join(c.rjust(w) for c, w in zip(cols, ws))]
    for name, vals in rows:
        lines.append(name.ljust(w0) + "  " + "  ".join(v.rjust(w) for v, w in zip(vals, ws)))
    return "\n".join(lines)


# --------------------------------------------------------------------------

def allot_log_lags(log_path, state):
    """From allot serve's log: how long after a Job was Complete in the API
    server (our watch) Allot's executor reported its attempt over, i.e. how
    long finished Jobs' GPUs stayed unusable to Allot's scheduler."""
    import datetime
    import re
    pat = re.compile(r"^(\S+?)Z? .*attempt over cluster=\S+ job=[^/\s]+/(\S+)")
    lags = []
    try:
        f = open(log_path, errors="replace")
    except OSError:
        return {}
    seen = set()
    with f:
        for line in f:
            m = pat.match(line)
            if not m or m.group(2) in seen:
                continue
            seen.add(m.group(2))
            r = state.jobs.get(m.group(2))
            if not r or not r.get("complete_t"):
                continue
            try:
                t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
            except ValueError:
                continue
            lags.append(t - r["complete_t"])
    return {"allot_attempt_over_after_job_complete_s": dist(lags)}


def kueue_evictions(api, a, names):
    items, _ = api.list_all(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{a.namespace}/workloads")
    by, last = {}, {}
    n = 0
    for w in items:
        owners = [o.get("name") for o in w["metadata"].get("ownerReferences", [])]
        if not any(o in names for o in owners):
            continue
        n += 1
        for e in (w.get("status", {}).get("schedulingStats") or {}).get("evictions", []) or []:
            k = e["reason"] + (f"/{e['underlyingCause']}" if e.get("underlyingCause") else "")
            by[k] = by.get(k, 0) + e.get("count", 0)
        for c in w.get("status", {}).get("conditions", []) or []:
            if c["type"] == "Preempted" and c.get("status") == "True" and c.get("reason"):
                last[c["reason"]] = last.get(c["reason"], 0) + 1
    return {"kueue_workloads": n, "kueue_evictions_total": sum(by.values()), "kueue_evictions_by_reason": by,
            "kueue_preempted_now_by_reason": last}


def run(a):
    if a.scheduler == "allot" and not os.environ.get("ALLOT_TEST_K8S_TOKEN"):
        sys.exit("ALLOT_TEST_K8S_TOKEN is not set: eval \"$(.ci/k8s.sh)\" first")
    for v in ("ALLOT_TEST_K8S_URL", "ALLOT_TEST_K8S_CA", "ALLOT_TEST_K8S_ADMIN_TOKEN"):
        if not os.environ.get(v):
            sys.exit(f"{v} is not set: eval \"$(.ci/k8s.sh)\" first (ALLOT_CI_STATE=... to pick the plane)")
    jobs, info = make_workload(a)
    summary = workload_summary(jobs, info, a)
    log(f"workload: {summary['jobs']} Jobs ({summary['burst_jobs']} at once, {summary['burst_gpus']} GPUs), "
        f"{summary['pods_total']} pods, {summary['gpu_seconds_total'] / 3600:.0f} GPU-hours, "
        f"fluid min demand {summary['fluid_min_demand_over_capacity']} x capacity")
    api = Api()
    if not a.allow_existing_jobs:
        check_fresh(api, a)
    ensure_nodes(api, a)
    teams = info["teams"]
    extra = {}
    server = None
    sched_info = {}
    if a.scheduler == "kueue":
        sched_info = setup_kueue(api, a, teams)
        sched_info.pop("docs", None)
    else:
        server = AllotServer(a, teams)
    cap = info["capacity_gpus"]
    state = State(jobs, teams, cap, None)
    for j in jobs:
        state.jobs[job_name(a.run_id, j)] = {"i": j["i"], "team": j["team"], "gpus": j["gpus"], "pods": j["pods"],
                                             "run_s": j["run_s"], "offset": j["offset"]}
    stop = threading.Event()
    try:
        if server:
            sched_info = server.start(api)
        sel = f"{RUN_LABEL}={a.run_id}"
        watches = [Watch(api, f"/apis/batch/v1/namespaces/{a.namespace}/jobs", sel, state.on_job, "jobs"),
                   Watch(api, f"/api/v1/namespaces/{a.namespace}/pods", sel, state.on_pod, "pods")]
        for w in watches:
            w.start()
        time.sleep(1)
        t0 = time.time()
        samples = []
        ent = {n: e for n, e, _ in teams}
        sub = threading.Thread(target=submit_all, args=(api, a, a.run_id, jobs, state, t0, stop), daemon=True)
        sub.start()
        end = t0 + info["load_s"]
        next_log = t0 + 30
        while True:
            now = time.time()
            with state.lock:
                d = state.demand()
                s = {"t": round(now - t0, 2), "held": dict(state.held), "held_total": state.held_total,
                     "demand": d, "demand_total": sum(d.values()), "unplaced": state.unplaced,
                     "preemptions": len(state.preemptions),
                     "completed": sum(1 for r in state.jobs.values() if r.get("complete_t")),
                     "created": sum(1 for r in state.jobs.values() if r.get("created_t")),
                     "unsuspended": sum(1 for r in state.jobs.values() if r.get("unsuspend_t"))}
            s["fair"] = {k: round(v, 1) for k, v in waterfill(cap, ent, d).items()}
            samples.append(s)
            if now >= next_log:
                next_log += 30
                log(f"t={s['t']:.0f}s created {s['created']} admitted {s['unsuspended']} done {s['completed']} "
                    f"GPUs held {s['held_total']}/{cap} unplaced {s['unplaced']} demand {s['demand_total'] / cap:.1f}x "
                    f"preempted {s['preemptions']} shares " + " ".join(f"{k}={v / cap:.2f}" for k, v in s["held"].items()))
            if now >= end:
                break
            time.sleep(min(a.sample, max(0.0, end - now)))
        stop.set()
        end_t = time.time()
        sub.join(timeout=30)
        for w in watches:
            w.stop.set()
        if a.scheduler == "kueue":
            names = set(state.jobs)
            try:
                extra.update(kueue_evictions(api, a, names))
            except RuntimeError as e:
                log(f"could not list Kueue workloads: {e}")
        extra["watch_relists"] = {w.name: w.relists for w in watches}
        extra["watch_errors"] = {w.name: w.errors for w in watches}
        with state.lock:
            figures = analyse(state, jobs, info, a, t0, samples, end_t, extra)
            job_recs = []
            for j in jobs:
                r = state.jobs[job_name(a.run_id, j)]
                rec = {"name": job_name(a.run_id, j), "team": r["team"], "gpus": r["gpus"], "pods": r["pods"],
                       "run_s": r["run_s"], "offset": r["offset"]}
                for k in ("post_t", "created_t", "unsuspend_t", "first_pod_t", "all_pods_t", "complete_t", "failed_t"):
                    if r.get(k):
                        rec[k] = round(r[k] - t0, 3)
                for k in ("preemptions", "resumes", "error"):
                    if r.get(k):
                        rec[k] = r[k]
                job_recs.append(rec)
    finally:
        stop.set()
        if server:
            server.stop()
    if server:
        with state.lock:
            figures.update(allot_log_lags(os.path.join(server.a.allot_dir, "server.log"), state))
    if a.cleanup:
        st, _ = api.request("DELETE", f"/apis/batch/v1/namespaces/{a.namespace}/jobs?labelSelector={RUN_LABEL}%3D{a.run_id}",
                            {"propagationPolicy": "Background"})
        log(f"deleted this run's Jobs ({st})")
    result = {
        "scheduler": a.scheduler, "run_id": a.run_id, "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
        "config": {k: v for k, v in vars(a).items() if k not in ("report",)},
        "workload": dict(summary, capacity_gpus=cap, mean_gpus=info["mean_gpus"], mean_run_s=info["mean_run_s"],
                         arrival_jobs_per_s=info["arrival_jobs_per_s"]),
        "scheduler_setup": sched_info,
        "figures": figures, "samples": samples, "jobs": job_recs,
    }
    print(table([result]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
        log(f"wrote {a.out}")
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scheduler", choices=("kueue", "allot"))
    ap.add_argument("--nodes", type=int, default=500, help="kwok nodes (default 500)")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--teams", default="a:40:34,b:30:26,c:20:20,d:10:20",
                    help="name:entitlement:arrival-share,... (normalised; default a:40:34,b:30:26,c:20:20,d:10:20)")
    ap.add_argument("--sizes", default="1:20,2:15,4:20,8:25,16:12,32:8",
                    help="GPUs:weight,... ; above a node's GPUs: an Indexed Job of full-node pods (default 1:20,2:15,4:20,8:25,16:12,32:8)")
    ap.add_argument("--run-min", type=int, default=120, help="shortest run time in s (log-uniform; default 120)")
    ap.add_argument("--run-max", type=int, default=480, help="longest run time in s (default 480)")
    ap.add_argument("--load-minutes", type=float, default=20, help="length of the load window = of the run (default 20)")
    ap.add_argument("--burst", type=float, default=2.2, help="opening backlog in GPUs, x capacity, submitted at once (default 2.2)")
    ap.add_argument("--arrival", type=float, default=1.05, help="arrivals, x the full cluster's GPU throughput (default 1.05)")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--grace", type=int, default=30, help="terminationGracePeriodSeconds, and Allot's contract grace (default 30)")
    ap.add_argument("--sample", type=float, default=3.0, help="seconds between share samples (default 3)")
    ap.add_argument("--warmup", type=float, default=300, help="steady part starts here if 95%% of the GPUs are never held (default 300)")
    ap.add_argument("--threads", type=int, default=8, help="submitting threads (default 8)")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--run-id", default=None, help="label value of this run's objects (default: random)")
    ap.add_argument("--out", help="write the figures, samples and per-job records as JSON")
    ap.add_argument("--cleanup", action="store_true", help="delete this run's Jobs at the end")
    ap.add_argument("--allow-existing-jobs", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="print the workload, touch no cluster")
    ap.add_argument("--report", nargs="+", metavar="JSON", help="print the table of earlier runs side by side")
    k = ap.add_argument_group("kueue")
    k.add_argument("--kueue-queues", default=os.path.join(HERE, "kueue-queues.yaml"),
                   help="ResourceFlavor/ClusterQueue/LocalQueue template (quotas and weights set from --teams and --nodes)")
    al = ap.add_argument_group("allot")
    al.add_argument("--allot-bin", help="allot binary (default: $CARGO_TARGET_DIR/{release,debug}/allot, then PATH)")
    al.add_argument("--allot-dir", help="state directory for allot serve (default /tmp/allot-bench-<run id>)")
    al.add_argument("--allot-min-slice", default="2h", help="contract min_slice.batch (default 2h, as examples/cluster.toml)")
    al.add_argument("--allot-scheduling-interval", default="30s", help="contract scheduling_interval (default 30s, as examples/cluster.toml)")
    al.add_argument("--allot-settle", type=float, default=5.0, help="seconds between allot serve answering and the first Job (default 5)")
    al.add_argument("--no-expected-duration", dest="expected_duration", action="store_false",
                    help="do not annotate allot.dev/expected-duration")
    a = ap.parse_args()
    if a.report:
        results = [json.load(open(p)) for p in a.report]
        print(table(results))
        return
    if not a.scheduler and not a.dry_run:
        ap.error("--scheduler kueue|allot is required")
    a.run_id = a.run_id or os.urandom(3).hex()
    if a.allot_dir is None:
        a.allot_dir = f"/tmp/allot-bench-{a.run_id}"
    if a.dry_run:
        jobs, info = make_workload(a)
        s = workload_summary(jobs, info, a)
        print(json.dumps(dict(s, capacity_gpus=info["capacity_gpus"], mean_gpus=round(info["mean_gpus"], 2),
                              mean_run_s=round(info["mean_run_s"], 1), arrival_jobs_per_s=round(info["arrival_jobs_per_s"], 3)), indent=1))
        return
    run(a)


if __name__ == "__main__":
    main()
