//! One server for a fleet: an executor per cluster of the config, and the
//! [`FleetExecutor`] that routes every command to the executor of the
//! attempt's cluster (the cluster of its allocation's nodes: a gang never
//! spans clusters, FLEET-1). The executors stay independent; their events
//! reach the one scheduler task through the fleet, which forgets an
//! attempt once it is over (and passes telemetry samples on unchanged);
//! each executor samples its own attempts' GPUs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use allot_core::Cluster;
use tokio::sync::mpsc;

use super::{Adoption, AttemptKey, BoxFuture, ExecEvent, Executor, Launch, LaunchError, Survivor};

/// Routes commands to the executor of each attempt's cluster.
pub struct FleetExecutor {
    /// By [`allot_core::cluster::ClusterId`]; clusters of one kind may share
    /// one executor (the host's local executor, the null executor).
    members: Vec<Arc<dyn Executor>>,
    /// Every node's cluster, by Allot's node name (a node that appears,
    /// MNT-5, is added as its event passes).
    node_cluster: Arc<RwLock<HashMap<String, usize>>>,
    /// The cluster each live attempt was launched on.
    placed: Arc<Mutex<HashMap<AttemptKey, usize>>>,
    events: mpsc::UnboundedSender<ExecEvent>,
}

impl FleetExecutor {
    /// `members[i]` runs cluster `i` of `cluster` (by its nodes' current
    /// names); their events arrive on `from_members` and are passed on to
    /// `events`. Must be called inside the runtime.
    pub fn new(
        cluster: &Cluster,
        members: Vec<Arc<dyn Executor>>,
        mut from_members: mpsc::UnboundedReceiver<ExecEvent>,
        events: mpsc::UnboundedSender<ExecEvent>,
    ) -> FleetExecutor {
        assert_eq!(members.len(), cluster.clusters.len(), "one executor per cluster of the fleet");
        let node_cluster: Arc<RwLock<HashMap<String, usize>>> = Arc::new(RwLock::new(
            (0..cluster.nodes.len())
                .map(|i| {
                    let n = allot_core::NodeId(i as u32);
                    (cluster.node(n).name.clone(), cluster.cluster_of(n).0 as usize)
                })
                .collect(),
        ));
        let placed: Arc<Mutex<HashMap<AttemptKey, usize>>> = Arc::default();
        let (forget, out, routes) = (placed.clone(), events.clone(), node_cluster.clone());
        let names = cluster.clusters.clone();
        tokio::spawn(async move {
            while let Some(e) = from_members.recv().await {
                match &e {
                    ExecEvent::Exited { key, .. } | ExecEvent::LaunchFailed { key, .. } => {
                        forget.lock().expect("fleet attempts").remove(key);
                    }
                    ExecEvent::NodeAdded { cluster, node, .. } => {
                        if let Some(c) = names.iter().position(|n| n == cluster) {
                            routes.write().expect("fleet routes").entry(node.clone()).or_insert(c);
                        }
                    }
                    _ => {}
                }
                if out.send(e).is_err() {
                    return;
                }
            }
        });
        FleetExecutor { members, node_cluster, placed, events }
    }

    /// The cluster that runs `job`: that of its nodes, which must all be
    /// of one known cluster.
    pub fn route(&self, job: &Launch) -> Result<usize, LaunchError> {
        self.cluster_of(job.gpus.iter().map(|n| n.node.as_str()))
    }

