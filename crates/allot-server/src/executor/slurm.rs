//! The Slurm executor: Allot decides, a real Slurm cluster runs.
//!
//! * Inventory: the config's nodes, in order, are the partition's Slurm
//!   nodes in natural name order (`sinfo`); each must have at least the
//!   GPUs its config node declares. Allot's nodes take the Slurm names, so
//!   `allot nodes`, drains and allocations speak Slurm's language.
//! * Launch: one `sbatch` per attempt, exactly where Allot placed it:
//!   `--nodelist` of its nodes, one task per node, `--gres=gpu:K` when every
//!   node has K GPUs; an uneven allocation is a heterogeneous job of one
//!   component per node (`--nodelist=NODE -N1 --ntasks=1 --gres=gpu:K`;
//!   Slurm starts those from its backfill scheduler). The batch script
//!   starts the command on every node with `srun` (one task per node,
//!   `--kill-on-bad-exit`), with `ALLOT_NODE` / `ALLOT_NODE_RANK` from
//!   Slurm's node name and id; Slurm sets `CUDA_VISIBLE_DEVICES`.
//!   Output is appended to the attempt's log file.
//! * Preemption (CON-2): `scancel --signal=TERM JOB` (the job's steps, i.e.
//!   the command on every node); at the end of grace `scancel
//!   --signal=KILL --full JOB` and `scancel JOB`.
//! * State: every poll interval one `squeue --jobs=<tracked ids>` (text
//!   output: Slurm 22.05's `--json` ignores filters); a job seen running is
//!   `Started` (its "pid" is the Slurm job id), a job in a final state is
//!   `Exited`: success for `COMPLETED`; otherwise the command's exit code
//!   where Slurm derived one, else the batch script's, read from the full
//!   `squeue --json` listing only then.
//! * Node health: `sinfo` every 2 s; a node Slurm marks down (or not
//!   responding) fails in Allot (MNT-2), a drained one is drained (MNT-1),
//!   and it comes back when Slurm returns it to service.
//! * Environment: `sbatch` runs with the server's own environment (less
//!   its `ALLOT_*` variables), never the workload's: the workload's `env`
//!   and Allot's `ALLOT_*` variables are set by `env` on the task's command
//!   line inside the batch script, so nothing a submitter writes can steer
//!   `sbatch` or `srun` (sbatch(1): environment options apply unless the
//!   command line overrides them).
//! * Ownership: jobs are named `allot-<store instance>-<seq>.<attempt>` and
//!   carry `--comment=allot-store=<store instance>`. A restarted server
//!   finds the jobs that outlived it by name and stops only those that are
//!   also its own by submitting user and comment: a job of the same name
//!   that another user (or another store) submitted is left alone.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use allot_core::{Cluster, NodeEventKind};
use serde::Deserialize;
use tokio::process::Command;
use tokio::sync::mpsc;

use super::{AttemptKey, BoxFuture, ExecEvent, Executor, ExitStatus, Launch, Survivor};

/// `allot serve --executor slurm` options.
#[derive(Clone, Debug, Default)]
pub struct SlurmOptions {
    /// The partition Allot's nodes are in (default: Slurm's default).
    pub partition: Option<String>,
    /// More `sbatch` options for every node's component (e.g.
    /// `--mem-per-gpu=100G`).
    pub sbatch_args: Vec<String>,
}

/// An attempt's Slurm job, as far as we know it.
#[derive(Default)]
struct Slot {
    job: Option<u64>,
    started: bool,
    /// Asked to stop (SIGTERM) or to die (SIGKILL) before the job id was known.
    term: bool,
    kill: bool,
    /// Polls in a row that did not list the job.
    missing: u32,
}

type Slots = Arc<Mutex<HashMap<AttemptKey, Slot>>>;

pub struct SlurmExecutor {
    events: mpsc::UnboundedSender<ExecEvent>,
    slots: Slots,
    instance: String,
    opts: SlurmOptions,
    /// Where batch scripts are written.
    script_dir: PathBuf,
}

/// How often `squeue` is asked.
const POLL: Duration = Duration::from_millis(500);
/// A tracked job missing from this many polls in a row is lost.
const MISSING_POLLS: u32 = 10;

impl SlurmExecutor {
    /// Starts the pollers of jobs and of `nodes`' health; must be called
    /// inside the runtime.
    pub fn new(
        events: mpsc::UnboundedSender<ExecEvent>,
        instance: &str,
        opts: SlurmOptions,
        script_dir: PathBuf,
        nodes: Vec<String>,
    ) -> SlurmExecutor {
        let slots: Slots = Arc::new(Mutex::new(HashMap::new()));
        tokio::spawn(poll(slots.clone(), events.clone()));
        tokio::spawn(poll_nodes(opts.partition.clone(), nodes, events.clone()));
        SlurmExecutor { events, slots, instance: instance.to_string(), opts, script_dir }
    }

