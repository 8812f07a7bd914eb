//! What an import is asked to do: the source format, how teams and users
//! become accounts, the values written for fields the public traces lack, and
//! how the cluster of the written config is sized. Every default here is a
//! documented parameter (docs/importers.md) with a CLI flag.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use allot_core::{Class, Contract, Priority, Time};

/// A supported source format.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Format {
    /// `timestamp,duration,num_gpus,gpu_time,cluster` (the Pollux subset of Philly).
    PhillyPollux,
    /// Philly's `cluster_job_log` JSON: jobs with attempts.
    Philly,
    /// Alibaba `openb_pod_list_*.csv` (+ the GPU node list).
    AlibabaOpenb,
    /// Helios / Acme `cluster_log.csv`.
    Helios,
    /// Slurm accounting: `sacct --parsable2` output (22.05 fields).
    Sacct,
    /// The Parallel Workloads Archive's Standard Workload Format.
    Swf,
}

impl Format {
    pub const ALL: [Format; 6] =
        [Format::PhillyPollux, Format::Philly, Format::AlibabaOpenb, Format::Helios, Format::Sacct, Format::Swf];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::PhillyPollux => "philly-pollux",
            Format::Philly => "philly",
            Format::AlibabaOpenb => "alibaba-openb",
            Format::Helios => "helios",
            Format::Sacct => "sacct",
            Format::Swf => "swf",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// Default root of the account paths (`<root>/<team>/<project>`).
    pub fn default_root(self) -> &'static str {
        match self {
            Format::PhillyPollux | Format::Philly => "philly",
            Format::AlibabaOpenb => "alibaba",
            Format::Helios => "helios",
            Format::Sacct => "slurm",
            Format::Swf => "swf",
        }
    }

    /// Prefix of generated ids for formats without job ids.
    pub(crate) fn id_prefix(self) -> &'static str {
        match self {
            Format::PhillyPollux => "pollux",
            Format::Philly => "philly",
            Format::AlibabaOpenb => "openb",
            Format::Helios => "helios",
            Format::Sacct => "sacct",
            Format::Swf => "swf",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the leaf project of a workload is named under its team.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ProjectBy {
    /// One project per team: `<root>/<team>/jobs`.
    #[default]
    Team,
    /// One project per user: `<root>/<team>/<user>`.
    User,
}

/// Name of the single project per team under [`ProjectBy::Team`].
pub const TEAM_PROJECT: &str = "jobs";

/// Values written for fields the public traces do not record.
#[derive(Clone, Debug, PartialEq)]
pub struct RowDefaults {
    /// Class of every workload (Alibaba: from `qos`, see [`QosMapping`]).
    pub class: Class,
    pub priority: Priority,
    pub preemptible: bool,
    /// Mean GPU utilisation (Alibaba fractional pods: `gpu_milli / 1000`).
    pub util: f64,
    /// Checkpoint interval in seconds of `batch` rows, 0 = never
    /// (`interactive` and `service` rows never checkpoint).
    pub checkpoint_s: Time,
}

impl Default for RowDefaults {
    fn default() -> Self {
        RowDefaults {
            class: Class::Batch,
            priority: Priority::Normal,
            preemptible: false,
            util: 0.5,
            checkpoint_s: 3600,
        }
    }
}

/// Class, priority and preemptibility of one Alibaba `qos` value.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct QosClass {
    pub class: Class,
    pub priority: Priority,
    pub preemptible: bool,
}

/// Alibaba `qos` → class / legacy priority / preemptible.
///
/// Defaults follow the trace's own meaning: `LS` (latency-sensitive) and
/// `Guaranteed` pods are services at high priority, `Burstable` pods are
/// normal batch work and `BE` (best-effort) pods are low-priority,
/// preemptible batch work. Any other value gets the [`RowDefaults`].
#[derive(Clone, Debug, PartialEq)]
pub struct QosMapping {
    pub ls: QosClass,
    pub guaranteed: QosClass,
    pub burstable: QosClass,
    pub be: QosClass,
}

