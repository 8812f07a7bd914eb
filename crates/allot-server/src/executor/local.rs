//! The local executor: each attempt is one child process per node of its
//! allocation, all on this host (a multi-node allocation is emulated the
//! way `srun` launches one task per node).
//!
//! * Contained (the default): each attempt runs in a cgroup of its own
//!   ([`super::cgroup`]), joined before `exec`, so that every process it
//!   starts (`setsid`, double forks, whatever it does to its environment)
//!   is in it. When the node processes have exited, whatever they left
//!   behind is killed (as Slurm and Kubernetes do when a job's or a
//!   container's main process ends), and the attempt ends, and its GPUs are
//!   released, only once the group is empty; stop signals every process in
//!   the group, kill writes `cgroup.kill`; a restarted server kills what is
//!   left in its groups.
//!   Where the v1 devices controller is mounted, each node's processes may
//!   open only that node's `/dev/nvidia*` GPUs.
//! * Uncontained (`allot serve --allow-uncontained`, where no cgroup can be
//!   made): each node's process leads a process group of its own, which is
//!   all that stop and kill reach; a process that leaves its group
//!   (`setsid`) escapes them, and a restarted server finds survivors only
//!   by `ALLOT_TAG`, which a process can drop.
//! * Each process starts in the workload's `workdir` (else the server's
//!   own working directory), where a relative program (`./train.sh`) is
//!   found; a `workdir` that is missing at launch is the workload's setup
//!   fault (MNT-4: failed at once, no retry spent, the node not blamed).
//! * Each process has stdin from `/dev/null`, stdout and stderr appended to
//!   the attempt's log file (created 0600, its directories and the
//!   checkpoint directory 0700: private to the server's user).
//! * Its environment is the server's without the server's own `ALLOT_*`
//!   and `SLURM_*` job context, plus the submission's `env`; it adds
//!   `CUDA_VISIBLE_DEVICES` (its own node's GPUs, with
//!   `CUDA_DEVICE_ORDER=PCI_BUS_ID` so that indices mean what `nvidia-smi`
//!   shows, or UUIDs when the inventory is the hardware's),
//!   `ALLOT_NODE`, `ALLOT_NODE_RANK`, `ALLOT_NUM_NODES`,
//!   `ALLOT_WORKLOAD_ID`, `ALLOT_CHECKPOINT_DIR` (the same directory for
//!   every attempt), `ALLOT_ATTEMPT`, `ALLOT_GPUS` (`node:i,j;node:k`, the
//!   whole allocation) and `ALLOT_TAG`, a marker naming the store (its
//!   random instance id) and the attempt.
//! * Its status is the first failing node process's (the rest of the
//!   attempt is then killed: a gang with a dead member cannot go on), else
//!   success.
//! * Preemption (CON-2): SIGTERM to every process; the scheduler sends
//!   SIGKILL when the grace period is over.
//! * Telemetry ([`super::telemetry`]): once started, one `nvidia-smi`
//!   query of the host's GPUs per interval, split by the GPU indices each
//!   live attempt holds on each of its nodes (they all run on this host).
//! * A launch that fails is reported with whose fault it is
//!   ([`super::LaunchFault`]): a command that cannot be run is the workload's;
//!   no cgroup, log file or checkpoint directory, or a spawn error such as
//!   EMFILE, is the infrastructure's (MNT-3).

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::cgroup::{AttemptGroup, Containment};
use super::inventory::DeviceMap;
use super::runas::{self, Identity};
use super::telemetry::{Held, sample_local};
use super::{AttemptKey, BoxFuture, ExecEvent, Executor, ExitStatus, Launch, LaunchError, NodeGpus, Survivor};

/// How often an attempt's cgroup is checked for emptiness once its node
/// processes have exited.
const EMPTY_POLL: Duration = Duration::from_millis(100);