    fn job_name(&self, key: AttemptKey) -> String {
        job_name(&self.instance, key)
    }

    /// The `sbatch` command for an attempt (script already written).
    fn sbatch(&self, job: &Launch, script: &Path) -> Command {
        let mut cmd = Command::new("sbatch");
        for k in super::server_only_env(false) {
            cmd.env_remove(k);
        }
        cmd.arg("--parsable")
            .arg(format!("--job-name={}", self.job_name(job.key)))
            .arg(format!("--comment={}", job_comment(&self.instance)))
            .arg(format!("--output={}", job.log_path.display()))
            .arg("--open-mode=append")
            .arg("--export=ALL");
        let partition = self.opts.partition.as_ref().map(|p| format!("--partition={p}"));
        if let Some(per_node) = uniform(job) {
            // The same GPU count everywhere: one plain job (Slurm's main
            // scheduler starts it at once).
            let nodes: Vec<&str> = job.gpus.iter().map(|n| n.node.as_str()).collect();
            cmd.args(&partition)
                .arg(format!("--nodelist={}", nodes.join(",")))
                .arg(format!("--nodes={}", nodes.len()))
                .arg("--ntasks-per-node=1")
                .arg(format!("--gres=gpu:{per_node}"))
                .args(&self.opts.sbatch_args);
        } else {
            // One heterogeneous-job component per node, each exact.
            for (i, n) in job.gpus.iter().enumerate() {
                if i > 0 {
                    cmd.arg(":");
                }
                cmd.args(&partition)
                    .arg(format!("--nodelist={}", n.node))
                    .args(["--nodes=1", "--ntasks=1"])
                    .arg(format!("--gres=gpu:{}", n.indices.len()))
                    .args(&self.opts.sbatch_args);
            }
        }
        cmd.arg(script).stdin(std::process::Stdio::null()).kill_on_drop(false);
        cmd
    }

    /// What the task's command sees besides Slurm's own variables: the
    /// workload's `env`, then Allot's (which win).
    fn task_env(&self, job: &Launch) -> Vec<(String, String)> {
        let all: Vec<String> = job.gpus.iter().map(|n| format!("{}:{}", n.node, n.indices.len())).collect();
        let allot = [
            ("ALLOT_WORKLOAD_ID", job.workload_id.clone()),
            ("ALLOT_CHECKPOINT_DIR", job.checkpoint_dir.display().to_string()),
            ("ALLOT_ATTEMPT", job.key.attempt.to_string()),
            ("ALLOT_NUM_NODES", job.gpus.len().to_string()),
            ("ALLOT_GPUS", all.join(";")),
            ("ALLOT_TAG", format!("{}#{}.{}", self.instance, job.key.seq, job.key.attempt)),
        ];
        let mut env: Vec<(String, String)> = job.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        env.retain(|(k, _)| !allot.iter().any(|(a, _)| a == k));
        env.extend(allot.into_iter().map(|(k, v)| (k.to_string(), v)));
        env
    }

