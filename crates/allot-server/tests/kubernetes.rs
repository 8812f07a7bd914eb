//! A Kubernetes cluster as a member of the fleet, end to end: `allot serve`
//! runs the managed Jobs of a real control plane (kube-apiserver, the Job
//! controller, kwok's fake nodes: `.ci/k8s.sh`), as the non-admin user
//! `allot` bound to the ClusterRole Allot prints, with the admission
//! policies it prints. Each test has its own namespace, its own Nodes
//! (label `allot.dev/test=<test>`, Allot's node selector) and its own store.
//!
//! The plane is found only through `ALLOT_TEST_K8S_*` (never a kubeconfig):
//! without them every test fails, saying how to start it.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use support::{Backend, Fixture, Server};

const GRACE_S: i64 = 2;

/// The control plane of `.ci/k8s.sh`, and clients of its users.
struct Plane {
    url: String,
    ca: PathBuf,
    admin: Client,
    alice: Client,
    allot_token_file: PathBuf,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: these tests need the private Kubernetes control plane. Start it with\n  \
             eval \"$(bash .ci/k8s.sh)\"\nand run them in that shell (.ci/test does both)."
        )
    })
}

impl Plane {
    fn new(dir: &Path) -> Plane {
        let url = env("ALLOT_TEST_K8S_URL");
        let ca = PathBuf::from(env("ALLOT_TEST_K8S_CA"));
        let file = |name: &str, token: String| {
            let p = dir.join(name);
            std::fs::write(&p, token).unwrap();
            p
        };
        let admin = client(&url, &ca, &file("admin.token", env("ALLOT_TEST_K8S_ADMIN_TOKEN")));
        let alice = client(&url, &ca, &file("alice.token", env("ALLOT_TEST_K8S_USER_TOKEN")));
        // With the newline `echo` leaves: Allot trims it.
        let allot_token_file = file("allot.token", format!("{}\n", env("ALLOT_TEST_K8S_TOKEN")));
        Plane { url, ca, admin, alice, allot_token_file }
    }

    fn jobs(&self, c: &Client, ns: &str) -> Api<Job> {
        Api::namespaced(c.clone(), ns)
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), ns)
    }

    /// Allot's manifests (as `allot kubernetes manifests` prints them for
    /// the user `allot`), applied as the admin.
    async fn apply_manifests(&self, config: &Path) {
        let out = std::process::Command::new(support::allot_bin())
            .args(["kubernetes", "manifests", "--config"])
            .arg(config)
            .args(["--user", "allot"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        for item in list["items"].as_array().unwrap() {
            let (api_version, kind) = (item["apiVersion"].as_str().unwrap(), item["kind"].as_str().unwrap());
            let (group, version) = api_version.split_once('/').unwrap();
            let plural = format!("{}s", kind.to_lowercase()).replace("policys", "policies");
            let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
            let api: Api<DynamicObject> = Api::all_with(self.admin.clone(), &ar);
            let name = item["metadata"]["name"].as_str().unwrap();
            let obj: DynamicObject = serde_json::from_value(item.clone()).unwrap();
            api.patch(name, &PatchParams::apply("allot-tests").force(), &Patch::Apply(&obj))
                .await
                .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
        }
    }

    /// A namespace where alice may create, read, change and delete Jobs.
    async fn namespace(&self, ns: &str) {
        let api: Api<Namespace> = Api::all(self.admin.clone());
        let _ = api
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
            .await;
        let rbac = |kind: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind), plural)
        };
        let role: Api<DynamicObject> = Api::namespaced_with(self.admin.clone(), ns, &rbac("Role", "roles"));
        let obj = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "jobs"},
            "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"]},
                      {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]});
        role.patch("jobs", &PatchParams::apply("allot-tests").force(), &Patch::Apply(&obj)).await.unwrap();
        let rb: Api<DynamicObject> = Api::namespaced_with(self.admin.clone(), ns, &rbac("RoleBinding", "rolebindings"));
        let obj = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "alice-jobs"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}]});
        rb.patch("alice-jobs", &PatchParams::apply("allot-tests").force(), &Patch::Apply(&obj)).await.unwrap();
    }

    /// A kwok node of `gpus` GPUs, selected by the test's label.
    async fn node(&self, test: &str, name: &str, gpus: u32) {
        let api: Api<Node> = Api::all(self.admin.clone());
        let _ = api.delete(name, &DeleteParams::default()).await;
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"allot.dev/test": test, "kubernetes.io/hostname": name,
                          "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "type": "kwok"},
                         "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "status": {"capacity": {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
                       "allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": gpus.to_string()}}
        }))
        .unwrap();
        for _ in 0..50 {
            match api.create(&PostParams::default(), &n).await {
                Ok(_) => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await, // the old one is still going
            }
        }
        until(30, || async { api.get(name).await.ok().filter(ready).map(|_| ()) }).await;
    }

    /// The config of `allot serve` for this plane.
    fn config(&self, test: &str, ns: &str, nodes: u32, min_slice: &str) -> String {
        format!(
            r#"
[[clusters]]
name = "k8s"
[[clusters.pools]]
name = "h100"
gpu = "H100"
nodes = {nodes}
gpus_per_node = 8
[clusters.executor]
kind = "kubernetes"
url = "{url}"
ca_file = "{ca}"
token_file = "{token}"
node_selector = "allot.dev/test={test}"
job_selector = "allot.dev/managed=true,allot.dev/test={test}"
[clusters.executor.namespaces]
{ns} = ["org/a"]
[clusters.executor.users]
alice = ["org/b"]
[clusters.executor.images]
{ns} = ["trainer:*"]

[[accounts]]
path = "org/a"
share = 1
[[accounts]]
path = "org/b"
share = 1

[contract]
scheduling_interval = "1s"
grace = "{GRACE_S}s"
min_slice = {{ batch = "{min_slice}", interactive = "0s", service = "0s" }}
"#,
            url = self.url,
            ca = self.ca.display(),
            token = self.allot_token_file.display(),
        )
    }
}

