//! The measures of docs/design.md §3, computed from a run's final [`State`] and
//! its record ([`SimOutput`]) alone. Every definition is written out in
//! `docs/measures.md`; the names there are the names here.
//!
//! * `capacity`: available GPU-time (the in-service step function);
//! * `work`: assigned, useful and lost GPU-time per attempt, per account;
//! * `queue`: queue and completion times, nearest-rank percentiles;
//! * `budget`: budget attainment per budget period;
//! * `fairness`: per-account shares and Jain's index;
//! * `clusters`: the capacity and queue-time measures per cluster of a fleet;
//! * `outcome`: what became of every workload, exactly one outcome each;
//! * `preemption`: the GPU-time lost to preemption by the rule that caused
//!   it, and what each preemption bought.
//!
//! [`State`]: allot_core::State
//! [`SimOutput`]: crate::SimOutput

mod budget;
mod capacity;
mod clusters;
mod fairness;
mod measure;
mod outcome;
mod preemption;
mod queue;
mod work;

pub use budget::{AccountBudget, BudgetPeriods, budget_periods};
pub use measure::measure;
pub use outcome::{WorkloadOutcome, outcomes};
pub use preemption::{SERVED_WITHIN_S, UNKNOWN_CAUSE};
