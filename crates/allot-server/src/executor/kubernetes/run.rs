//! The executor's one task: it owns the watched Jobs, pods and Nodes and
//! every attempt, and serialises every write to the cluster, each checked
//! against the store's lease first (K8S-8).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::{mpsc, oneshot};

use super::{
    ATTEMPT, COMPLETION_INDEX, Command, Front, JOB_NAME, KubeNode, KubeOptions, MANAGED, NODES, REASON, STORE,
    WORKLOAD, job,
};
use crate::executor::health::{NodeHealth as Health, transition};
use crate::executor::{Adoption, AttemptKey, ExecEvent, ExitStatus, Launch, LaunchError, Survivor};
use crate::store::lease::Fence;

/// How often pending Jobs' reasons are refreshed, and at most how often one
/// Job's reason is rewritten (K8S-6).
const REASON_EVERY: Duration = Duration::from_secs(5);
const REASON_MIN_GAP: Duration = Duration::from_secs(15);
/// At most this many reasons are written per round (each an annotation and
/// an Event): with thousands of waiting Jobs the loop stays free to admit,
/// bind and end work, and the rest are written in the rounds that follow.
const REASON_WRITES_PER_ROUND: usize = 40;

/// A Node as the inventory reads it.
pub(super) fn kube_node(n: &Node, opts: &KubeOptions) -> KubeNode {
    let labels = n.metadata.labels.clone().unwrap_or_default();
    let gpus = n
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref()?.get(&opts.gpu_resource))
        .and_then(|q| q.0.trim().parse::<u32>().ok())
        .unwrap_or(0);
    KubeNode {
        name: n.name_any(),
        gpus,
        product: labels.get(&opts.product_label).cloned(),
        topology: opts.topology_label.as_ref().and_then(|l| labels.get(l).cloned()),
    }
}

/// A Node's health for Allot: `Ready` and schedulable is up; cordoned
/// (`spec.unschedulable`, as `kubectl drain` does) drains (MNT-1); not
/// `Ready`, or gone, is down (MNT-2). K8S-5.
fn health(n: &Node) -> Health {
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        Health::Down
    } else if n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false) {
        Health::Drain
    } else {
        Health::Up
    }
}

/// One attempt the executor runs.
struct Attempt {
    /// `namespace/name` of its Job.
    job: String,
    /// Kubernetes node names, pod (completion index) i on node i.
    nodes: Vec<String>,
    /// Pods bound, or being bound: pod name → node.
    bound: HashMap<String, String>,
    /// Bindings the API server confirmed.
    confirmed: usize,
    started: bool,
    /// A stop was asked: `Some(true)` kill, `Some(false)` preemption/cancel.
    stop: Option<bool>,
    /// Its Job was deleted (K8S-4: a cancel).
    orphan: bool,
    /// The first failed pod's exit code.
    failed_code: Option<i32>,
}

impl Attempt {
    /// Admitted on `nodes`, nothing bound yet.
    fn new(job: String, nodes: Vec<String>) -> Attempt {
        Attempt {
            job,
            nodes,
            bound: HashMap::new(),
            confirmed: 0,
            started: false,
            stop: None,
            orphan: false,
            failed_code: None,
        }
    }
}

/// A pod bound to a node and not over, as K8S-11 counts it.
struct Placed {
    node: String,
    gpus: u32,
    /// `namespace/name` of its Job, if a Job made it.
    job: Option<String>,
    managed: bool,
}