fn client(url: &str, ca: &Path, token: &Path) -> Client {
    let mut cfg = kube::Config::new(url.parse().unwrap());
    cfg.root_cert_file = Some(ca.to_path_buf());
    cfg.auth_info.token_file = Some(token.display().to_string());
    Client::try_from(cfg).unwrap()
}

fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Polls `f` until it gives `Some`, for at most `secs`.
async fn until<T, F, Fut>(secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {secs} s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Job of `pods` pods of `gpus` GPUs each that runs `run_s` seconds once
/// bound (kwok's stage delays); managed by Allot when `account` is given.
fn job(test: &str, name: &str, account: Option<&str>, pods: i32, gpus: u32, run_s: u32) -> Job {
    let mut ann = serde_json::Map::new();
    for (stage, d) in [("pod-create", 0), ("pod-ready", 0), ("pod-complete", run_s)] {
        ann.insert(format!("{stage}.stage.kwok.x-k8s.io/delay"), json!(format!("{d}s")));
        ann.insert(format!("{stage}.stage.kwok.x-k8s.io/jitter-delay"), json!(format!("{d}s")));
    }
    let mut meta = json!({"name": name});
    if let Some(a) = account {
        meta = json!({"name": name, "labels": {"allot.dev/managed": "true", "allot.dev/test": test},
                      "annotations": {"allot.dev/account": a, "allot.dev/expected-duration": format!("{run_s}s")}});
    }
    serde_json::from_value(json!({
        "metadata": meta,
        "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                 "template": {"metadata": {"annotations": ann},
                              "spec": {"restartPolicy": "Never", "containers": [{"name": "train", "image": "trainer:1",
                                  "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}}}
    }))
    .unwrap()
}

fn annotation(j: &Job, key: &str) -> Option<String> {
    j.annotations().get(key).cloned()
}

/// The workload id Allot wrote on Job `name`.
async fn workload_of(p: &Plane, ns: &str, name: &str) -> String {
    let api = p.jobs(&p.admin, ns);
    until(30, || async { api.get(name).await.ok().and_then(|j| annotation(&j, "allot.dev/workload")) }).await
}

/// The live pods of Job `name`, by completion index.
async fn pods_of(p: &Plane, ns: &str, name: &str) -> BTreeMap<u32, Pod> {
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
    let mut out = BTreeMap::new();
    for pod in p.pods(ns).list(&lp).await.unwrap() {
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() || phase == "Succeeded" || phase == "Failed" {
            continue;
        }
        let i = pod.annotations().get("batch.kubernetes.io/job-completion-index").and_then(|i| i.parse().ok());
        out.insert(i.unwrap_or(0), pod);
    }
    out
}

async fn workload(s: &Server, token: &str, id: &str) -> Value {
    s.http("GET", &format!("/v1/workloads/{id}"), Some(token), None).await.1
}

async fn until_state(s: &Server, token: &str, id: &str, state: &str, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = workload(s, token, id).await;
        if v["workload"]["state"] == state {
            return v;
        }
        assert!(Instant::now() < deadline, "workload {id} not {state} in {secs} s: {v}\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Everything a test needs: its store, plane, namespace, Nodes and server.
async fn setup(test: &str, nodes: u32, min_slice: &str) -> (Fixture, Plane, String, Server) {
    let f = Fixture::new(Backend::Sqlite, &format!("k8s-{test}")).await;
    let p = Plane::new(&f.dir);
    leftovers(&p, test).await;
    let ns = format!("t-{test}-{}", rand_suffix());
    let cfg = p.config(test, &ns, nodes, min_slice);
    std::fs::write(f.dir.join("cluster.toml"), &cfg).unwrap();
    p.apply_manifests(&f.dir.join("cluster.toml")).await;
    p.namespace(&ns).await;
    for i in 1..=nodes {
        p.node(test, &format!("{test}-{i}"), 8).await;
    }
    // The policies take a moment to be enforced, each on its own: a probe
    // Job comes back suspended (K8S-1), and unsuspending it is refused to
    // anyone but Allot (K8S-3).
    let api = p.jobs(&p.admin, &ns);
    let unsuspend = Patch::Merge(json!({"spec": {"suspend": false}}));
    until(30, || async {
        let probe = job("probe", &format!("probe-{}", rand_suffix()), Some("org/a"), 1, 1, 1);
        let made = api.create(&PostParams::default(), &probe).await.ok()?;
        let name = made.name_any();
        let suspended = made.spec.and_then(|s| s.suspend) == Some(true);
        let guarded = suspended
            && api
                .patch(&name, &PatchParams::default(), &unsuspend)
                .await
                .is_err_and(|e| e.to_string().contains("K8S-3: only Allot suspends or unsuspends"));
        let _ = api.delete(&name, &DeleteParams::background()).await;
        guarded.then_some(())
    })
    .await;
    let s = Server::start(&f.dir, &f.db.url);
    (f, p, ns, s)
}

fn rand_suffix() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos())
}

/// What an earlier run of test `test` left on this plane when it did not
/// reach its teardown (a panic): its namespaces (`t-<test>-<hex>`) and
/// Nodes are removed first, so no pod of theirs holds a reused Node.
async fn leftovers(p: &Plane, test: &str) {
    let api: Api<Namespace> = Api::all(p.admin.clone());
    let prefix = format!("t-{test}-");
    let ours =
        |n: &str| n.strip_prefix(&prefix).is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()));
    let old = |list: Vec<Namespace>| -> Vec<String> { list.iter().map(|n| n.name_any()).filter(|n| ours(n)).collect() };
    let left = old(api.list(&ListParams::default()).await.unwrap().items);
    if left.is_empty() {
        return;
    }
    eprintln!("removing what an earlier run of {test} left: {left:?}");
    // The namespaces first, while the Nodes are there to let their pods go.
    for ns in &left {
        let _ = api.delete(ns, &DeleteParams::background()).await;
    }
    until(120, || async { old(api.list(&ListParams::default()).await.ok()?.items).is_empty().then_some(()) }).await;
    delete_nodes(p, test).await;
}

/// Removes the test's namespace (its Jobs and pods) and Nodes.
async fn teardown(p: &Plane, test: &str, ns: &str) {
    let _ = Api::<Namespace>::all(p.admin.clone()).delete(ns, &DeleteParams::background()).await;
    delete_nodes(p, test).await;
}

/// Deletes the Nodes of test `test`.
async fn delete_nodes(p: &Plane, test: &str) {
    let nodes: Api<Node> = Api::all(p.admin.clone());
    let lp = ListParams::default().labels(&format!("allot.dev/test={test}"));
    let _ = nodes.delete_collection(&DeleteParams::default(), &lp).await;
}

/// A 2-pod gang on 2 × 8-GPU nodes runs only once Allot admits it, each
/// pod on the node of its allocation; users cannot unsuspend a managed Job;
/// refused Jobs say why on the Job and in `GET /v1/workloads`; a waiting Job
/// carries its reason; unmanaged Jobs are never touched; deleting a Job
/// cancels its workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_gang_admission_guards_and_reasons() {
    const TEST: &str = "gang";
    let (f, p, ns, s) = setup(TEST, 2, "10m").await;
    let t = f.admin.as_str();
    let alice = p.jobs(&p.alice, &ns);
    let admin = p.jobs(&p.admin, &ns);

    // A command submitted through the API cannot run on a cluster of Jobs.
    let body = r#"{"account":"org/a","gpus":1,"command":["true"]}"#;
    let (code, v) = s.http("POST", "/v1/workloads", Some(t), Some(body)).await;
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("K8S-1: every cluster of this fleet runs Kubernetes Jobs only"),
        "{v}"
    );

    // An unmanaged Job first: nothing of Allot's may ever touch it.
    let plain = admin.create(&PostParams::default(), &job(TEST, "plain", None, 1, 8, 600)).await.unwrap();

    // Created without `suspend`: the creation policy suspends it and
    // records its creator; its pods get Allot's scheduler and the grace.
    let made = alice.create(&PostParams::default(), &job(TEST, "gang", Some("org/a"), 2, 8, 600)).await.unwrap();
    let spec = made.spec.clone().unwrap();
    assert_eq!(spec.suspend, Some(true), "K8S-1: suspended at creation");
    assert_eq!(annotation(&made, "allot.dev/user").as_deref(), Some("alice"));
    let pod = spec.template.spec.clone().unwrap();
    assert_eq!(pod.scheduler_name.as_deref(), Some("allot"));
    assert_eq!(pod.termination_grace_period_seconds, Some(GRACE_S));
    assert_eq!(spec.backoff_limit, Some(0), "the Job controller's retries are off");

    // Allot admits it: every pod on the node its allocation names.
    let id = workload_of(&p, &ns, "gang").await;
    let v = until_state(&s, t, &id, "running", 60).await;
    let alloc: Vec<String> = v["attempts"][0]["allocation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(alloc.len(), 2, "{v}");
    let placed = until(30, || async {
        let pods = pods_of(&p, &ns, "gang").await;
        let bound: Vec<String> = pods.values().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
        (bound.len() == 2).then_some(pods)
    })
    .await;
    for (i, pod) in &placed {
        assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some(alloc[*i as usize].as_str()), "pod {i}");
    }
    let gang = admin.get("gang").await.unwrap();
    assert_eq!(annotation(&gang, "allot.dev/nodes"), Some(alloc.join(",")));

    // Refused Jobs say why, on the Job and in the API, and stay (suspended, no pod).
    let refusals = [
        ("unknown", job(TEST, "unknown", Some("org/a/nope"), 1, 8, 5), &alice, "unknown account \"org/a/nope\""),
        ("not-mine", job(TEST, "not-mine", Some("org/b"), 1, 8, 5), &admin, "K8S-2: namespace"),
        ("no-gpus", job(TEST, "no-gpus", Some("org/a"), 1, 0, 5), &alice, "K8S-1: the Job requests no GPUs"),
        ("too-big", job(TEST, "too-big", Some("org/a"), 1, 9, 5), &alice, "larger than any pool: asks 1 node × 9 GPUs"),
    ];
    for (name, j, api, _) in &refusals {
        api.create(&PostParams::default(), j).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for (name, _, _, want) in &refusals {
        let reason =
            until(30, || async { admin.get(name).await.ok().and_then(|j| annotation(&j, "allot.dev/reason")) }).await;
        assert!(reason.contains(want), "{name}: {reason}");
        let rid = workload_of(&p, &ns, name).await;
        let w = workload(&s, t, &rid).await;
        assert_eq!(w["workload"]["state"], "rejected", "{name}: {w}");
        assert!(w["workload"]["reason"].as_str().unwrap().contains(want), "{name}: {w}");
        let j = admin.get(name).await.unwrap();
        assert_eq!(j.spec.unwrap().suspend, Some(true), "{name} stays suspended");
        assert!(pods_of(&p, &ns, name).await.is_empty(), "{name} has no pod");
    }

    // A Job that waits is told why, on the Job and as an Event, as `allot why` says.
    alice.create(&PostParams::default(), &job(TEST, "later", Some("org/b"), 1, 8, 3)).await.unwrap();
    let lid = workload_of(&p, &ns, "later").await;
    let reason =
        until(30, || async { admin.get("later").await.ok().and_then(|j| annotation(&j, "allot.dev/reason")) }).await;
    let why = workload(&s, t, &lid).await["why"].as_str().unwrap_or_default().to_string();
    // The first rule id in each (a reason for people leads with a sentence).
    let rule = |r: &str| {
        r.split(|c: char| c.is_whitespace() || c == ':')
            .find(|w| {
                w.split_once('-').is_some_and(|(a, n)| {
                    !a.is_empty() && a.chars().all(|c| c.is_ascii_uppercase()) && n.parse::<u32>().is_ok()
                })
            })
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(rule(&reason), rule(&why), "the Job's reason is allot why's: {reason} / {why}");
    let events: Api<DynamicObject> = Api::namespaced_with(
        p.admin.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("events.k8s.io", "v1", "Event"), "events"),
    );
    until(30, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| e.data["regarding"]["name"] == "later" && e.data["note"].as_str() == Some(reason.as_str()))
            .then_some(())
    })
    .await;

    // A user may not unsuspend a waiting Job (nor may the admin: only
    // Allot's identity). Checked on `later`, which cannot be admitted
    // while `gang` holds both Nodes: a Job Allot may admit at any moment
    // would let an unsuspend through as a no-op once Allot has admitted it.
    let unsuspend = Patch::Merge(json!({"spec": {"suspend": false}}));
    for (who, api) in [("alice", &alice), ("admin", &admin)] {
        let err = api.patch("later", &PatchParams::default(), &unsuspend).await.expect_err(who);
        assert!(err.to_string().contains("K8S-3: only Allot suspends or unsuspends"), "{who}: {err}");
    }
    assert_eq!(admin.get("later").await.unwrap().spec.unwrap().suspend, Some(true), "later still waits");

    // Deleting a Job cancels its workload; its GPUs go to the waiting one.
    alice.delete("gang", &DeleteParams::background()).await.unwrap();
    until_state(&s, t, &id, "cancelled", 60).await;
    until_state(&s, t, &lid, "finished", 60).await;

    // The unmanaged Job was never touched.
    let now = admin.get("plain").await.unwrap();
    assert_eq!(now.annotations(), plain.annotations(), "no annotation of Allot's");
    assert_ne!(now.spec.as_ref().unwrap().suspend, Some(true));
    for pod in pods_of(&p, &ns, "plain").await.values() {
        assert!(pod.spec.as_ref().unwrap().node_name.is_none(), "Allot binds no pod of an unmanaged Job");
    }
    drop(s);
    teardown(&p, TEST, &ns).await;
    f.finish().await;
}

