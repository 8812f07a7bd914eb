//! The policies known by name.

use super::{AllotPolicy, Fifo, Policy, PriorityPolicy, SlurmPolicy};

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
}
