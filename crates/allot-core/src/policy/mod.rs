//! The policy interface and the policies.
//!
//! A policy is a deterministic function of `(state, now)`: it returns the
//! decisions for one scheduling pass, each with the [`crate::Reason`] naming
//! the rule that produced it. It may keep caches between passes, but never
//! reads a clock, does I/O or draws unseeded randomness.

mod allot;
mod fail_cache;
mod fifo;
mod interface;
mod kind;
mod priority;
mod slurm;

pub use allot::{AllotPolicy, Standing};
pub(crate) use fail_cache::FailCache;
pub use fifo::Fifo;
pub use interface::{Memory, Policy};
pub use kind::PolicyKind;
pub use priority::PriorityPolicy;
pub use slurm::{FairTree, JobPriority, MAX_PARTITIONS, Multifactor, SlurmParams, SlurmPolicy, SlurmPreempt};
