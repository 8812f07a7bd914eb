//! GPU-time per attempt: assigned, useful, lost; in total and per account
//! subtree. Every attempt is clipped to the horizon.

use allot_core::{AccountId, State, Time};

use crate::measures::capacity::overlap;
use crate::record::{AttemptEnd, SimOutput};

/// Sums over the attempts of a run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Work {
    /// Σ (end − start) × gpus.
    pub assigned_gpu_s: u64,
    /// Σ assigned × util.
    pub util_gpu_s: f64,
    /// Σ useful (progress kept).
    pub useful_gpu_s: u64,
    /// Σ useful × impact of the workload's account.
    pub impact_gpu_s: f64,
    pub preemptions: u64,
    /// Σ (assigned − useful) over preempted attempts: grace + lost progress.
    pub preemption_overhead_gpu_s: u64,
    pub failures: u64,
    /// Σ (assigned − useful) over attempts ended by a node failure.
    pub failure_lost_gpu_s: u64,
    /// Assigned GPU-seconds per account subtree (index = account id).
    pub by_account_gpu_s: Vec<u64>,
    /// Normalised GPU-seconds per account subtree.
    pub by_account_ngs: Vec<f64>,
}

impl Work {
    pub(crate) fn tally(state: &State, out: &SimOutput) -> Work {
        let h = out.horizon_end;
        let n = state.accounts.len();
        let mut w = Work { by_account_gpu_s: vec![0; n], by_account_ngs: vec![0.0; n], ..Work::default() };
        for a in &out.attempts {
            let assigned = overlap(a.start, a.end, 0, h) * u64::from(a.gpus);
            let useful = a.useful_gpu_s.min(assigned);
            let lost = assigned - useful;
            w.assigned_gpu_s += assigned;
            w.util_gpu_s += assigned as f64 * a.util;
            w.useful_gpu_s += useful;
            w.impact_gpu_s += useful as f64 * state.accounts.account(a.account).impact;
            match a.outcome {
                AttemptEnd::Preempted => {
                    w.preemptions += 1;
                    w.preemption_overhead_gpu_s += lost;
                }
                AttemptEnd::Failed => {
                    w.failures += 1;
                    w.failure_lost_gpu_s += lost;
                }
                // A cancel or an idle reclaim (CON-9) ends the workload:
                // its own outcome, not a preemption.
                AttemptEnd::Finished | AttemptEnd::Cut | AttemptEnd::Cancelled | AttemptEnd::IdleReclaimed => {}
            }
            for x in state.accounts.ancestry(a.account) {
                w.by_account_gpu_s[x.0 as usize] += assigned;
                w.by_account_ngs[x.0 as usize] += assigned as f64 * a.weight;
            }
        }
        w
    }
}

/// The largest impact of any account (the virtual root excluded); 1 for an
/// empty tree.
pub(crate) fn max_impact(state: &State) -> f64 {
    state.accounts.ids().map(|a| state.accounts.account(a).impact).reduce(f64::max).unwrap_or(1.0)
}

/// The interval in which a workload wanted GPUs, `[submit, end)` clipped to
/// the horizon (end = its end, or the horizon if it has not ended), with its
/// gang size and normalisation weight.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) struct Want {
    pub account: AccountId,
    pub from: Time,
    pub to: Time,
    pub gpus: u32,
    /// Weight of the GPU type it last ran on, else of its GPU-type
    /// constraint, else 1.
    pub weight: f64,
}

impl Want {
    /// Raw GPU-seconds wanted over the horizon.
    pub(crate) fn gpu_s(&self) -> u64 {
        (self.to - self.from) * u64::from(self.gpus)
    }
}

/// The [`Want`] of every workload, in workload order.
pub(crate) fn wants(state: &State, out: &SimOutput) -> Vec<Want> {
    let h = out.horizon_end;
    // Weight of the latest attempt (by start; ties: the one recorded later).
    let mut last: Vec<Option<(Time, f64)>> = vec![None; state.specs.len()];
    for a in &out.attempts {
        let slot = &mut last[a.workload.0 as usize];
        if slot.is_none_or(|(t, _)| a.start >= t) {
            *slot = Some((a.start, a.weight));
        }
    }
    state
        .specs
        .iter()
        .zip(&state.runs)
        .zip(last)
        .map(|((spec, run), last)| {
            let weight = last.map(|(_, w)| w).or_else(|| spec.gpu_type.map(|g| state.cluster.weight(g))).unwrap_or(1.0);
            let from = spec.submit.min(h);
            let to = run.end.unwrap_or(h).clamp(from, h);
            Want { account: spec.account, from, to, gpus: spec.gpus, weight }
        })
        .collect()
}
