//! The local executor: each attempt is one child process group per node of
//! its allocation, all on this host (a multi-node allocation is emulated
//! the way `srun` launches one task per node).
//!
//! * Each process runs in a new process group (pgid = pid), stdin from
//!   `/dev/null`, stdout and stderr appended to the attempt's log file.
//! * Its environment is the server's without the server's own `ALLOT_*`
//!   and `SLURM_*` job context, plus the submission's `env`; it adds
//!   `CUDA_VISIBLE_DEVICES` (its own node's GPUs, with
//!   `CUDA_DEVICE_ORDER=PCI_BUS_ID` so that indices mean what `nvidia-smi`
//!   shows, or UUIDs when the inventory is the hardware's),
//!   `ALLOT_NODE`, `ALLOT_NODE_RANK`, `ALLOT_NUM_NODES`,
//!   `ALLOT_WORKLOAD_ID`, `ALLOT_CHECKPOINT_DIR` (the same directory for
//!   every attempt), `ALLOT_ATTEMPT`, `ALLOT_GPUS` (`node:i,j;node:k`, the
//!   whole allocation) and `ALLOT_TAG`, a marker naming the store (its
//!   random instance id) and the attempt, by which a restarted server finds
//!   processes that outlived it.
//! * The attempt ends when every node's process has exited; its status is
//!   the first failure's (any other node's process is then killed: a gang
//!   with a dead member cannot go on), else success.
//! * Preemption (CON-2): SIGTERM to every group; the scheduler sends SIGKILL
//!   when the grace period is over. When a process exits, whatever is left
//!   of its group is killed.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::inventory::DeviceMap;
use super::{AttemptKey, BoxFuture, ExecEvent, Executor, ExitStatus, Launch, NodeGpus, Survivor};

pub struct LocalExecutor {
    events: mpsc::UnboundedSender<ExecEvent>,
    /// Process groups of each live attempt (one per node).
    groups: Arc<Mutex<HashMap<AttemptKey, Vec<i32>>>>,
    /// Identifies this store's processes (`ALLOT_TAG` prefix).
    instance: String,
    /// How GPUs are named to CUDA (empty: by index).
    devices: DeviceMap,
}

impl LocalExecutor {
    /// `instance` identifies the store: processes are tagged with it.
    /// `devices` names each node's GPUs to CUDA (see `inventory`).
    pub fn new(events: mpsc::UnboundedSender<ExecEvent>, instance: &str, devices: DeviceMap) -> LocalExecutor {
        LocalExecutor { events, groups: Arc::new(Mutex::new(HashMap::new())), instance: instance.to_string(), devices }
    }

    fn tag(&self, key: AttemptKey) -> String {
        format!("{}#{}.{}", self.instance, key.seq, key.attempt)
    }

    /// `CUDA_VISIBLE_DEVICES` for one node's GPUs.
    fn visible(&self, n: &NodeGpus) -> String {
        let names = self.devices.get(&n.node);
        let name = |i: u32| names.and_then(|v| v.get(i as usize)).cloned().unwrap_or_else(|| i.to_string());
        n.indices.iter().map(|&i| name(i)).collect::<Vec<_>>().join(",")
    }

    fn open_log(job: &Launch) -> Result<File, String> {
        fs::create_dir_all(&job.checkpoint_dir)
            .map_err(|e| format!("cannot create {}: {e}", job.checkpoint_dir.display()))?;
        if let Some(dir) = job.log_path.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&job.log_path)
            .map_err(|e| format!("cannot open {}: {e}", job.log_path.display()))
    }

    /// Starts the process of node `rank` (a gang of one node when the
    /// allocation is empty).
    fn spawn(&self, job: &Launch, rank: usize, log: &File) -> Result<tokio::process::Child, String> {
        let program = job.command.first().ok_or("empty command")?;
        let reopen = || log.try_clone().map_err(|e| format!("cannot open {}: {e}", job.log_path.display()));
        let (out, err) = (reopen()?, reopen()?);
        let node = job.gpus.get(rank);
        let all: Vec<String> = job.gpus.iter().map(|n| format!("{}:{}", n.node, join(&n.indices))).collect();
        let mut cmd = tokio::process::Command::new(program);
        for k in super::server_only_env(true) {
            cmd.env_remove(k);
        }
        cmd.args(&job.command[1..])
            .envs(&job.env)
            .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            .env("CUDA_VISIBLE_DEVICES", node.map(|n| self.visible(n)).unwrap_or_default())
            .env("ALLOT_NODE", node.map_or("", |n| n.node.as_str()))
            .env("ALLOT_NODE_RANK", rank.to_string())
            .env("ALLOT_NUM_NODES", job.gpus.len().max(1).to_string())
            .env("ALLOT_WORKLOAD_ID", &job.workload_id)
            .env("ALLOT_CHECKPOINT_DIR", &job.checkpoint_dir)
            .env("ALLOT_ATTEMPT", job.key.attempt.to_string())
            .env("ALLOT_GPUS", all.join(";"))
            .env("ALLOT_TAG", self.tag(job.key))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(false);
        cmd.spawn().map_err(|e| format!("cannot start {program:?}: {e}"))
    }

    /// Starts every node's process, or none: a failure kills (and reaps)
    /// those already started.
    fn spawn_all(&self, job: &Launch) -> Result<Vec<tokio::process::Child>, String> {
        let log = Self::open_log(job)?;
        let mut children = Vec::with_capacity(job.gpus.len().max(1));
        for rank in 0..job.gpus.len().max(1) {
            match self.spawn(job, rank, &log) {
                Ok(c) => children.push(c),
                Err(e) => {
                    for mut c in children {
                        if let Some(pid) = c.id() {
                            killpg(pid as i32, libc::SIGKILL);
                        }
                        tokio::spawn(async move { c.wait().await });
                    }
                    return Err(e);
                }
            }
        }
        Ok(children)
    }

    fn send_groups(&self, key: AttemptKey, sig: i32) {
        let pgids = self.groups.lock().expect("process groups").get(&key).cloned().unwrap_or_default();
        for pgid in pgids {
            killpg(pgid, sig);
        }
    }
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn killpg(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: killpg has no memory-safety preconditions.
        unsafe {
            libc::killpg(pgid, sig);
        }
    }
}