/// A better-ranked Job past the slice preempts a running gang: its pods
/// go, it requeues and finishes as attempt 2, and the ledger equals the
/// recorded attempts. A cordoned Node drains under the contract; a deleted
/// Node fails its pods and the workload requeues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_preemption_drain_and_node_loss() {
    const TEST: &str = "preempt";
    let (f, p, ns, s) = setup(TEST, 2, "3s").await;
    let t = f.admin.as_str();
    let alice = p.jobs(&p.alice, &ns);
    let admin = p.jobs(&p.admin, &ns);
    let nodes: Api<Node> = Api::all(p.admin.clone());
    let t0 = Instant::now();
    let mark = |what: &str| eprintln!("[{TEST} {:>5.1}s] {what}", t0.elapsed().as_secs_f64());

    admin.create(&PostParams::default(), &job(TEST, "gang", Some("org/a"), 2, 8, 20)).await.unwrap();
    let gid = workload_of(&p, &ns, "gang").await;
    until_state(&s, t, &gid, "running", 60).await;
    tokio::time::sleep(Duration::from_secs(4)).await; // past its slice
    // Interactive work outranks batch work past its slice (CON-2).
    let mut urgent = job(TEST, "urgent", Some("org/b"), 1, 8, 4);
    urgent.metadata.annotations.as_mut().unwrap().insert("allot.dev/class".into(), "interactive".into());
    alice.create(&PostParams::default(), &urgent).await.unwrap();
    let uid = workload_of(&p, &ns, "urgent").await;
    until_state(&s, t, &uid, "finished", 90).await;
    let g = until_state(&s, t, &gid, "finished", 120).await;
    let attempts = g["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "preempted once, then finished: {g}");
    assert_eq!(attempts[0]["outcome"], "preempted", "{g}");
    assert_eq!(attempts[1]["outcome"], "finished", "{g}");
    assert_ledger_exact(&s, t, &["finished"]).await;
    mark("preempted, finished, ledger exact");

    // A cordoned Node drains (MNT-1): what runs there is preempted, requeued
    // and placed on the other Node.
    admin.create(&PostParams::default(), &job(TEST, "long", Some("org/a"), 1, 8, 600)).await.unwrap();
    let lid = workload_of(&p, &ns, "long").await;
    let v = until_state(&s, t, &lid, "running", 60).await;
    let first = v["attempts"][0]["allocation"][0]["node"].as_str().unwrap().to_string();
    let other = if first == "preempt-1" { "preempt-2" } else { "preempt-1" };
    nodes
        .patch(&first, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
        .await
        .unwrap();
    mark("cordoned");
    let v = until(60, || async {
        let v = workload(&s, t, &lid).await;
        let a = v["attempts"].as_array()?;
        (a.len() == 2 && v["workload"]["state"] == "running").then_some(v)
    })
    .await;
    assert_eq!(v["attempts"][1]["allocation"][0]["node"], other, "{v}");
    assert!(
        v["attempts"][0]["end_reason"].as_str().unwrap_or_default().contains("MNT-1")
            || v["attempts"][0]["outcome"] == "preempted",
        "{v}"
    );
    let (_, ns_view) = s.http("GET", "/v1/nodes", Some(t), None).await;
    let health = ns_view.as_array().unwrap().iter().find(|n| n["name"] == first.as_str()).unwrap()["health"].clone();
    assert!(health == "drained" || health == "draining", "{ns_view}");

    // The other Node is deleted: its pods go, the attempt is lost, the
    // workload waits (the only other Node is cordoned) and runs once it is
    // uncordoned.
    nodes.delete(other, &DeleteParams::default()).await.unwrap();
    mark("node deleted");
    let v = until(90, || async {
        let v = workload(&s, t, &lid).await;
        (v["attempts"].as_array()?.len() == 2 && v["workload"]["state"] == "pending").then_some(v)
    })
    .await;
    assert_ne!(v["attempts"][1]["outcome"], "finished", "{v}");
    nodes
        .patch(&first, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": false}})))
        .await
        .unwrap();
    mark("uncordoned");
    let v = until(60, || async {
        let v = workload(&s, t, &lid).await;
        (v["attempts"].as_array()?.len() == 3 && v["workload"]["state"] == "running").then_some(v)
    })
    .await;
    assert_eq!(v["attempts"][2]["allocation"][0]["node"], first.as_str(), "{v}");
    mark("running again");
    admin.delete("long", &DeleteParams::background()).await.unwrap();
    until_state(&s, t, &lid, "cancelled", 60).await;
    mark("cancelled");
    drop(s);
    teardown(&p, TEST, &ns).await;
    f.finish().await;
}

/// The ledger equals the GPU-time of the recorded attempts of the
/// workloads in `states` (every workload that held GPUs is in one of them).
async fn assert_ledger_exact(s: &Server, token: &str, states: &[&str]) {
    let mut ws = Vec::new();
    for state in states {
        let (_, list) = s.http("GET", &format!("/v1/workloads?limit=1000&state={state}"), Some(token), None).await;
        ws.extend(list.as_array().unwrap().iter().cloned());
    }
    let mut recorded: BTreeMap<String, i64> = BTreeMap::new();
    for w in &ws {
        let id = w["id"].as_str().unwrap();
        let d = workload(s, token, id).await;
        for a in d["attempts"].as_array().unwrap() {
            let gpus: i64 =
                a["allocation"].as_array().unwrap().iter().map(|n| n["gpus"].as_array().unwrap().len() as i64).sum();
            let held = (a["end_t"].as_i64().unwrap() - a["start_t"].as_i64().unwrap()) * gpus;
            let acct = w["account"].as_str().unwrap();
            for (i, _) in acct.match_indices('/').chain([(acct.len(), "")]) {
                *recorded.entry(acct[..i].to_string()).or_default() += held;
            }
        }
    }
    let (_, accounts) = s.http("GET", "/v1/accounts", Some(token), None).await;
    for a in accounts.as_array().unwrap() {
        let path = a["path"].as_str().unwrap();
        let charged = (a["charged_gpu_hours"].as_f64().unwrap() * 3600.0).round() as i64;
        assert_eq!(charged, recorded.get(path).copied().unwrap_or(0), "ledger of {path}: {accounts}");
    }
}

/// K8S-11: a pod Allot does not manage, bound to Allot's Node by someone
/// else, holds 6 of its 8 GPUs: an 8-GPU Job waits while a 2-GPU one
/// runs beside it; once the pod is gone the 8-GPU Job runs. The pod is
/// never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_gpus_held_outside_allot_are_not_allots() {
    const TEST: &str = "outside";
    let (f, p, ns, s) = setup(TEST, 1, "10m").await;
    let t = f.admin.as_str();
    let admin = p.jobs(&p.admin, &ns);
    let pods = p.pods(&ns);
    let outsider: Pod = serde_json::from_value(json!({
        "metadata": {"name": "outsider"},
        "spec": {"nodeName": format!("{TEST}-1"), "containers": [{"name": "other", "image": "other:1",
                 "resources": {"limits": {"nvidia.com/gpu": "6"}}}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &outsider).await.unwrap();
    until(30, || async {
        let p = pods.get("outsider").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    until(30, || async { s.log().contains("GPUs held by pods Allot does not manage").then_some(()) }).await;
    admin.create(&PostParams::default(), &job(TEST, "big", Some("org/a"), 1, 8, 3)).await.unwrap();
    let big = workload_of(&p, &ns, "big").await;
    admin.create(&PostParams::default(), &job(TEST, "small", Some("org/a"), 1, 2, 3)).await.unwrap();
    let small = workload_of(&p, &ns, "small").await;
    until_state(&s, t, &small, "finished", 60).await;
    let v = workload(&s, t, &big).await;
    assert_eq!(v["workload"]["state"], "pending", "6 of the 8 GPUs are not Allot's: {v}");
    let held = "6 held by pods Allot does not manage (K8S-11)";
    assert!(v["why"].as_str().unwrap_or_default().contains(held), "{v}");
    // The Job's reason is rewritten as it changes (at most every 15 s:
    // K8S-6); the one before "small" ended was another.
    until(45, || async {
        let reason = admin.get("big").await.ok().and_then(|j| annotation(&j, "allot.dev/reason"))?;
        reason.contains(held).then_some(())
    })
    .await;
    let after = pods.get("outsider").await.unwrap();
    assert_eq!(after.spec.as_ref().unwrap().node_name.as_deref(), Some(format!("{TEST}-1").as_str()));
    assert!(after.metadata.deletion_timestamp.is_none(), "the outsider is never touched");
    assert!(!after.annotations().keys().any(|k| k.starts_with("allot.dev/")), "{:?}", after.annotations());
    pods.delete("outsider", &DeleteParams::default().grace_period(0)).await.unwrap();
    let v = until_state(&s, t, &big, "finished", 60).await;
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1, "{v}");
    drop(s);
    teardown(&p, TEST, &ns).await;
    f.finish().await;
}

/// `allot serve` killed with SIGKILL while three Jobs run, then restarted
/// (K8S-10): the gang still running is adopted — its pods are never
/// deleted or made again and it finishes as attempt 1, charged from its
/// recorded start; the Job that completed while no server ran finishes at
/// once; the Job deleted meanwhile is cancelled; the ledger is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_restart_adopts_running_jobs() {
    const TEST: &str = "restart";
    let (f, p, ns, mut s) = setup(TEST, 4, "10m").await;
    let t = f.admin.as_str();
    let admin = p.jobs(&p.admin, &ns);
    let t0 = Instant::now();
    let mark = |what: &str| eprintln!("[{TEST} {:>5.1}s] {what}", t0.elapsed().as_secs_f64());
    let mut ids = BTreeMap::new();
    for (name, pods, run_s) in [("gang", 2, 40), ("short", 1, 10), ("gone", 1, 600)] {
        admin.create(&PostParams::default(), &job(TEST, name, Some("org/a"), pods, 8, run_s)).await.unwrap();
        ids.insert(name, workload_of(&p, &ns, name).await);
    }
    let mut started = BTreeMap::new();
    for (name, id) in &ids {
        let v = until_state(&s, t, id, "running", 60).await;
        started.insert(*name, v["attempts"][0]["start_t"].as_i64().unwrap());
    }
    until(30, || async { (pods_of(&p, &ns, "gang").await.len() == 2).then_some(()) }).await;
    let uids = |pods: BTreeMap<u32, Pod>| -> BTreeSet<String> { pods.values().filter_map(|p| p.uid()).collect() };
    let gang_pods = uids(pods_of(&p, &ns, "gang").await);
    mark("three Jobs running");
    s.kill9();
    // While no Allot runs, the pods keep running: the cluster holds them;
    // "short" completes and "gone" is deleted meanwhile.
    admin.delete("gone", &DeleteParams::background()).await.unwrap();
    until(30, || async { condition_true(&admin.get("short").await.ok()?, "Complete").then_some(()) }).await;
    assert_eq!(uids(pods_of(&p, &ns, "gang").await), gang_pods, "the pods outlive the server");
    mark("short completed and gone deleted while no server ran");
    s.restart();
    let deadline = Instant::now() + Duration::from_secs(120);
    let v = loop {
        assert!(Instant::now() < deadline, "the gang did not finish after the restart:\n{}", s.log());
        let now = uids(pods_of(&p, &ns, "gang").await);
        assert!(now.is_subset(&gang_pods), "no pod of the gang is made again: {now:?} vs {gang_pods:?}");
        let v = workload(&s, t, &ids["gang"]).await;
        assert_ne!(v["workload"]["state"], "pending", "an adopted workload never requeues: {v}");
        if v["workload"]["state"] == "finished" {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    mark("the adopted gang finished");
    let attempts = v["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{v}");
    assert_eq!(attempts[0]["outcome"], "finished", "{v}");
    assert_eq!(attempts[0]["start_t"].as_i64(), Some(started["gang"]), "charged from its recorded start: {v}");
    let v = until_state(&s, t, &ids["short"], "finished", 30).await;
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["attempts"][0]["outcome"], "finished", "{v}");
    let v = until_state(&s, t, &ids["gone"], "cancelled", 30).await;
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1, "{v}");
    assert!(s.log().contains("K8S-10: attempt adopted"), "{}", s.log());
    assert_ledger_exact(&s, t, &["finished", "cancelled"]).await;
    drop(s);
    teardown(&p, TEST, &ns).await;
    f.finish().await;
}

/// K8S-12: `allot submit --image` makes a managed Job in the namespace
/// that may charge the account, charged to the submitter, and Allot runs
/// it as any Job to its end; what a Job cannot carry, or no namespace may charge, is
/// refused before any Job exists; a user cannot pass their Job off as
/// another's through the annotation Allot writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_submit_image_creates_a_managed_job() {
    const TEST: &str = "image";
    let (f, p, ns, s) = setup(TEST, 1, "10m").await;
    let t = f.admin.as_str();
    let admin = p.jobs(&p.admin, &ns);
    let alice = p.jobs(&p.alice, &ns);

    let not_allowed = format!(
        "K8S-12: namespace {ns:?} of cluster k8s may not run image \"evil.example/miner:1\" (it takes only trainer:*)"
    );
    let refusals = [
        (
            json!({"account": "org/a", "gpus": 8, "image": "trainer:1", "retries": 2}),
            "retries",
            "K8S-12: a Kubernetes Job does not carry retries",
        ),
        (
            json!({"account": "org/b", "gpus": 8, "image": "trainer:1"}),
            "namespace",
            "K8S-12: no namespace of cluster k8s may charge \"org/b\"",
        ),
        (
            json!({"account": "org/a", "gpus": 8, "image": "trainer:1", "namespace": "default"}),
            "namespace",
            "K8S-12: Jobs of namespace \"default\" of cluster k8s may not charge",
        ),
        (
            json!({"account": "org/a", "gpus": 9, "nodes": 2, "image": "trainer:1"}),
            "gpus",
            "K8S-12: 9 GPUs do not split evenly over 2 pods",
        ),
        (json!({"account": "org/a", "gpus": 16, "image": "trainer:1"}), "gpus", "larger than any pool"),
        (
            json!({"account": "org/a", "gpus": 8, "image": "trainer:1", "clusters": ["elsewhere"]}),
            "clusters",
            "K8S-12: an image runs as a Job of one Kubernetes cluster; elsewhere is not one",
        ),
        (json!({"account": "org/a", "gpus": 8, "image": "evil.example/miner:1"}), "image", not_allowed.as_str()),
    ];
    for (body, field, want) in &refusals {
        let (code, v) = s.http("POST", "/v1/workloads", Some(t), Some(&body.to_string())).await;
        assert_eq!(code, 400, "{body}: {v}");
        assert_eq!(v["field"], *field, "{body}: {v}");
        assert!(v["error"].as_str().unwrap_or_default().contains(want), "{body}: {v}");
    }
    let made_by_allot =
        |jobs: Vec<Job>| jobs.into_iter().filter(|j| annotation(j, "allot.dev/submitted-by").is_some()).count();
    assert_eq!(made_by_allot(admin.list(&ListParams::default()).await.unwrap().items), 0, "no Job for a refusal");

    // Submitted with the CLI: a managed Job in the namespace that may charge org/a.
    let out = s.cli(
        t,
        &[
            "submit",
            "--account",
            "org/a",
            "--gpus",
            "8",
            "--image",
            "trainer:1",
            "--name",
            "My Run!",
            "--env",
            "STEP=1",
            "--duration",
            "10m",
            "--",
            "python",
            "train.py",
        ],
    );
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), s.log());
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let v = workload(&s, t, &id).await;
    let user = v["workload"]["user"].as_str().unwrap().to_string();
    let (job_ns, name) = v["workload"]["name"].as_str().unwrap().split_once('/').unwrap();
    assert_eq!(job_ns, ns, "{v}");
    assert!(name.starts_with("my-run-"), "{v}");
    assert_eq!(made_by_allot(admin.list(&ListParams::default()).await.unwrap().items), 1, "one Job, though retried");
    let j = admin.get(name).await.unwrap();
    assert_eq!(annotation(&j, "allot.dev/user").as_deref(), Some(user.as_str()), "charged to the submitter");
    assert_ne!(user, "allot", "not to Allot, which created it");
    assert_eq!(annotation(&j, "allot.dev/account").as_deref(), Some("org/a"));
    assert_eq!(annotation(&j, "allot.dev/expected-duration").as_deref(), Some("600s"));
    assert_eq!(workload_of(&p, &ns, name).await, id, "the Job names its workload");
    assert_eq!(j.labels().get("allot.dev/test").map(String::as_str), Some(TEST), "it matches the job_selector");
    let pod = j.spec.as_ref().unwrap().template.spec.clone().unwrap();
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("trainer:1"));
    assert_eq!(c.command.clone().unwrap(), ["python", "train.py"]);
    assert_eq!(c.env.clone().unwrap()[0].value.as_deref(), Some("1"));
    let limits = c.resources.clone().unwrap().limits.unwrap();
    assert_eq!(limits["nvidia.com/gpu"].0, "8");
    assert_eq!(pod.termination_grace_period_seconds, Some(GRACE_S), "the creation policy ran on it");
    // Locked down: no service-account token, non-root, default seccomp, no
    // capabilities, no privilege escalation.
    assert_eq!(pod.automount_service_account_token, Some(false));
    let psc = pod.security_context.clone().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    let csc = c.security_context.clone().unwrap();
    assert_eq!(csc.allow_privilege_escalation, Some(false));
    assert_eq!(csc.capabilities.unwrap().drop.unwrap(), ["ALL"]);

    // Allot runs it as any Job, its pod on the node of its allocation
    // (kwok completes a pod at once unless its annotations say otherwise).
    let v = until_state(&s, t, &id, "finished", 60).await;
    assert_eq!(v["attempts"][0]["allocation"][0]["node"], "image-1", "{v}");
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
    let pods = p.pods(&ns).list(&lp).await.unwrap().items;
    assert_eq!(pods.len(), 1, "one pod, bound by Allot");
    assert_eq!(pods[0].spec.as_ref().unwrap().node_name.as_deref(), Some("image-1"));
    assert!(condition_true(&admin.get(name).await.unwrap(), "Complete"));

    // Naming another submitter does not make a user's Job theirs (the Job
    // is not this server's: it never runs, so it leaves no pod behind).
    let mut forged = job("not-this-server", "forged", Some("org/a"), 1, 1, 600);
    forged.annotations_mut().insert("allot.dev/submitted-by".into(), "bob".into());
    let made = alice.create(&PostParams::default(), &forged).await.unwrap();
    assert_eq!(annotation(&made, "allot.dev/user").as_deref(), Some("alice"));

    // ID-1: on a server that runs work as its submitters, the pod runs as
    // the submitter's Unix user and groups; a token of no Unix user
    // submits nothing.
    drop(s);
    let s = Server::start_multi_user(&f.dir, &f.db.url, &[], &[], &[]);
    let nobody = nix::unistd::User::from_name("nobody").unwrap().expect("this host has a user nobody");
    let req = r#"{"name":"nobody-svc","role":"researcher","projects":["org/a"],"user":"nobody"}"#;
    let (code, v) = s.http("POST", "/v1/tokens", Some(t), Some(req)).await;
    assert_eq!(code, 201, "{v}");
    let as_nobody = v["token"].as_str().unwrap().to_string();
    let body = json!({"account": "org/a", "gpus": 8, "image": "trainer:1", "name": "as nobody"}).to_string();
    let (code, v) = s.http("POST", "/v1/workloads", Some(t), Some(&body)).await;
    assert_eq!(code, 403, "no Unix user, no pod: {v}");
    assert!(v["error"].as_str().unwrap().contains("has no Unix user"), "{v}");
    let (code, v) = s.http("POST", "/v1/workloads", Some(&as_nobody), Some(&body)).await;
    assert_eq!(code, 201, "{v}\n{}", s.log());
    let (_, name) = v["name"].as_str().unwrap().split_once('/').unwrap();
    let j = admin.get(name).await.unwrap();
    let psc = j.spec.unwrap().template.spec.unwrap().security_context.unwrap();
    assert_eq!(psc.run_as_user, Some(i64::from(nobody.uid.as_raw())), "{psc:?}");
    assert_eq!(psc.run_as_group, Some(i64::from(nobody.gid.as_raw())), "{psc:?}");
    assert_eq!(psc.run_as_non_root, Some(true));

    drop(s);
    teardown(&p, TEST, &ns).await;
    f.finish().await;
}

/// MNT-5: a Node that appears is capacity added. The config declares 2
/// nodes; one Node of them is deleted, so a 2-pod gang waits, until a new
/// Node appears and the gang runs on it; another new Node runs a second
/// Job. A restarted server maps the config's nodes to the Nodes there are
/// and adds the Node beyond them (at start), and adopts both Jobs where
/// they run (K8S-10). A Node with fewer GPUs than any pool's nodes is not
/// used, nor followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_a_node_that_appears_is_capacity_added() {
    const TEST: &str = "grow";
    let (f, p, ns, mut s) = setup(TEST, 2, "10m").await;
    let t = f.admin.as_str();
    let admin = p.jobs(&p.admin, &ns);
    let nodes: Api<Node> = Api::all(p.admin.clone());
    nodes.delete("grow-2", &DeleteParams::default()).await.unwrap();
    until(30, || async { s.log().contains("the Node changed: fail cluster=k8s node=grow-2").then_some(()) }).await;
    admin.create(&PostParams::default(), &job(TEST, "gang", Some("org/a"), 2, 8, 30)).await.unwrap();
    let gang = workload_of(&p, &ns, "gang").await;
    let v = until(30, || async {
        let v = workload(&s, t, &gang).await;
        v["why"].as_str().is_some_and(|w| w.contains(" PLACE-")).then_some(v)
    })
    .await;
    assert_eq!(v["workload"]["state"], "pending", "one node in service cannot hold 2 × 8: {v}");

    let nodes_of = |v: &Value| -> BTreeSet<String> {
        v["attempts"][0]["allocation"].as_array().unwrap().iter().map(|n| n["node"].as_str().unwrap().into()).collect()
    };
    let set = |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| n.to_string()).collect() };
    p.node(TEST, "grow-small", 4).await;
    // Not followed: its changes are not reported (to a scheduler that does
    // not know it).
    let cordon = Patch::Merge(json!({"spec": {"unschedulable": true}}));
    nodes.patch("grow-small", &PatchParams::default(), &cordon).await.unwrap();
    p.node(TEST, "grow-3", 8).await;
    let v = until_state(&s, t, &gang, "running", 60).await;
    assert_eq!(nodes_of(&v), set(&["grow-1", "grow-3"]), "{v}");
    let mut starts = vec![v["attempts"][0]["start_t"].as_i64()];
    p.node(TEST, "grow-4", 8).await;
    admin.create(&PostParams::default(), &job(TEST, "more", Some("org/a"), 1, 8, 30)).await.unwrap();
    let more = workload_of(&p, &ns, "more").await;
    let v = until_state(&s, t, &more, "running", 60).await;
    assert_eq!(nodes_of(&v), set(&["grow-4"]), "{v}");
    starts.push(v["attempts"][0]["start_t"].as_i64());
    // The store says running once the scheduler decides; the crash below
    // is about Jobs that run, so wait until Allot has admitted the Job (a
    // crash before that, a CI run under load showed, leaves an attempt the
    // restart does not adopt).
    let deadline = Instant::now() + Duration::from_secs(30);
    while admin.get("more").await.unwrap().spec.and_then(|j| j.suspend) != Some(false) {
        assert!(Instant::now() < deadline, "the Job more was not unsuspended within 30 s: {}", s.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(s.log().contains("MNT-5: node added to its pool"), "{}", s.log());
    assert!(s.log().contains("fits no pool"), "the 4-GPU Node is not used: {}", s.log());
    let log = s.log();
    let noise: Vec<&str> = log.lines().filter(|l| l.contains("grow-small") && l.contains("WARN")).collect();
    assert!(noise.is_empty(), "a Node that fits no pool is left alone, not warned about: {noise:?}");

    s.kill9();
    s.restart();
    for (id, start) in [&gang, &more].into_iter().zip(starts) {
        let v = until_state(&s, t, id, "finished", 90).await;
        let attempts = v["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "adopted where it ran, not run again: {v}");
        assert_eq!(attempts[0]["start_t"].as_i64(), start, "{v}");
    }
    let log = s.log();
    assert!(log.contains("MNT-5: a Node beyond the config's joins its pool"), "{log}");
    assert!(log.contains("K8S-10: attempt adopted"), "{log}");
    assert_ledger_exact(&s, t, &["finished"]).await;
    drop(s);
    teardown(&p, TEST, &ns).await;
    f.finish().await;
}

fn condition_true(j: &Job, kind: &str) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == kind && c.status == "True"))
}
