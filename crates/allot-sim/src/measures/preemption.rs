//! Where the GPU-time lost to preemption goes, by the rule that caused each
//! preemption (`docs/measures.md`, "Preemption loss by cause"): how many
//! preemptions, the GPU-time they cost (the grace, and the progress since
//! the victim's last checkpoint), and whether each bought something:
//! whether its preemptor started soon after the GPUs were freed, whether
//! that start then ended in an idle reclaim (CON-9: a session that took
//! the GPUs and left them idle), and whether the victim later preempted its
//! own preemptor (the two traded GPUs back and forth).

use std::collections::BTreeMap;

use allot_core::{Time, WorkloadId};

use crate::measures::capacity::overlap;
use crate::record::{AttemptEnd, SimOutput};
use crate::report::CauseReport;

const HOUR: f64 = 3600.0;

/// A preemptor "started soon" if it started at most this long after its
/// victim's GPUs were freed (the end of the grace): the pass after the
/// stop, with room for the other victims of a gang to stop too.
pub const SERVED_WITHIN_S: Time = 300;

/// The key of preemptions without a recorded signal (an attempt lost with
/// its server, which a replay never has).
pub const UNKNOWN_CAUSE: &str = "unknown";

/// Per cause (the rule id of the decision that signalled the victim, or
/// [`UNKNOWN_CAUSE`]), the preemptions of the run's attempts clipped to the
/// horizon as every other measure of GPU-time is; empty without any.
pub(crate) fn causes(out: &SimOutput) -> BTreeMap<String, CauseReport> {
    let h = out.horizon_end;
    // Per workload, the starts of its attempts in time order, with how
    // each ended.
    let mut starts: BTreeMap<WorkloadId, Vec<(Time, AttemptEnd)>> = BTreeMap::new();
    // (victim, preemptor) → when the victim's preemptions by it were signalled.
    let mut pairs: BTreeMap<(WorkloadId, WorkloadId), Vec<Time>> = BTreeMap::new();
    for a in &out.attempts {
        starts.entry(a.workload).or_default().push((a.start, a.outcome));
        if let Some(s) = a.preempted
            && let Some(by) = s.by
        {
            pairs.entry((a.workload, by)).or_default().push(s.at);
        }
    }
    for v in starts.values_mut() {
        v.sort_by_key(|x| x.0);
    }
    let mut out_map: BTreeMap<String, Acc> = BTreeMap::new();
    for a in out.attempts.iter().filter(|a| a.outcome == AttemptEnd::Preempted) {
        let gpus = u64::from(a.gpus);
        let assigned = overlap(a.start, a.end, 0, h) * gpus;
        let lost = assigned - a.useful_gpu_s.min(assigned);
        let key = a.preempted.map_or(UNKNOWN_CAUSE, |s| s.rule.id());
        let acc = out_map.entry(key.to_string()).or_default();
        acc.preemptions += 1;
        acc.overhead_gpu_s += lost;
        let Some(s) = a.preempted else { continue };
        acc.grace_gpu_s += (overlap(s.at.max(a.start), a.end, 0, h) * gpus).min(lost);
        let Some(by) = s.by else {
            acc.no_preemptor += 1;
            continue;
        };
        // Its preemptor's first start at or after the signal.
        let next = starts.get(&by).and_then(|v| v.get(v.partition_point(|&(t, _)| t < s.at)).copied());
        if next.is_some_and(|(t, _)| t <= a.end + SERVED_WITHIN_S) {
            acc.served += 1;
        }
        if next.is_some_and(|(_, end)| end == AttemptEnd::IdleReclaimed) {
            acc.reclaimed += 1;
        }
        // The victim later preempted its preemptor.
        if pairs.get(&(by, a.workload)).is_some_and(|ts| ts.iter().any(|&t| t > s.at)) {
            acc.returned += 1;
        }
    }
    out_map.into_iter().map(|(k, a)| (k, a.report())).collect()
}

/// The sums of one cause.
#[derive(Default)]
struct Acc {
    preemptions: u64,
    overhead_gpu_s: u64,
    grace_gpu_s: u64,
    no_preemptor: u64,
    served: u64,
    reclaimed: u64,
    returned: u64,
}

impl Acc {
    fn report(&self) -> CauseReport {
        let with = self.preemptions - self.no_preemptor;
        CauseReport {
            preemptions: self.preemptions,
            overhead_gpu_hours: self.overhead_gpu_s as f64 / HOUR,
            grace_gpu_hours: self.grace_gpu_s as f64 / HOUR,
            progress_lost_gpu_hours: (self.overhead_gpu_s - self.grace_gpu_s) as f64 / HOUR,
            with_preemptor: with,
            preemptor_started: self.served,
            preemptor_idle_reclaimed: self.reclaimed,
            returned: self.returned,
        }
    }
}
