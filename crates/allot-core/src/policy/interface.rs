//! The interface every policy implements.

use crate::Time;
use crate::decision::Decision;
use crate::rule::Reason;
use crate::state::State;
use crate::workload::{WorkloadId, WorkloadSpec};

/// What a policy remembers from pass to pass that its later decisions
/// depend on (SLURM-2: the period's priorities): a snapshot of a live run
/// carries it with the engine.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Memory {
    Slurm(Box<crate::policy::slurm::SlurmPolicy>),
}

/// A scheduling policy.
pub trait Policy: Send {
    /// The policy's name as given on the command line.
    fn name(&self) -> &'static str;

    /// Admission at submit time: `Err` rejects the workload for good with
    /// the reason (e.g. it can never fit what this policy lets it use).
    fn admit(&self, state: &State, spec: &WorkloadSpec) -> Result<(), Reason>;

    /// The decisions of one scheduling pass at `now`. Starts must name GPUs
    /// that are free on usable nodes once the decisions before them in the
    /// list have been applied; preemptions name running workloads.
    fn schedule(&mut self, state: &State, now: Time) -> Vec<Decision>;

    /// Why a pending workload is not running, as the policy sees it now.
    fn explain(&self, state: &State, w: WorkloadId, now: Time) -> Reason;

    /// [`Policy::explain`] of each of `ws` in one state at one instant
    /// (the end of a replay, a whole queue): the same reasons, with the
    /// work they have in common done once.
    fn explain_all(&self, state: &State, ws: &[WorkloadId], now: Time) -> Vec<Reason> {
        ws.iter().map(|&w| self.explain(state, w, now)).collect()
    }

    /// The next time after `now` at which a time-based condition (a slice
    /// ending, a budget period rolling over) may change this policy's
    /// decisions while work waits. `None` when only events matter.
    fn next_wakeup(&self, _state: &State, _now: Time) -> Option<Time> {
        None
    }

    /// Whether the simulator must also run a pass every scheduling interval
    /// while work waits (policies whose ranking drifts with time).
    fn periodic(&self) -> bool {
        false
    }

    /// What it remembers between passes that later decisions depend on
    /// (`None`: nothing; every pass reads only the state).
    fn memory(&self) -> Option<Memory> {
        None
    }

    /// Takes back what [`Policy::memory`] gave (a snapshot restored).
    fn remember(&mut self, _memory: Memory) {}
}
