//! The Slurm executor: what the scheduler calls (launch, signal, kill,
//! survivors) and the tracked attempts the job poller reports on.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::health::{Watch, poll_nodes};
use super::jobs::{POLL, Slot, Slots, live_store_jobs, owned_jobs, poll, scancel};
use super::launch::{exit_record, job_comment, job_name, sbatch_command, uniform, write_script};
use crate::executor::{AttemptKey, BoxFuture, ExecEvent, Executor, Launch, LaunchError, Survivor};
use crate::identity::UnixUser;

/// `allot serve --executor slurm` options, or one cluster's
/// `[clusters.executor]` in a fleet.
#[derive(Clone, Debug, Default)]
pub struct SlurmOptions {
    /// The partition Allot's nodes are in (default: Slurm's default).
    pub partition: Option<String>,
    /// More `sbatch` options for every node's component (e.g.
    /// `--mem-per-gpu=100G`).
    pub sbatch_args: Vec<String>,
    /// The `slurm.conf` of this Slurm cluster: set as `SLURM_CONF` on every
    /// Slurm command (default: the server's own environment decides).
    pub slurm_conf: Option<PathBuf>,
    /// In a fleet of several clusters, the fleet's name of this cluster:
    /// Allot's node names are `<cluster>/<Slurm node>`, translated back
    /// to Slurm's for every command. `None`: Allot's names are Slurm's.
    pub cluster: Option<String>,
    /// How long Slurm may stay unreachable (every `sinfo` failing) before
    /// the cluster is taken out of service (FLEET-3); default
    /// [`DEFAULT_OUTAGE_AFTER`].
    pub outage_after: Option<Duration>,
    /// ID-1: jobs never run as a uid below this (`[identity] min_uid`;
    /// `None`: its default, 1000).
    pub min_uid: Option<u32>,
}

/// How long a Slurm cluster may be unreachable before it is taken out of
/// service, unless configured (FLEET-3).
pub const DEFAULT_OUTAGE_AFTER: Duration = Duration::from_secs(30);

impl SlurmOptions {
    /// A Slurm command that speaks to this cluster (`SLURM_CONF` set when
    /// configured, never left to the server's environment then).
    pub(super) fn command(&self, program: &'static str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(program);
        if let Some(conf) = &self.slurm_conf {
            cmd.env("SLURM_CONF", conf);
        }
        cmd
    }

    /// Slurm's name of Allot's node `node` (the `<cluster>/` prefix off).
    pub fn slurm_name<'a>(&self, node: &'a str) -> &'a str {
        match &self.cluster {
            Some(c) => node.strip_prefix(c.as_str()).and_then(|r| r.strip_prefix('/')).unwrap_or(node),
            None => node,
        }
    }

    /// Allot's name of the Slurm node `slurm` (`<cluster>/<slurm>` in a fleet).
    pub fn allot_name(&self, slurm: &str) -> String {
        match &self.cluster {
            Some(c) => format!("{c}/{slurm}"),
            None => slurm.to_string(),
        }
    }

    pub fn outage_after(&self) -> Duration {
        self.outage_after.unwrap_or(DEFAULT_OUTAGE_AFTER)
    }

    /// How long a task of a fleet's cluster runs on while Slurm does not
    /// answer before it ends itself: half the outage threshold, so that it
    /// is gone before Allot requeues its work (FLEET-3). `None` for a fleet
    /// of one, whose jobs run as before.
    pub fn fence(&self) -> Option<Duration> {
        self.cluster.as_ref().map(|_| self.outage_after() / 2)
    }
}

pub struct SlurmExecutor {
    events: mpsc::UnboundedSender<ExecEvent>,
    slots: Slots,
    instance: String,
    opts: Arc<SlurmOptions>,
    /// Where batch scripts are written.
    script_dir: PathBuf,
}