/// GPUs a pod holds on its node: its containers' limits (or requests) of
/// `resource`, or its largest init container's if larger.
fn pod_gpus(p: &Pod, resource: &str) -> u32 {
    let Some(spec) = p.spec.as_ref() else { return 0 };
    let of = |c: &k8s_openapi::api::core::v1::Container| {
        let r = c.resources.as_ref();
        r.and_then(|r| r.limits.as_ref()?.get(resource))
            .or_else(|| r.and_then(|r| r.requests.as_ref()?.get(resource)))
            .and_then(|q| q.0.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    let main: u32 = spec.containers.iter().map(of).sum();
    let init = spec.init_containers.iter().flatten().map(of).max().unwrap_or(0);
    main.max(init)
}

/// What a write running beside the loop reports back to it.
enum Done {
    /// A pod's binding, and whether it took.
    Bound { key: AttemptKey, pod: String, node: String, ok: bool },
}

pub(super) struct Loop {
    client: Client,
    /// Writes run as tasks of their own (the loop never waits on a
    /// binding, an Event or a reason) and report here.
    done: mpsc::UnboundedSender<Done>,
    opts: Arc<KubeOptions>,
    events: mpsc::UnboundedSender<ExecEvent>,
    fence: Arc<Fence>,
    front: Option<Arc<dyn Front>>,
    recorder: Recorder,
    /// Allot's nodes of this cluster, by their Kubernetes names.
    nodes: HashSet<String>,
    health: HashMap<String, Health>,
    nodes_listed: bool,
    /// MNT-5: whether a Node that appears fits a pool of this cluster.
    fits: super::Fits,
    /// Nodes of the selector Allot does not use: without GPUs, or fitting
    /// no pool (logged once, never followed, so never reported).
    unused: HashSet<String>,
    jobs: HashMap<String, Job>,
    jobs_listed: bool,
    pods: HashMap<String, Pod>,
    pods_listed: bool,
    by_seq: HashMap<i64, String>,
    attempts: BTreeMap<AttemptKey, Attempt>,
    /// The uids of the Jobs submitted by this process, with their
    /// workloads (each once: the annotation that records it may come back
    /// after the next event).
    submitted: HashMap<String, i64>,
    /// Jobs refused: key → (resource version refused, reason).
    refused: HashMap<String, (String, String)>,
    /// Launches waiting for the first listing of Jobs.
    waiting: Vec<Launch>,
    /// K8S-12: Jobs to create for submissions, once the Jobs are listed.
    creating: Vec<(Job, super::Created)>,
    /// Survivors of the previous server, stopped before recovery goes on.
    survivors: Option<(Vec<Survivor>, oneshot::Sender<()>, Instant)>,
    /// K8S-10: attempts of the previous server taken back, reconciled with
    /// their Jobs once listed; a stop asked meanwhile (`Some(kill)`).
    adopting: Vec<(Adoption, Option<bool>)>,
    /// The first reconciliation with the cluster is done.
    reconciled: bool,
    /// K8S-11: pods bound to Allot's nodes, by `namespace/name`; the keys
    /// of each node's; the count of GPUs held outside Allot last reported
    /// per node; the first listing is done.
    placed: HashMap<String, Placed>,
    placed_on: HashMap<String, HashSet<String>>,
    outside: HashMap<String, u32>,
    placed_listed: bool,
    /// The reason last written on each Job, and when.
    written: HashMap<String, (String, Instant)>,
    last_reasons: Instant,
}

impl Loop {
    pub(super) async fn start(
        client: Client,
        opts: KubeOptions,
        nodes: Vec<String>,
        fits: super::Fits,
        events: mpsc::UnboundedSender<ExecEvent>,
        mut commands: mpsc::UnboundedReceiver<Command>,
        fence: Arc<Fence>,
    ) {
        let opts = Arc::new(opts);
        let reporter = Reporter { controller: "allot".into(), instance: std::env::var("HOSTNAME").ok() };
        let (done, mut done_rx) = mpsc::unbounded_channel();
        let mut me = Loop {
            done,
            recorder: Recorder::new(client.clone(), reporter),
            client: client.clone(),
            nodes: nodes.iter().map(|n| opts.kube_name(n).to_string()).collect(),
            opts: opts.clone(),
            events,
            fence,
            front: None,
            health: HashMap::new(),
            nodes_listed: false,
            fits,
            unused: HashSet::new(),
            jobs: HashMap::new(),
            jobs_listed: false,
            pods: HashMap::new(),
            pods_listed: false,
            by_seq: HashMap::new(),
            attempts: BTreeMap::new(),
            refused: HashMap::new(),
            submitted: HashMap::new(),
            waiting: Vec::new(),
            creating: Vec::new(),
            survivors: None,
            adopting: Vec::new(),
            placed: HashMap::new(),
            placed_on: HashMap::new(),
            outside: HashMap::new(),
            placed_listed: false,
            reconciled: false,
            written: HashMap::new(),
            last_reasons: Instant::now(),
        };
        let managed = format!("{MANAGED}=true");
        let jobs_selector = opts.job_selector.clone();
        let mut node_cfg = watcher::Config::default();
        if let Some(s) = &opts.node_selector {
            node_cfg = node_cfg.labels(s);
        }
        let mut node_events = watcher::watcher(Api::<Node>::all(client.clone()), node_cfg).default_backoff().boxed();
        let mut job_events =
            watcher::watcher(Api::<Job>::all(client.clone()), watcher::Config::default().labels(&jobs_selector))
                .default_backoff()
                .boxed();
        let mut pod_events =
            watcher::watcher(Api::<Pod>::all(client.clone()), watcher::Config::default().labels(&managed))
                .default_backoff()
                .boxed();
        // K8S-11: every pod bound to a node and not over, whoever made it.
        let bound = watcher::Config::default().fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed");
        let mut placed_events = watcher::watcher(Api::<Pod>::all(client.clone()), bound).default_backoff().boxed();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                c = commands.recv() => match c {
                    Some(c) => me.command(c).await,
                    None => return,
                },
                Some(e) = node_events.next() => match e {
                    Ok(e) => me.on_node(e),
                    Err(e) => tracing::warn!(cluster = %opts.cluster, error = %e, "watching Nodes"),
                },
                Some(e) = job_events.next() => match e {
                    Ok(e) => me.on_job(e).await,
                    Err(e) => tracing::warn!(cluster = %opts.cluster, error = %e, "watching Jobs"),
                },
                Some(e) = pod_events.next() => match e {
                    Ok(e) => me.on_pod(e).await,
                    Err(e) => tracing::warn!(cluster = %opts.cluster, error = %e, "watching pods"),
                },
                Some(e) = placed_events.next() => match e {
                    Ok(e) => me.on_placed(e),
                    Err(e) => tracing::warn!(cluster = %opts.cluster, error = %e, "watching bound pods"),
                },
                Some(d) = done_rx.recv() => me.on_done(d),
                _ = tick.tick() => me.tick().await,
            }
            if me.events.is_closed() {
                return;
            }
        }
    }

    // ------------------------------------------------------------ commands

    async fn command(&mut self, c: Command) {
        match c {
            Command::Launch(l) => {
                if self.jobs_listed && self.pods_listed {
                    self.launch(l).await;
                } else {
                    self.waiting.push(l);
                }
            }
            Command::Stop { key, kill } => self.stop(key, kill).await,
            Command::Serve(front) => {
                self.front = Some(front);
                self.ingest_all().await;
            }
            Command::Create { job, reply } => {
                if self.jobs_listed && self.pods_listed && self.front.is_some() {
                    let _ = reply.send(self.create(*job).await);
                } else {
                    self.creating.push((*job, reply));
                }
            }
            Command::Adopt(list) => {
                self.adopting.extend(list.into_iter().map(|a| (a, None)));
                self.ingest_all().await;
            }
            Command::Survivors { survivors, done } => {
                if survivors.is_empty() {
                    let _ = done.send(());
                } else {
                    let deadline = Instant::now() + self.opts.grace + Duration::from_secs(30);
                    self.survivors = Some((survivors, done, deadline));
                    self.stop_survivors().await;
                }
            }
        }
    }

    /// Whether this process may write to the cluster now (K8S-8): only the
    /// holder of the store's lease, surely still held.
    fn may_write(&self, what: &str) -> bool {
        let fresh = self.fence.fresh();
        if !fresh {
            tracing::warn!(cluster = %self.opts.cluster, what, "not written: this server's lease is not surely held (K8S-8)");
        }
        fresh
    }

    fn jobs_api(&self, ns: &str) -> Api<Job> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn pods_api(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// A merge patch of the Job `key`: `suspend` and annotations.
    async fn patch_job(
        &self,
        key: &str,
        suspend: Option<bool>,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), kube::Error> {
        let (ns, name) = key.split_once('/').unwrap_or(("default", key));
        patch_job(self.jobs_api(ns), name, suspend, annotations).await
    }

    /// [`Loop::patch_job`] of annotations only, beside the loop.
    fn annotate_later(&self, key: &str, annotations: BTreeMap<String, String>) {
        let (ns, name) = key.split_once('/').unwrap_or(("default", key));
        let (api, name) = (self.jobs_api(ns), name.to_string());
        tokio::spawn(async move {
            if let Err(e) = patch_job(api, &name, None, annotations).await {
                tracing::warn!(job = %name, error = %e, "cannot annotate the Job");
            }
        });
    }

    async fn launch(&mut self, l: Launch) {
        let key = l.key;
        let Some(job_key) = self.by_seq.get(&key.seq).cloned() else {
            // Listed, the cluster has no Job of it: it was deleted while no
            // server watched, which is a cancel (K8S-4); its own doing, so
            // no node is blamed and no retry spent (MNT-4).
            let gone =
                format!("K8S-4: no Job of cluster {} carries workload {}: it was deleted", self.opts.cluster, key.seq);
            if let Some(front) = self.front.clone() {
                front.cancel(key.seq, format!("kubernetes: {gone}")).await;
            }
            let error = LaunchError { fault: crate::executor::LaunchFault::Setup, node: None, message: gone };
            let _ = self.events.send(ExecEvent::LaunchFailed { key, error });
            return;
        };
        if !self.may_write("unsuspend a Job") {
            let error = LaunchError::infrastructure("K8S-8: this server's lease is not surely held");
            let _ = self.events.send(ExecEvent::LaunchFailed { key, error });
            return;
        }
        let nodes: Vec<String> = l.gpus.iter().map(|n| self.opts.kube_name(&n.node).to_string()).collect();
        let reason = format!("K8S-3: admitted as attempt {} on {}", key.attempt, nodes.join(", "));
        let annotations = BTreeMap::from([
            (ATTEMPT.to_string(), key.attempt.to_string()),
            (NODES.to_string(), nodes.join(",")),
            (REASON.to_string(), reason.clone()),
        ]);
        if let Err(e) = self.patch_job(&job_key, Some(false), annotations).await {
            let error = LaunchError::infrastructure(format!("K8S-3: cannot unsuspend Job {job_key}: {e}"));
            let _ = self.events.send(ExecEvent::LaunchFailed { key, error });
            return;
        }
        tracing::info!(cluster = %self.opts.cluster, job = %job_key, workload = key.seq, attempt = key.attempt, nodes = %nodes.join(","), "Job unsuspended");
        self.written.insert(job_key.clone(), (reason.clone(), Instant::now()));
        self.publish(&job_key, "Admitted", &reason).await;
        self.attempts.insert(key, Attempt::new(job_key.clone(), nodes));
        let pending: Vec<Pod> = self.pods_of(&job_key).into_iter().cloned().collect();
        for p in pending {
            self.place(&p).await;
        }
    }

    async fn stop(&mut self, key: AttemptKey, kill: bool) {
        if let Some((_, stop)) = self.adopting.iter_mut().find(|(a, _)| a.key == key) {
            *stop = Some(kill || *stop == Some(true));
            return;
        }
        let Some(a) = self.attempts.get_mut(&key) else { return };
        a.stop = Some(kill || a.stop == Some(true));
        let job_key = a.job.clone();
        if a.orphan {
            self.settle(&job_key);
            return;
        }
        if self.may_write("suspend a Job") {
            if let Err(e) = self.patch_job(&job_key, Some(true), BTreeMap::new()).await
                && !is_not_found(&e)
            {
                tracing::warn!(cluster = %self.opts.cluster, job = %job_key, error = %e, "cannot suspend the Job");
            }
            if kill {
                let (ns, _) = job_key.split_once('/').unwrap_or(("default", ""));
                let names: Vec<String> = self.pods_of(&job_key).iter().map(|p| p.name_any()).collect();
                for name in names {
                    let _ = self.pods_api(ns).delete(&name, &DeleteParams::default().grace_period(0)).await;
                }
            }
        }
        self.settle(&job_key);
    }

    /// Recovery's survivors: their Jobs are suspended and their pods waited
    /// for (CON-3); done once none is left, or after grace + 30 s.
    async fn stop_survivors(&mut self) {
        if !(self.jobs_listed && self.pods_listed) {
            return;
        }
        let Some((survivors, _, _)) = &self.survivors else { return };
        let jobs: Vec<String> = survivors.iter().filter_map(|s| self.by_seq.get(&s.key.seq).cloned()).collect();
        for j in &jobs {
            if self.jobs.get(j).is_some_and(|job| !suspended(job)) && self.may_write("suspend a survivor's Job") {
                let _ = self.patch_job(j, Some(true), BTreeMap::new()).await;
                tracing::warn!(cluster = %self.opts.cluster, job = %j, "the previous server's attempt is stopped (CON-3)");
            }
        }
        self.check_survivors();
    }

    fn check_survivors(&mut self) {
        let Some((survivors, _, deadline)) = &self.survivors else { return };
        // Until the Jobs and pods are listed, none is known to be stopped.
        let listed = self.jobs_listed && self.pods_listed;
        let left = survivors
            .iter()
            .filter_map(|s| self.by_seq.get(&s.key.seq))
            .filter(|j| !self.pods_of(j).is_empty())
            .count();
        if (listed && left == 0) || Instant::now() > *deadline {
            if !listed {
                tracing::warn!(cluster = %self.opts.cluster, "the cluster's Jobs could not be listed before the deadline: the survivors are not known to have stopped");
            } else if left > 0 {
                tracing::warn!(cluster = %self.opts.cluster, left, "survivors' pods still there after the deadline");
            }
            if let Some((_, done, _)) = self.survivors.take() {
                let _ = done.send(());
            }
        }
    }

    // ------------------------------------------------------------ watches

    fn on_node(&mut self, e: Event<Node>) {
        match e {
            Event::Init => {}
            Event::InitApply(n) | Event::Apply(n) => {
                if !self.nodes.contains(&n.name_any()) && !self.appeared(&n) {
                    return;
                }
                self.node_health(&n.name_any(), health(&n))
            }
            Event::Delete(n) => self.node_health(&n.name_any(), Health::Down),
            Event::InitDone => {
                if !self.nodes_listed {
                    self.nodes_listed = true;
                    // A config node without a Node is out of service.
                    let missing: Vec<String> =
                        self.nodes.iter().filter(|n| !self.health.contains_key(*n)).cloned().collect();
                    for n in missing {
                        self.node_health(&n, Health::Down);
                    }
                }
            }
        }
    }

    /// MNT-5: a Node Allot did not know matches the node selector: it is
    /// capacity added (the scheduler adds it to its pool), and followed as
    /// Allot's from now on (true when it was). A Node without GPUs, or fitting
    /// no pool, is left alone: logged once, and none of its changes is
    /// reported. One that fits joins once Ready and schedulable, not
    /// before: added in service and failed a moment later, it could be
    /// given work in between.
    fn appeared(&mut self, n: &Node) -> bool {
        let k = kube_node(n, &self.opts);
        let unused = if k.gpus == 0 {
            Some(format!("it has no {}", self.opts.gpu_resource))
        } else {
            (self.fits)(k.gpus, k.product.as_deref()).err()
        };
        if let Some(why) = unused {
            if self.unused.insert(k.name.clone()) {
                tracing::info!(cluster = %self.opts.cluster, node = %k.name, %why, "a Node that fits no pool is not used");
            }
            return false;
        }
        if health(n) != Health::Up {
            return false;
        }
        tracing::info!(cluster = %self.opts.cluster, node = %k.name, gpus = k.gpus, "a Node appeared (MNT-5)");
        self.unused.remove(&k.name);
        self.nodes.insert(k.name.clone());
        let node = self.opts.allot_name(&k.name);
        let cluster = self.opts.cluster.clone();
        let _ = self.events.send(ExecEvent::NodeAdded { cluster, node, gpus: k.gpus, product: k.product });
        true
    }

    fn node_health(&mut self, name: &str, now: Health) {
        if !self.nodes.contains(name) {
            return;
        }
        let before = self.health.insert(name.to_string(), now).unwrap_or(Health::Up);
        for kind in transition(before, now) {
            let node = self.opts.allot_name(name);
            tracing::info!(cluster = %self.opts.cluster, node = %node, "the Node changed: {}", kind.as_str());
            let by = format!(
                "kubernetes: Node {name} {}",
                match now {
                    Health::Up => "Ready and schedulable",
                    Health::Drain => "cordoned (unschedulable)",
                    Health::Down => "not Ready or deleted",
                }
            );
            let _ = self.events.send(ExecEvent::Node { node, kind, by });
        }
    }

    async fn on_job(&mut self, e: Event<Job>) {
        match e {
            Event::Init => {}
            Event::InitApply(j) | Event::Apply(j) => {
                let key = key_of(&j);
                if let Owner::Ours(seq) = owner(&j, &self.opts.store) {
                    self.by_seq.insert(seq, key.clone());
                }
                self.jobs.insert(key.clone(), j);
                if self.jobs_listed {
                    self.ingest(&key).await;
                }
                self.job_state(&key);
            }
            Event::Delete(j) => {
                let key = key_of(&j);
                self.jobs.remove(&key);
                self.refused.remove(&key);
                self.written.remove(&key);
                if let Owner::Ours(seq) = owner(&j, &self.opts.store) {
                    for a in self.attempts.values_mut().filter(|a| a.job == key) {
                        a.orphan = true;
                    }
                    if let Some(front) = self.front.clone() {
                        tracing::info!(cluster = %self.opts.cluster, job = %key, workload = seq, "Job deleted: its workload is cancelled (K8S-4)");
                        front.cancel(seq, format!("kubernetes: Job {key} deleted")).await;
                    }
                }
                self.settle(&key);
            }
            Event::InitDone => {
                self.jobs_listed = true;
                self.after_listing().await;
            }
        }
    }

    async fn on_pod(&mut self, e: Event<Pod>) {
        match e {
            Event::Init => {}
            Event::InitApply(p) | Event::Apply(p) => {
                let key = key_of(&p);
                let job = job_of(&p);
                self.pods.insert(key, p.clone());
                if self.jobs_listed {
                    self.place(&p).await;
                }
                if let Some(j) = job {
                    self.pod_state(&j, &p);
                    self.job_state(&j);
                }
            }
            Event::Delete(p) => {
                self.pods.remove(&key_of(&p));
                if let Some(j) = job_of(&p) {
                    self.job_state(&j);
                }
                self.check_survivors();
            }
            Event::InitDone => {
                self.pods_listed = true;
                self.after_listing().await;
            }
        }
    }

    async fn after_listing(&mut self) {
        if !(self.jobs_listed && self.pods_listed) {
            return;
        }
        self.report_outside_all();
        for l in std::mem::take(&mut self.waiting) {
            self.launch(l).await;
        }
        self.stop_survivors().await;
        self.ingest_all().await;
    }

    /// The pods of Job `key` that may hold GPUs: not yet Succeeded or
    /// Failed (a pod being deleted still holds them until it is gone).
    fn pods_of(&self, key: &str) -> Vec<&Pod> {
        let (ns, name) = key.split_once('/').unwrap_or(("default", key));
        self.pods
            .values()
            .filter(|p| p.namespace().as_deref() == Some(ns) && job_of_name(p) == Some(name))
            .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
            .collect()
    }

    /// Binds a waiting pod of an admitted attempt to its node (K8S-3).
    async fn place(&mut self, p: &Pod) {
        let Some(job) = job_of(p) else { return };
        let spec = p.spec.clone().unwrap_or_default();
        if spec.node_name.is_some()
            || p.metadata.deletion_timestamp.is_some()
            || spec.scheduler_name.as_deref() != Some(self.opts.scheduler_name.as_str())
        {
            return;
        }
        // Only a pod the Job controller made for this Job (its controller
        // owner is the Job): a pod that merely carries the Job's label is
        // never bound.
        let Some(uid) = self.jobs.get(&job).and_then(|j| j.uid()) else { return };
        if !p.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == uid) {
            return;
        }
        let Some((&key, a)) = self.attempts.iter().find(|(_, a)| a.job == job && a.stop.is_none() && !a.orphan) else {
            return;
        };
        let name = p.name_any();
        if a.bound.contains_key(&name) {
            return;
        }
        let taken: HashSet<&String> = a.bound.values().collect();
        let index = annotation(p, COMPLETION_INDEX).and_then(|i| i.parse::<usize>().ok());
        let node = match index {
            Some(i) => a.nodes.get(i).cloned(),
            None => a.nodes.iter().find(|n| !taken.contains(n)).cloned(),
        };
        let Some(node) = node else {
            tracing::warn!(cluster = %self.opts.cluster, pod = %name, "a pod beyond the allocation's nodes is left unbound");
            return;
        };
        if !self.may_write("bind a pod") {
            return;
        }
        let binding = Binding {
            metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.clone()),
                ..ObjectReference::default()
            },
        };
        let ns = p.namespace().unwrap_or_default();
        self.attempts.get_mut(&key).expect("found above").bound.insert(name.clone(), node.clone());
        let (api, done) = (self.pods_api(&ns), self.done.clone());
        tokio::spawn(async move {
            // The answer is a Status, not the Binding.
            let r: Result<serde_json::Value, kube::Error> =
                api.create_subresource("binding", &name, &PostParams::default(), &binding).await;
            if let Err(e) = &r {
                tracing::warn!(pod = %name, node = %node, error = %e, "cannot bind the pod");
            }
            let _ = done.send(Done::Bound { key, pod: name, node, ok: r.is_ok() });
        });
    }

    fn on_done(&mut self, d: Done) {
        match d {
            Done::Bound { key, pod, node, ok } => {
                let Some(a) = self.attempts.get_mut(&key) else { return };
                if !ok {
                    // Tried again at the pod's next event.
                    a.bound.remove(&pod);
                    return;
                }
                tracing::info!(cluster = %self.opts.cluster, pod = %pod, node = %node, workload = key.seq, "pod bound");
                a.confirmed += 1;
                if !a.started && a.confirmed >= a.nodes.len() {
                    a.started = true;
                    let _ = self.events.send(ExecEvent::Started { key, pid: 0 });
                }
            }
        }
    }

    /// A failed pod of a running attempt: its exit code is the attempt's.
    fn pod_state(&mut self, job: &str, p: &Pod) {
        if phase(p) != "Failed" {
            return;
        }
        let code = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find_map(|c| Some(c.state.as_ref()?.terminated.as_ref()?.exit_code)))
            .unwrap_or(1);
        for a in self.attempts.values_mut().filter(|a| a.job == job && a.failed_code.is_none()) {
            a.failed_code = Some(code);
        }
    }

    /// Reports the end of Job `key`'s attempt once it is over.
    fn job_state(&mut self, key: &str) {
        let Some(job) = self.jobs.get(key) else {
            self.settle(key);
            return;
        };
        let done = condition(job, "Complete");
        let failed = condition(job, "Failed");
        let live: Vec<AttemptKey> = self.attempts.iter().filter(|(_, a)| a.job == key).map(|(k, _)| *k).collect();
        for k in live {
            let a = &self.attempts[&k];
            if a.stop.is_none() && done {
                self.exit(k, ExitStatus { code: Some(0), signal: None });
            } else if a.stop.is_none() && failed {
                let code = a.failed_code.unwrap_or(1);
                self.exit(k, ExitStatus { code: Some(code), signal: None });
            }
        }
        self.settle(key);
    }

    /// A stopped attempt of Job `key` is over once its Job is suspended
    /// (or gone) and none of its pods is left.
    fn settle(&mut self, key: &str) {
        let stopped: Vec<(AttemptKey, bool)> = self
            .attempts
            .iter()
            .filter(|(_, a)| a.job == key && (a.stop.is_some() || a.orphan))
            .map(|(k, a)| (*k, a.stop == Some(true)))
            .collect();
        if stopped.is_empty() {
            return;
        }
        let quiet = self.jobs.get(key).is_none_or(suspended) && self.pods_of(key).is_empty();
        for (k, kill) in stopped {
            let a = &self.attempts[&k];
            if quiet || (a.orphan && a.stop.is_some() && self.pods_of(key).is_empty()) {
                let signal = if kill { libc::SIGKILL } else { libc::SIGTERM };
                self.exit(k, ExitStatus { code: None, signal: Some(signal) });
            }
        }
    }

    fn exit(&mut self, key: AttemptKey, status: ExitStatus) {
        if let Some(a) = self.attempts.remove(&key) {
            tracing::info!(cluster = %self.opts.cluster, job = %a.job, workload = key.seq, attempt = key.attempt, ?status, "attempt over");
            let _ = self.events.send(ExecEvent::Exited { key, status });
        }
    }

    // ------------------------------------------------------------ outside work

    /// A bound pod's event (K8S-11): the GPUs held on its node outside
    /// Allot are counted again. A relisting replaces what was known.
    fn on_placed(&mut self, e: Event<Pod>) {
        match e {
            Event::Init => {
                self.placed.clear();
                self.placed_on.clear();
                self.placed_listed = false;
            }
            Event::InitApply(p) | Event::Apply(p) => {
                let key = key_of(&p);
                let before = self.unplace(&key);
                let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
                let gpus = pod_gpus(&p, &self.opts.gpu_resource);
                // A pod being deleted holds its GPUs until it is gone.
                if self.nodes.contains(&node) && gpus > 0 {
                    let managed = p.labels().get(MANAGED).is_some_and(|v| v == "true");
                    self.placed_on.entry(node.clone()).or_default().insert(key.clone());
                    self.placed.insert(key, Placed { node: node.clone(), gpus, job: job_of(&p), managed });
                    self.report_outside(&node);
                }
                if let Some(b) = before.filter(|b| *b != node) {
                    self.report_outside(&b);
                }
            }
            Event::Delete(p) => {
                if let Some(node) = self.unplace(&key_of(&p)) {
                    self.report_outside(&node);
                }
            }
            Event::InitDone => {
                self.placed_listed = true;
                self.report_outside_all();
            }
        }
    }

    /// Forgets bound pod `key`; the node it was on.
    fn unplace(&mut self, key: &str) -> Option<String> {
        let p = self.placed.remove(key)?;
        if let Some(on) = self.placed_on.get_mut(&p.node) {
            on.remove(key);
        }
        Some(p.node)
    }

    /// GPUs held on Node `node` by pods that are not of this store's Jobs.
    fn outside_on(&self, node: &str) -> u32 {
        let ours = |p: &Placed| {
            p.managed
                && p.job.as_ref().is_some_and(|j| {
                    self.jobs.get(j).is_some_and(|job| matches!(owner(job, &self.opts.store), Owner::Ours(_)))
                        || self.attempts.values().any(|a| &a.job == j)
                })
        };
        self.placed_on
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|k| self.placed.get(k))
            .filter(|p| !ours(p))
            .map(|p| p.gpus)
            .sum()
    }

    /// Reports Node `node`'s GPUs held outside Allot where the count
    /// changed, once Jobs and every kind of pod are listed (until then
    /// this store's pods cannot be told from the others).
    fn report_outside(&mut self, node: &str) {
        if !(self.jobs_listed && self.pods_listed && self.placed_listed) {
            return;
        }
        let gpus = self.outside_on(node);
        if self.outside.get(node).copied().unwrap_or(0) == gpus {
            return;
        }
        self.outside.insert(node.to_string(), gpus);
        let name = self.opts.allot_name(node);
        tracing::info!(cluster = %self.opts.cluster, node = %name, gpus, "GPUs held by pods Allot does not manage (K8S-11)");
        let _ = self.events.send(ExecEvent::Outside { node: name, gpus });
    }

    fn report_outside_all(&mut self) {
        let nodes: Vec<String> = self.nodes.iter().cloned().collect();
        for n in nodes {
            self.report_outside(&n);
        }
    }

    // ------------------------------------------------------------ adoption

    /// K8S-10, once the Jobs and pods are listed: the adopted attempts are
    /// reconciled with their Jobs, and, the first time, a Job of this
    /// store that runs with no attempt recorded as running is suspended.
    /// Every difference is logged.
    async fn reconcile(&mut self) {
        for (a, stop) in std::mem::take(&mut self.adopting) {
            self.adopt(a, stop).await;
        }
        if std::mem::replace(&mut self.reconciled, true) {
            return;
        }
        let strays: Vec<String> = self
            .jobs
            .iter()
            .filter(|(k, j)| {
                matches!(owner(j, &self.opts.store), Owner::Ours(_))
                    && !suspended(j)
                    && !condition(j, "Complete")
                    && !condition(j, "Failed")
                    && !self.attempts.values().any(|a| &a.job == *k)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in strays {
            tracing::warn!(cluster = %self.opts.cluster, job = %k, "K8S-10: the Job runs but the store records no attempt of it running: suspended");
            if self.may_write("suspend a stray Job") {
                let _ = self.patch_job(&k, Some(true), BTreeMap::new()).await;
            }
        }
    }

    /// Takes back attempt `a` of the previous server as its Job stands.
    async fn adopt(&mut self, a: Adoption, stop: Option<bool>) {
        let key = a.key;
        let nodes: Vec<String> = a.nodes.iter().map(|n| self.opts.kube_name(n).to_string()).collect();
        let Some(job_key) = self.by_seq.get(&key.seq).cloned() else {
            let why = format!("the Job of workload {} was deleted while no server ran", key.seq);
            tracing::warn!(cluster = %self.opts.cluster, workload = key.seq, attempt = key.attempt, "K8S-10: {why}: its workload is cancelled (K8S-4)");
            if let Some(front) = self.front.clone() {
                front.cancel(key.seq, format!("kubernetes: {why}")).await;
            }
            let _ = self
                .events
                .send(ExecEvent::Exited { key, status: ExitStatus { code: None, signal: Some(libc::SIGKILL) } });
            return;
        };
        let job = &self.jobs[&job_key];
        let recorded = annotation(job, ATTEMPT).and_then(|v| v.parse::<i64>().ok());
        let mut stop = stop;
        if suspended(job) || recorded != Some(key.attempt) {
            tracing::warn!(cluster = %self.opts.cluster, job = %job_key, workload = key.seq, attempt = key.attempt, ?recorded, suspended = suspended(job), "K8S-10: the Job does not run the attempt the store records: the attempt is stopped");
            stop.get_or_insert(false);
        }
        let mut attempt = Attempt::new(job_key.clone(), nodes.clone());
        for p in self.pods_of(&job_key) {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
            if !nodes.contains(&node) {
                tracing::warn!(cluster = %self.opts.cluster, pod = %p.name_any(), %node, allocation = %nodes.join(","), "K8S-10: the pod runs on a node its allocation does not name");
            }
            attempt.bound.insert(p.name_any(), node);
            attempt.confirmed += 1;
        }
        tracing::info!(cluster = %self.opts.cluster, job = %job_key, workload = key.seq, attempt = key.attempt, pods = attempt.confirmed, "K8S-10: attempt adopted");
        self.attempts.insert(key, attempt);
        let failed: Vec<Pod> = self
            .pods
            .values()
            .filter(|p| job_of(p).as_deref() == Some(job_key.as_str()) && phase(p) == "Failed")
            .cloned()
            .collect();
        for p in &failed {
            self.pod_state(&job_key, p);
        }
        if let Some(kill) = stop {
            self.stop(key, kill).await;
            return;
        }
        let a = self.attempts.get_mut(&key).expect("inserted above");
        if a.confirmed >= a.nodes.len() {
            a.started = true;
            let _ = self.events.send(ExecEvent::Started { key, pid: 0 });
        }
        let unbound: Vec<Pod> = self.pods_of(&job_key).into_iter().cloned().collect();
        for p in unbound {
            self.place(&p).await;
        }
        // A Job that completed or failed while no server ran ends now.
        self.job_state(&job_key);
    }

    // ------------------------------------------------------------ ingest

    async fn ingest_all(&mut self) {
        if !(self.jobs_listed && self.pods_listed) || self.front.is_none() {
            return;
        }
        self.reconcile().await;
        for (job, reply) in std::mem::take(&mut self.creating) {
            let _ = reply.send(self.create(job).await);
        }
        let keys: Vec<String> = self.jobs.keys().cloned().collect();
        for k in keys {
            self.ingest(&k).await;
        }
    }

    /// K8S-12: creates `job` (a submission that names an image) and
    /// ingests it at once, before any launch of its workload can come
    /// (called once the Jobs are listed and the server serves):
    /// its key and workload id, or why it is not one. The same Job again
    /// (the submission retried with its idempotency key) is answered with
    /// its workload.
    async fn create(&mut self, job: Job) -> Result<(String, i64), String> {
        let cluster = self.opts.cluster.clone();
        if !self.may_write("create a Job") {
            return Err("K8S-8: this server's lease is not surely held; retry in a moment".into());
        }
        let ns = job.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let api = self.jobs_api(&ns);
        let pp = PostParams { field_manager: Some(super::MANAGER.into()), ..Default::default() };
        let made = match api.create(&pp, &job).await {
            Ok(j) => j,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let name = job.metadata.name.clone().unwrap_or_default();
                let j = api.get(&name).await.map_err(|e| format!("cluster {cluster}: read Job {ns}/{name}: {e}"))?;
                let by = |j: &Job| annotation(j, super::SUBMITTED_BY).map(str::to_string);
                if by(&j) != by(&job) {
                    return Err(format!("cluster {cluster}: a Job {ns}/{name} of another submitter exists"));
                }
                j
            }
            Err(e) => return Err(format!("cluster {cluster}: cannot create a Job in namespace {ns}: {e}")),
        };
        let key = key_of(&made);
        tracing::info!(cluster = %cluster, job = %key, "Job created for a submission (K8S-12)");
        // The watcher may have brought it (or a later version) already.
        self.jobs.entry(key.clone()).or_insert(made);
        match self.ingest(&key).await {
            Some(Ok(seq)) => Ok((key, seq)),
            Some(Err(why)) => Err(format!("Job {key} was created and refused: {why}")),
            None => Err(format!("Job {key} was created but is deleted or complete already")),
        }
    }

    /// A new managed Job becomes a workload, or gets its refusal (K8S-1,
    /// K8S-2): its workload id (that of a Job already ingested too), or
    /// why it is refused; `None` for a Job that is not to be ingested.
    async fn ingest(&mut self, key: &str) -> Option<Result<i64, String>> {
        let front = self.front.clone()?;
        let j = self.jobs.get(key)?;
        if j.metadata.deletion_timestamp.is_some() || condition(j, "Complete") {
            return None;
        }
        match owner(j, &self.opts.store) {
            Owner::New => {}
            Owner::Ours(seq) => return Some(self.refused.get(key).map_or(Ok(seq), |(_, why)| Err(why.clone()))),
            Owner::Foreign => return None,
        }
        let version = j.resource_version().unwrap_or_default();
        let uid = j.uid().unwrap_or_default();
        if let Some((_, why)) = self.refused.get(key).filter(|(v, _)| *v == version) {
            return Some(Err(why.clone()));
        }
        if let Some(&seq) = self.submitted.get(&uid) {
            return Some(Ok(seq));
        }
        let outcome = match job::read(j, &self.opts) {
            Ok(shape) => front.submit(shape.clone()).await.map_err(|why| (shape, why)),
            Err(refused) => Err(*refused),
        };
        match outcome {
            Ok(seq) => {
                self.submitted.insert(uid, seq);
                self.by_seq.insert(seq, key.to_string());
                self.refused.remove(key);
                if self.may_write("record the workload on its Job") {
                    let ann = BTreeMap::from([
                        (WORKLOAD.to_string(), seq.to_string()),
                        (STORE.to_string(), self.opts.store.clone()),
                    ]);
                    self.annotate_later(key, ann);
                }
                tracing::info!(cluster = %self.opts.cluster, job = %key, workload = seq, "Job ingested");
                Some(Ok(seq))
            }
            Err((shape, why)) => {
                tracing::warn!(cluster = %self.opts.cluster, job = %key, reason = %why, "Job refused");
                let seq = front.reject(shape, why.clone()).await;
                let text = match seq {
                    Some(seq) => format!("{why} (workload {seq}, rejected; fix the Job and create it again)"),
                    None => why.clone(),
                };
                self.refused.insert(key.to_string(), (version, why.clone()));
                let mut ann = BTreeMap::from([(REASON.to_string(), text.clone())]);
                if let Some(seq) = seq {
                    ann.insert(WORKLOAD.to_string(), seq.to_string());
                    ann.insert(STORE.to_string(), self.opts.store.clone());
                }
                if self.may_write("write a refusal on a Job") {
                    let _ = self.patch_job(key, None, ann).await;
                    self.publish(key, "Refused", &text).await;
                    self.written.insert(key.to_string(), (text, Instant::now()));
                }
                Some(Err(why))
            }
        }
    }

    // ------------------------------------------------------------ reasons

    async fn tick(&mut self) {
        if !self.waiting.is_empty() && self.jobs_listed && self.pods_listed {
            self.after_listing().await;
        }
        self.check_survivors();
        // Only stopped attempts wait for their pods to go; running ones end
        // on their Job's events.
        let keys: Vec<String> =
            self.attempts.values().filter(|a| a.stop.is_some() || a.orphan).map(|a| a.job.clone()).collect();
        for k in keys {
            self.settle(&k);
        }
        if self.last_reasons.elapsed() >= REASON_EVERY {
            self.last_reasons = Instant::now();
            self.write_reasons().await;
        }
    }

    /// Writes each waiting Job's reason where it changed, at most once per
    /// [`REASON_MIN_GAP`] per Job (K8S-6).
    async fn write_reasons(&mut self) {
        let Some(front) = self.front.clone() else { return };
        let waiting: Vec<(i64, String)> = self
            .jobs
            .iter()
            .filter(|(k, j)| {
                suspended(j) && !self.attempts.values().any(|a| &a.job == *k) && !self.refused.contains_key(*k)
            })
            .filter_map(|(k, j)| match owner(j, &self.opts.store) {
                Owner::Ours(seq) => Some((seq, k.clone())),
                _ => None,
            })
            .collect();
        if waiting.is_empty() {
            return;
        }
        let reasons = front.reasons(waiting.iter().map(|(s, _)| *s).collect()).await;
        let mut writes = 0;
        for ((_, key), reason) in waiting.into_iter().zip(reasons) {
            if writes >= REASON_WRITES_PER_ROUND {
                break;
            }
            let Some(reason) = reason else { continue };
            let reason: String = reason.chars().take(1000).collect();
            let fresh = match self.written.get(&key) {
                Some((r, _)) if *r == reason => false,
                Some((_, at)) if at.elapsed() < REASON_MIN_GAP => false,
                _ => true,
            };
            if !fresh || !self.may_write("write a Job's reason") {
                continue;
            }
            writes += 1;
            self.annotate_later(&key, BTreeMap::from([(REASON.to_string(), reason.clone())]));
            self.publish(&key, "Waiting", &reason).await;
            self.written.insert(key, (reason, Instant::now()));
        }
    }

    /// An Event on Job `key` (K8S-6), published beside the loop.
    async fn publish(&self, key: &str, reason: &str, note: &str) {
        let Some(j) = self.jobs.get(key) else { return };
        let ev = KubeEvent {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Schedule".into(),
            secondary: None,
        };
        let (recorder, reference, key) = (self.recorder.clone(), j.object_ref(&()), key.to_string());
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::debug!(job = %key, error = %e, "cannot publish an Event");
            }
        });
    }
}

