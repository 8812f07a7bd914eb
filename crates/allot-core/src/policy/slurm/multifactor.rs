//! SLURM-1: job priority as Slurm's `priority/multifactor` computes it.
//!
//! Each factor is normalised to 0..=1, multiplied by its integer weight,
//! and the sum is truncated to an integer (at least 1, as Slurm reserves 0
//! for held jobs):
//! * age: `min(now − eligible, PriorityMaxAge) / PriorityMaxAge`, eligible
//!   being when the workload was first queued (its conditions met);
//! * fair share: the Fair Tree factor of its user in its account (SLURM-2);
//! * job size: as Slurm without `SMALL_RELATIVE_TO_TIME`, GPUs standing for
//!   CPUs: the mean of `nodes / cluster nodes` and `GPUs / cluster GPUs`
//!   (`nodes` 1 for a `nodes = 0` workload), or with `PriorityFavorSmall`
//!   the mean of `(N − nodes) / N` (0 once `nodes ≥ N`) and `(G − GPUs) / G`;
//! * partition: the `PriorityJobFactor` of its GPU type over the largest of
//!   the cluster's GPU types (a workload without a GPU type: the highest
//!   among the types it may run on, as Slurm tries a job in each of its
//!   partitions);
//! * QOS: the priority of its label over `qos_priority_max` (the site's
//!   largest QOS priority), by default the largest label priority;
//! * TRES (`PriorityWeightTRES=GRES/gpu=N`): its GPUs over the cluster's
//!   GPUs (Slurm: over its partition's).
//!
//! With a controller per cluster of a fleet (`SlurmPolicy::per_cluster`),
//! "the cluster" is the workload's own cluster: its nodes, its GPUs and its
//! GPU types' largest `PriorityJobFactor`.
//!
//! Slurm computes a job's priority when it is queued and then every
//! `PriorityCalcPeriod` (the Fair Tree too); the policy keeps them between
//! (`super::policy`).

use std::fmt;

use crate::Time;
use crate::state::State;
use crate::workload::{Priority, WorkloadId};

use super::controllers::Controllers;
use super::fairtree::FairTree;
use crate::slurm_params::SlurmParams;

/// A workload's factors (0..=1), weighted, and the priority.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobPriority {
    /// age, fair share, job size, partition, QOS, TRES (GPUs), each 0..=1.
    pub factors: [f64; 6],
    /// The same times their weights.
    pub weighted: [f64; 6],
    pub priority: u32,
}

impl fmt::Display for JobPriority {
    /// `priority 1234 (age 100, fairshare 800, jobsize 0, partition 334, qos 0)`,
    /// the weighted factors as `sprio` shows them (`, tres gres/gpu=12`
    /// with a GPU TRES weight).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.weighted.map(|x| x.round() as u64);
        write!(
            f,
            "priority {} (age {}, fairshare {}, jobsize {}, partition {}, qos {}",
            self.priority, w[0], w[1], w[2], w[3], w[4]
        )?;
        if self.weighted[5] > 0.0 {
            write!(f, ", tres gres/gpu={}", self.weighted[5] as u64)?;
        }
        f.write_str(")")
    }
}

/// What every workload's priority in one pass is computed from.
pub struct Multifactor {
    params: SlurmParams,
    tree: FairTree,
    ctl: Controllers,
    /// Per controller: what the job-size, TRES and partition factors are
    /// relative to.
    scales: Vec<Scale>,
    max_qos: u32,
}

/// A controller's GPUs, nodes and largest partition priority.
#[derive(Clone, Copy, Debug, Default)]
struct Scale {
    gpus: f64,
    nodes: f64,
    max_partition: u32,
}

impl Multifactor {
    pub fn new(state: &State, now: Time) -> Multifactor {
        Multifactor::with_tree(state, FairTree::compute(state, now))
    }

