//! Importers for public GPU-cluster traces (docs/importers.md).
//!
//! [`import`] reads one source file in a [`Format`] and returns the workloads
//! as [`crate::write::TraceRow`]s (sorted, time rebased so the earliest
//! submit is 0), a matching [`crate::write::ConfigOut`] and an
//! [`ImportSummary`]. Teams / virtual clusters become accounts
//! `<root>/<team>` with one project `jobs` (or one per user); rows that
//! cannot be imported are skipped and counted per [`SkipReason`], changes to
//! imported rows are counted per [`Adjustment`].
//!
//! The written config makes both models meaningful: each team gets exclusive
//! pools for the legacy policy (sized from its observed peak demand, a sizes
//! file, or a split of a given capacity) and a budget per period equal to its
//! share of the trace's GPU-hours times the cluster's capacity.

mod accounts;
mod alibaba;
mod error;
mod helios;
mod legacy_sizes;
mod options;
mod philly;
mod philly_pollux;
mod pipeline;
mod record;
mod sacct;
mod sizing;
mod slurm;
mod slurm_config;
mod slurm_qos;
mod summary;
mod swf;

pub use error::ImportError;
pub use options::{
    DEFAULT_PROCS_PER_GPU, Format, ImportOptions, ProjectBy, QosClass, QosMapping, RowDefaults, Sizing, TEAM_PROJECT,
};
pub use pipeline::{Imported, import};
pub use summary::{Adjustment, ImportSummary, SkipReason};

pub(crate) use sizing::{NodeGroup, Shape, TeamNeed, apportion, size_cluster};