/// A merge patch of Job `name`: `suspend` and annotations.
async fn patch_job(
    api: Api<Job>,
    name: &str,
    suspend: Option<bool>,
    annotations: BTreeMap<String, String>,
) -> Result<(), kube::Error> {
    let patch = Job {
        metadata: ObjectMeta { annotations: Some(annotations).filter(|a| !a.is_empty()), ..ObjectMeta::default() },
        spec: suspend.map(|s| JobSpec { suspend: Some(s), ..JobSpec::default() }),
        status: None,
    };
    let mut value = serde_json::to_value(&patch).expect("a Job serialises");
    // A typed JobSpec always carries its (required) template: an empty
    // object, which a merge patch leaves as it is — dropped to be plain.
    if let Some(spec) = value.get_mut("spec").and_then(|s| s.as_object_mut()) {
        spec.remove("template");
    }
    api.patch(name, &PatchParams::default(), &Patch::Merge(&value)).await.map(|_| ())
}

fn key_of<K: ResourceExt>(o: &K) -> String {
    format!("{}/{}", o.namespace().unwrap_or_else(|| "default".into()), o.name_any())
}

fn annotation<'a, K: ResourceExt>(o: &'a K, key: &str) -> Option<&'a str> {
    o.annotations().get(key).map(String::as_str)
}

/// Whose Job `j` is: this store's (its workload), another store's, or
/// nobody's yet.
enum Owner {
    Ours(i64),
    Foreign,
    New,
}

fn owner(j: &Job, store: &str) -> Owner {
    match annotation(j, STORE) {
        Some(s) if s == store => {
            annotation(j, WORKLOAD).and_then(|w| w.parse().ok()).map_or(Owner::Foreign, Owner::Ours)
        }
        Some(_) => Owner::Foreign,
        None => Owner::New,
    }
}

fn job_of_name(p: &Pod) -> Option<&str> {
    p.labels().get(JOB_NAME).map(String::as_str)
}

fn job_of(p: &Pod) -> Option<String> {
    Some(format!("{}/{}", p.namespace()?, job_of_name(p)?))
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

fn suspended(j: &Job) -> bool {
    j.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false)
}

fn condition(j: &Job, kind: &str) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == kind && c.status == "True"))
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}
