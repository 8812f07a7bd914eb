//! The engine: the one place where inputs change the scheduler state.
//!
//! Everything that happens is an [`Input`] (an arrival, an exit, a node
//! event, a cancel, the passing of time…), taken only through
//! [`Engine::step`], which owns the order within an instant and the pass
//! trigger; every method that changes the [`State`](crate::State) is
//! private. A step leaves [`Effect`]s behind as data: launch this attempt,
//! signal it, kill it, record this transition, this node's health changed.
//! Two interpreters execute them: the simulator in virtual time (a
//! launched attempt's process ends when its work is done, a kill ends it at
//! once) and the live server (the store first, in one transaction, then the
//! executor). Whatever differs between them is in *what they feed in*, never
//! in how the state changes; `docs/architecture.md` lists those facts.
//!
//! Pure and deterministic like the rest of the core: no I/O, no clock; `now`
//! is always an argument, and every tie is broken by workload id.

mod effect;
mod input;
mod reactor;

pub use effect::{
    Change, Closed, Effect, Ended, Exit, LaunchFault, OpenAttempt, Outcome, Transition, closed_at_restart,
};
pub use input::{Answer, Carry, Close, Entry, Input, Later, Snapshot, SnapshotOf, Start, Step, UsageSpan};
pub use reactor::{Cancelled, CheckpointRefused, Engine, HoldRefused, LAUNCH_FAILURES_TO_DRAIN, Past};
