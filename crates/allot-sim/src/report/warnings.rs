//! Warnings about a run whose measures would mislead on their own: a policy
//! that rejected, or never started, a large part of the trace (e.g.
//! `priority` on a config without legacy pools refuses every workload,
//! PRIO-1, and its table shows an occupancy of 0 and nothing else). Each
//! warning names the policy, how many workloads of how many, and the
//! reason of the first of them in trace order, with its rule id.

use std::fmt;

use allot_core::{Phase, State, Time};
use serde::Serialize;

/// The share of the trace from which a policy that did not serve it is
/// warned about.
pub const WARN_SHARE: f64 = 0.10;

/// What became of the workloads a warning counts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unserved {
    /// Refused at admission for good.
    Rejected,
    /// Admitted, but never held GPUs within the horizon.
    NeverStarted,
}

impl Unserved {
    fn verb(self) -> &'static str {
        match self {
            Unserved::Rejected => "rejected",
            Unserved::NeverStarted => "never started",
        }
    }
}

/// A policy that rejected or never started at least [`WARN_SHARE`] of the
/// workloads of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceWarning {
    pub policy: String,
    pub unserved: Unserved,
    /// Workloads concerned, of `workloads` the run knew.
    pub count: u64,
    pub workloads: u64,
    /// The first of them in trace order, and the reason it was given
    /// (`RULE-ID: detail`; a waiting workload's is the policy's
    /// explanation at the end of the run).
    pub first_workload: String,
    pub first_reason: String,
    /// How many of them were given the same rule as the first.
    pub same_rule: u64,
}

impl fmt::Display for TraceWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let share = self.count as f64 / self.workloads.max(1) as f64 * 100.0;
        write!(
            f,
            "{} {} {} of {} workloads ({share:.0}%); the first, {}: {}",
            self.policy,
            self.unserved.verb(),
            self.count,
            self.workloads,
            self.first_workload,
            self.first_reason
        )?;
        if self.same_rule < self.count {
            write!(f, " ({} of the {} for the same rule)", self.same_rule, self.count)?;
        }
        Ok(())
    }
}

/// The warnings of a run of `policy` over `[0, horizon]` ending in `state`:
/// one when the rejected workloads reach [`WARN_SHARE`] of the trace, one
/// when those admitted but never started within the horizon do.
pub fn trace_warnings(policy: &str, state: &State, horizon: Time) -> Vec<TraceWarning> {
    let workloads = state.specs.len() as u64;
    let kinds = [Unserved::Rejected, Unserved::NeverStarted];
    kinds.into_iter().filter_map(|kind| warning(policy, state, horizon, kind, workloads)).collect()
}

fn warning(policy: &str, state: &State, horizon: Time, kind: Unserved, workloads: u64) -> Option<TraceWarning> {
    let of_kind = |run: &allot_core::workload::Run| match kind {
        Unserved::Rejected => run.phase == Phase::Rejected,
        Unserved::NeverStarted => run.phase != Phase::Rejected && run.first_start.is_none_or(|s| s > horizon),
    };
    let hit: Vec<usize> = state.runs.iter().enumerate().filter(|(_, r)| of_kind(r)).map(|(i, _)| i).collect();
    let count = hit.len() as u64;
    if count == 0 || (count as f64) < WARN_SHARE * workloads as f64 {
        return None;
    }
    let first = hit[0];
    let rule = state.runs[first].last_reason.as_ref().map(|r| r.rule);
    let same_rule = hit.iter().filter(|&&i| state.runs[i].last_reason.as_ref().map(|r| r.rule) == rule).count() as u64;
    Some(TraceWarning {
        policy: policy.to_string(),
        unserved: kind,
        count,
        workloads,
        first_workload: state.specs[first].id.clone(),
        first_reason: state.runs[first]
            .last_reason
            .as_ref()
            .map_or_else(|| "no reason was recorded".to_string(), ToString::to_string),
        same_rule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warning(count: u64, same_rule: u64) -> TraceWarning {
        TraceWarning {
            policy: "priority".into(),
            unserved: Unserved::Rejected,
            count,
            workloads: 40,
            first_workload: "w1".into(),
            first_reason: "PRIO-1: 8 GPUs never fit the legacy pools of org/x plus the shared pools".into(),
            same_rule,
        }
    }

    #[test]
    fn a_warning_says_who_how_many_and_why() {
        assert_eq!(
            warning(40, 40).to_string(),
            "priority rejected 40 of 40 workloads (100%); the first, w1: \
             PRIO-1: 8 GPUs never fit the legacy pools of org/x plus the shared pools"
        );
        assert!(warning(10, 7).to_string().ends_with(" (7 of the 10 for the same rule)"));
    }
}