    /// The same with the fair-share factors of `tree` (the last
    /// `PriorityCalcPeriod`'s).
    pub fn with_tree(state: &State, tree: FairTree) -> Multifactor {
        Multifactor::with_tree_in(state, tree, Controllers::default())
    }

    /// The same with the controllers `ctl`.
    pub(crate) fn with_tree_in(state: &State, tree: FairTree, ctl: Controllers) -> Multifactor {
        let params = state.contract.slurm;
        let c = &state.cluster;
        let mut scales = vec![Scale::default(); ctl.count(state)];
        let of_pool = |p: crate::cluster::PoolId| -> usize {
            let pool = c.pool(p);
            if ctl.per_cluster { usize::from(pool.cluster.0) } else { 0 }
        };
        for n in &c.nodes {
            let s = &mut scales[of_pool(n.pool)];
            s.gpus += f64::from(n.gpus);
            s.nodes += 1.0;
        }
        for (i, p) in c.pools.iter().enumerate() {
            let s = &mut scales[of_pool(crate::cluster::PoolId(i as u32))];
            s.max_partition = s.max_partition.max(params.partition(p.gpu));
        }
        Multifactor {
            params,
            tree,
            ctl,
            scales,
            max_qos: params
                .qos_priority_max
                .unwrap_or_else(|| Priority::ALL.iter().map(|&p| params.qos(p)).max().unwrap_or(0)),
        }
    }

    /// The priority of pending `w` at `now`.
    pub fn of(&self, state: &State, w: WorkloadId, now: Time) -> JobPriority {
        let (spec, p) = (state.spec(w), &self.params);
        let eligible = state.run(w).queued.unwrap_or(spec.submit);
        let age =
            if p.max_age == 0 { 1.0 } else { now.saturating_sub(eligible).min(p.max_age) as f64 / p.max_age as f64 };
        let fairshare = self.tree.factor(spec.account, &spec.user);
        let scale = self.scales[usize::from(self.ctl.of(state, spec))];
        let tres = (f64::from(spec.gpus) / scale.gpus.max(1.0)).min(1.0);
        let factors = [
            age,
            fairshare,
            self.job_size(scale, spec.gpus, spec.nodes),
            self.partition(state, scale, w),
            self.qos(spec.priority),
            tres,
        ];
        let weights =
            [p.weight_age, p.weight_fairshare, p.weight_job_size, p.weight_partition, p.weight_qos, p.weight_tres_gpu];
        let mut weighted = [0.0; 6];
        for i in 0..6 {
            weighted[i] = factors[i] * f64::from(weights[i]);
        }
        let sum: f64 = weighted.iter().sum();
        JobPriority { factors, weighted, priority: (sum.min(f64::from(u32::MAX)) as u32).max(1) }
    }

    fn job_size(&self, scale: Scale, gpus: u32, nodes: u32) -> f64 {
        let (n, g) = (f64::from(nodes.max(1)), f64::from(gpus));
        let (nn, gg) = (scale.nodes.max(1.0), scale.gpus.max(1.0));
        let f = if self.params.favor_small {
            let by_nodes = if nn > n { (nn - n) / nn } else { 0.0 };
            (by_nodes + (gg - g) / gg) / 2.0
        } else {
            (n / nn + g / gg) / 2.0
        };
        f.clamp(0.0, 1.0)
    }

    fn partition(&self, state: &State, scale: Scale, w: WorkloadId) -> f64 {
        if scale.max_partition == 0 {
            return 0.0;
        }
        let spec = state.spec(w);
        let best = state
            .cluster
            .pools
            .iter()
            .filter(|p| p.may_serve(spec.gpu_type, spec.clusters))
            .map(|p| self.params.partition(p.gpu))
            .max()
            .unwrap_or(0);
        f64::from(best) / f64::from(scale.max_partition)
    }

    fn qos(&self, label: Priority) -> f64 {
        if self.max_qos == 0 { 0.0 } else { (f64::from(self.params.qos(label)) / f64::from(self.max_qos)).min(1.0) }
    }
}
