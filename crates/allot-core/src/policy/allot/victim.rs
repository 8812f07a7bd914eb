//! The two sides of a victim search: the candidate victims and the
//! preemptor, as value types the search ([`super::preempt`]) and its bounds
//! ([`super::bound`]) both read.

use crate::Time;
use crate::cluster::GpuTypeId;
use crate::workload::{Class, WorkloadId, WorkloadSpec};

use super::fairshare::Side;
use super::rank::Tier;

/// A running workload that may be preempted in this pass.
#[derive(Clone, Debug)]
pub(crate) struct Cand {
    pub(crate) w: WorkloadId,
    pub(crate) side: Side,
    pub(crate) over: bool,
    pub(crate) class: Class,
    pub(crate) slice_ok: bool,
    /// CON-12: when its next checkpoint is due, if a fair-share swap (CON-4)
    /// that chooses it waits for that checkpoint.
    pub(crate) checkpoint_due: Option<Time>,
    pub(crate) gpu: Option<GpuTypeId>,
    /// The cluster of the fleet it runs on (FLEET-1).
    pub(crate) cluster: crate::cluster::ClusterId,
    /// Normalisation weight of the GPUs it holds (where the preemptor lands).
    pub(crate) weight: f64,
}

/// The preemptor's view: who it is and how it ranks.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Preemptor<'s> {
    pub(crate) w: WorkloadId,
    pub(crate) spec: &'s WorkloadSpec,
    pub(crate) side: Side,
    pub(crate) tier: Tier,
}

impl Preemptor<'_> {
    /// Whether it may run on GPUs of type `g` (any type unless it names one).
    pub(crate) fn may_use(&self, g: Option<GpuTypeId>) -> bool {
        self.spec.gpu_type.is_none_or(|t| Some(t) == g)
    }

    /// Whether it is over budget (BUD-1): it may then only preempt
    /// over-budget work, under CON-4.
    pub(crate) fn over(&self) -> bool {
        self.tier == Tier::OverBudget
    }
}
