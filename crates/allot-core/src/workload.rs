//! Workloads: what was asked for ([`WorkloadSpec`]) and what happened to it
//! so far ([`Run`]).

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::account::AccountId;
use crate::allocation::Allocation;
use crate::cluster::{ClusterSet, GpuTypeId};
use crate::rule::Reason;

/// Index of a workload in [`crate::State`]; also its trace order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkloadId(pub u32);

/// Workload class.
#[derive(
    Copy,
    Clone,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(serialize_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Batch,
    Interactive,
    Service,
}

impl Class {
    pub const ALL: [Class; 3] = [Class::Batch, Class::Interactive, Class::Service];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<Class> {
        s.parse().ok()
    }
}

/// Legacy priority level (only the `priority` policy reads it).
#[derive(
    Copy,
    Clone,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(serialize_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Low,
    Normal,
    High,
    Urgent,
}

impl Priority {
    pub const ALL: [Priority; 4] = [Priority::Low, Priority::Normal, Priority::High, Priority::Urgent];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<Priority> {
        s.parse().ok()
    }
}

/// What a workload asks for.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    /// Unique external id.
    pub id: String,
    pub submit: Time,
    pub account: AccountId,
    pub user: String,
    pub class: Class,
    /// Total GPUs (gang: all at once).
    pub gpus: u32,
    /// 0: any packing; k > 0: exactly k nodes with gpus/k each.
    pub nodes: u32,
    pub gpu_type: Option<GpuTypeId>,
    /// The clusters it may run on (FLEET-1); [`ClusterSet::ANY`] by default.
    pub clusters: ClusterSet,
    /// Run time if never interrupted.
    pub work_s: Time,
    /// Checkpoint interval in seconds of progress; 0: never checkpoints.
    pub checkpoint_s: Time,
    /// Mean GPU utilisation while running, 0..=1.
    pub util: f64,
    pub priority: Priority,
    pub preemptible: bool,
    /// CON-6: running time allowed per attempt; `None`: no limit.
    pub time_limit_s: Option<Time>,
    /// CON-8: it saves its progress when signalled, within the grace, and
    /// reports that checkpoint (so a preemption costs it only the grace).
    pub checkpoint_on_signal: bool,
    /// DEP-1: it waits until each of these is satisfied (all of them).
    pub after: Vec<Dependency>,
    /// ARR-1: it is one element of an array.
    pub array: Option<ArrayPart>,
    /// HOLD-1: submitted on hold; it waits until released.
    pub hold: bool,
    /// SLURM-2: what it is billed per second it runs (Slurm's `billing`
    /// TRES), which only the `slurm` policy's Fair Tree usage counts;
    /// `None`: its normalised GPUs.
    pub billing: Option<u64>,
}

impl WorkloadSpec {
    /// Whether it has conditions to meet before it is queued: submitted
    /// held (HOLD-1), dependencies (DEP-1), an array limit (ARR-1).
    pub fn has_conditions(&self) -> bool {
        self.hold || !self.after.is_empty() || self.array.is_some_and(|a| a.limit.is_some())
    }
}

/// DEP-1: what a dependency waits for.
#[derive(
    Copy,
    Clone,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(serialize_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum DepKind {
    /// The other workload finished its work.
    AfterOk,
    /// The other workload ended, however.
    AfterAny,
    /// The other workload ended without finishing (failed, cancelled or
    /// rejected).
    AfterNotOk,
}

impl DepKind {
    pub const ALL: [DepKind; 3] = [DepKind::AfterOk, DepKind::AfterAny, DepKind::AfterNotOk];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<DepKind> {
        s.parse().ok()
    }

    /// Whether an end in `phase` satisfies the dependency (`Some(true)`),
    /// never can (`Some(false)`), or it is not decided yet (`None`: the
    /// other workload has not ended).
    pub fn satisfied_by(self, phase: Phase) -> Option<bool> {
        if !phase.is_terminal() {
            return None;
        }
        Some(match self {
            DepKind::AfterOk => phase == Phase::Finished,
            DepKind::AfterAny => true,
            DepKind::AfterNotOk => phase != Phase::Finished,
        })
    }
}

/// DEP-1: one dependency of a workload.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    pub kind: DepKind,
    pub on: DepTarget,
}

/// What a dependency is on.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq, Eq)]
pub enum DepTarget {
    /// A workload of the state (earlier in the trace, or live).
    Workload(WorkloadId),
    /// A workload that had already ended in this phase before the state
    /// knew it (a live server restored after it ended); `label` names it
    /// in reasons.
    Ended { phase: Phase, label: u64 },
}

