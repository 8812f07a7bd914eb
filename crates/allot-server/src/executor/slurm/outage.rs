//! A Slurm cluster that cannot be reached (FLEET-3) and its return
//! (FLEET-4), as the node poller sees it: every `sinfo` failing for the
//! outage threshold takes the cluster out of service; the first answer
//! after that reconciles its jobs before its nodes come back.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::SlurmOptions;
use super::jobs::{POLL, Slots, live_store_jobs, scancel};
use crate::executor::{ExecEvent, ExitStatus};

/// Whether Slurm answers: failures since when, and whether the cluster was
/// taken out of service for them.
#[derive(Debug, Default)]
pub(super) struct Reach {
    failing_since: Option<Instant>,
    down: bool,
}

impl Reach {
    /// A probe failed at `now`: true exactly once, when the failures have
    /// lasted `after` and the cluster must be taken out of service.
    pub(super) fn failed(&mut self, now: Instant, after: Duration) -> bool {
        let since = *self.failing_since.get_or_insert(now);
        if !self.down && now.duration_since(since) >= after {
            self.down = true;
            return true;
        }
        false
    }

    /// A probe answered: true when the cluster was out of service (it is
    /// to be reconciled, then returned).
    pub(super) fn answered(&mut self) -> bool {
        self.failing_since = None;
        std::mem::take(&mut self.down)
    }

    /// How long the probes have been failing.
    pub(super) fn failing_for(&self, now: Instant) -> Duration {
        self.failing_since.map_or(Duration::ZERO, |s| now.duration_since(s))
    }
}

/// Takes the cluster out of service: `ClusterDown` first (its nodes fail,
/// its attempts are aborted), then every tracked attempt is reported lost
/// (nothing can be learnt of it while Slurm is unreachable), so that its
/// workload is requeued and its GPUs released. The job ids are returned:
/// they are stopped when the cluster answers again.
pub(super) fn take_down(
    cluster: &str,
    reason: String,
    slots: &Slots,
    events: &mpsc::UnboundedSender<ExecEvent>,
) -> Vec<u64> {
    let lost: Vec<_> = slots.lock().expect("slurm slots").drain().collect();
    tracing::error!(cluster, %reason, attempts = lost.len(), "taking the cluster out of service (FLEET-3)");
    let _ = events.send(ExecEvent::ClusterDown { cluster: cluster.to_string(), reason });
    let mut jobs = Vec::new();
    for (key, slot) in lost {
        jobs.extend(slot.job);
        let _ = events.send(ExecEvent::Exited { key, status: ExitStatus { code: None, signal: None } });
    }
    jobs
}

/// Before the cluster's nodes return (FLEET-4): every job of this store
/// still alive there is stopped (`scancel`, then killed), since each one's
/// attempt was reported lost and its workload requeued; none is adopted,
/// so none runs twice. Waits until Slurm lists none of them alive (at most
/// about 30 s; past that the cluster returns anyway, logged).
pub(super) async fn reconcile(opts: &SlurmOptions, instance: &str, slots: &Slots) {
    let stale = || async {
        let tracked: Vec<u64> = slots.lock().expect("slurm slots").values().filter_map(|s| s.job).collect();
        live_store_jobs(opts, instance)
            .await
            .map(|jobs| jobs.into_iter().filter(|id| !tracked.contains(id)).collect::<Vec<u64>>())
    };
    for round in 0..60 {
        match stale().await {
            Ok(left) if left.is_empty() => return,
            Ok(left) => {
                if round == 0 {
                    tracing::warn!(jobs = ?left, "stopping this store's jobs that ran on while the cluster was unreachable");
                }
                for &j in &left {
                    scancel(opts, j, round > 0).await;
                }
            }
            Err(error) => {
                tracing::warn!(error = &error as &dyn std::error::Error, "cannot list this store's Slurm jobs yet");
            }
        }
        tokio::time::sleep(POLL).await;
    }
    tracing::error!("jobs of this store are still not ended 30 s after the cluster returned");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_once_after_the_threshold_and_up_on_the_first_answer() {
        let t0 = Instant::now();
        let after = Duration::from_secs(10);
        let mut r = Reach::default();
        assert!(!r.failed(t0, after), "one failure is not an outage");
        assert!(!r.failed(t0 + Duration::from_secs(9), after));
        assert_eq!(r.failing_for(t0 + Duration::from_secs(9)), Duration::from_secs(9));
        assert!(r.failed(t0 + Duration::from_secs(10), after), "failing for the threshold: down");
        assert!(!r.failed(t0 + Duration::from_secs(30), after), "taken down once");
        assert!(r.answered(), "the first answer returns it");
        assert!(!r.answered(), "and only once");
        // A short blip between answers never takes it down.
        assert!(!r.failed(t0 + Duration::from_secs(40), after));
        assert!(!r.answered());
        assert!(!r.failed(t0 + Duration::from_secs(55), after), "the count restarted at the answer");
    }
}
