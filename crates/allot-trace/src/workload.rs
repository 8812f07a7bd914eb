//! One validator of a workload's shape and fields, shared by every path a
//! workload comes in by: trace rows (`crate::trace`), API submissions and
//! store rows at recovery (`allot-server`). Each caller parses its own
//! syntax (CSV cells, JSON bodies, store columns) into a [`RawWorkload`],
//! asks a [`Validator`] built from the config, and maps a [`FieldError`]
//! into its own form (file:line:field, a 422 naming the field, the reason a
//! recovered workload is rejected).
//!
//! The checks: the account exists and is not the root; the class and the
//! priority are known ([`parse_class`], [`parse_priority`]); gpus, nodes,
//! work and checkpoint are held to [`crate::bounds`]; nodes divide gpus
//! (PLACE-2); the GPU type is one some pool has (PLACE-5); the clusters it
//! names are the fleet's (FLEET-1); the shape fits some pool of those
//! clusters (PLACE-1); util is a number between 0 and 1.

use std::fmt;

use allot_core::cluster::{ClusterId, ClusterSet};
use allot_core::contract::PerClass;
use allot_core::{AccountId, AccountTree, Class, Cluster, Contract, GpuTypeId, Priority, State, Time, WorkloadSpec};

use crate::bounds::{self, BoundError};
use crate::config::Config;
use crate::error::quoted;

/// Default expected duration of batch and service work given without one
/// (an interactive one defaults to the contract's `interactive_max_duration`).
pub const DEFAULT_WORK_S: Time = 24 * 3600;

/// A workload's fields as given, before they are checked; `None` takes
/// the default.
#[derive(Clone, Debug, PartialEq)]
pub struct RawWorkload<'a> {
    pub id: &'a str,
    pub submit: Time,
    pub account: &'a str,
    pub user: &'a str,
    /// `batch` (the default), `interactive` or `service`, any case.
    pub class: Option<&'a str>,
    pub gpus: u64,
    /// 0 = any packing.
    pub nodes: u64,
    pub gpu_type: Option<&'a str>,
    /// The clusters it may run on, names separated by commas (or
    /// spaces); `None` or empty: any cluster that can run it (FLEET-1).
    pub clusters: Option<&'a str>,
    /// Default: [`DEFAULT_WORK_S`], or the interactive maximum.
    pub work_s: Option<u64>,
    pub checkpoint_s: u64,
    pub util: f64,
    /// `low`, `normal` (the default), `high` or `urgent`, any case.
    pub priority: Option<&'a str>,
    pub preemptible: bool,
    /// CON-6: running time allowed per attempt; `None` takes the class's
    /// `time_limit` from the contract (none by default).
    pub time_limit_s: Option<u64>,
    /// CON-8: it saves its progress when signalled (default false).
    pub checkpoint_on_signal: bool,
    /// SLURM-2: its billing per second (Slurm's `billing` TRES); `None`:
    /// not given (the `slurm` policy bills its normalised GPUs).
    pub billing: Option<u64>,
}

/// A field of a workload, named as in traces (the API renames some).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    Account,
    Class,
    Gpus,
    Nodes,
    GpuType,
    Clusters,
    WorkS,
    CheckpointS,
    Util,
    Priority,
    TimeLimitS,
    Billing,
}

impl Field {
    pub const ALL: [Field; 12] = [
        Field::Account,
        Field::Class,
        Field::Gpus,
        Field::Nodes,
        Field::GpuType,
        Field::Clusters,
        Field::WorkS,
        Field::CheckpointS,
        Field::Util,
        Field::Priority,
        Field::TimeLimitS,
        Field::Billing,
    ];