/// A live attempt: its node processes' groups and, contained, its cgroup;
/// its workload's id and GPUs (for telemetry).
#[derive(Clone)]
struct Running {
    pgids: Vec<i32>,
    group: Option<Arc<AttemptGroup>>,
    workload: String,
    gpus: Vec<NodeGpus>,
}

pub struct LocalExecutor {
    events: mpsc::UnboundedSender<ExecEvent>,
    live: Arc<Mutex<HashMap<AttemptKey, Running>>>,
    /// Identifies this store's processes (`ALLOT_TAG` prefix).
    instance: String,
    /// How GPUs are named to CUDA (empty: by index).
    devices: DeviceMap,
    /// `None`: uncontained (`--allow-uncontained`).
    contain: Option<Arc<Containment>>,
    /// ID-1: workloads never run as a uid below this.
    min_uid: u32,
}

impl LocalExecutor {
    /// `instance` identifies the store: processes are tagged with it.
    /// `devices` names each node's GPUs to CUDA (see `inventory`).
    /// `contain`: the cgroups attempts run in (`None`: uncontained).
    pub fn new(
        events: mpsc::UnboundedSender<ExecEvent>,
        instance: &str,
        devices: DeviceMap,
        contain: Option<Containment>,
    ) -> LocalExecutor {
        LocalExecutor {
            events,
            live: Arc::new(Mutex::new(HashMap::new())),
            instance: instance.to_string(),
            devices,
            contain: contain.map(Arc::new),
            min_uid: allot_trace::config::IdentityConfig::default().min_uid,
        }
    }

