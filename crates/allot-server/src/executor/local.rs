//! The local executor: each attempt is a child process group on this host.
//!
//! * The command runs in a new process group (pgid = pid), stdin from
//!   `/dev/null`, stdout and stderr appended to the attempt's log file.
//! * Its environment adds `CUDA_VISIBLE_DEVICES` (the GPU indices of its
//!   first node; the GPU inventory comes from the config, so this works on
//!   machines without GPUs), `ALLOT_WORKLOAD_ID`, `ALLOT_CHECKPOINT_DIR`
//!   (the same directory for every attempt), `ALLOT_ATTEMPT`,
//!   `ALLOT_GPUS` (`node:i,j;node:k` for multi-node allocations) and
//!   `ALLOT_TAG`, a marker naming the store (its random instance id) and the
//!   attempt, by which a restarted server finds processes that outlived it.
//! * Preemption (CON-2): SIGTERM to the group; the scheduler sends SIGKILL
//!   when the grace period is over. When the group leader exits, whatever is
//!   left of its group is killed.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{AttemptKey, BoxFuture, ExecEvent, Executor, ExitStatus, Launch, Survivor};

pub struct LocalExecutor {
    events: mpsc::UnboundedSender<ExecEvent>,
    /// Process group of each live attempt.
    groups: Arc<Mutex<HashMap<AttemptKey, i32>>>,
    /// Identifies this store's processes (`ALLOT_TAG` prefix).
    instance: String,
}

impl LocalExecutor {
    /// `instance` identifies the store: processes are tagged with it.
    pub fn new(events: mpsc::UnboundedSender<ExecEvent>, instance: &str) -> LocalExecutor {
        LocalExecutor { events, groups: Arc::new(Mutex::new(HashMap::new())), instance: instance.to_string() }
    }

    fn tag(&self, key: AttemptKey) -> String {
        format!("{}#{}.{}", self.instance, key.seq, key.attempt)
    }

    fn spawn(&self, job: &Launch) -> Result<tokio::process::Child, String> {
        let program = job.command.first().ok_or("empty command")?;
        fs::create_dir_all(&job.checkpoint_dir)
            .map_err(|e| format!("cannot create {}: {e}", job.checkpoint_dir.display()))?;
        if let Some(dir) = job.log_path.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&job.log_path)
            .map_err(|e| format!("cannot open {}: {e}", job.log_path.display()))?;
        let err = log.try_clone().map_err(|e| format!("cannot open {}: {e}", job.log_path.display()))?;
        let first = job.gpus.first().map(|n| join(&n.indices)).unwrap_or_default();
        let all: Vec<String> = job.gpus.iter().map(|n| format!("{}:{}", n.node, join(&n.indices))).collect();
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(&job.command[1..])
            .envs(&job.env)
            .env("CUDA_VISIBLE_DEVICES", first)
            .env("ALLOT_WORKLOAD_ID", &job.workload_id)
            .env("ALLOT_CHECKPOINT_DIR", &job.checkpoint_dir)
            .env("ALLOT_ATTEMPT", job.key.attempt.to_string())
            .env("ALLOT_GPUS", all.join(";"))
            .env("ALLOT_TAG", self.tag(job.key))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(false);
        cmd.spawn().map_err(|e| format!("cannot start {program:?}: {e}"))
    }

    fn send_group(&self, key: AttemptKey, sig: i32) {
        let pgid = self.groups.lock().expect("process groups").get(&key).copied();
        if let Some(pgid) = pgid {
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

impl Executor for LocalExecutor {
    fn name(&self) -> &'static str {
        "local"
    }

    fn launch(&self, job: Launch) {
        let key = job.key;
        let mut child = match self.spawn(&job) {
            Ok(c) => c,
            Err(error) => {
                tracing::warn!(workload = %job.workload_id, attempt = key.attempt, %error, "launch failed");
                let _ = self.events.send(ExecEvent::LaunchFailed { key, error });
                return;
            }
        };
        let pid = child.id().expect("a spawned child has a pid");
        self.groups.lock().expect("process groups").insert(key, pid as i32);
        let _ = self.events.send(ExecEvent::Started { key, pid });
        tracing::info!(workload = %job.workload_id, attempt = key.attempt, pid, "started");
        let (events, groups) = (self.events.clone(), self.groups.clone());
        tokio::spawn(async move {
            let status = match child.wait().await {
                Ok(s) => ExitStatus { code: s.code(), signal: s.signal() },
                Err(_) => ExitStatus { code: None, signal: None },
            };
            // Whatever the leader left behind in its group goes too.
            killpg(pid as i32, libc::SIGKILL);
            groups.lock().expect("process groups").remove(&key);
            let _ = events.send(ExecEvent::Exited { key, status });
        });
    }

    fn signal(&self, key: AttemptKey) {
        self.send_group(key, libc::SIGTERM);
    }

    fn kill(&self, key: AttemptKey) {
        self.send_group(key, libc::SIGKILL);
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
