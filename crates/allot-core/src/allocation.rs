//! GPUs held by a workload.

use crate::cluster::NodeId;

/// GPUs held by one workload: per node, a bit mask of GPU indices.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct Allocation {
    pub parts: Vec<(NodeId, u64)>,
}

impl Allocation {
    pub fn gpus(&self) -> u32 {
        self.parts.iter().map(|(_, m)| m.count_ones()).sum()
    }

    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.parts.iter().map(|(n, _)| *n)
    }

    /// GPU indices on a node, ascending.
    pub fn indices(mask: u64) -> impl Iterator<Item = u32> {
        (0..64u32).filter(move |i| mask & (1u64 << i) != 0)
    }
}