    fn write_script(&self, job: &Launch) -> Result<PathBuf, String> {
        for dir in [&self.script_dir, &job.checkpoint_dir] {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        if let Some(dir) = job.log_path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let path = self.script_dir.join(format!("{}.{}.sh", job.key.seq, job.key.attempt));
        std::fs::write(&path, batch_script(job, &self.task_env(job)))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }

    /// Runs `scancel` for the attempt's job now if its id is known, else
    /// when `sbatch` answers.
    fn stop(&self, key: AttemptKey, kill: bool) {
        let job = {
            let mut slots = self.slots.lock().expect("slurm slots");
            let Some(slot) = slots.get_mut(&key) else { return };
            if kill {
                slot.kill = true;
            } else {
                slot.term = true;
            }
            slot.job
        };
        if let Some(job) = job {
            tokio::spawn(scancel(job, kill));
        }
    }
}

fn job_name(instance: &str, key: AttemptKey) -> String {
    format!("allot-{instance}-{}.{}", key.seq, key.attempt)
}

/// The comment every job of this store carries (`squeue --format=%k`).
fn job_comment(instance: &str) -> String {
    format!("allot-store={instance}")
}

/// Quotes a word for `/bin/sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The GPUs per node when every node of the allocation has the same count.
fn uniform(job: &Launch) -> Option<usize> {
    let first = job.gpus.first()?.indices.len();
    job.gpus.iter().all(|n| n.indices.len() == first).then_some(first)
}

/// Runs the command on every node of the job (one task each), with `env`
/// setting the task's variables: they reach the command only, never
/// `sbatch` or `srun`.
fn batch_script(job: &Launch, env: &[(String, String)]) -> String {
    let het = match uniform(job) {
        Some(_) => String::new(),
        None => format!(" --het-group=0-{}", job.gpus.len() - 1),
    };
    let words: Vec<String> = std::iter::once("/usr/bin/env".to_string())
        .chain(env.iter().map(|(k, v)| format!("{k}={v}")))
        .chain(job.command.iter().cloned())
        .map(|w| sh_quote(&w))
        .collect();
    format!(
        "#!/bin/sh\n# allot workload {} attempt {}: one task per node\n\
         exec srun{het} --kill-on-bad-exit=1 /bin/sh -c \
         'ALLOT_NODE=\"$SLURMD_NODENAME\" ALLOT_NODE_RANK=\"$SLURM_NODEID\" exec \"$@\"' allot-task {}\n",
        job.workload_id,
        job.key.attempt,
        words.join(" ")
    )
}

/// SIGTERM to the job's steps, or SIGKILL to everything and the job
/// cancelled. Failures are logged: the poller sees what really happened.
async fn scancel(job: u64, kill: bool) {
    let id = job.to_string();
    let runs: Vec<Vec<&str>> =
        if kill { vec![vec!["--signal=KILL", "--full", &id], vec![&id]] } else { vec![vec!["--signal=TERM", &id]] };
    for args in runs {
        match Command::new("scancel").args(&args).output().await {
            Ok(o) if o.status.success() => {}
            Ok(o) => tracing::debug!(job, stderr = %String::from_utf8_lossy(&o.stderr).trim(), "scancel"),
            Err(e) => tracing::warn!(job, error = %e, "cannot run scancel"),
        }
    }
}

impl Executor for SlurmExecutor {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn launch(&self, job: Launch) {
        let key = job.key;
        let fail = |error: String| {
            tracing::warn!(workload = %job.workload_id, attempt = key.attempt, %error, "sbatch failed");
            let _ = self.events.send(ExecEvent::LaunchFailed { key, error });
        };
        if job.command.is_empty() {
            return fail("empty command".into());
        }
        let script = match self.write_script(&job) {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        self.slots.lock().expect("slurm slots").insert(key, Slot::default());
        let mut cmd = self.sbatch(&job, &script);
        let (slots, events, workload) = (self.slots.clone(), self.events.clone(), job.workload_id.clone());
        tokio::spawn(async move {
            let submitted = match cmd.output().await {
                Ok(o) if o.status.success() => {
                    let out = String::from_utf8_lossy(&o.stdout);
                    // `--parsable` prints `JOBID` or `JOBID;CLUSTER`.
                    out.trim()
                        .split(';')
                        .next()
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or(format!("sbatch printed {:?}, not a job id", out.trim()))
                }
                Ok(o) => Err(format!("sbatch failed ({}): {}", o.status, String::from_utf8_lossy(&o.stderr).trim())),
                Err(e) => Err(format!("cannot run sbatch: {e}")),
            };
            let pending = {
                let mut s = slots.lock().expect("slurm slots");
                match (&submitted, s.get_mut(&key)) {
                    (Ok(id), Some(slot)) => {
                        slot.job = Some(*id);
                        Some((*id, slot.term, slot.kill))
                    }
                    _ => {
                        s.remove(&key);
                        None
                    }
                }
            };
            match (submitted, pending) {
                (Ok(id), Some((_, term, kill))) => {
                    tracing::info!(workload = %workload, attempt = key.attempt, job = id, "submitted to slurm");
                    if term || kill {
                        scancel(id, kill).await;
                    }
                }
                (Ok(id), None) => scancel(id, true).await,
                (Err(error), _) => {
                    tracing::warn!(workload = %workload, attempt = key.attempt, %error, "sbatch failed");
                    let _ = events.send(ExecEvent::LaunchFailed { key, error });
                }
            }
        });
    }

    fn signal(&self, key: AttemptKey) {
        self.stop(key, false);
    }

    fn kill(&self, key: AttemptKey) {
        self.stop(key, true);
    }