fn kill(pid: i32, sig: i32) {
    if pid > 1 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Waits for every node's process; the first failure kills the others.
async fn wait_gang(children: Vec<tokio::process::Child>) -> ExitStatus {
    let mut pids = Vec::with_capacity(children.len());
    let mut set = JoinSet::new();
    for mut child in children {
        let pid = child.id().map_or(0, |p| p as i32);
        pids.push(pid);
        set.spawn(async move {
            let status = match child.wait().await {
                Ok(s) => ExitStatus { code: s.code(), signal: s.signal() },
                Err(_) => ExitStatus { code: None, signal: None },
            };
            // Whatever the process left behind in its group goes too.
            killpg(pid, libc::SIGKILL);
            status
        });
    }
    let mut first_failure = None;
    while let Some(done) = set.join_next().await {
        let status = done.unwrap_or(ExitStatus { code: None, signal: None });
        if !status.success() && first_failure.is_none() {
            first_failure = Some(status);
            for &pid in &pids {
                killpg(pid, libc::SIGKILL);
            }
        }
    }
    first_failure.unwrap_or(ExitStatus { code: Some(0), signal: None })
}

impl Executor for LocalExecutor {
    fn name(&self) -> &'static str {
        "local"
    }

    fn launch(&self, job: Launch) {
        let key = job.key;
        let children = match self.spawn_all(&job) {
            Ok(c) => c,
            Err(error) => {
                tracing::warn!(workload = %job.workload_id, attempt = key.attempt, %error, "launch failed");
                let _ = self.events.send(ExecEvent::LaunchFailed { key, error });
                return;
            }
        };
        let pids: Vec<i32> = children.iter().filter_map(|c| c.id()).map(|p| p as i32).collect();
        self.groups.lock().expect("process groups").insert(key, pids.clone());
        let _ = self.events.send(ExecEvent::Started { key, pid: pids[0] as u32 });
        tracing::info!(workload = %job.workload_id, attempt = key.attempt, pid = pids[0], nodes = pids.len(), "started");
        let (events, groups) = (self.events.clone(), self.groups.clone());
        tokio::spawn(async move {
            let status = wait_gang(children).await;
            groups.lock().expect("process groups").remove(&key);
            let _ = events.send(ExecEvent::Exited { key, status });
        });
    }

    fn signal(&self, key: AttemptKey) {
        self.send_groups(key, libc::SIGTERM);
    }

    fn kill(&self, key: AttemptKey) {
        self.send_groups(key, libc::SIGKILL);
    }

    fn terminate_survivors(&self, survivors: Vec<Survivor>, grace: Duration) -> BoxFuture<'_, ()> {
        let tags: Vec<String> = survivors.iter().map(|s| self.tag(s.key)).collect();
        Box::pin(async move {
            if tags.is_empty() {
                return;
            }
            let found = tagged_processes(&tags);
            if found.is_empty() {
                return;
            }
            tracing::warn!(processes = found.len(), "stopping processes that outlived the previous server");
            for &pid in &found {
                killpg(pid, libc::SIGTERM);
                kill(pid, libc::SIGTERM);
            }
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline && !tagged_processes(&tags).is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            for _ in 0..100 {
                let left = tagged_processes(&tags);
                if left.is_empty() {
                    return;
                }
                for &pid in &left {
                    killpg(pid, libc::SIGKILL);
                    kill(pid, libc::SIGKILL);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tracing::error!("processes of a previous server survived SIGKILL for 10 s");
        })
    }
}

/// Live (not zombie) processes whose environment carries one of `tags` as
/// `ALLOT_TAG`.
fn tagged_processes(tags: &[String]) -> Vec<i32> {
    let wanted: Vec<Vec<u8>> = tags.iter().map(|t| format!("ALLOT_TAG={t}").into_bytes()).collect();
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let base = PathBuf::from("/proc").join(pid.to_string());
        let Ok(env) = fs::read(base.join("environ")) else { continue };
        if env.split(|b| *b == 0).any(|var| wanted.iter().any(|w| var == w.as_slice())) && !is_zombie(&base) {
            out.push(pid);
        }
    }
    out
}

fn is_zombie(proc_dir: &Path) -> bool {
    let Ok(stat) = fs::read_to_string(proc_dir.join("stat")) else { return true };
    // The state follows the command name in parentheses.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_none_or(|s| s == "Z" || s == "X")
}
