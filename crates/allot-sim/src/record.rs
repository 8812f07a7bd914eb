//! What a simulation recorded: every attempt, every log event and the
//! in-service capacity over time. Measures are computed from this alone.

use allot_core::cluster::{ClusterId, GpuTypeId};
use allot_core::{AccountId, Class, Rule, Time, WorkloadId};
use serde::Serialize;

/// One attempt: a workload holding GPUs from `start` to `end`.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    pub workload: WorkloadId,
    pub account: AccountId,
    pub class: Class,
    pub gpus: u32,
    /// The cluster of the fleet it ran on (a gang never spans clusters).
    pub cluster: ClusterId,
    /// The GPU type it ran on, and that type's normalisation weight.
    pub gpu: GpuTypeId,
    pub weight: f64,
    pub util: f64,
    pub start: Time,
    pub end: Time,
    /// GPU-seconds of progress kept (the rest of `gpus × (end − start)` was lost).
    pub useful_gpu_s: u64,
    /// How it ended.
    pub outcome: AttemptEnd,
    /// For a preempted attempt: why and when it was signalled (`None` for
    /// one stopped without a signal, and for every other outcome).
    pub preempted: Option<Signalled>,
}

/// The signal that preempted an attempt: the rule of the decision, when,
/// and the workload whose need caused it.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Signalled {
    pub rule: Rule,
    pub at: Time,
    pub by: Option<WorkloadId>,
}

impl Attempt {
    pub fn assigned_gpu_s(&self) -> u64 {
        (self.end - self.start) * u64::from(self.gpus)
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptEnd {
    /// Completed its work.
    Finished,
    /// Stopped after a preemption signal and grace (policy or drain).
    Preempted,
    /// Stopped at once by a node failure.
    Failed,
    /// Ended by a cancel (not requeued; not a preemption).
    Cancelled,
    /// CON-9: ended because its GPUs stayed idle (not requeued; not a
    /// preemption).
    IdleReclaimed,
    /// Still holding GPUs when the simulation ended (horizon cut).
    Cut,
}

/// A scheduling event, as written to `--log` (one JSON line each).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogEvent {
    pub t: Time,
    /// start | preempt | stop | finish | fail | reject | node | budget (a threshold reached)
    pub event: &'static str,
    pub workload: String,
    pub nodes: Vec<String>,
    pub gpus: u32,
    pub reason: String,
    /// The workload whose need caused a preemption, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl LogEvent {
    /// The log line of a transition, as the state has it when the
    /// transition is carried out (the nodes it held or holds).
    pub fn of(state: &allot_core::State, tr: &allot_core::Transition) -> LogEvent {
        let alloc = match &tr.ended {
            Some(e) => Some(&e.alloc),
            None => state.run(tr.workload).alloc.as_ref(),
        };
        let nodes = alloc.map(|a| a.nodes().map(|n| state.cluster.node(n).name.clone()).collect()).unwrap_or_default();
        let spec = state.spec(tr.workload);
        LogEvent {
            t: tr.t,
            event: tr.change.as_str(),
            workload: spec.id.clone(),
            nodes,
            gpus: spec.gpus,
            reason: tr.reason.to_string(),
            by: tr.by.map(|b| state.spec(b).id.clone()),
        }
    }
}

/// In-service GPUs from `t` on (a step function; first entry at t = 0).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CapacityStep {
    pub t: Time,
    pub gpus: u64,
    /// Normalised GPUs in service.
    pub ngpus_milli: u64,
}

/// One cluster's GPUs and in-service capacity over time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterCapacity {
    pub name: String,
    /// GPUs of the cluster at the start (healthy or not).
    pub total_gpus: u64,
    /// MNT-5: (when, GPUs) of the nodes added to the cluster at run time.
    pub added_gpus: Vec<(Time, u64)>,
    /// In-service GPUs of the cluster from each step's `t` on.
    pub capacity: Vec<CapacityStep>,
}

/// Everything a run produced.
#[derive(Clone, Debug)]
pub struct SimOutput {
    pub policy: String,
    /// Measures are over `[0, horizon_end]`.
    pub horizon_end: Time,
    /// GPUs of the fleet at the start (healthy or not).
    pub total_gpus: u64,
    /// MNT-5: (when, GPUs) of the nodes added at run time, in time order:
    /// the fleet has `total_gpus` plus those added by `t` at `t`.
    pub added_gpus: Vec<(Time, u64)>,
    pub attempts: Vec<Attempt>,
    pub capacity: Vec<CapacityStep>,
    /// Per cluster of a fleet of several, in config order (index =
    /// [`ClusterId`]): its GPUs and its own in-service step function.
    /// Empty for a fleet of one, whose cluster is the whole of `capacity`.
    pub clusters: Vec<ClusterCapacity>,
    pub log: Vec<LogEvent>,
    /// Scheduling passes run and simulator events processed.
    pub passes: u64,
    pub events: u64,
    /// Node failures: `fail` events on a node that was not already down
    /// (MNT-2), whether or not work was running there.
    pub node_failures: u64,
}
