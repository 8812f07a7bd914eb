//! The outcome of every workload: exactly one of completed, failed,
//! cancelled, idle-reclaimed, rejected or unfinished, so that the counts
//! of a report add up to its workloads (`docs/measures.md`, "Outcomes").

use allot_core::{Phase, State};

use crate::record::{AttemptEnd, SimOutput};

/// What became of a workload by the end of the horizon.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WorkloadOutcome {
    /// All its work done.
    Completed,
    /// A time limit (CON-6) or its own failure without retries left.
    Failed,
    /// Cancelled by a person.
    Cancelled,
    /// Ended because its GPUs stayed idle (CON-9).
    IdleReclaimed,
    /// Refused at admission.
    Rejected,
    /// Pending, running or stopping when the horizon ended.
    Unfinished,
}

impl WorkloadOutcome {
    /// Every outcome, in the order the reports show them.
    pub const ALL: [WorkloadOutcome; 6] = [
        WorkloadOutcome::Completed,
        WorkloadOutcome::Failed,
        WorkloadOutcome::Cancelled,
        WorkloadOutcome::IdleReclaimed,
        WorkloadOutcome::Rejected,
        WorkloadOutcome::Unfinished,
    ];

    /// The outcome in words, as the reports write it.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadOutcome::Completed => "completed",
            WorkloadOutcome::Failed => "failed",
            WorkloadOutcome::Cancelled => "cancelled",
            WorkloadOutcome::IdleReclaimed => "idle-reclaimed",
            WorkloadOutcome::Rejected => "rejected",
            WorkloadOutcome::Unfinished => "unfinished",
        }
    }
}

/// The outcome of every workload of a run, in workload order: its final
/// phase, with a cancel told apart from an idle reclaim by how its last
/// attempt ended.
pub fn outcomes(state: &State, out: &SimOutput) -> Vec<WorkloadOutcome> {
    let mut reclaimed = vec![false; state.specs.len()];
    for a in &out.attempts {
        // An idle reclaim ends the workload: its attempt is the last one.
        if a.outcome == AttemptEnd::IdleReclaimed {
            reclaimed[a.workload.0 as usize] = true;
        }
    }
    state
        .runs
        .iter()
        .zip(reclaimed)
        .map(|(run, reclaimed)| match run.phase {
            Phase::Finished => WorkloadOutcome::Completed,
            Phase::Failed => WorkloadOutcome::Failed,
            Phase::Cancelled if reclaimed => WorkloadOutcome::IdleReclaimed,
            Phase::Cancelled => WorkloadOutcome::Cancelled,
            Phase::Rejected => WorkloadOutcome::Rejected,
            Phase::Pending | Phase::Running | Phase::Stopping => WorkloadOutcome::Unfinished,
        })
        .collect()
}

/// How many workloads ended in each outcome, in [`WorkloadOutcome::ALL`] order.
pub(crate) fn counts(outcomes: &[WorkloadOutcome]) -> [u64; 6] {
    let mut n = [0; 6];
    for o in outcomes {
        n[WorkloadOutcome::ALL.iter().position(|x| x == o).expect("every outcome is listed")] += 1;
    }
    n
}