    /// The trace column (and JSON Lines key) of the field.
    pub fn as_str(self) -> &'static str {
        match self {
            Field::Account => "account",
            Field::Class => "class",
            Field::Gpus => "gpus",
            Field::Nodes => "nodes",
            Field::GpuType => "gpu_type",
            Field::Clusters => "clusters",
            Field::WorkS => "work_s",
            Field::CheckpointS => "checkpoint_s",
            Field::Util => "util",
            Field::Priority => "priority",
            Field::TimeLimitS => "time_limit_s",
            Field::Billing => "billing",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FieldErrorKind {
    #[error("unknown account {}", quoted(.0))]
    UnknownAccount(String),
    #[error("unknown class {} (use batch, interactive or service)", quoted(.0))]
    UnknownClass(String),
    #[error("unknown priority {} (use low, normal, high or urgent)", quoted(.0))]
    UnknownPriority(String),
    #[error("unknown gpu type {} (pools have {})", quoted(name), crate::choices::list(name, known))]
    UnknownGpuType { name: String, known: Vec<String> },
    #[error("unknown cluster {} (the fleet has {})", quoted(name), crate::choices::list(name, known))]
    UnknownCluster { name: String, known: Vec<String> },
    #[error(transparent)]
    Bound(#[from] BoundError),
    #[error("gpus ({gpus}) is not a multiple of nodes ({nodes})")]
    NotMultiple { gpus: u32, nodes: u32 },
    /// The shape fits no pool; the text says what it asks and what the largest pool has ([`too_large`]).
    #[error("{0}")]
    TooLarge(String),
    /// CON-6: a time limit above the class's `max_time_limit`.
    #[error("time limit {limit} s is above the {class} maximum of {max} s (contract.max_time_limit.{class})")]
    AboveMaxTimeLimit { limit: Time, max: Time, class: &'static str },
}

/// A workload field that fails a check: which field and what is wrong. The
/// message is the kind's, without the field (callers say it their way).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind}")]
pub struct FieldError {
    pub field: Field,
    pub kind: FieldErrorKind,
}

impl FieldError {
    pub fn new(field: Field, kind: impl Into<FieldErrorKind>) -> FieldError {
        FieldError { field, kind: kind.into() }
    }
}

/// A class by name, any case.
pub fn parse_class(v: &str) -> Result<Class, FieldError> {
    Class::parse(&v.to_ascii_lowercase())
        .ok_or_else(|| FieldError::new(Field::Class, FieldErrorKind::UnknownClass(v.to_string())))
}

/// A legacy priority by name, any case.
pub fn parse_priority(v: &str) -> Result<Priority, FieldError> {
    Priority::parse(&v.to_ascii_lowercase())
        .ok_or_else(|| FieldError::new(Field::Priority, FieldErrorKind::UnknownPriority(v.to_string())))
}

/// Checks workloads against one config: the topology, the account tree and
/// the contract's interactive maximum.
pub struct Validator<'a> {
    cluster: &'a Cluster,
    accounts: &'a AccountTree,
    interactive_max_s: Time,
    /// CON-6: per-class default and maximum time limits.
    time_limit: PerClass<Option<Time>>,
    max_time_limit: PerClass<Option<Time>>,
    /// GPU types some pool has, by name, in pool order.
    gpu_types: Vec<(&'a str, GpuTypeId)>,
}

impl<'a> Validator<'a> {
    pub fn new(cluster: &'a Cluster, accounts: &'a AccountTree, contract: &Contract) -> Validator<'a> {
        let mut gpu_types: Vec<(&str, GpuTypeId)> = Vec::new();
        for p in &cluster.pools {
            if !gpu_types.iter().any(|(_, g)| *g == p.gpu) {
                gpu_types.push((cluster.gpu_types[p.gpu.0 as usize].name.as_str(), p.gpu));
            }
        }
        let interactive_max_s = contract.interactive_max_duration.clamp(bounds::WORK_S.min, bounds::WORK_S.max);
        let (time_limit, max_time_limit) = (contract.time_limit, contract.max_time_limit);
        Validator { cluster, accounts, interactive_max_s, time_limit, max_time_limit, gpu_types }
    }

    pub fn for_config(cfg: &'a Config) -> Validator<'a> {
        Validator::new(&cfg.cluster, &cfg.accounts, &cfg.contract)
    }

    pub fn for_state(state: &'a State) -> Validator<'a> {
        Validator::new(&state.cluster, &state.accounts, &state.contract)
    }

    /// The account, when it exists and is not the root.
    pub fn account(&self, path: &str) -> Result<AccountId, FieldError> {
        match self.accounts.get(path) {
            Some(id) if id != AccountId::ROOT => Ok(id),
            _ => Err(FieldError::new(Field::Account, FieldErrorKind::UnknownAccount(path.to_string()))),
        }
    }

    /// Every field checked; the first that fails, in the order of the
    /// trace's columns, is the error.
    pub fn check(&self, raw: &RawWorkload<'_>) -> Result<WorkloadSpec, FieldError> {
        let bounded = |field: Field, v: u64, b: bounds::IntBound| b.check(v).map_err(|e| FieldError::new(field, e));
        let account = self.account(raw.account)?;
        let class = raw.class.map_or(Ok(Class::Batch), parse_class)?;
        let gpus = bounded(Field::Gpus, raw.gpus, bounds::GPUS)? as u32;
        let nodes = bounded(Field::Nodes, raw.nodes, bounds::NODES)? as u32;
        if nodes > 0 && !gpus.is_multiple_of(nodes) {
            return Err(FieldError::new(Field::Nodes, FieldErrorKind::NotMultiple { gpus, nodes }));
        }
        let gpu_type = raw.gpu_type.map(|name| self.gpu_type(name)).transpose()?;
        let clusters = raw.clusters.map_or(Ok(ClusterSet::ANY), |names| self.clusters(names))?;
        let default_work = if class == Class::Interactive { self.interactive_max_s } else { DEFAULT_WORK_S };
        let work_s = bounded(Field::WorkS, raw.work_s.unwrap_or(default_work), bounds::WORK_S)?;
        let checkpoint_s = bounded(Field::CheckpointS, raw.checkpoint_s, bounds::CHECKPOINT_S)?;
        let util = bounds::UTIL.check(raw.util).map_err(|e| FieldError::new(Field::Util, e))?;
        let priority = raw.priority.map_or(Ok(Priority::Normal), parse_priority)?;
        let time_limit_s = self.time_limit(class, raw.time_limit_s)?;
        let billing = raw.billing.map(|b| bounded(Field::Billing, b, bounds::BILLING)).transpose()?;
        if !self.cluster.fits_anywhere(gpus, nodes, gpu_type, clusters) {
            let why = too_large(self.cluster, gpus, nodes, gpu_type, clusters);
            return Err(FieldError::new(Field::Gpus, FieldErrorKind::TooLarge(why)));
        }
        Ok(WorkloadSpec {
            id: raw.id.to_string(),
            submit: raw.submit,
            account,
            user: raw.user.to_string(),
            class,
            gpus,
            nodes,
            gpu_type,
            clusters,
            work_s,
            checkpoint_s,
            util,
            priority,
            preemptible: raw.preemptible,
            time_limit_s,
            checkpoint_on_signal: raw.checkpoint_on_signal,
            after: Vec::new(),
            array: None,
            hold: false,
            billing,
        })
    }

    /// CON-6: the limit asked for, else the class's default; at least a
    /// second and at most the class's maximum.
    fn time_limit(&self, class: Class, asked: Option<u64>) -> Result<Option<Time>, FieldError> {
        let Some(limit) = asked.or(self.time_limit.get(class)) else { return Ok(None) };
        let limit = bounds::WORK_S.check(limit).map_err(|e| FieldError::new(Field::TimeLimitS, e))?;
        match self.max_time_limit.get(class) {
            Some(max) if limit > max => Err(FieldError::new(
                Field::TimeLimitS,
                FieldErrorKind::AboveMaxTimeLimit { limit, max, class: class.as_str() },
            )),
            _ => Ok(Some(limit)),
        }
    }

    /// The clusters a list of names (commas or spaces between) means;
    /// an empty list is any cluster.
    pub fn clusters(&self, names: &str) -> Result<ClusterSet, FieldError> {
        let mut ids: Vec<ClusterId> = Vec::new();
        for name in names.split([',', ' ']).map(str::trim).filter(|n| !n.is_empty()) {
            let id = self.cluster.cluster_by_name(name).ok_or_else(|| {
                let known = self.cluster.clusters.clone();
                FieldError::new(Field::Clusters, FieldErrorKind::UnknownCluster { name: name.to_string(), known })
            })?;
            ids.push(id);
        }
        Ok(if ids.is_empty() { ClusterSet::ANY } else { ClusterSet::of(ids) })
    }

    fn gpu_type(&self, name: &str) -> Result<GpuTypeId, FieldError> {
        self.gpu_types.iter().find(|(n, _)| *n == name).map(|(_, g)| *g).ok_or_else(|| {
            let known = self.gpu_types.iter().map(|(n, _)| n.to_string()).collect();
            FieldError::new(Field::GpuType, FieldErrorKind::UnknownGpuType { name: name.to_string(), known })
        })
    }
}

/// Why a shape (`gpus` over `nodes`, optionally of one GPU type) fits in no
/// pool of `c` (of the clusters it may use), with the numbers.
pub fn too_large(c: &Cluster, gpus: u32, nodes: u32, gpu: Option<GpuTypeId>, clusters: ClusterSet) -> String {
    use allot_core::words::count;
    let ask = match gpus.checked_div(nodes) {
        None => count(gpus, "GPU"),
        Some(per_node) => format!("{} × {}", count(nodes, "node"), count(per_node, "GPU")),
    };
    let mut of_type = gpu.map(|g| format!(" of type {}", c.gpu_types[g.0 as usize].name)).unwrap_or_default();
    if !clusters.is_any() {
        let names: Vec<&str> = c
            .clusters
            .iter()
            .enumerate()
            .filter(|(i, _)| clusters.contains(ClusterId(*i as u16)))
            .map(|(_, n)| n.as_str())
            .collect();
        of_type.push_str(&format!(" on cluster {}", names.join(", ")));
    }
    let largest = c
        .pools
        .iter()
        .filter(|p| p.may_serve(gpu, clusters))
        .max_by_key(|p| (u64::from(p.nodes) * u64::from(p.gpus_per_node), p.gpus_per_node));
    match largest {
        Some(p) => format!(
            "larger than any pool: asks {ask}{of_type}, the largest{} pool {} has {} nodes × {} GPUs",
            if gpu.is_some() { " such" } else { "" },
            p.name,
            p.nodes,
            p.gpus_per_node
        ),
        // No pool of that type where it may run: say what is there, not
        // that it is too large (issue 30, point 6).
        None if gpu.is_some() => {
            let mut there: Vec<&str> = c
                .pools
                .iter()
                .filter(|p| p.may_serve(None, clusters))
                .map(|p| c.gpu_types[p.gpu.0 as usize].name.as_str())
                .collect();
            there.sort_unstable();
            there.dedup();
            format!("no pool{of_type}; the GPU types there are {} (asks {ask})", there.join(", "))
        }
        None => format!("larger than any pool: asks {ask}{of_type}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H100\"\nnodes = 2\ngpus_per_node = 4\n\
                          [[accounts]]\npath = \"org/x\"\n[contract]\ninteractive_max_duration = \"2h\"\n";

    fn raw() -> RawWorkload<'static> {
        RawWorkload {
            id: "w",
            submit: 0,
            account: "org/x",
            user: "u",
            class: None,
            gpus: 1,
            nodes: 0,
            gpu_type: None,
            clusters: None,
            work_s: Some(60),
            checkpoint_s: 0,
            util: 1.0,
            priority: None,
            preemptible: false,
            time_limit_s: None,
            checkpoint_on_signal: false,
            billing: None,
        }
    }

    #[test]
    fn each_check_names_its_field_and_says_what_is_wrong() {
        let cfg = crate::config::parse_config(CONFIG, "c.toml").unwrap();
        let v = Validator::for_config(&cfg);
        type Want = Option<(Field, &'static str)>;
        let cases: Vec<(&str, RawWorkload, Want)> = vec![
            ("valid", raw(), None),
            ("parent account", RawWorkload { account: "org", ..raw() }, None),
            ("root", RawWorkload { account: "", ..raw() }, Some((Field::Account, "unknown account \"\""))),
            ("unknown account", RawWorkload { account: "org/y", ..raw() }, Some((Field::Account, "unknown account"))),
            ("class", RawWorkload { class: Some("gpu"), ..raw() }, Some((Field::Class, "unknown class \"gpu\""))),
            ("class in capitals", RawWorkload { class: Some("SERVICE"), ..raw() }, None),
            ("zero gpus", RawWorkload { gpus: 0, ..raw() }, Some((Field::Gpus, "at least 1, got 0"))),
            ("gpus past u32", RawWorkload { gpus: 1 << 40, ..raw() }, Some((Field::Gpus, "at most 1048576"))),
            ("nodes past bound", RawWorkload { nodes: 1 << 40, ..raw() }, Some((Field::Nodes, "at most 100000"))),
            (
                "nodes divide gpus",
                RawWorkload { gpus: 3, nodes: 2, ..raw() },
                Some((Field::Nodes, "gpus (3) is not a multiple of nodes (2)")),
            ),
            (
                "gpu type",
                RawWorkload { gpu_type: Some("B200"), ..raw() },
                Some((Field::GpuType, "unknown gpu type \"B200\" (pools have H100)")),
            ),
            ("work zero", RawWorkload { work_s: Some(0), ..raw() }, Some((Field::WorkS, "at least 1"))),
            ("checkpoint", RawWorkload { checkpoint_s: 1 << 63, ..raw() }, Some((Field::CheckpointS, "at most"))),
            ("util nan", RawWorkload { util: f64::NAN, ..raw() }, Some((Field::Util, "between 0 and 1, got NaN"))),
            ("priority", RawWorkload { priority: Some("max"), ..raw() }, Some((Field::Priority, "unknown priority"))),
            ("billing zero", RawWorkload { billing: Some(0), ..raw() }, None),
            ("billing", RawWorkload { billing: Some(1 << 41), ..raw() }, Some((Field::Billing, "at most"))),
            (
                "too large",
                RawWorkload { gpus: 12, ..raw() },
                Some((Field::Gpus, "asks 12 GPUs, the largest pool a has 2 nodes × 4 GPUs")),
            ),
            ("gang too wide", RawWorkload { gpus: 3, nodes: 3, ..raw() }, Some((Field::Gpus, "asks 3 nodes × 1 GPU"))),
        ];
        for (name, r, want) in cases {
            match (v.check(&r), want) {
                (Ok(_), None) => {}
                (Err(e), Some((field, fragment))) => {
                    assert_eq!(e.field, field, "case {name}: {e}");
                    assert!(e.to_string().contains(fragment), "case {name}: {e}");
                }
                (got, want) => panic!("case {name}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// Issue 30, point 6: a GPU type that exists, but not on the cluster
    /// named, is said to be missing there, not "larger than any pool".
    #[test]
    fn a_gpu_type_missing_where_it_may_run_is_named() {
        let fleet = "name = \"f\"\n[[clusters]]\nname = \"here\"\n[[clusters.pools]]\nname = \"h\"\ngpu = \"H100\"\n\
                     nodes = 1\ngpus_per_node = 8\n[[clusters]]\nname = \"there\"\n[[clusters.pools]]\nname = \"a\"\n\
                     gpu = \"A100\"\nnodes = 1\ngpus_per_node = 8\n[[accounts]]\npath = \"org/x\"\n";
        let cfg = crate::config::parse_config(fleet, "f.toml").unwrap();
        let v = Validator::for_config(&cfg);
        let r = RawWorkload { gpus: 2, gpu_type: Some("A100"), clusters: Some("here"), ..raw() };
        let e = v.check(&r).unwrap_err().to_string();
        assert!(e.contains("no pool of type A100 on cluster here; the GPU types there are H100 (asks 2 GPUs)"), "{e}");
        assert!(!e.contains("larger than"), "{e}");
        let r = RawWorkload { gpus: 2, gpu_type: Some("A100"), clusters: Some("there"), ..raw() };
        assert!(v.check(&r).is_ok());
    }

    #[test]
    fn every_field_is_a_trace_column() {
        for f in Field::ALL {
            assert!(crate::trace::COLUMNS.contains(&f.as_str()), "{f}");
        }
    }

    #[test]
    fn defaults() {
        let cfg = crate::config::parse_config(CONFIG, "c.toml").unwrap();
        let v = Validator::for_config(&cfg);
        let s = v.check(&RawWorkload { work_s: None, ..raw() }).unwrap();
        assert_eq!((s.class, s.priority, s.work_s), (Class::Batch, Priority::Normal, DEFAULT_WORK_S));
        let i = v.check(&RawWorkload { work_s: None, class: Some("interactive"), ..raw() }).unwrap();
        assert_eq!(i.work_s, 7200, "the interactive maximum");
        assert_eq!(parse_priority("HIGH"), Ok(Priority::High));
    }
}
