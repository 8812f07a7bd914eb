//! The report object of docs/design.md §4 and its readable forms.
//!
//! * [`Report`]: one policy run, serialised with exactly the docs/design.md §4
//!   keys plus a few extras (see `docs/measures.md`);
//! * [`summary_table`] / [`markdown_table`]: the reports of one or several
//!   policies side by side, both rendered from the [`Tables`] model of
//!   [`measures_tables`];
//! * [`rows`]: every measure of those tables, with its unit and the
//!   direction that is better;
//! * [`trace_warnings`]: a policy that rejected or never started a large
//!   part of the trace, with the first reason;
//! * [`write_workloads_csv`]: one row per workload of the final state.

mod csv;
mod model;
pub mod rows;
mod table;
mod warnings;

pub use csv::{WORKLOADS_CSV_HEADER, write_workloads_csv};
pub use model::{AccountReport, CauseReport, ClassStats, ClusterReport, Metrics, Report, Stats};
pub use rows::{Better, DIRECTIONS, Unit, best_cells};
pub use table::{
    Block, CAUSES_TITLE, CLUSTERS_TITLE, Line, MARKS, MeasureLine, Table, Tables, cause_of, cause_section,
    cluster_section, fleet_clusters, markdown_table, measures_tables, preemption_causes, summary_table, write_value,
};
pub use warnings::{TraceWarning, Unserved, WARN_SHARE, trace_warnings};
