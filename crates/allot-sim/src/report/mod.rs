//! The report object of docs/design.md §4 and its readable forms.
//!
//! * [`Report`]: one policy run, serialised with exactly the docs/design.md §4
//!   keys plus a few extras (see `docs/measures.md`);
//! * [`summary_table`] / [`markdown_table`]: the reports of one or several
//!   policies side by side, both rendered from the [`Tables`] model of
//!   [`measures_tables`];
//! * [`write_workloads_csv`]: one row per workload of the final state.

mod csv;
mod model;
mod table;

pub use csv::{WORKLOADS_CSV_HEADER, write_workloads_csv};
pub use model::{AccountReport, ClassStats, ClusterReport, Metrics, Report, Stats};
pub use table::{
    Block, CLUSTERS_TITLE, Line, Table, Tables, cluster_section, fleet_clusters, markdown_table, measures_tables,
    summary_table,
};
