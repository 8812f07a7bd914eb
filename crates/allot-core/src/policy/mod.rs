//! The policy interface and the policies.
//!
//! A policy is a deterministic function of `(state, now)`: it returns the
//! decisions for one scheduling pass, each with the [`Reason`] naming the
//! rule that produced it. It may keep caches between passes, but never reads
//! a clock, does I/O or draws unseeded randomness.

mod allot;
mod fifo;
mod priority;

pub use allot::AllotPolicy;
pub use fifo::Fifo;
pub use priority::PriorityPolicy;

use crate::Time;
use crate::decision::{Decision, Reason};
use crate::pending::Shape;
use crate::state::State;
use crate::workload::{WorkloadId, WorkloadSpec};

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
}

/// The policies known by name.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyKind {
    Fifo,
    FifoBackfill,
    Priority,
    Allot,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 4] =
        [PolicyKind::Fifo, PolicyKind::FifoBackfill, PolicyKind::Priority, PolicyKind::Allot];

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Fifo => "fifo",
            PolicyKind::FifoBackfill => "fifo-backfill",
            PolicyKind::Priority => "priority",
            PolicyKind::Allot => "allot",
        }
    }

    pub fn parse(s: &str) -> Option<PolicyKind> {
        PolicyKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// A fresh policy of this kind.
    pub fn build(self) -> Box<dyn Policy> {
        match self {
            PolicyKind::Fifo => Box::new(Fifo::strict()),
            PolicyKind::FifoBackfill => Box::new(Fifo::backfill()),
            PolicyKind::Priority => Box::new(PriorityPolicy),
            PolicyKind::Allot => Box::new(AllotPolicy::new()),
        }
    }
}

/// Remembers, within one pass, the smallest gang of each shape that failed
/// to place: a larger gang of the same shape cannot fit either, because a
/// pass only ever consumes free GPUs.
#[derive(Default)]
pub(crate) struct FailCache {
    /// ((GPU type, exact nodes, scope), smallest failed gang).
    shapes: Vec<(ShapeKey, u32)>,
}

type ShapeKey = (Option<crate::cluster::GpuTypeId>, u32, u64);

impl FailCache {
    /// `scope` distinguishes sets of allowed pools (0 when all pools).
    pub(crate) fn known_to_fail(&self, spec: &WorkloadSpec, scope: u64) -> bool {
        self.known_shape(Shape::of(spec), scope)
    }

    /// [`FailCache::known_to_fail`] for a gang of this shape.
    pub(crate) fn known_shape(&self, shape: Shape, scope: u64) -> bool {
        let key = (shape.gpu_type, shape.nodes, scope);
        self.shapes.iter().any(|(k, g)| *k == key && shape.gpus >= *g)
    }

    pub(crate) fn record(&mut self, spec: &WorkloadSpec, scope: u64) {
        let key = (spec.gpu_type, spec.nodes, scope);
        match self.shapes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => *g = (*g).min(spec.gpus),
            None => self.shapes.push((key, spec.gpus)),
        }
    }
}
