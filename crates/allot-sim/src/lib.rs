//! Allot's event-driven simulator and the measures of docs/design.md §3.
//!
//! [`simulate`] replays a trace under a policy on integer virtual time and
//! records every attempt and event ([`SimOutput`]); [`measures`] turns that
//! record into the report object of docs/design.md §4.

pub mod record;

pub use record::{Attempt, AttemptEnd, CapacityStep, ClusterCapacity, LogEvent, Signalled, SimOutput};
pub mod measures;
pub mod replay;
pub mod report;
pub mod sim;
pub mod split;
pub mod statement;

pub use sim::{
    Request, RequestKind, SimOptions, simulate, simulate_observed, simulate_requests, simulate_with_accounts,
};