    /// The cluster of `nodes`, which must all be of one known cluster.
    fn cluster_of<'a>(&self, nodes: impl IntoIterator<Item = &'a str>) -> Result<usize, LaunchError> {
        let mut found = None;
        for n in nodes {
            let Some(&c) = self.node_cluster.read().expect("fleet routes").get(n) else {
                return Err(LaunchError::infrastructure(format!("node {n} is of no cluster of the fleet")));
            };
            match found {
                Some(f) if f != c => {
                    return Err(LaunchError::infrastructure(format!(
                        "the allocation spans clusters (node {n} is not of the first node's cluster): FLEET-1"
                    )));
                }
                _ => found = Some(c),
            }
        }
        found.ok_or_else(|| LaunchError::infrastructure("the allocation has no node"))
    }

    fn member_of(&self, key: AttemptKey) -> Option<&Arc<dyn Executor>> {
        let c = *self.placed.lock().expect("fleet attempts").get(&key)?;
        self.members.get(c)
    }

    /// The distinct executors (clusters may share one).
    fn distinct(&self) -> Vec<&Arc<dyn Executor>> {
        let mut out: Vec<&Arc<dyn Executor>> = Vec::new();
        for m in &self.members {
            if !out.iter().any(|o| Arc::ptr_eq(o, m)) {
                out.push(m);
            }
        }
        out
    }
}

