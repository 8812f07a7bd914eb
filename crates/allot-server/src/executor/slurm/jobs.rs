//! Following the jobs: one filtered `squeue` per poll for the tracked
//! attempts, exit codes from the full listing when one failed, `scancel`,
//! and which listed jobs are this store's own.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::mpsc;

use super::SlurmOptions;
use super::error::{SlurmError, SlurmErrorKind};
use crate::executor::{AttemptKey, ExecEvent, ExitStatus};

/// An attempt's Slurm job, as far as we know it.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) job: Option<u64>,
    pub(super) started: bool,
    /// Asked to stop (SIGTERM) or to die (SIGKILL) before the job id was known.
    pub(super) term: bool,
    pub(super) kill: bool,
    /// Polls in a row that did not list the job.
    pub(super) missing: u32,
    /// The workload's id and Allot's names of the job's nodes, in the
    /// order of its components when `het` (telemetry).
    pub(super) workload: String,
    pub(super) nodes: Vec<String>,
    /// A heterogeneous job: one component per node.
    pub(super) het: bool,
    /// The attempt's working directory and exit record, where a task that
    /// could not enter it says so (MNT-4); `None` without a `workdir`.
    pub(super) setup: Option<(PathBuf, PathBuf)>,
}

pub(super) type Slots = Arc<Mutex<HashMap<AttemptKey, Slot>>>;

/// How often `squeue` is asked.
pub(super) const POLL: Duration = Duration::from_millis(500);
/// A tracked job missing from this many polls in a row is lost.
pub(super) const MISSING_POLLS: u32 = 10;

