//! The report types. Field names are the JSON keys of docs/design.md §4; `None`
//! serialises as `null` where a measure is undefined.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The measures of one policy run over the horizon `[0, horizon_s]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Report {
    pub policy: String,
    pub horizon_s: u64,
    /// Workloads known to the run (submitted, whatever became of them).
    pub workloads: u64,
    pub metrics: Metrics,
    /// Every account except the virtual root, by path.
    pub accounts: BTreeMap<String, AccountReport>,
    /// Per cluster of a fleet of several, by name; absent (empty) for a
    /// fleet of one, whose cluster-wide measures are `metrics`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clusters: BTreeMap<String, ClusterReport>,
    /// The preemptions by the rule that caused them (its id, or `unknown`
    /// for one without a recorded signal); empty (absent) without any.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub preemption_causes: BTreeMap<String, CauseReport>,
    /// Scheduling passes the run made.
    pub passes: u64,
    /// Simulator events the run processed.
    pub events: u64,
}

/// Cluster-wide measures (docs/design.md §3).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Metrics {
    pub availability: f64,
    pub occupancy: f64,
    pub utilization: f64,
    pub impact: f64,
    /// `null` when no account has a budget or nothing was demanded of one.
    pub budget_attainment: Option<f64>,
    /// `null` when no leaf account had saturating demand.
    pub jain_index: Option<f64>,
    /// Over every workload that started; `null` if none did.
    pub queue_time_s: Option<Stats>,
    pub queue_time_by_class: ClassStats,
    pub completed_workloads: u64,
    pub throughput_per_day: f64,
    pub useful_gpu_hours: f64,
    pub preemptions: u64,
    pub preemption_overhead_gpu_hours: f64,
    pub preemption_overhead_fraction: f64,
    /// Queue time of interactive workloads (same as `queue_time_by_class.interactive`).
    pub time_to_gpu_s: Option<Stats>,
    pub rejected_workloads: u64,
    /// Workloads not in a terminal phase at the end (pending, running, stopping).
    pub unfinished_workloads: u64,
    /// Workloads that failed (a time limit, CON-6, or their own exit
    /// without retries left).
    #[serde(default)]
    pub failed_workloads: u64,
    /// Workloads cancelled by a person.
    #[serde(default)]
    pub cancelled_workloads: u64,
    /// Workloads ended because their GPUs stayed idle (CON-9). With
    /// completed, failed, cancelled, rejected and unfinished: every
    /// workload is exactly one of the six ([`crate::measures::WorkloadOutcome`]).
    #[serde(default)]
    pub idle_reclaimed_workloads: u64,
    /// Attempts ended by a failure (their node failed, MNT-2): the work
    /// killed, not the failures (`node_failures`).
    pub failures: u64,
    /// Node failures that hit: `fail` events on a node that was not already
    /// down (MNT-2), whether or not work was running there.
    #[serde(default)]
    pub node_failures: u64,
    pub lost_gpu_hours_failures: f64,
    pub assigned_gpu_hours: f64,
    pub available_gpu_hours: f64,
    pub useful_gpu_hours_per_day: f64,
    /// Submit to end of the finished workloads; `null` if none finished.
    pub jct_s: Option<Stats>,
}

/// Order statistics (nearest rank) and the mean of a set of durations, seconds.
#[derive(Serialize, Deserialize, Copy, Clone, Debug, PartialEq)]
pub struct Stats {
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub mean: f64,
}

/// Queue-time statistics per workload class; `null` for a class with no
/// started workload.
#[derive(Serialize, Deserialize, Copy, Clone, Debug, PartialEq)]
pub struct ClassStats {
    pub batch: Option<Stats>,
    pub interactive: Option<Stats>,
    pub service: Option<Stats>,
}

/// Measures of one account's subtree.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct AccountReport {
    /// Static entitled share of the cluster (product of sibling shares).
    pub entitled_share: f64,
    /// Fraction of all assigned GPU-time that went to the subtree.
    pub delivered_share: f64,
    /// Fraction of all GPU-time asked for (GPUs × work of the workloads
    /// submitted before the horizon) that the subtree asked for: what
    /// `delivered_share` is judged against, beside `entitled_share`.
    #[serde(default)]
    pub demand_share: f64,
    /// Assigned GPU-hours of the subtree (raw).
    pub gpu_hours: f64,
    /// Own budget, NGH per budget period.
    pub budget_gpu_hours: Option<f64>,
    /// Normalised GPU-hours of the subtree over the horizon.
    pub used_gpu_hours: f64,
    /// Median queue time of the subtree's started workloads.
    pub queue_time_p50_s: Option<u64>,
}

/// The capacity and queue-time measures of [`Metrics`] restricted to one
/// cluster of a fleet: its GPUs, the attempts that ran on it and the
/// workloads whose first attempt started on it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ClusterReport {
    /// Position of the cluster in the config (the fleet's order).
    pub index: u64,
    /// GPUs of the cluster (healthy or not).
    pub gpus: u64,
    pub availability: f64,
    pub occupancy: f64,
    pub utilization: f64,
    pub available_gpu_hours: f64,
    pub assigned_gpu_hours: f64,
    /// Workloads whose first attempt started on the cluster within the horizon.
    pub started_workloads: u64,
    /// Over the workloads that started here; `null` if none did.
    pub queue_time_s: Option<Stats>,
    pub queue_time_by_class: ClassStats,
}

/// The preemptions of one cause and what they cost and bought
/// (`docs/measures.md`, "Preemption loss by cause").
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CauseReport {
    pub preemptions: u64,
    /// GPU-hours lost: assigned minus progress kept, over the preempted
    /// attempts (the part of `preemption_overhead_gpu_hours` of this cause).
    pub overhead_gpu_hours: f64,
    /// Of that, the GPU-hours between the signal and the stop (the grace).
    pub grace_gpu_hours: f64,
    /// Of that, the progress made before the signal and not kept (since
    /// the last checkpoint).
    pub progress_lost_gpu_hours: f64,
    /// Preemptions made for a named waiting workload (the rest: drains,
    /// outages, a time limit).
    pub with_preemptor: u64,
    /// Of those, the ones whose preemptor started within 5 minutes of the
    /// victim's GPUs being freed.
    pub preemptor_started: u64,
    /// Of those, the ones whose preemptor's next attempt ended in an idle
    /// reclaim (CON-9): it took the GPUs and left them idle.
    #[serde(default)]
    pub preemptor_idle_reclaimed: u64,
    /// Of those, the ones whose victim later preempted its preemptor in
    /// turn (the two traded GPUs back and forth).
    pub returned: u64,
}