    /// Workloads never run as a uid below `min_uid` (`[identity] min_uid`).
    pub fn with_min_uid(mut self, min_uid: u32) -> LocalExecutor {
        self.min_uid = min_uid;
        self
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

    /// The checkpoint directory and the log file, private to the user the
    /// workload runs as (0700 directories, a 0600 file, made without
    /// following anything the workload planted).
    fn open_log(job: &Launch, ident: Option<&Identity>) -> Result<File, LaunchError> {
        runas::private_files(&job.checkpoint_dir, &job.log_path, ident.map(|i| &i.user)).map_err(|e| {
            LaunchError::infrastructure(format!(
                "cannot open {} (or make its directories): {e}",
                job.log_path.display()
            ))
        })
    }

    /// Starts the process of node `rank` (a gang of one node when the
    /// allocation is empty), in `group` when contained.
    fn spawn(
        &self,
        job: &Launch,
        rank: usize,
        log: &File,
        group: Option<&Arc<AttemptGroup>>,
        ident: Option<&Arc<Identity>>,
    ) -> Result<tokio::process::Child, LaunchError> {
        let program = job.command.first().ok_or_else(|| LaunchError::workload("empty command"))?;
        let reopen = || {
            log.try_clone()
                .map_err(|e| LaunchError::infrastructure(format!("cannot open {}: {e}", job.log_path.display())))
        };
        let (out, err) = (reopen()?, reopen()?);
        let node = job.gpus.get(rank);
        let all: Vec<String> = job.gpus.iter().map(|n| format!("{}:{}", n.node, join(&n.indices))).collect();
        let mut cmd = match &job.workdir {
            Some(dir) => {
                // A relative program (`./train.sh`, `bin/x`) is the workload
                // directory's, named as given in argv[0]; a bare name is
                // looked up in PATH.
                let mut cmd = match Path::new(program) {
                    p if p.is_relative() && program.contains('/') => tokio::process::Command::new(dir.join(p)),
                    _ => tokio::process::Command::new(program),
                };
                cmd.arg0(program);
                // As another user, the switch changes directory (as the
                // user, after it); as itself, std does.
                if ident.is_none() {
                    cmd.current_dir(dir);
                }
                cmd
            }
            None => tokio::process::Command::new(program),
        };
        let (visible, rank_s, nodes_s) =
            (node.map(|n| self.visible(n)).unwrap_or_default(), rank.to_string(), job.gpus.len().max(1).to_string());
        let (attempt_s, gpus_s, tag) = (job.key.attempt.to_string(), all.join(";"), self.tag(job.key));
        let checkpoint_dir = job.checkpoint_dir.display().to_string();
        let ours = [
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
            ("CUDA_VISIBLE_DEVICES", visible.as_str()),
            ("ALLOT_NODE", node.map_or("", |n| n.node.as_str())),
            ("ALLOT_NODE_RANK", &rank_s),
            ("ALLOT_NUM_NODES", &nodes_s),
            ("ALLOT_WORKLOAD_ID", &job.workload_id),
            ("ALLOT_CHECKPOINT_DIR", &checkpoint_dir),
            ("ALLOT_ATTEMPT", &attempt_s),
            ("ALLOT_GPUS", &gpus_s),
            ("ALLOT_TAG", &tag),
        ];
        let own = job.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(ours);
        cmd.env_clear()
            .envs(runas::environment(ident.map(|i| &i.user), own))
            .args(&job.command[1..])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(false);
        let (g, id) = (group.cloned(), ident.cloned());
        if g.is_some() || id.is_some() {
            // SAFETY: the hook only makes system calls (`AttemptGroup::join`,
            // `Identity::switch`): the cgroup is joined as root, then root
            // is dropped for good.
            unsafe {
                cmd.pre_exec(move || {
                    if let Some(g) = &g {
                        g.join(rank)?;
                    }
                    match &id {
                        Some(id) => id.switch(),
                        None => Ok(()),
                    }
                });
            }
        }
        let spawned = cmd.spawn().map_err(|e| spawn_error(program, &e));
        spawned.map_err(|e| match node {
            Some(n) => e.on(&n.node),
            None => e,
        })
    }

    /// Starts every node's process, or none: a failure kills (and reaps)
    /// those already started.
    fn spawn_all(&self, job: &Launch) -> Result<(Vec<tokio::process::Child>, Running), LaunchError> {
        let node = job.gpus.first().map_or("this host", |n| n.node.as_str());
        if let Some(dir) = &job.workdir
            && let Some(why) = super::unusable_dir(dir)
        {
            return Err(LaunchError::workdir(dir, node, &why));
        }
        // ID-1: as its submitter's Unix user, resolved now (NSS).
        let ident = Identity::resolve(&job.run_as, self.min_uid, job.workdir.as_deref())
            .map_err(|e| LaunchError::workload(format!("cannot run as its user: {e}")))?
            .map(Arc::new);
        if let Some(id) = &ident
            && let Some(why) = runas::cannot_enter(id.dir(), &id.user)
        {
            return Err(LaunchError::workdir(id.dir(), node, &why));
        }
        let log = Self::open_log(job, ident.as_deref())?;
        let group = match &self.contain {
            Some(c) => {
                let mut own: Vec<Vec<u32>> = job.gpus.iter().map(|n| n.indices.clone()).collect();
                if own.is_empty() {
                    own.push(Vec::new());
                }
                let name = format!("{}.{}", job.key.seq, job.key.attempt);
                let g = c
                    .create(&name, &own)
                    .map_err(|e| LaunchError::infrastructure(format!("cannot make the attempt's cgroup: {e}")))?;
                Some(Arc::new(g))
            }
            None => None,
        };
        let mut children = Vec::with_capacity(job.gpus.len().max(1));
        for rank in 0..job.gpus.len().max(1) {
            match self.spawn(job, rank, &log, group.as_ref(), ident.as_ref()) {
                Ok(c) => children.push(c),
                Err(e) => {
                    abandon(children, group);
                    return Err(e);
                }
            }
        }
        let pgids = children.iter().filter_map(|c| c.id()).map(|p| p as i32).collect();
        Ok((children, Running { pgids, group, workload: job.workload_id.clone(), gpus: job.gpus.clone() }))
    }

    fn running(&self, key: AttemptKey) -> Option<Running> {
        self.live.lock().expect("live attempts").get(&key).cloned()
    }
}

/// Kills and reaps the processes of an attempt that could not start whole,
/// then removes its cgroup.
fn abandon(children: Vec<tokio::process::Child>, group: Option<Arc<AttemptGroup>>) {
    for c in &children {
        if let Some(pid) = c.id() {
            killpg(pid as i32, libc::SIGKILL);
        }
    }
    if let Some(g) = &group {
        g.kill();
    }
    tokio::spawn(async move {
        for mut c in children {
            let _ = c.wait().await;
        }
        if let Some(g) = group {
            g.wait_empty(EMPTY_POLL).await;
            g.remove();
        }
    });
}

/// Whose fault a spawn error is: a program that cannot be run is the
/// workload's; anything else (EMFILE, ENOMEM, EAGAIN, a cgroup that cannot
/// be joined) is the infrastructure's.
fn spawn_error(program: &str, e: &std::io::Error) -> LaunchError {
    let message = format!("cannot start {program:?}: {e}");
    match e.raw_os_error() {
        Some(
            libc::ENOENT
            | libc::EACCES
            | libc::ENOEXEC
            | libc::ENOTDIR
            | libc::EISDIR
            | libc::ELOOP
            | libc::ENAMETOOLONG
            | libc::E2BIG
            | libc::ETXTBSY,
        ) => LaunchError::workload(message),
        _ => LaunchError::infrastructure(message),
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

/// Waits for every node's process. Uncontained, what a process left in its
/// process group is killed when it exits; the first failure kills the
/// other nodes' processes (contained: the whole cgroup).
async fn wait_gang(children: Vec<tokio::process::Child>, group: Option<&AttemptGroup>) -> ExitStatus {
    let mut pids = Vec::with_capacity(children.len());
    let mut set = JoinSet::new();
    for mut child in children {
        let pid = child.id().map_or(0, |p| p as i32);
        pids.push(pid);
        set.spawn(async move {
            match child.wait().await {
                Ok(s) => (pid, ExitStatus { code: s.code(), signal: s.signal() }),
                Err(_) => (pid, ExitStatus { code: None, signal: None }),
            }
        });
    }
    let mut first_failure = None;
    while let Some(done) = set.join_next().await {
        let (pid, status) = done.unwrap_or((0, ExitStatus { code: None, signal: None }));
        if group.is_none() {
            killpg(pid, libc::SIGKILL);
        }
        if !status.success() && first_failure.is_none() {
            first_failure = Some(status);
            match group {
                Some(g) => g.kill(),
                None => pids.iter().for_each(|&p| killpg(p, libc::SIGKILL)),
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
        let (children, running) = match self.spawn_all(&job) {
            Ok(c) => c,
            Err(error) => {
                tracing::warn!(workload = %job.workload_id, attempt = key.attempt, error = %error.message,
                    fault = ?error.fault, node = ?error.node, "launch failed");
                let _ = self.events.send(ExecEvent::LaunchFailed { key, error });
                return;
            }
        };
        let first = running.pgids.first().copied().unwrap_or(0);
        self.live.lock().expect("live attempts").insert(key, running.clone());
        let _ = self.events.send(ExecEvent::Started { key, pid: first as u32 });
        tracing::info!(workload = %job.workload_id, attempt = key.attempt, pid = first, nodes = children.len(),
            cgroup = ?running.group.as_ref().map(|g| g.path().display().to_string()), "started");
        let (events, live) = (self.events.clone(), self.live.clone());
        tokio::spawn(async move {
            let status = wait_gang(children, running.group.as_deref()).await;
            if let Some(g) = &running.group {
                // Whatever the node processes left behind dies with them;
                // the attempt (and its GPUs) ends once it is gone.
                if g.populated() {
                    tracing::info!(
                        workload = key.seq,
                        attempt = key.attempt,
                        processes = g.pids().len(),
                        "node processes exited: killing what they left in the attempt's cgroup"
                    );
                    g.kill();
                }
                g.wait_empty(EMPTY_POLL).await;
                g.remove();
            }
            live.lock().expect("live attempts").remove(&key);
            let _ = events.send(ExecEvent::Exited { key, status });
        });
    }

    fn signal(&self, key: AttemptKey) {
        match self.running(key) {
            Some(Running { group: Some(g), .. }) => g.signal(libc::SIGTERM),
            Some(r) => r.pgids.iter().for_each(|&p| killpg(p, libc::SIGTERM)),
            None => {}
        }
    }

    fn kill(&self, key: AttemptKey) {
        match self.running(key) {
            Some(Running { group: Some(g), .. }) => g.kill(),
            Some(r) => r.pgids.iter().for_each(|&p| killpg(p, libc::SIGKILL)),
            None => {}
        }
    }

    fn start_telemetry(&self, every: Duration) {
        let live = self.live.clone();
        let held = move || {
            let live = live.lock().expect("live attempts");
            live.iter().map(|(k, r)| Held { key: *k, workload: r.workload.clone(), gpus: r.gpus.clone() }).collect()
        };
        tokio::spawn(sample_local(every, held, self.events.clone()));
    }

    /// Removes the empty cgroups this server made (issue 30, point 17): a
    /// clean stop with nothing running leaves no group behind.
    fn shutdown(&self) {
        if let Some(c) = &self.contain {
            let left = c.remove_empty();
            if left > 0 {
                tracing::info!(groups = left, "cgroups of running attempts are left to the next start");
            }
        }
    }

    fn terminate_survivors(&self, survivors: Vec<Survivor>, grace: Duration) -> BoxFuture<'_, ()> {
        let tags: Vec<String> = survivors.iter().map(|s| self.tag(s.key)).collect();
        Box::pin(async move {
            if let Some(c) = &self.contain {
                stop_groups(c.existing(), grace).await;
            }
            if !tags.is_empty() {
                stop_tagged(&tags, grace).await;
            }
        })
    }
}

/// Stops every process in `groups` (SIGTERM, `grace`, `cgroup.kill`), waits
/// until they are empty and removes them.
async fn stop_groups(groups: Vec<AttemptGroup>, grace: Duration) {
    let live: Vec<&AttemptGroup> = groups.iter().filter(|g| g.populated()).collect();
    if !live.is_empty() {
        let processes: usize = live.iter().map(|g| g.pids().len()).sum();
        tracing::warn!(groups = live.len(), processes, "stopping processes left in the previous server's cgroups");
        live.iter().for_each(|g| g.signal(libc::SIGTERM));
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && live.iter().any(|g| g.populated()) {
            tokio::time::sleep(EMPTY_POLL).await;
        }
        for _ in 0..100 {
            let left: Vec<&&AttemptGroup> = live.iter().filter(|g| g.populated()).collect();
            if left.is_empty() {
                break;
            }
            left.iter().for_each(|g| g.kill());
            tokio::time::sleep(EMPTY_POLL).await;
        }
        if let Some(g) = live.iter().find(|g| g.populated()) {
            tracing::error!(group = %g.path().display(), "processes of a previous server survived cgroup.kill for 10 s");
        }
    }
    groups.iter().filter(|g| !g.populated()).for_each(AttemptGroup::remove);
}

/// Stops processes found by `ALLOT_TAG` (what an uncontained server's
/// attempts left).
async fn stop_tagged(tags: &[String], grace: Duration) {
    let found = tagged_processes(tags);
    if found.is_empty() {
        return;
    }
    tracing::warn!(processes = found.len(), "stopping processes that outlived the previous server");
    for &pid in &found {
        killpg(pid, libc::SIGTERM);
        kill(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && !tagged_processes(tags).is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..100 {
        let left = tagged_processes(tags);
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