impl Executor for FleetExecutor {
    fn name(&self) -> &'static str {
        "fleet"
    }

    fn launch(&self, job: Launch) {
        match self.route(&job) {
            Ok(c) => {
                self.placed.lock().expect("fleet attempts").insert(job.key, c);
                self.members[c].launch(job);
            }
            Err(error) => {
                tracing::warn!(workload = %job.workload_id, attempt = job.key.attempt, error = %error.message, "cannot route the launch");
                let _ = self.events.send(ExecEvent::LaunchFailed { key: job.key, error });
            }
        }
    }

    fn signal(&self, key: AttemptKey) {
        if let Some(m) = self.member_of(key) {
            m.signal(key);
        }
    }

    fn kill(&self, key: AttemptKey) {
        if let Some(m) = self.member_of(key) {
            m.kill(key);
        }
    }

    /// Each executor samples the attempts it runs (once, when shared).
    fn start_telemetry(&self, every: Duration) {
        for m in self.distinct() {
            m.start_telemetry(every);
        }
    }

    /// Each attempt goes to the executor of its nodes' cluster, which
    /// adopts it or not; the adopted ones are routed there from now on.
    fn adopt(&self, attempts: Vec<Adoption>) -> Vec<AttemptKey> {
        let mut by_cluster: BTreeMap<usize, Vec<Adoption>> = BTreeMap::new();
        for a in attempts {
            match self.cluster_of(a.nodes.iter().map(String::as_str)) {
                Ok(c) => by_cluster.entry(c).or_default().push(a),
                Err(e) => {
                    tracing::warn!(workload = a.key.seq, attempt = a.key.attempt, error = %e.message, "not adopted")
                }
            }
        }
        let mut adopted = Vec::new();
        for (c, list) in by_cluster {
            let keys = self.members[c].adopt(list);
            let mut placed = self.placed.lock().expect("fleet attempts");
            placed.extend(keys.iter().map(|k| (*k, c)));
            adopted.extend(keys);
        }
        adopted
    }

    /// Each executor looks for its own: the local one by its cgroups and
    /// tags, each Slurm one every job of its store (user and comment) on
    /// its cluster; none stops what is not its own. Run one after the other.
    fn shutdown(&self) {
        for m in self.distinct() {
            m.shutdown();
        }
    }

    fn terminate_survivors(&self, survivors: Vec<Survivor>, grace: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            for m in self.distinct() {
                m.terminate_survivors(survivors.clone(), grace).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{ExitStatus, NodeGpus};

    /// Records the commands it gets.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<String>>,
        /// Adopts what it is offered (as a Kubernetes cluster does).
        adopts: bool,
    }

    impl Executor for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn launch(&self, job: Launch) {
            self.calls.lock().unwrap().push(format!("launch {}", job.key.seq));
        }
        fn signal(&self, key: AttemptKey) {
            self.calls.lock().unwrap().push(format!("signal {}", key.seq));
        }
        fn kill(&self, key: AttemptKey) {
            self.calls.lock().unwrap().push(format!("kill {}", key.seq));
        }
        fn terminate_survivors(&self, s: Vec<Survivor>, _grace: Duration) -> BoxFuture<'_, ()> {
            self.calls.lock().unwrap().push(format!("survivors {}", s.len()));
            Box::pin(async {})
        }
        fn start_telemetry(&self, every: Duration) {
            self.calls.lock().unwrap().push(format!("telemetry {}", every.as_secs()));
        }
        fn adopt(&self, attempts: Vec<Adoption>) -> Vec<AttemptKey> {
            let seqs: Vec<String> = attempts.iter().map(|a| a.key.seq.to_string()).collect();
            self.calls.lock().unwrap().push(format!("adopt {}", seqs.join(",")));
            if self.adopts { attempts.iter().map(|a| a.key).collect() } else { Vec::new() }
        }
    }

    fn fleet() -> Cluster {
        use crate::executor::{test_pool, test_types};
        let clusters =
            vec![("a".into(), vec![test_pool("gpu")]), ("b".into(), vec![test_pool("gpu"), test_pool("big")])];
        Cluster::fleet("f", test_types(), clusters)
    }

    fn job(seq: i64, nodes: &[&str]) -> Launch {
        Launch {
            run_as: crate::identity::RunAs::Server,
            key: AttemptKey { seq, attempt: 1 },
            workload_id: seq.to_string(),
            command: vec!["true".into()],
            env: Default::default(),
            gpus: nodes.iter().map(|n| NodeGpus { node: n.to_string(), indices: vec![0] }).collect(),
            checkpoint_dir: "/ck".into(),
            log_path: "/log".into(),
            workdir: None,
        }
    }

    fn calls(r: &Recorder) -> Vec<String> {
        r.calls.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn routes_every_command_to_the_attempts_cluster() {
        let (a, b) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        let (member_tx, member_rx) = mpsc::unbounded_channel();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let members: Vec<Arc<dyn Executor>> = vec![a.clone(), b.clone()];
        let f = FleetExecutor::new(&fleet(), members, member_rx, tx);
        f.launch(job(1, &["a/gpu-0", "a/gpu-1"]));
        f.launch(job(2, &["b/big-1"]));
        f.signal(AttemptKey { seq: 2, attempt: 1 });
        f.kill(AttemptKey { seq: 1, attempt: 1 });
        f.kill(AttemptKey { seq: 9, attempt: 1 });
        assert_eq!(calls(&a), ["launch 1", "kill 1"]);
        assert_eq!(calls(&b), ["launch 2", "signal 2"], "a command goes to the attempt's cluster only");
        // Once over, the attempt is forgotten: a late kill goes nowhere.
        let over = ExecEvent::Exited {
            key: AttemptKey { seq: 2, attempt: 1 },
            status: ExitStatus { code: Some(0), signal: None },
        };
        member_tx.send(over.clone()).unwrap();
        assert_eq!(rx.recv().await, Some(over), "the member's event reaches the scheduler");
        f.kill(AttemptKey { seq: 2, attempt: 1 });
        assert_eq!(calls(&b), ["launch 2", "signal 2"]);
        f.terminate_survivors(vec![Survivor { key: AttemptKey { seq: 5, attempt: 1 }, pid: None }], Duration::ZERO)
            .await;
        assert_eq!(calls(&a).last().map(String::as_str), Some("survivors 1"), "each executor finds its own");
        assert_eq!(calls(&b).last().map(String::as_str), Some("survivors 1"));
        f.start_telemetry(Duration::from_secs(7));
        assert_eq!(calls(&a).last().map(String::as_str), Some("telemetry 7"), "each executor samples its own");
        assert_eq!(calls(&b).last().map(String::as_str), Some("telemetry 7"));
        // A member's sample reaches the scheduler, and the attempt is not forgotten.
        f.launch(job(3, &["b/gpu-0"]));
        let key = AttemptKey { seq: 3, attempt: 1 };
        let gpus = vec![crate::executor::GpuSample {
            node: "b/gpu-0".into(),
            index: 0,
            util: 0.5,
            mem_used_mib: 1,
            mem_total_mib: 2,
        }];
        let sample = ExecEvent::Telemetry { key, t: 9, gpus };
        member_tx.send(sample.clone()).unwrap();
        assert_eq!(rx.recv().await, Some(sample));
        f.kill(key);
        assert_eq!(calls(&b).last().map(String::as_str), Some("kill 3"), "still routed after a sample");
    }

    #[tokio::test]
    async fn refuses_an_allocation_across_clusters_or_of_unknown_nodes() {
        let shared: Arc<dyn Executor> = Arc::new(Recorder::default());
        let (_member_tx, member_rx) = mpsc::unbounded_channel();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let f = FleetExecutor::new(&fleet(), vec![shared.clone(), shared], member_rx, tx);
        assert_eq!(f.distinct().len(), 1, "a shared executor is asked once");
        for (nodes, why) in [(&["a/gpu-0", "b/gpu-0"][..], "spans clusters"), (&["c/gpu-0"][..], "no cluster")] {
            f.launch(job(3, nodes));
            match rx.recv().await {
                Some(ExecEvent::LaunchFailed { error, .. }) => {
                    assert!(error.message.contains(why), "{nodes:?}: {}", error.message);
                    assert_eq!(error.fault, crate::executor::LaunchFault::Infrastructure);
                }
                other => panic!("{nodes:?}: {other:?}"),
            }
        }
        assert_eq!(f.route(&job(4, &["b/big-0", "b/gpu-1"])).unwrap(), 1);
    }

    /// MNT-5: a node that appears is routed to its cluster once its event
    /// has passed on to the scheduler.
    #[tokio::test]
    async fn routes_a_node_that_appears_to_its_cluster() {
        let (a, b) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        let (member_tx, member_rx) = mpsc::unbounded_channel();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let f = FleetExecutor::new(&fleet(), vec![a.clone(), b.clone()], member_rx, tx);
        assert!(f.route(&job(1, &["b/node-9"])).is_err(), "unknown before it appears");
        let added = ExecEvent::NodeAdded { cluster: "b".into(), node: "b/node-9".into(), gpus: 8, product: None };
        member_tx.send(added.clone()).unwrap();
        assert_eq!(rx.recv().await, Some(added));
        f.launch(job(1, &["b/node-9"]));
        assert_eq!(calls(&b), ["launch 1"]);
        assert!(calls(&a).is_empty());
    }

    /// K8S-10: each attempt is offered to its nodes' cluster only; what
    /// that executor adopts is routed there from then on, what it does
    /// not (or what no cluster has) is not adopted.
    #[tokio::test]
    async fn offers_each_attempt_to_its_cluster_and_routes_what_is_adopted() {
        let a = Arc::new(Recorder::default());
        let b = Arc::new(Recorder { adopts: true, ..Recorder::default() });
        let (_member_tx, member_rx) = mpsc::unbounded_channel();
        let (tx, _rx) = mpsc::unbounded_channel();
        let f = FleetExecutor::new(&fleet(), vec![a.clone(), b.clone()], member_rx, tx);
        let offer = |seq: i64, nodes: &[&str]| Adoption {
            key: AttemptKey { seq, attempt: 2 },
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
        };
        let adopted = f.adopt(vec![
            offer(1, &["a/gpu-0"]),
            offer(2, &["b/big-0", "b/big-1"]),
            offer(3, &["c/gpu-0"]),
            offer(4, &["a/gpu-0", "b/gpu-0"]),
        ]);
        assert_eq!(adopted, [AttemptKey { seq: 2, attempt: 2 }]);
        assert_eq!(calls(&a), ["adopt 1"]);
        assert_eq!(calls(&b), ["adopt 2"], "unknown nodes and spans are offered to no one");
        f.signal(AttemptKey { seq: 2, attempt: 2 });
        f.kill(AttemptKey { seq: 1, attempt: 2 });
        assert_eq!(calls(&b).last().map(String::as_str), Some("signal 2"), "an adopted attempt is routed");
        assert_eq!(calls(&a), ["adopt 1"], "one not adopted is not");
    }
}