/// SIGTERM to the job's steps, or SIGKILL to everything and the job
/// cancelled. Failures are logged: the poller sees what really happened.
pub(super) async fn scancel(opts: &SlurmOptions, job: u64, kill: bool) {
    let id = job.to_string();
    let runs: Vec<Vec<&str>> =
        if kill { vec![vec!["--signal=KILL", "--full", &id], vec![&id]] } else { vec![vec!["--signal=TERM", &id]] };
    for args in runs {
        match opts.command("scancel").args(&args).output().await {
            Ok(o) if o.status.success() => {}
            Ok(o) => tracing::debug!(job, stderr = %String::from_utf8_lossy(&o.stderr).trim(), "scancel"),
            Err(e) => tracing::warn!(job, error = %e, "cannot run scancel"),
        }
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
pub async fn squeue(opts: &SlurmOptions) -> Result<Vec<SqueueJob>, SlurmError> {
    const ACTION: &str = "list Slurm's jobs with their exit codes";
    let out = opts.command("squeue").args(["--json", "--states=all"]).output().await;
    let out = SlurmError::command(ACTION, "squeue", out)?;
    parse_squeue(&out.stdout).map_err(|e| SlurmError::new(ACTION, e))
}

pub fn parse_squeue(json: &[u8]) -> Result<Vec<SqueueJob>, SlurmErrorKind> {
    serde_json::from_slice::<Squeue>(json).map(|s| s.jobs).map_err(SlurmErrorKind::Json)
}

/// `(job id, state)` of the jobs `filter` selects (`--jobs=…`, `--name=…`),
/// from `squeue`'s text output, which honours filters. Job ids Slurm no
/// longer knows are left out.
pub async fn job_states(opts: &SlurmOptions, filter: &str) -> Result<Vec<(u64, String)>, SlurmError> {
    let out = opts.command("squeue").args(["--noheader", "--states=all", "--format=%A|%T", filter]).output().await;
    match SlurmError::command("poll the states of Slurm jobs", "squeue", out) {
        Ok(out) => Ok(parse_job_states(&String::from_utf8_lossy(&out.stdout))),
        // None of them is known any more.
        Err(SlurmError { kind: SlurmErrorKind::Exit { stderr, .. }, .. }) if stderr.contains("Invalid job id") => {
            Ok(Vec::new())
        }
        Err(e) => Err(e),
    }
}

/// `(job id, state)` of the jobs `filter` selects that this server owns
/// ([`Users::of_server`], with `comment`). Others are logged and left alone.
pub(super) async fn owned_jobs(
    opts: &SlurmOptions,
    filter: &str,
    comment: &str,
) -> Result<Vec<(u64, String)>, SlurmError> {
    owned_jobs_of(opts, Some(filter), Users::of_server(opts), comment).await
}

/// Whose jobs a server owns (with its store's comment).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Users {
    /// Its own user's only.
    Only(u32),
    /// A root server's (ID-1): its own, and those it submitted for people,
    /// who are at or above `min_uid`.
    Any { min_uid: u32, server: u32 },
}

impl Users {
    /// This server's: a root server's own and its people's (ID-1), any
    /// other server's own.
    pub fn of_server(opts: &SlurmOptions) -> Users {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        if uid == 0 {
            let min_uid = opts.min_uid.unwrap_or(allot_trace::config::IdentityConfig::default().min_uid);
            Users::Any { min_uid, server: uid }
        } else {
            Users::Only(uid)
        }
    }

    pub fn admits(self, uid: u32) -> bool {
        match self {
            Users::Only(u) => uid == u,
            Users::Any { min_uid, server } => uid == server || uid >= min_uid,
        }
    }
}

/// [`owned_jobs`] of `users`; `filter`: `squeue`'s selection (`None`: all).
async fn owned_jobs_of(
    opts: &SlurmOptions,
    filter: Option<&str>,
    users: Users,
    comment: &str,
) -> Result<Vec<(u64, String)>, SlurmError> {
    let out =
        opts.command("squeue").args(["--noheader", "--states=all", "--format=%A|%T|%U|%k"]).args(filter).output().await;
    let out = SlurmError::command("list this store's Slurm jobs", "squeue", out)?;
    let (mine, foreign) = split_owned(&String::from_utf8_lossy(&out.stdout), users, comment);
    for j in foreign {
        tracing::info!(job = j.id, user = %j.user, comment = %j.comment, "this Slurm job (another user's or store's) is not its own: left alone");
    }
    Ok(mine)
}

/// The ids of this store's jobs still alive on the cluster: with the
/// store's comment, not in a final state, run as this server's user or,
/// submitted for people (ID-1), as any user at or above `min_uid`.
pub(super) async fn live_store_jobs(opts: &SlurmOptions, instance: &str) -> Result<Vec<u64>, SlurmError> {
    let comment = super::launch::job_comment(instance);
    let users = Users::of_server(opts);
    let filter = match users {
        Users::Only(uid) => Some(format!("--user={uid}")),
        Users::Any { .. } => None,
    };
    let jobs = owned_jobs_of(opts, filter.as_deref(), users, &comment).await?;
    Ok(jobs.into_iter().filter(|(_, st)| !is_final(st)).map(|(id, _)| id).collect())
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
pub fn split_owned(text: &str, users: Users, comment: &str) -> (Vec<(u64, String)>, Vec<ForeignJob>) {
    let (mut mine, mut foreign) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let mut f = line.trim().splitn(4, '|');
        let (Some(id), Some(state), Some(user), Some(c)) = (f.next(), f.next(), f.next(), f.next()) else { continue };
        let Ok(id) = id.parse::<u64>() else { continue };
        if user.parse::<u32>().is_ok_and(|u| users.admits(u)) && c == comment {
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
pub(super) async fn poll(opts: Arc<SlurmOptions>, slots: Slots, events: mpsc::UnboundedSender<ExecEvent>) {
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
        let states: HashMap<u64, String> = match job_states(&opts, &format!("--jobs={}", list.join(","))).await {
            Ok(s) => s.into_iter().collect(),
            Err(error) => {
                tracing::warn!(error = &error as &dyn std::error::Error, "cannot poll Slurm");
                continue;
            }
        };
        let failed = states.values().any(|st| is_final(st) && st != "COMPLETED");
        let details: HashMap<u64, ExitStatus> = if failed {
            match squeue(&opts).await {
                Ok(jobs) => jobs.iter().map(|j| (j.job_id, j.status())).collect(),
                Err(error) => {
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        "cannot read the exit codes of ended jobs"
                    );
                    HashMap::new()
                }
            }
        } else {
            HashMap::new()
        };
        let mut out = Vec::new();
        // Ended jobs whose tasks may have found their working directory
        // missing: (index in `out`, working directory, exit record).
        let mut setups = Vec::new();
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
                        if let Some((dir, record)) = slot.setup.take() {
                            setups.push((out.len(), dir, record));
                        }
                        details.get(&id).copied().unwrap_or(ExitStatus { code: None, signal: Some(libc::SIGKILL) })
                    };
                    out.push(ExecEvent::Exited { key, status });
                    return false;
                }
                true
            });
        }
        for (i, dir, record) in setups {
            let ExecEvent::Exited { key, .. } = out[i] else { continue };
            let text = std::fs::read_to_string(&record).unwrap_or_default();
            if let Some(error) = super::launch::setup_failure(&text, &dir, &opts) {
                tracing::warn!(workload = key.seq, attempt = key.attempt, error = %error.message, "the working directory is missing: MNT-4");
                let _ = std::fs::remove_file(&record);
                out[i] = ExecEvent::LaunchFailed { key, error };
            }
        }
        for e in out {
            let _ = events.send(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn only_jobs_of_this_user_and_store_are_its_own() {
        let text = "11|RUNNING|0|allot-store=s1\n12|RUNNING|1000|allot-store=s1\n13|PENDING|0|(null)\n\
                    14|RUNNING|0|allot-store=s2\njunk\n";
        let (mine, foreign) = split_owned(text, Users::Only(0), "allot-store=s1");
        assert_eq!(mine, [(11, "RUNNING".to_string())]);
        assert_eq!(foreign.iter().map(|f| f.id).collect::<Vec<_>>(), [12, 13, 14]);
        // ID-1: a root server's jobs run as the people it submitted for
        // (uid 1000 and above), never as a system account.
        let text = format!("{text}15|RUNNING|999|allot-store=s1\n");
        let (mine, foreign) = split_owned(&text, Users::Any { min_uid: 1000, server: 0 }, "allot-store=s1");
        assert_eq!(mine.iter().map(|m| m.0).collect::<Vec<_>>(), [11, 12]);
        assert_eq!(foreign.iter().map(|f| f.id).collect::<Vec<_>>(), [13, 14, 15]);
    }
}
