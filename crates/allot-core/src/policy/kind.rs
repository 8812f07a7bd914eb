//! The policies known by name.

use super::{AllotPolicy, Fifo, Policy, PriorityPolicy, SlurmPolicy};
use crate::Contract;

/// A policy by name.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum PolicyKind {
    Fifo,
    FifoBackfill,
    Priority,
    Allot,
    Slurm,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 5] =
        [PolicyKind::Fifo, PolicyKind::FifoBackfill, PolicyKind::Priority, PolicyKind::Allot, PolicyKind::Slurm];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<PolicyKind> {
        s.parse().ok()
    }

    /// A baseline: a policy Allot is compared against, i.e. every kind
    /// but Allot's own (a kind added later is a baseline unless it says
    /// otherwise).
    pub fn is_baseline(self) -> bool {
        !matches!(self, PolicyKind::Allot)
    }

    /// CON-9: whether a replay under this kind applies idle reclaim.
    /// Allot's contract includes it; a baseline gets it only when asked
    /// (`reclaim_baselines`), so that a comparison does not credit a
    /// baseline with a mechanism it does not have, nor hide its effect on
    /// Allot (docs/baselines.md).
    pub fn idle_reclaim(self, reclaim_baselines: bool) -> bool {
        !self.is_baseline() || reclaim_baselines
    }

    /// The contract a replay under this kind runs with: `contract`, without
    /// idle reclaim unless [`PolicyKind::idle_reclaim`] says it applies.
    pub fn contract(self, contract: Contract, reclaim_baselines: bool) -> Contract {
        if self.idle_reclaim(reclaim_baselines) { contract } else { contract.without_idle_reclaim() }
    }

    /// A fresh policy of this kind. Its knobs come with the state it is
    /// given (`Contract::slurm` for `slurm`).
    pub fn build(self) -> Box<dyn Policy> {
        match self {
            PolicyKind::Fifo => Box::new(Fifo::strict()),
            PolicyKind::FifoBackfill => Box::new(Fifo::backfill()),
            PolicyKind::Priority => Box::new(PriorityPolicy),
            PolicyKind::Allot => Box::new(AllotPolicy::new()),
            PolicyKind::Slurm => Box::new(SlurmPolicy::new()),
        }
    }

    /// The kinds that have a per-cluster form for a fleet whose inputs are
    /// split per cluster (`allot compare --policies allot-split,slurm-split`,
    /// docs/compare.md): one scheduler per cluster.
    pub const SPLIT: [PolicyKind; 2] = [PolicyKind::Allot, PolicyKind::Slurm];

    /// `allot-split`, `slurm-split`: the name of the per-cluster form.
    pub fn split_name(self) -> Option<&'static str> {
        match self {
            PolicyKind::Allot => Some("allot-split"),
            PolicyKind::Slurm => Some("slurm-split"),
            _ => None,
        }
    }

    /// A fresh policy of the per-cluster form, for inputs split per
    /// cluster: `allot` as it is (the split tree's copies share nothing),
    /// `slurm` with one controller per cluster
    /// ([`SlurmPolicy::per_cluster`]); `None` for a kind without one.
    pub fn build_split(self) -> Option<Box<dyn Policy>> {
        match self {
            PolicyKind::Allot => Some(Box::new(AllotPolicy::new())),
            PolicyKind::Slurm => Some(Box::new(SlurmPolicy::per_cluster())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_reclaim_is_allots_and_a_baselines_only_when_asked() {
        let c = Contract::default();
        assert!(c.idle_reclaim.interactive.is_some(), "the default contract reclaims idle interactive GPUs");
        for k in PolicyKind::ALL {
            let baseline = k != PolicyKind::Allot;
            assert_eq!(k.is_baseline(), baseline, "{k:?}");
            assert_eq!(k.contract(c, false).idle_reclaim.interactive.is_some(), !baseline, "{k:?}, not asked");
            assert_eq!(k.contract(c, true), c, "{k:?}, asked: the contract as given");
        }
    }
}