/// ARR-1: a workload as an element of an array.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq, Eq)]
pub struct ArrayPart {
    /// The array's id, the same for all its elements (the interpreter's
    /// choice: the id of its first element).
    pub array: u64,
    /// Its index in the array.
    pub index: u32,
    /// How many elements the array has.
    pub count: u32,
    /// ARR-1: at most this many elements are queued or hold GPUs at once.
    pub limit: Option<u32>,
}

/// Lifecycle phase.
#[derive(
    Copy,
    Clone,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(serialize_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Waiting for GPUs (new or requeued).
    Pending,
    /// Holding GPUs and making progress.
    Running,
    /// Signalled to stop; holds its GPUs until the grace period ends.
    Stopping,
    /// All work done.
    Finished,
    /// Refused at admission (e.g. interactive over the lane limits).
    Rejected,
    /// Failed (live executor: non-zero exit without retries left).
    Failed,
    /// Cancelled by a user.
    Cancelled,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the workload holds GPUs.
    pub fn holds_gpus(self) -> bool {
        matches!(self, Phase::Running | Phase::Stopping)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Finished | Phase::Rejected | Phase::Failed | Phase::Cancelled)
    }
}

/// Dynamic state of a workload.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Run {
    pub phase: Phase,
    /// Work left (seconds of progress) at the start of the current attempt.
    pub remaining: Time,
    /// Start of the current attempt (Running/Stopping).
    pub started: Option<Time>,
    /// When a Stopping workload releases its GPUs.
    pub stop_at: Option<Time>,
    /// Progress of the current attempt frozen at the preemption signal.
    pub progress_at_signal: Option<Time>,
    /// GPUs held (Running/Stopping).
    pub alloc: Option<Allocation>,
    pub first_start: Option<Time>,
    /// When it was first queued: its submission, or when its conditions
    /// were first met (HOLD-1, DEP-1, ARR-1); queue time counts from here.
    pub queued: Option<Time>,
    pub end: Option<Time>,
    pub preemptions: u32,
    pub attempts: u32,
    /// GPU-seconds lost to preemptions and failures (lost progress + grace).
    pub lost_gpu_s: u64,
    /// Why it last changed state or why it is waiting.
    pub last_reason: Option<Reason>,
    /// CON-7: progress of the current attempt saved by its last reported
    /// checkpoint; `None`: none reported in this attempt.
    pub reported: Option<Time>,
    /// CON-7: it has reported a checkpoint in some attempt: from then on
    /// its reports, not its declared interval, say what a stop keeps.
    pub reports: bool,
}

impl Run {
    pub fn new(spec: &WorkloadSpec) -> Run {
        Run {
            phase: Phase::Pending,
            remaining: spec.work_s,
            started: None,
            stop_at: None,
            progress_at_signal: None,
            alloc: None,
            first_start: None,
            queued: None,
            end: None,
            preemptions: 0,
            attempts: 0,
            lost_gpu_s: 0,
            last_reason: None,
            reported: None,
            reports: false,
        }
    }

    /// Progress made by the current attempt at `now` (frozen at the signal
    /// once stopping).
    pub fn progress(&self, now: Time) -> Time {
        if let Some(p) = self.progress_at_signal {
            return p;
        }
        match self.started {
            Some(s) if self.phase == Phase::Running => now.saturating_sub(s).min(self.remaining),
            _ => 0,
        }
    }

    /// Progress of the current attempt that is lost if it stops at `now`
    /// (rule CON-3: everything since the last checkpoint).
    pub fn unsaved_progress(&self, spec: &WorkloadSpec, now: Time) -> Time {
        let p = self.progress(now);
        p - self.kept(p, spec.checkpoint_s)
    }

    /// Progress kept out of `p` seconds of the current attempt (CON-3,
    /// CON-7): up to its last reported checkpoint once it reports them,
    /// else by its declared interval.
    pub fn kept(&self, p: Time, checkpoint_s: Time) -> Time {
        kept(p, checkpoint_s, self.reports, self.reported)
    }
}

/// Progress kept out of `p` seconds of an attempt (CON-3, CON-7): a
/// workload that reports checkpoints keeps what its last report of the
/// attempt saved (`reported`, nothing without one); one that never
/// reported keeps the multiples of its declared interval.
pub fn kept(p: Time, checkpoint_s: Time, reports: bool, reported: Option<Time>) -> Time {
    if reports { reported.unwrap_or(0).min(p) } else { saved(p, checkpoint_s) }
}

/// Progress kept out of `p` seconds with checkpoints every `every` seconds
/// (0: never). Because kept progress is always a multiple of `every`, per
/// attempt and cumulative checkpoints coincide.
pub fn saved(p: Time, every: Time) -> Time {
    p.checked_div(every).map_or(0, |n| n * every)
}
