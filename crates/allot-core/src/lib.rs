//! Allot's policy core.
//!
//! Pure and deterministic: no I/O, no async, no clock, no unseeded randomness.
//! Everything here is a function of `(state, now)`; the simulator and the live
//! server both call it. Every policy rule has an id (see `docs/rules.md`) that
//! the code cites and that every [`Reason`] carries.

pub mod account;
pub mod cluster;
pub mod contract;
pub mod decision;
pub mod engine;
pub mod ledger;
pub(crate) mod pending;
pub mod placement;
pub mod policy;
pub mod state;
pub mod workload;

pub use account::{Account, AccountId, AccountSpec, AccountTree, AccountTreeError};
pub use cluster::{Cluster, GpuType, GpuTypeId, Health, Node, NodeId, Pool, PoolId, PoolSpec};
pub use contract::{Contract, PerClass};
pub use decision::{Action, Decision, Reason, Rule};
pub use engine::{Effect, Engine, Exit, Transition};
pub use ledger::{Ledger, Usage};
pub use placement::{Allocation, FreeMap, PlacementFailure};
pub use policy::{Policy, PolicyKind};
pub use state::{NodeEvent, NodeEventKind, State};
pub use workload::{Class, Phase, Priority, Run, WorkloadId, WorkloadSpec};

/// Time in whole seconds since the start of the trace (simulator) or the Unix
/// epoch (server). Integer time keeps every decision reproducible.
pub type Time = u64;
