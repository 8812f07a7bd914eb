//! Budget statements (docs/budgets.md, "Statements"): per account, at every
//! level of the tree, and per budget period, the budget in force (BUD-4),
//! the carry-over (BUD-5), the NGH used (BUD-3, rolled up to ancestors), the
//! raw GPU-hours by GPU type, the use beyond budget, the budget attainment
//! and the queue times — computed from recorded usage intervals alone, so
//! the server (from its store) and the simulator (from its record) produce
//! the same statement for the same history.
//!
//! * [`compute`]: the statement from its inputs;
//! * [`render`]: the statement as CSV or Markdown (JSON is its serde form).

pub mod compute;
pub mod render;

pub use compute::{
    AccountLine, BudgetChange, PeriodStatement, Statement, StatementInput, UsageInterval, WorkloadTimes, period_index,
    statement,
};
pub use render::{Format, to_csv, to_markdown};
