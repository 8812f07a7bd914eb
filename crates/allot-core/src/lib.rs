//! Allot's policy core.
//!
//! Pure and deterministic: no I/O, no async, no clock, no unseeded randomness.
//! Everything here is a function of `(state, now)`; the simulator and the live
//! server both call it. Every policy rule has an id (see `docs/rules.md`) that
//! the code cites and that every [`Reason`] carries.

pub mod account;
pub mod alerts;
pub mod allocation;
pub mod book;
pub mod calendar;
pub mod cluster;
pub mod contract;
pub mod decision;
pub mod engine;
pub mod ledger;
pub(crate) mod pending;
pub mod placement;
pub mod policy;
pub mod rule;
pub mod slurm_params;
pub mod state;
pub mod statement;
pub mod time;
pub mod words;
pub mod workload;

pub use account::{Account, AccountId, AccountSpec, AccountTree, AccountTreeError, check_path};
pub use allocation::Allocation;
pub use book::{AccountBook, AccountEdit, AccountField, EditError};
pub use cluster::{AddNodeError, Cluster, GpuType, GpuTypeId, Health, Node, NodeId, Pool, PoolId, PoolSpec};
pub use contract::{Contract, IdleReclaim, PerClass};
pub use decision::{Action, Decision};
pub use engine::{Effect, Engine, Exit, Transition};
pub use ledger::{Ledger, Projection, Usage};
pub use placement::{FreeMap, PlacementFailure};
pub use policy::{Policy, PolicyKind};
pub use rule::{Reason, Rule};
pub use state::{NodeAdded, NodeEvent, NodeEventKind, NodeEvents, State};
pub use time::Time;
pub use workload::{ArrayPart, Class, DepKind, DepTarget, Dependency, Phase, Priority, Run, WorkloadId, WorkloadSpec};
