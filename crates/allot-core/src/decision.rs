//! Decisions: what a policy asks for, each with the reason (the rule that
//! produced it, [`crate::rule`]).

use crate::allocation::Allocation;
pub use crate::rule::{Reason, Rule};
use crate::workload::WorkloadId;

/// What a policy wants done.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Start a pending workload on these GPUs (which must be free now).
    Start { workload: WorkloadId, alloc: Allocation },
    /// Signal a running workload to stop; it is stopped after grace.
    Preempt { workload: WorkloadId, by: Option<WorkloadId> },
    /// Refuse a pending workload for good.
    Reject { workload: WorkloadId },
    /// CON-10: keep these GPUs (free, or held by stopping workloads) for a
    /// pending workload until it starts; nothing else may start there.
    Claim { workload: WorkloadId, alloc: Allocation },
}

/// An action with its reason.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub action: Action,
    pub reason: Reason,
}
