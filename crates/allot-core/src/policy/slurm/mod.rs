//! `slurm`: a model of a Slurm site's scheduling, the baseline Allot is
//! compared against (rules SLURM-1 … SLURM-5, `docs/baselines.md`).
//!
//! * SLURM-1: multifactor priority ([`multifactor`]);
//! * SLURM-2: fair share by Fair Tree ([`fairtree`]);
//! * SLURM-3: the main scheduler, priority order, stopping a partition at
//!   its first workload that does not fit;
//! * SLURM-4: backfill with reservations by time limits every `bf_interval`;
//! * SLURM-5: optional QOS preemption (`PreemptType=preempt/qos`,
//!   `PreemptMode=REQUEUE`).
//!
//! One controller for the cluster, or one per cluster of a fleet
//! ([`controllers`], `SlurmPolicy::per_cluster`).

mod controllers;
mod fairtree;
mod multifactor;
mod pass;
mod policy;

pub use crate::slurm_params::{MAX_PARTITIONS, SlurmParams, SlurmPreempt};
pub use fairtree::FairTree;
pub use multifactor::{JobPriority, Multifactor};
pub use policy::SlurmPolicy;