    fn terminate_survivors(&self, survivors: Vec<Survivor>, grace: Duration) -> BoxFuture<'_, ()> {
        let names: Vec<String> = survivors.iter().map(|s| self.job_name(s.key)).collect();
        Box::pin(async move {
            if names.is_empty() {
                return;
            }
            let filter = format!("--name={}", names.join(","));
            let comment = job_comment(&self.instance);
            // SAFETY: geteuid has no preconditions and cannot fail.
            let uid = unsafe { libc::geteuid() };
            let live = || async {
                owned_jobs(&filter, uid, &comment)
                    .await
                    .map(|j| j.into_iter().filter(|(_, st)| !is_final(st)).map(|(id, _)| id).collect())
            };
            let found: Vec<u64> = match live().await {
                Ok(f) => f,
                Err(error) => {
                    tracing::error!(%error, "cannot list Slurm jobs: jobs of the previous server may still run");
                    return;
                }
            };
            if found.is_empty() {
                return;
            }
            tracing::warn!(jobs = ?found, "stopping Slurm jobs that outlived the previous server");
            for &j in &found {
                scancel(j, false).await;
            }
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline && live().await.is_ok_and(|l: Vec<u64>| !l.is_empty()) {
                tokio::time::sleep(POLL).await;
            }
            for _ in 0..60 {
                let left: Vec<u64> = live().await.unwrap_or_default();
                if left.is_empty() {
                    return;
                }
                for &j in &left {
                    scancel(j, true).await;
                }
                tokio::time::sleep(POLL).await;
            }
            tracing::error!("Slurm jobs of a previous server are still not ended after 30 s");
        })
    }
}

/// One job of `squeue --json` (the fields used; Slurm 22.05's schema).
#[derive(Clone, Debug, Deserialize)]
pub struct SqueueJob {
    pub job_id: u64,
    #[serde(default)]
    pub name: String,
    pub job_state: String,
    /// Wait status of the batch script.
    #[serde(default)]
    pub exit_code: i64,
    /// Highest wait status of the job's steps.
    #[serde(default)]
    pub derived_exit_code: i64,
}

#[derive(Deserialize)]
struct Squeue {
    jobs: Vec<SqueueJob>,
}

/// A job state after which nothing more happens.
pub fn is_final(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "CANCELLED"
            | "FAILED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "OUT_OF_MEMORY"
            | "REVOKED"
            | "SPECIAL_EXIT"
    )
}

/// A job state of a job running (or past it) on its nodes.
pub fn has_started(state: &str) -> bool {
    matches!(state, "RUNNING" | "COMPLETING" | "SUSPENDED" | "STOPPED" | "SIGNALING" | "STAGE_OUT")
}

impl SqueueJob {
    /// How the job ended: success only for `COMPLETED` with code 0; else
    /// the command's code where Slurm derived one, else the batch script's
    /// code or signal (`SIGKILL` when Slurm gives neither, e.g. cancelled).
    pub fn status(&self) -> ExitStatus {
        let (code, signal) = wait_status(self.exit_code);
        if self.job_state == "COMPLETED" && code == 0 && signal == 0 {
            return ExitStatus { code: Some(0), signal: None };
        }
        let (derived, _) = wait_status(self.derived_exit_code);
        match (derived, code, signal) {
            (d, _, _) if d > 0 => ExitStatus { code: Some(d), signal: None },
            (_, c, _) if c > 0 => ExitStatus { code: Some(c), signal: None },
            (_, _, s) if s > 0 => ExitStatus { code: None, signal: Some(s) },
            _ => ExitStatus { code: None, signal: Some(libc::SIGKILL) },
        }
    }
}

/// `(exit code, signal)` of a wait status.
fn wait_status(raw: i64) -> (i32, i32) {
    (((raw >> 8) & 0xff) as i32, (raw & 0x7f) as i32)
}

