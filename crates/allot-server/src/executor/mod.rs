//! Executors run what the scheduler decided. They talk to the scheduler
//! only by messages: commands go in through [`Executor`] (never blocking),
//! and what happened comes back as [`ExecEvent`]s on a channel.
//!
//! * [`local::LocalExecutor`]: one child process per node of an
//!   allocation, on this host, each attempt in its own cgroup
//!   ([`cgroup`]); [`inventory`] reads the host's GPUs, to compare with the
//!   config's or to be the inventory.
//! * [`slurm::SlurmExecutor`]: Allot decides, a Slurm cluster runs: one
//!   `sbatch` per attempt on exactly the nodes and GPU counts chosen.
//! * [`fleet::FleetExecutor`]: a fleet of several clusters, each with its
//!   own executor; every command goes to the executor of the attempt's
//!   cluster.
//! * [`health`]: the node model the Slurm and Kubernetes executors share
//!   (a node's health, the node events between two, the nodes' order).
//! * [`telemetry`]: the GPUs of running attempts, sampled through
//!   `nvidia-smi` and reported as [`ExecEvent::Telemetry`] once
//!   [`Executor::start_telemetry`] is called.
//! * [`NullExecutor`] (`--executor none`): decides and records, runs
//!   nothing; workloads hold their GPUs until cancelled (benchmarks, dry
//!   runs of a policy on live submissions).

pub mod cgroup;
pub mod fleet;
pub mod health;
pub mod inventory;
pub mod kubernetes;
pub mod local;
pub mod runas;
pub mod slurm;
pub mod telemetry;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::mpsc;

pub use telemetry::GpuSample;

/// The server's own environment variables a workload must not inherit: its
/// `ALLOT_*` settings (an operator's `ALLOT_TOKEN` would hand every workload
/// the operator's rights; the executors set the workload's own `ALLOT_*`),
/// and with `slurm_context` the `SLURM_*` job context of a server that runs
/// inside a Slurm job (but not `SLURM_CONF`, which says where Slurm is).
pub(crate) fn server_only_env(slurm_context: bool) -> impl Iterator<Item = std::ffi::OsString> {
    std::env::vars_os().map(|(k, _)| k).filter(move |k| {
        let k = k.to_string_lossy();
        k.starts_with("ALLOT_") || (slurm_context && k.starts_with("SLURM_") && k != "SLURM_CONF")
    })
}

/// A pool of two nodes of four H100 (unit tests).
#[cfg(test)]
pub(crate) fn test_pool(name: &str) -> allot_core::PoolSpec {
    allot_core::PoolSpec {
        name: name.into(),
        gpu: allot_core::GpuTypeId(0),
        nodes: 2,
        gpus_per_node: 4,
        rack_size: 2,
        shared: false,
    }
}

/// The GPU types of [`test_pool`] (unit tests).
#[cfg(test)]
pub(crate) fn test_types() -> Vec<allot_core::GpuType> {
    vec![allot_core::GpuType { name: "H100".into(), weight: 1.0 }]
}

/// Identifies one attempt of one workload.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptKey {
    pub seq: i64,
    pub attempt: i64,
}

/// GPUs of one node given to an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeGpus {
    pub node: String,
    pub indices: Vec<u32>,
}

/// Everything needed to start an attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub key: AttemptKey,
    /// The workload's external id.
    pub workload_id: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub gpus: Vec<NodeGpus>,
    /// Kept across attempts (requeued work resumes from it).
    pub checkpoint_dir: PathBuf,
    /// stdout and stderr of this attempt.
    pub log_path: PathBuf,
    /// Where the command starts, an absolute path (a relative program such
    /// as `./train.sh` is found there); `None`: the server's own working
    /// directory, as before workloads had one.
    pub workdir: Option<PathBuf>,
    /// The Unix identity its processes run as (ID-1).
    pub run_as: crate::identity::RunAs,
}

/// How a process ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ExitStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitStatus {
    pub fn success(self) -> bool {
        self.code == Some(0)
    }
}

/// Whose fault a launch failure is: the engine's distinction, which
/// decides what follows (a retry spent, MNT-3, MNT-4).
pub use allot_core::engine::LaunchFault;

/// Why an attempt could not start.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchError {
    pub fault: LaunchFault,
    /// The node whose launch failed; `None`: the allocation as a whole.
    pub node: Option<String>,
    pub message: String,
}

impl LaunchError {
    pub fn workload(message: impl Into<String>) -> LaunchError {
        LaunchError { fault: LaunchFault::Workload, node: None, message: message.into() }
    }

    pub fn infrastructure(message: impl Into<String>) -> LaunchError {
        LaunchError { fault: LaunchFault::Infrastructure, node: None, message: message.into() }
    }

    /// The workload's working directory `dir` cannot be used on `node`
    /// (`why`: "does not exist", …): its setup is missing there (MNT-4).
    pub fn workdir(dir: &std::path::Path, node: &str, why: &str) -> LaunchError {
        let message = format!("working directory {} {why} on {node}", dir.display());
        LaunchError { fault: LaunchFault::Setup, node: Some(node.to_string()), message }
    }

    /// The same error, blamed on one node.
    pub fn on(mut self, node: &str) -> LaunchError {
        self.node = Some(node.to_string());
        self
    }
}