impl Default for QosMapping {
    fn default() -> Self {
        let service = QosClass { class: Class::Service, priority: Priority::High, preemptible: false };
        QosMapping {
            ls: service,
            guaranteed: service,
            burstable: QosClass { class: Class::Batch, priority: Priority::Normal, preemptible: false },
            be: QosClass { class: Class::Batch, priority: Priority::Low, preemptible: true },
        }
    }
}

impl QosMapping {
    pub(crate) fn get(&self, qos: &str, defaults: &RowDefaults) -> QosClass {
        match qos {
            "LS" => self.ls,
            "Guaranteed" => self.guaranteed,
            "Burstable" => self.burstable,
            "BE" => self.be,
            _ => QosClass { class: defaults.class, priority: defaults.priority, preemptible: defaults.preemptible },
        }
    }
}

/// How the cluster of the written config is sized.
///
/// * With a node list (`node_list`, Alibaba), the pools are the listed nodes,
///   grouped by GPU model and GPUs per node.
/// * With `gpus`, one group of `gpus / gpus_per_node` nodes of `gpu_model`.
/// * Otherwise each team's pool is its observed peak concurrent GPU demand
///   (jobs assumed to start at submit), or its size in `legacy_sizes`,
///   rounded up to whole nodes.
///
/// Fixed capacities (node list, `gpus`) are split among teams in proportion to
/// their GPU-hours; `shared_fraction` of the nodes becomes shared pools.
#[derive(Clone, Debug, PartialEq)]
pub struct Sizing {
    pub gpus: Option<u32>,
    pub gpus_per_node: u32,
    pub gpu_model: String,
    pub rack_size: u32,
    pub shared_fraction: f64,
    /// Per-team GPU counts: `team,gpus` rows, or a wide per-day file such as
    /// `helios_earth_vc_gpus.csv` (the day with the largest total is used).
    pub legacy_sizes: Option<PathBuf>,
    /// Alibaba `openb_node_list_gpu_node.csv`.
    pub node_list: Option<PathBuf>,
    /// Saved `scontrol show nodes --oneliner` output: the pools are the
    /// Slurm partitions' GPU nodes (docs/importers.md).
    pub slurm_nodes: Option<PathBuf>,
    /// Normalisation weight per GPU model; unlisted models weigh 1.
    pub gpu_weights: BTreeMap<String, f64>,
    /// Budget period the budgets are computed for, in seconds.
    pub budget_period_s: Time,
}

impl Default for Sizing {
    fn default() -> Self {
        Sizing {
            gpus: None,
            gpus_per_node: 8,
            gpu_model: "GPU".to_string(),
            rack_size: 16,
            shared_fraction: 0.0,
            legacy_sizes: None,
            node_list: None,
            slurm_nodes: None,
            gpu_weights: BTreeMap::new(),
            budget_period_s: Contract::default().budget_period,
        }
    }
}

/// Everything an import needs besides the input file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImportOptions {
    /// Root of the account paths; default [`Format::default_root`].
    pub root: Option<String>,
    pub project_by: ProjectBy,
    pub defaults: RowDefaults,
    pub qos: QosMapping,
    pub sizing: Sizing,
    /// Name of the written cluster; default the root.
    pub cluster_name: Option<String>,
    /// sacct: IANA time zone of times printed without an offset; default UTC.
    pub time_zone: Option<String>,
    /// sacct: saved `sacctmgr show assoc … --parsable2` output: the account
    /// tree and its `Fairshare` shares.
    pub slurm_assoc: Option<PathBuf>,
    /// Saved `scontrol show config` output: the `slurm` policy's knobs
    /// (`[slurm]`: priority weights, decay, backfill, preemption).
    pub slurm_config: Option<PathBuf>,
    /// sacct: saved `sacctmgr show qos … --parsable2` output: each job's
    /// QOS becomes a priority label, the QOS priorities `[slurm]
    /// qos_priority` (docs/importers.md).
    pub slurm_qos: Option<PathBuf>,
    /// SWF: processors that make one GPU (default [`DEFAULT_PROCS_PER_GPU`]).
    pub procs_per_gpu: Option<u32>,
}

/// SWF: each processor stands for one GPU unless `--procs-per-gpu` says otherwise.
pub const DEFAULT_PROCS_PER_GPU: u32 = 1;
