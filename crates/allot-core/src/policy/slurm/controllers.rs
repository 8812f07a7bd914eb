//! Which `slurmctld` a pool and a workload answer to, and the partitions
//! the main scheduler blocks (SLURM-3): one controller for the whole
//! cluster, or one per cluster of a fleet (`SlurmPolicy::per_cluster`).

use std::collections::BTreeSet;

use crate::cluster::Pool;
use crate::state::State;
use crate::workload::WorkloadSpec;

/// A partition: a GPU type of the whole (fleet's) cluster under one
/// controller, or a GPU type of one cluster with a controller per cluster
/// ([`Controllers`]). Serialised as a number: a GPU type id alone in the
/// first case.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub(crate) struct Part(u32);

/// Which `slurmctld` each pool and workload answers to: one for the whole
/// cluster, or one per cluster of a fleet (`SlurmPolicy::per_cluster`),
/// as a site runs several clusters: each controller has its own
/// partitions, its own Fair Tree over its own part of the account tree,
/// its own job-size and TRES denominators and its own `bf_max_job_test`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Controllers {
    pub per_cluster: bool,
}

impl Controllers {
    /// The partition `pool` belongs to.
    pub(crate) fn part(self, pool: &Pool) -> Part {
        let c = if self.per_cluster { u32::from(pool.cluster.0) << 16 } else { 0 };
        Part(c | u32::from(pool.gpu.0))
    }

    /// The controller `spec` is submitted to: 0 under one controller; per
    /// cluster, the first cluster among the pools that may serve it (a
    /// workload of a per-cluster run is pinned to one cluster).
    pub(crate) fn of(self, state: &State, spec: &WorkloadSpec) -> u16 {
        if !self.per_cluster {
            return 0;
        }
        state
            .cluster
            .pools
            .iter()
            .filter(|p| p.may_serve(spec.gpu_type, spec.clusters))
            .map(|p| p.cluster.0)
            .min()
            .unwrap_or(0)
    }

    /// How many controllers there are.
    pub(crate) fn count(self, state: &State) -> usize {
        if self.per_cluster { state.cluster.clusters.len().max(1) } else { 1 }
    }

    /// The partitions of the pools that may serve `spec`.
    pub(crate) fn partitions(self, state: &State, spec: &WorkloadSpec) -> BTreeSet<Part> {
        state.cluster.pools.iter().filter(|p| p.may_serve(spec.gpu_type, spec.clusters)).map(|p| self.part(p)).collect()
    }
}