/// Why `dir` cannot be a working directory on this host ("does not
/// exist", "is not a directory", …), or `None` when it can.
pub(crate) fn unusable_dir(dir: &std::path::Path) -> Option<String> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => None,
        Ok(_) => Some("is not a directory".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("does not exist".into()),
        Err(e) => Some(format!("cannot be used ({e})")),
    }
}

/// `error`'s message followed by those of its sources, `: `-separated (for
/// a message that travels as text, such as a [`LaunchError`]'s).
pub fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// What an executor reports.
#[derive(Clone, Debug, PartialEq)]
pub enum ExecEvent {
    /// The attempt's process runs (its pid is also its process group).
    Started { key: AttemptKey, pid: u32 },
    /// The attempt could not be started.
    LaunchFailed { key: AttemptKey, error: LaunchError },
    /// The attempt is over: its first node's process exited, or with the
    /// local executor contained, every process of its cgroup is gone; the
    /// status is the first failing node process's, else success.
    Exited { key: AttemptKey, status: ExitStatus },
    /// The engine changed a node's health (Slurm marked it down, drained
    /// or back in service): applied as that node event (MNT-1/MNT-2),
    /// recorded with `by` as its principal.
    Node { node: String, kind: allot_core::NodeEventKind, by: String },
    /// The executor of the fleet's cluster `cluster` cannot be reached
    /// (FLEET-3): every node of it in service fails (MNT-2), applied as
    /// node events. Sent before the cluster's attempts are reported lost.
    ClusterDown { cluster: String, reason: String },
    /// The cluster answers again and was reconciled (FLEET-4): the nodes
    /// its outage took out return to service.
    ClusterUp { cluster: String },
    /// K8S-11: `gpus` GPUs of `node` are held by work Allot does not
    /// manage (the count now, replacing the last one).
    Outside { node: String, gpus: u32 },
    /// MNT-5: a node of `cluster` that Allot did not know appeared (a
    /// Kubernetes Node joining), with its GPUs and GPU product: capacity
    /// added to the pool it fits.
    NodeAdded { cluster: String, node: String, gpus: u32, product: Option<String> },
    /// One sample of the GPUs the attempt holds, taken at `t` (Unix
    /// seconds): one entry per GPU (see [`telemetry`]). Never sent for a
    /// sample that failed.
    Telemetry { key: AttemptKey, t: allot_core::Time, gpus: Vec<GpuSample> },
}

/// An attempt recorded as holding GPUs when the server last stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct Survivor {
    pub key: AttemptKey,
    pub pid: Option<u32>,
}

/// An attempt recorded as holding GPUs when the server last stopped, that
/// its cluster may still run (K8S-10).
#[derive(Clone, Debug, PartialEq)]
pub struct Adoption {
    pub key: AttemptKey,
    /// Allot's names of its allocation's nodes, in order.
    pub nodes: Vec<String>,
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A backend that runs workloads.
pub trait Executor: Send + Sync {
    fn name(&self) -> &'static str;

    /// Starts an attempt; reports `Started` or `LaunchFailed`, later `Exited`.
    fn launch(&self, job: Launch);

    /// Asks the attempt to stop (SIGTERM to each of its processes).
    fn signal(&self, key: AttemptKey);

    /// Stops the attempt now (SIGKILL to each of its processes).
    fn kill(&self, key: AttemptKey);

    /// At startup, before the survivors are terminated: takes back the
    /// attempts its cluster keeps running through a restart (K8S-10) and
    /// returns their keys; it reports them from then on as attempts it
    /// launched (`Started` once each of its parts runs, `Exited` once
    /// over). The others are the survivors. By default it adopts none.
    fn adopt(&self, _attempts: Vec<Adoption>) -> Vec<AttemptKey> {
        Vec::new()
    }

    /// At startup: makes sure no process of these attempts is left running
    /// (signal, wait up to `grace`, kill), and returns once all are gone.
    fn terminate_survivors(&self, survivors: Vec<Survivor>, grace: Duration) -> BoxFuture<'_, ()>;

    /// Starts sampling the GPUs of every running attempt every `every`,
    /// reported as [`ExecEvent::Telemetry`] on the event channel (see
    /// [`telemetry`]); an executor that runs nothing on GPUs ignores it.
    /// Called at most once, inside the runtime.
    fn start_telemetry(&self, _every: Duration) {}

    /// At a clean stop, once the scheduler has committed its last step:
    /// removes what the executor made on this host and no longer needs
    /// (the local executor's empty cgroups). Running work is left to the
    /// next start. By default there is nothing to remove.
    fn shutdown(&self) {}
}

/// Runs nothing: attempts "start" at once and never end by themselves.
pub struct NullExecutor {
    events: mpsc::UnboundedSender<ExecEvent>,
}

impl NullExecutor {
    pub fn new(events: mpsc::UnboundedSender<ExecEvent>) -> NullExecutor {
        NullExecutor { events }
    }
}

impl Executor for NullExecutor {
    fn name(&self) -> &'static str {
        "none"
    }

    fn launch(&self, job: Launch) {
        let _ = self.events.send(ExecEvent::Started { key: job.key, pid: 0 });
    }

    fn signal(&self, key: AttemptKey) {
        let status = ExitStatus { code: None, signal: Some(libc::SIGTERM) };
        let _ = self.events.send(ExecEvent::Exited { key, status });
    }

    fn kill(&self, key: AttemptKey) {
        self.signal(key);
    }

    fn terminate_survivors(&self, _survivors: Vec<Survivor>, _grace: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