impl SlurmExecutor {
    /// Starts the pollers of jobs and of `nodes`' health (Allot's names)
    /// for the fleet's cluster `cluster`; must be called inside the runtime.
    pub fn new(
        events: mpsc::UnboundedSender<ExecEvent>,
        instance: &str,
        opts: SlurmOptions,
        script_dir: PathBuf,
        cluster: &str,
        nodes: Vec<String>,
    ) -> SlurmExecutor {
        let slots: Slots = Arc::new(Mutex::new(HashMap::new()));
        let opts = Arc::new(opts);
        tokio::spawn(poll(opts.clone(), slots.clone(), events.clone()));
        let watch = Watch { cluster: cluster.to_string(), instance: instance.to_string(), slots: slots.clone() };
        tokio::spawn(poll_nodes(opts.clone(), watch, nodes, events.clone()));
        SlurmExecutor { events, slots, instance: instance.to_string(), opts, script_dir }
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
            let opts = self.opts.clone();
            tokio::spawn(async move { scancel(&opts, job, kill).await });
        }
    }
}

/// Runs `sbatch`: the job id, or why not.
async fn sbatch(cmd: &mut tokio::process::Command) -> Result<u64, String> {
    match cmd.output().await {
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
    }
}

/// Slurm refused the connection: the controller is down or unreachable
/// and cannot have taken the job (a timeout may have: never retried).
fn refused(error: &str) -> bool {
    error.contains("connect failure") || error.contains("Connection refused")
}

