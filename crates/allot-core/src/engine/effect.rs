//! What the engine leaves for its interpreters: effects, and the
//! transitions they record.

use crate::Time;
use crate::allocation::Allocation;
use crate::cluster::{Health, NodeId};
use crate::rule::{Reason, Rule};
use crate::state::{NodeEventKind, StopOutcome};
use crate::workload::{Phase, WorkloadId};

/// Something an interpreter must do or record, in the order left.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Start attempt `attempt` of the workload on its allocation (the
    /// state's: effects are carried out after every engine call, before the
    /// next one).
    Launch { workload: WorkloadId, attempt: u32 },
    /// Ask the attempt to checkpoint and stop (CON-2); the engine kills it
    /// at `stop_at` unless it has ended.
    Signal { workload: WorkloadId, attempt: u32, stop_at: Time },
    /// End the attempt now (grace over, node failed).
    Kill { workload: WorkloadId, attempt: u32 },
    /// A state change to record.
    Record(Transition),
    /// A node's health changed (in-service capacity may have).
    Health { node: NodeId, health: Health },
    /// CON-9: the attempt's GPUs have been idle long enough: it is stopped
    /// at `reclaim_at` unless they get busy (`Some`), or they are busy
    /// again and the warning is withdrawn (`None`).
    Idle { workload: WorkloadId, attempt: u32, reclaim_at: Option<Time> },
    /// The engine itself took a node out of service (MNT-3): record it as
    /// an operator's node event, with `cause` as its principal.
    NodeAction { node: NodeId, kind: NodeEventKind, cause: Reason },
}

/// A workload's state change.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub t: Time,
    pub workload: WorkloadId,
    /// The attempt it concerns (the last one for changes of a pending
    /// workload).
    pub attempt: u32,
    pub change: Change,
    /// The phase the workload is in after it ([`Change::leads_to`]): the
    /// interpreters record it as it is, and never map changes themselves.
    pub phase: Phase,
    pub reason: Reason,
    /// The workload whose need caused a preemption, if any.
    pub by: Option<WorkloadId>,
    /// For changes that end an attempt: what it held and amounted to.
    pub ended: Option<Ended>,
}

impl Transition {
    /// A change of workload `workload`'s attempt `attempt` at `t`, leading
    /// to the phase the change leads to.
    pub fn new(t: Time, workload: WorkloadId, attempt: u32, change: Change, reason: Reason) -> Transition {
        Transition { t, workload, attempt, change, phase: change.leads_to(), reason, by: None, ended: None }
    }

    /// Caused by `by`'s need (a preemption).
    pub fn caused_by(mut self, by: Option<WorkloadId>) -> Transition {
        self.by = by;
        self
    }

    /// Ending an attempt that amounted to `ended`.
    pub fn ended(mut self, ended: Ended) -> Transition {
        self.ended = Some(ended);
        self
    }
}

/// The kinds of state change, named as in the decision log.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum Change {
    /// Pending → running on an allocation.
    Start,
    /// Running → stopping: signalled, killed after grace (CON-2).
    Preempt,
    /// Running → stopping without grace: its node failed (MNT-2).
    Abort,
    /// Stopping → pending: stopped and requeued (CON-3).
    Stop,
    /// Stopped by a node failure and requeued (MNT-2).
    Fail,
    /// The work is done (ENG-1).
    Finish,
    /// Refused for good (admission or policy).
    Reject,
    /// Ended by a cancel (pending, or stopped after one was asked).
    Cancel,
    /// Failed by itself and requeued while retries are left.
    Retry,
    /// Failed by itself with no retry left, at its time limit (CON-6), or
    /// with its setup missing on its node (MNT-4).
    Failed,
    /// Could not start for a reason outside the workload; requeued (MNT-3).
    LaunchFailed,
    /// Still running, warned that its idle GPUs will be reclaimed (CON-9).
    IdleWarning,
    /// Still running, its GPUs busy again: the warning is withdrawn (CON-9).
    IdleCleared,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The phase machine: the phase a workload is in after this change. A
    /// workload requeued (stopped, failed on its node, retried, not
    /// launched) is pending again, whether queued or parked.
    pub fn leads_to(self) -> Phase {
        match self {
            Change::Start | Change::IdleWarning | Change::IdleCleared => Phase::Running,
            Change::Preempt | Change::Abort => Phase::Stopping,
            Change::Stop | Change::Fail | Change::Retry | Change::LaunchFailed => Phase::Pending,
            Change::Finish => Phase::Finished,
            Change::Reject => Phase::Rejected,
            Change::Cancel => Phase::Cancelled,
            Change::Failed => Phase::Failed,
        }
    }
}

/// How an attempt ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum Outcome {
    Finished,
    /// Stopped after a signal (policy, drain).
    Preempted,
    /// Stopped by its node's failure.
    NodeFailed,
    /// Stopped after a cancel.
    Cancelled,
    /// Failed by itself.
    Failed,
    /// Never started: not by its own fault (MNT-3), or its setup is
    /// missing on the node (MNT-4).
    LaunchFailed,
    /// Its server stopped while it ran unsignalled, and the next one did
    /// not adopt it ([`closed_at_restart`]): nothing is learnt of how it
    /// ended, so it is treated as interrupted from outside.
    Lost,
}

impl Outcome {
    /// Every outcome, in the order the store has always listed them.
    pub const ALL: [Outcome; 7] = [
        Outcome::Finished,
        Outcome::Preempted,
        Outcome::NodeFailed,
        Outcome::Cancelled,
        Outcome::Failed,
        Outcome::LaunchFailed,
        Outcome::Lost,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        s.parse().ok()
    }