/// Every job Slurm lists, with exit codes (22.05's `squeue --json` ignores
/// filters: only read when a tracked job failed).
pub async fn squeue() -> Result<Vec<SqueueJob>, String> {
    let out = Command::new("squeue")
        .args(["--json", "--states=all"])
        .output()
        .await
        .map_err(|e| format!("cannot run squeue: {e}"))?;
    if !out.status.success() {
        return Err(format!("squeue failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    parse_squeue(&out.stdout)
}

pub fn parse_squeue(json: &[u8]) -> Result<Vec<SqueueJob>, String> {
    serde_json::from_slice::<Squeue>(json).map(|s| s.jobs).map_err(|e| format!("cannot read squeue --json: {e}"))
}

/// `(job id, state)` of the jobs `filter` selects (`--jobs=…`, `--name=…`),
/// from `squeue`'s text output, which honours filters. Job ids Slurm no
/// longer knows are left out.
pub async fn job_states(filter: &str) -> Result<Vec<(u64, String)>, String> {
    let out = Command::new("squeue")
        .args(["--noheader", "--states=all", "--format=%A|%T", filter])
        .output()
        .await
        .map_err(|e| format!("cannot run squeue: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("Invalid job id") {
            return Ok(Vec::new()); // none of them is known any more
        }
        return Err(format!("squeue failed ({}): {}", out.status, stderr.trim()));
    }
    Ok(parse_job_states(&String::from_utf8_lossy(&out.stdout)))
}

/// `(job id, state)` of the jobs `filter` selects that this server owns:
/// submitted by `uid` with `comment`. Others of the same name are logged
/// and left alone.
async fn owned_jobs(filter: &str, uid: u32, comment: &str) -> Result<Vec<(u64, String)>, String> {
    let out = Command::new("squeue")
        .args(["--noheader", "--states=all", "--format=%A|%T|%U|%k", filter])
        .output()
        .await
        .map_err(|e| format!("cannot run squeue: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("squeue failed ({}): {}", out.status, stderr.trim()));
    }
    let (mine, foreign) = split_owned(&String::from_utf8_lossy(&out.stdout), uid, comment);
    for j in foreign {
        tracing::warn!(job = j.id, user = %j.user, comment = %j.comment, "a Slurm job with this store's job name is not its own: left alone");
    }
    Ok(mine)
}

/// A job that is not this server's, as `squeue` lists it.
#[derive(Debug)]
pub struct ForeignJob {
    pub id: u64,
    pub user: String,
    pub comment: String,
}

/// Splits `ID|STATE|UID|COMMENT` lines into this server's jobs `(id,
/// state)` and the others.
pub fn split_owned(text: &str, uid: u32, comment: &str) -> (Vec<(u64, String)>, Vec<ForeignJob>) {
    let (mut mine, mut foreign) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let mut f = line.trim().splitn(4, '|');
        let (Some(id), Some(state), Some(user), Some(c)) = (f.next(), f.next(), f.next(), f.next()) else { continue };
        let Ok(id) = id.parse::<u64>() else { continue };
        if user.parse::<u32>() == Ok(uid) && c == comment {
            mine.push((id, state.to_string()));
        } else {
            foreign.push(ForeignJob { id, user: user.to_string(), comment: c.to_string() });
        }
    }
    (mine, foreign)
}

pub fn parse_job_states(text: &str) -> Vec<(u64, String)> {
    text.lines()
        .filter_map(|l| {
            let (id, state) = l.trim().split_once('|')?;
            Some((id.parse().ok()?, state.to_string()))
        })
        .collect()
}

/// Reports what Slurm did with the tracked jobs: one filtered `squeue` per
/// poll, and the full listing only when a tracked job ended otherwise than
/// `COMPLETED` (for its exit code).
async fn poll(slots: Slots, events: mpsc::UnboundedSender<ExecEvent>) {
    loop {
        tokio::time::sleep(POLL).await;
        if events.is_closed() {
            return;
        }
        let ids: Vec<u64> = slots.lock().expect("slurm slots").values().filter_map(|s| s.job).collect();
        if ids.is_empty() {
            continue;
        }
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        let states: HashMap<u64, String> = match job_states(&format!("--jobs={}", list.join(","))).await {
            Ok(s) => s.into_iter().collect(),
            Err(error) => {
                tracing::warn!(%error, "cannot poll Slurm");
                continue;
            }
        };
        let failed = states.values().any(|st| is_final(st) && st != "COMPLETED");
        let details: HashMap<u64, ExitStatus> = if failed {
            match squeue().await {
                Ok(jobs) => jobs.iter().map(|j| (j.job_id, j.status())).collect(),
                Err(error) => {
                    tracing::warn!(%error, "cannot read the exit codes of ended jobs");
                    HashMap::new()
                }
            }
        } else {
            HashMap::new()
        };
        let mut out = Vec::new();
        {
            let mut s = slots.lock().expect("slurm slots");
            s.retain(|&key, slot| {
                let Some(id) = slot.job else { return true };
                let Some(state) = states.get(&id) else {
                    slot.missing += 1;
                    if slot.missing < MISSING_POLLS {
                        return true;
                    }
                    tracing::warn!(job = id, "Slurm no longer lists the job: taken as lost");
                    out.push(ExecEvent::Exited { key, status: ExitStatus { code: None, signal: None } });
                    return false;
                };
                slot.missing = 0;
                if (has_started(state) || is_final(state)) && !slot.started {
                    slot.started = true;
                    out.push(ExecEvent::Started { key, pid: id as u32 });
                }
                if is_final(state) {
                    let status = if state == "COMPLETED" {
                        ExitStatus { code: Some(0), signal: None }
                    } else {
                        details.get(&id).copied().unwrap_or(ExitStatus { code: None, signal: Some(libc::SIGKILL) })
                    };
                    out.push(ExecEvent::Exited { key, status });
                    return false;
                }
                true
            });
        }
        for e in out {
            let _ = events.send(e);
        }
    }
}

/// How often `sinfo` is asked for node states.
const NODE_POLL: Duration = Duration::from_secs(2);

/// A node's health as far as Allot cares.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SlurmHealth {
    Up,
    /// `DRAINING`, `DRAINED`: no new work; what runs is preempted (MNT-1).
    Drain,
    /// `DOWN`, `FAIL`, not responding (`*`): what runs is lost (MNT-2).
    Down,
}

/// Classifies `sinfo --format=%T` (`idle`, `mixed`, `drained`,
/// `down*`, `allocated+drain`…).
pub fn health(state: &str) -> SlurmHealth {
    let s = state.to_ascii_lowercase();
    if s.contains("down") || s.contains("fail") || s.ends_with('*') || s.contains("not_responding") {
        SlurmHealth::Down
    } else if s.contains("drain") {
        SlurmHealth::Drain
    } else {
        SlurmHealth::Up
    }
}

/// The node events that take Allot's view of a node from `from` to `to`.
pub fn transition(from: SlurmHealth, to: SlurmHealth) -> Vec<NodeEventKind> {
    use SlurmHealth::*;
    match (from, to) {
        (a, b) if a == b => vec![],
        (_, Down) => vec![NodeEventKind::Fail],
        (Down, Drain) => vec![NodeEventKind::Repair, NodeEventKind::Drain],
        (_, Drain) => vec![NodeEventKind::Drain],
        (Down, Up) => vec![NodeEventKind::Repair],
        (_, Up) => vec![NodeEventKind::Undrain],
    }
}

/// Follows the health Slurm gives Allot's nodes. A node first seen out of
/// service is taken out in Allot too; from then on every change is sent.
async fn poll_nodes(partition: Option<String>, nodes: Vec<String>, events: mpsc::UnboundedSender<ExecEvent>) {
    let nodes: HashSet<String> = nodes.into_iter().collect();
    let mut seen: HashMap<String, SlurmHealth> = HashMap::new();
    loop {
        if events.is_closed() {
            return;
        }
        match node_states(partition.as_deref()).await {
            Ok(states) => {
                for (name, state) in states.into_iter().filter(|(n, _)| nodes.contains(n)) {
                    let now = health(&state);
                    let before = seen.insert(name.clone(), now).unwrap_or(SlurmHealth::Up);
                    for kind in transition(before, now) {
                        tracing::info!(node = %name, slurm_state = %state, "Slurm changed the node: {}", kind.as_str());
                        let by = format!("slurm: node state {state}");
                        let _ = events.send(ExecEvent::Node { node: name.clone(), kind, by });
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "cannot read Slurm node states"),
        }
        tokio::time::sleep(NODE_POLL).await;
    }
}

/// `(node, state)` of the partition's nodes (`sinfo --format=%N|%T`).
async fn node_states(partition: Option<&str>) -> Result<Vec<(String, String)>, String> {
    let text = sinfo(partition, "%N|%T").await?;
    Ok(text.lines().filter_map(|l| l.trim().split_once('|')).map(|(n, s)| (n.to_string(), s.to_string())).collect())
}

async fn sinfo(partition: Option<&str>, format: &str) -> Result<String, String> {
    let mut cmd = Command::new("sinfo");
    cmd.args(["--noheader", "--Node"]).arg(format!("--format={format}"));
    if let Some(p) = partition {
        cmd.arg(format!("--partition={p}"));
    }
    let out = cmd.output().await.map_err(|e| format!("cannot run sinfo: {e} (is Slurm installed?)"))?;
    if !out.status.success() {
        return Err(format!("sinfo failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One node of a Slurm partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmNode {
    pub name: String,
    pub gpus: u32,
}

/// The partition's nodes and GPU counts (`sinfo`), in natural name order.
pub async fn nodes(partition: Option<&str>) -> Result<Vec<SlurmNode>, String> {
    let nodes = parse_sinfo(&sinfo(partition, "%N|%G").await?)?;
    if nodes.is_empty() {
        return Err(format!(
            "sinfo lists no nodes{}",
            partition.map(|p| format!(" in partition {p}")).unwrap_or_default()
        ));
    }
    Ok(nodes)
}

/// Parses `NAME|GRES` lines (a node in several partitions is listed once).
pub fn parse_sinfo(text: &str) -> Result<Vec<SlurmNode>, String> {
    let mut nodes: Vec<SlurmNode> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, gres) = line.split_once('|').ok_or_else(|| format!("sinfo line {line:?}: expected NAME|GRES"))?;
        if nodes.iter().any(|n| n.name == name) {
            continue;
        }
        nodes.push(SlurmNode { name: name.to_string(), gpus: gpu_count(gres) });
    }
    nodes.sort_by_key(|n| natural_key(&n.name));
    Ok(nodes)
}

/// GPUs in a GRES string: `gpu:4`, `gpu:h100:8(S:0-1)`, `gpu:a:2,gpu:b:2`, `(null)`.
fn gpu_count(gres: &str) -> u32 {
    gres.split(',')
        .filter(|g| g.starts_with("gpu:") || g == &"gpu")
        .filter_map(|g| g.split('(').next()?.rsplit(':').next()?.parse::<u32>().ok())
        .sum()
}

/// `node10` after `node9`.
fn natural_key(s: &str) -> (String, u64, String) {
    let digits_at = s.find(|c: char| c.is_ascii_digit()).unwrap_or(s.len());
    let (head, rest) = s.split_at(digits_at);
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    (head.to_string(), rest[..end].parse().unwrap_or(0), rest[end..].to_string())
}

/// The config's nodes, in order, named after the Slurm nodes.
pub fn map_nodes(cluster: &mut Cluster, slurm: &[SlurmNode]) -> Result<(), String> {
    if cluster.nodes.len() > slurm.len() {
        return Err(format!(
            "--executor slurm: the config declares {} nodes but Slurm has {} ({})",
            cluster.nodes.len(),
            slurm.len(),
            slurm.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    for (node, s) in cluster.nodes.iter_mut().zip(slurm) {
        if s.gpus < node.gpus {
            return Err(format!(
                "--executor slurm: config node {} ({} GPUs) maps to Slurm node {}, which has {} GPUs",
                node.name, node.gpus, s.name, s.gpus
            ));
        }
        node.name = s.name.clone();
    }
    if slurm.len() > cluster.nodes.len() {
        let rest: Vec<&str> = slurm[cluster.nodes.len()..].iter().map(|n| n.name.as_str()).collect();
        tracing::warn!(nodes = %rest.join(","), "Slurm nodes beyond the config's are not used by Allot");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sinfo_in_natural_order() {
        let n =
            parse_sinfo("node10|gpu:fake:4\nnode2|gpu:h100:8(S:0-1)\nnode2|gpu:h100:8(S:0-1)\nnode9|(null)\n").unwrap();
        let names: Vec<(&str, u32)> = n.iter().map(|n| (n.name.as_str(), n.gpus)).collect();
        assert_eq!(names, [("node2", 8), ("node9", 0), ("node10", 4)]);
        assert_eq!(gpu_count("gpu:a:2,gpu:b:3,license:1"), 5);
        assert!(parse_sinfo("garbage").unwrap_err().contains("garbage"));
    }

    #[test]
    fn follows_slurm_node_states() {
        use SlurmHealth::*;
        let cases = [
            ("idle", Up),
            ("mixed", Up),
            ("allocated", Up),
            ("completing", Up),
            ("draining", Drain),
            ("drained", Drain),
            ("mixed+drain", Drain),
            ("down", Down),
            ("down*", Down),
            ("idle*", Down),
            ("fail", Down),
            ("drained*", Down),
        ];
        for (state, want) in cases {
            assert_eq!(health(state), want, "{state}");
        }
        assert!(transition(Up, Up).is_empty());
        assert_eq!(transition(Up, Drain), [NodeEventKind::Drain]);
        assert_eq!(transition(Drain, Up), [NodeEventKind::Undrain]);
        assert_eq!(transition(Drain, Down), [NodeEventKind::Fail]);
        assert_eq!(transition(Down, Up), [NodeEventKind::Repair]);
        assert_eq!(transition(Down, Drain), [NodeEventKind::Repair, NodeEventKind::Drain]);
    }

    #[test]
    fn reads_exit_statuses() {
        let job = |state: &str, exit: i64, derived: i64| SqueueJob {
            job_id: 1,
            name: String::new(),
            job_state: state.into(),
            exit_code: exit,
            derived_exit_code: derived,
        };
        assert!(job("COMPLETED", 0, 0).status().success());
        // srun's 143 after --kill-on-bad-exit; the task's own code was 3.
        assert_eq!(job("FAILED", 143 << 8, 3 << 8).status(), ExitStatus { code: Some(3), signal: None });
        assert_eq!(job("FAILED", 9, 0).status(), ExitStatus { code: None, signal: Some(9) });
        assert!(!job("CANCELLED", 0, 0).status().success(), "cancelled is never success");
        assert!(!job("NODE_FAIL", 0, 0).status().success());
        let parsed = parse_squeue(br#"{"jobs":[{"job_id":7,"name":"n","job_state":"RUNNING","exit_code":0,"derived_exit_code":0,"het_job_id":0,"other":1}]}"#).unwrap();
        assert!(has_started(&parsed[0].job_state) && !is_final(&parsed[0].job_state));
        let states = parse_job_states("118|COMPLETED\n119|RUNNING\njunk\n");
        assert_eq!(states, [(118, "COMPLETED".to_string()), (119, "RUNNING".to_string())]);
    }

    #[test]
    fn writes_a_script_that_quotes_the_command() {
        let job = Launch {
            key: AttemptKey { seq: 3, attempt: 2 },
            workload_id: "3".into(),
            command: vec!["echo".into(), "it's $HOME".into()],
            env: Default::default(),
            gpus: vec![
                super::super::NodeGpus { node: "node1".into(), indices: vec![0, 1] },
                super::super::NodeGpus { node: "node2".into(), indices: vec![0] },
            ],
            checkpoint_dir: "/ck".into(),
            log_path: "/log".into(),
        };
        let env = [("A".to_string(), "x y".to_string())];
        let s = batch_script(&job, &env);
        assert!(s.contains("srun --het-group=0-1 --kill-on-bad-exit=1"), "{s}");
        assert!(s.ends_with("allot-task '/usr/bin/env' 'A=x y' 'echo' 'it'\\''s $HOME'\n"), "{s}");
        let even = Launch { gpus: vec![job.gpus[0].clone(), job.gpus[0].clone()], ..job };
        assert!(batch_script(&even, &env).contains("exec srun --kill-on-bad-exit=1"), "a plain job when even");
    }

    /// Finding: a submission's `env` reached `sbatch`'s own environment,
    /// where `SBATCH_*` / `SLURM_*` override what Allot decided.
    #[test]
    fn the_workload_env_never_reaches_sbatch() {
        let exec = SlurmExecutor {
            events: mpsc::unbounded_channel().0,
            slots: Slots::default(),
            instance: "store1".into(),
            opts: SlurmOptions::default(),
            script_dir: "/scripts".into(),
        };
        let env = [("SBATCH_QOS", "high"), ("SBATCH_EXCLUSIVE", "1"), ("SLURM_CONF", "/evil"), ("MY_VAR", "v")];
        let job = Launch {
            key: AttemptKey { seq: 3, attempt: 1 },
            workload_id: "3".into(),
            command: vec!["train".into()],
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            gpus: vec![super::super::NodeGpus { node: "node1".into(), indices: vec![0] }],
            checkpoint_dir: "/ck".into(),
            log_path: "/log".into(),
        };
        let cmd = exec.sbatch(&job, Path::new("/scripts/3.1.sh"));
        for (k, v) in cmd.as_std().get_envs() {
            let k = k.to_string_lossy();
            assert!(!env.iter().any(|(n, _)| *n == k) || v.is_none(), "the workload's {k} is in sbatch's environment");
        }
        let args: Vec<String> = cmd.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(args.contains(&"--comment=allot-store=store1".to_string()), "{args:?}");
        let task = exec.task_env(&job);
        assert!(task.contains(&("MY_VAR".into(), "v".into())), "the command still gets its env: {task:?}");
        assert!(task.iter().any(|(k, v)| k == "ALLOT_TAG" && v == "store1#3.1"), "{task:?}");
        let script = batch_script(&job, &task);
        let task_part = script.split_once("allot-task '/usr/bin/env' ").map(|(_, t)| t).unwrap_or_default();
        assert!(task_part.contains("'SBATCH_EXCLUSIVE=1'"), "set on the task only: {script}");
    }

    #[test]
    fn only_jobs_of_this_user_and_store_are_its_own() {
        let text = "11|RUNNING|0|allot-store=s1\n12|RUNNING|1000|allot-store=s1\n13|PENDING|0|(null)\n\
                    14|RUNNING|0|allot-store=s2\njunk\n";
        let (mine, foreign) = split_owned(text, 0, "allot-store=s1");
        assert_eq!(mine, [(11, "RUNNING".to_string())]);
        assert_eq!(foreign.iter().map(|f| f.id).collect::<Vec<_>>(), [12, 13, 14]);
    }

    #[test]
    fn maps_config_nodes_onto_slurm_nodes() {
        let spec = allot_core::PoolSpec {
            name: "gpu".into(),
            gpu: allot_core::GpuTypeId(0),
            nodes: 2,
            gpus_per_node: 4,
            rack_size: 2,
            shared: false,
        };
        let types = vec![allot_core::GpuType { name: "H100".into(), weight: 1.0 }];
        let slurm = |g: &[u32]| -> Vec<SlurmNode> {
            g.iter().enumerate().map(|(i, &gpus)| SlurmNode { name: format!("node{}", i + 1), gpus }).collect()
        };
        let mut c = Cluster::new("c", types.clone(), vec![spec.clone()]);
        map_nodes(&mut c, &slurm(&[4, 8, 8])).unwrap();
        assert_eq!(c.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["node1", "node2"]);
        assert_eq!(c.node_by_name("node2"), Some(allot_core::NodeId(1)), "found by its Slurm name");
        assert_eq!(c.node_by_name("gpu-1"), None, "the laid-out name is gone");
        let mut c = Cluster::new("c", types.clone(), vec![spec.clone()]);
        assert!(map_nodes(&mut c, &slurm(&[4])).unwrap_err().contains("declares 2 nodes but Slurm has 1"));
        let mut c = Cluster::new("c", types, vec![spec]);
        assert!(map_nodes(&mut c, &slurm(&[4, 2])).unwrap_err().contains("node2, which has 2 GPUs"));
    }
}