impl Executor for SlurmExecutor {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn launch(&self, job: Launch) {
        let key = job.key;
        let fail = |error: LaunchError| {
            tracing::warn!(workload = %job.workload_id, attempt = key.attempt, error = %error.message, "sbatch failed");
            let _ = self.events.send(ExecEvent::LaunchFailed { key, error });
        };
        if job.command.is_empty() {
            return fail(LaunchError::workload("empty command"));
        }
        // ID-1: Slurm runs the job as its submitter's Unix user.
        let min_uid = self.opts.min_uid.unwrap_or(allot_trace::config::IdentityConfig::default().min_uid);
        let launch_as = match job.run_as.launch_as() {
            Ok(u) => u,
            Err(why) => return fail(LaunchError::workload(format!("cannot run as its user: {why}"))),
        };
        let user = match launch_as.map(|u| UnixUser::by_name(u).and_then(|u| u.at_least(min_uid))) {
            None => None,
            Some(Ok(u)) => Some(u),
            Some(Err(e)) => return fail(LaunchError::workload(format!("cannot run as its user: {e}"))),
        };
        let script = match write_script(&self.script_dir, &self.instance, &self.opts, &job, user.as_ref()) {
            Ok(p) => p,
            Err(e) => return fail(LaunchError::infrastructure(crate::executor::with_sources(&e))),
        };
        let slot = Slot {
            workload: job.workload_id.clone(),
            nodes: job.gpus.iter().map(|n| n.node.clone()).collect(),
            het: uniform(&job).is_none(),
            setup: job.workdir.clone().map(|dir| (dir, exit_record(&job))),
            ..Slot::default()
        };
        self.slots.lock().expect("slurm slots").insert(key, slot);
        let mut cmd = sbatch_command(&self.instance, &self.opts, &job, &script, user.as_ref());
        let (slots, events, workload) = (self.slots.clone(), self.events.clone(), job.workload_id.clone());
        let opts = self.opts.clone();
        tokio::spawn(async move {
            // While Slurm refuses connections (it cannot have taken the
            // job), the submission is retried until the cluster is taken out
            // of service (which reports the attempt lost) or the outage
            // threshold has passed: an outage is not the nodes' fault (MNT-3).
            let deadline = Instant::now() + opts.outage_after() + POLL * 10;
            let submitted = loop {
                let r = sbatch(&mut cmd).await;
                let tracked = || slots.lock().expect("slurm slots").contains_key(&key);
                match &r {
                    Err(e) if refused(e) && Instant::now() < deadline && tracked() => {
                        tracing::debug!(workload = %workload, error = %e, "Slurm refuses connections: sbatch again");
                        tokio::time::sleep(POLL * 2).await;
                    }
                    _ => break r,
                }
            };
            let (pending, lost) = {
                let mut s = slots.lock().expect("slurm slots");
                // Taken out of service meanwhile: already reported lost.
                let lost = !s.contains_key(&key);
                let pending = match (&submitted, s.get_mut(&key)) {
                    (Ok(id), Some(slot)) => {
                        slot.job = Some(*id);
                        Some((*id, slot.term, slot.kill))
                    }
                    _ => {
                        s.remove(&key);
                        None
                    }
                };
                (pending, lost)
            };
            match (submitted, pending) {
                (Ok(id), Some((_, term, kill))) => {
                    tracing::info!(workload = %workload, attempt = key.attempt, job = id, "submitted to slurm");
                    if term || kill {
                        scancel(&opts, id, kill).await;
                    }
                }
                (Ok(id), None) => scancel(&opts, id, true).await,
                (Err(error), None) if lost => {
                    tracing::warn!(workload = %workload, attempt = key.attempt, %error, "sbatch failed; the attempt was reported lost with its cluster");
                }
                (Err(error), _) => {
                    tracing::warn!(workload = %workload, attempt = key.attempt, %error, "sbatch failed");
                    let _ = events.send(ExecEvent::LaunchFailed { key, error: LaunchError::infrastructure(error) });
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

    /// One `srun --overlap` step per node of each running job, every
    /// `every` (`telemetry`).
    fn start_telemetry(&self, every: Duration) {
        tokio::spawn(super::telemetry::sample(self.opts.clone(), self.slots.clone(), every, self.events.clone()));
    }

    /// Stops every job of this store still alive on this Slurm cluster,
    /// not only the survivors': before the scheduler runs, this server has
    /// submitted nothing, so each one is a previous server's, and its
    /// attempt is either a survivor (closed and requeued by recovery) or
    /// already closed (lost while the cluster was out of service, FLEET-3),
    /// whose workload may be running elsewhere: none is adopted (FLEET-4).
    fn terminate_survivors(&self, survivors: Vec<Survivor>, grace: Duration) -> BoxFuture<'_, ()> {
        let names: Vec<String> = survivors.iter().map(|s| job_name(&self.instance, s.key)).collect();
        Box::pin(async move {
            let comment = job_comment(&self.instance);
            if !names.is_empty() {
                // Jobs of the survivors' names that are not this store's
                // are logged, and left alone.
                let _ = owned_jobs(&self.opts, &format!("--name={}", names.join(",")), &comment).await;
            }
            let live = || live_store_jobs(&self.opts, &self.instance);
            let found: Vec<u64> = match live().await {
                Ok(f) => f,
                Err(error) => {
                    tracing::error!(
                        error = &error as &dyn std::error::Error,
                        "cannot list Slurm jobs: jobs of the previous server may still run"
                    );
                    return;
                }
            };
            if found.is_empty() {
                return;
            }
            tracing::warn!(jobs = ?found, "stopping Slurm jobs that outlived the previous server");
            for &j in &found {
                scancel(&self.opts, j, false).await;
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
                    scancel(&self.opts, j, true).await;
                }
                tokio::time::sleep(POLL).await;
            }
            tracing::error!("Slurm jobs of a previous server are still not ended after 30 s");
        })
    }
}

#[cfg(test)]
mod tests {
    /// Only a refused connection is retried: a timeout may have submitted.
    #[test]
    fn retries_sbatch_only_when_slurm_refused_the_connection() {
        let down = "sbatch failed (exit status: 1): sbatch: error: Batch job submission failed: Unable to contact \
                    slurm controller (connect failure)";
        assert!(super::refused(down));
        assert!(!super::refused(
            "sbatch failed (exit status: 1): sbatch: error: Socket timed out on send/recv operation"
        ));
        assert!(!super::refused(
            "sbatch failed (exit status: 1): sbatch: error: Invalid generic resource (gres) specification"
        ));
    }
}