    /// Whether the attempt was stopped from outside (a preemption, its
    /// node's failure, its server's loss): what counts as a preemption.
    pub fn interrupted(self) -> bool {
        matches!(self, Outcome::Preempted | Outcome::NodeFailed | Outcome::Lost)
    }
}

/// An attempt that held GPUs when its server stopped and that the next
/// server did not adopt (K8S-10): what was recorded of it.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenAttempt {
    pub attempt: u32,
    pub started: Time,
    /// When it was signalled (CON-2), if it was: its progress froze then.
    pub signalled: Option<Time>,
    /// The workload's work left when the attempt started (seconds).
    pub remaining: Time,
    pub checkpoint_s: Time,
    /// CON-7: whether the workload reports checkpoints (any attempt of it
    /// reported one), and the progress this attempt's last report saved.
    pub reports: bool,
    pub reported: Option<Time>,
    /// A cancel was asked.
    pub cancel: bool,
}

/// How [`closed_at_restart`] closes an [`OpenAttempt`].
#[derive(Clone, Debug, PartialEq)]
pub struct Closed {
    pub outcome: Outcome,
    /// Progress it kept (CON-3, CON-7) and progress it lost (seconds).
    pub kept_s: Time,
    pub lost_s: Time,
    /// The workload's phase after it: requeued, or cancelled if a cancel
    /// was asked.
    pub phase: Phase,
    pub reason: Reason,
}

/// CON-3 at a server restart: an attempt that held GPUs when its server
/// stopped, was not adopted and has been stopped by the next server
/// (at `end`) keeps the progress the engine would have kept had it been
/// stopped then (its progress up to its signal, if it was signalled, capped
/// by its work left; kept by its reported checkpoints or its declared
/// interval, as [`crate::workload::kept`] decides live), and its workload is
/// requeued, or cancelled if a cancel was asked. Signalled, it was
/// preempted; not, it was lost.
pub fn closed_at_restart(a: &OpenAttempt, end: Time) -> Closed {
    let until = a.signalled.unwrap_or(end).max(a.started);
    let progress = (until - a.started).min(a.remaining.max(1));
    let kept_s = crate::workload::kept(progress, a.checkpoint_s, a.reports, a.reported);
    let lost_s = progress - kept_s;
    let (outcome, phase) = if a.cancel {
        (Outcome::Cancelled, Phase::Cancelled)
    } else if a.signalled.is_some() {
        (Outcome::Preempted, Phase::Pending)
    } else {
        (Outcome::Lost, Phase::Pending)
    };
    let reason = Reason::new(
        Rule::Requeue,
        format!(
            "the server restarted while attempt {} held GPUs; stopped, {lost_s} s of progress since the last checkpoint lost",
            a.attempt
        ),
    );
    Closed { outcome, kept_s, lost_s, phase, reason }
}

/// What an ended attempt held and amounted to.
#[derive(Clone, Debug, PartialEq)]
pub struct Ended {
    pub alloc: Allocation,
    pub started: Time,
    pub outcome: Outcome,
    pub stop: StopOutcome,
    /// The exit code reported, if any.
    pub exit_code: Option<i32>,
    /// Seconds of the workload's progress the attempt kept: all it ran if
    /// it finished, else what it had checkpointed (CON-3).
    pub kept_s: Time,
}

impl Ended {
    /// An attempt of a workload of `gpus` GPUs that ended at `end`.
    pub fn new(
        alloc: Allocation,
        started: Time,
        outcome: Outcome,
        stop: StopOutcome,
        exit_code: Option<i32>,
        end: Time,
        gpus: u32,
    ) -> Ended {
        let kept_s = match outcome {
            Outcome::Finished => end.saturating_sub(started),
            _ => stop.useful_gpu_s / u64::from(gpus.max(1)),
        };
        Ended { alloc, started, outcome, stop, exit_code, kept_s }
    }
}

/// How an attempt's process ended, as its interpreter saw it.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// Its work is done (the simulator knows when; a live executor reports
    /// exit codes instead).
    Completed,
    /// It exited with this code or was killed by this signal. Code 0 of an
    /// attempt that was not signalled is a completion (ENG-1); any other
    /// end of one that was not signalled is a failure, retried while
    /// retries are left; any end of a signalled one is a stop (CON-3).
    Status { code: Option<i32>, signal: Option<i32> },
    /// It could not be started, on `node` or on its allocation as a whole;
    /// `fault` says whose fault it is and so what follows.
    NotStarted { message: String, fault: LaunchFault, node: Option<NodeId> },
}

/// Whose fault a launch that failed is.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum LaunchFault {
    /// The workload's own: its command cannot be run (not found, not
    /// executable). It fails like a non-zero exit and spends a retry.
    Workload,
    /// Outside the workload: no cgroup, log file or checkpoint directory, a
    /// spawn error such as EMFILE, an executor error. It is requeued without
    /// spending a retry, and counts against the node (MNT-3).
    Infrastructure,
    /// The workload's own setup cannot exist where it was placed: its
    /// working directory is missing on the node. Trying again cannot help,
    /// and the node is not at fault: it ends as failed at once, without
    /// spending a retry or counting against the node (MNT-4).
    Setup,
}

impl Exit {
    /// A killed process, as the simulator's kill leaves it.
    pub const KILLED: Exit = Exit::Status { code: None, signal: Some(9) };

    pub fn code(&self) -> Option<i32> {
        match self {
            Exit::Completed => Some(0),
            Exit::Status { code, .. } => *code,
            Exit::NotStarted { .. } => None,
        }
    }
}
