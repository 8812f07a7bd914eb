//! What the engine leaves for its interpreters: effects, and the
//! transitions they record.

use crate::Time;
use crate::allocation::Allocation;
use crate::cluster::{Health, NodeId};
use crate::rule::Reason;
use crate::state::{NodeEventKind, StopOutcome};
use crate::workload::WorkloadId;

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
    pub reason: Reason,
    /// The workload whose need caused a preemption, if any.
    pub by: Option<WorkloadId>,
    /// For changes that end an attempt: what it held and amounted to.
    pub ended: Option<Ended>,
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
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
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
}

/// How an attempt's process ended, as its interpreter saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
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
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
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
