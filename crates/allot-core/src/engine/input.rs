//! The engine's one way in: every input an interpreter gathers is an
//! [`Input`], and [`Engine::step`] takes the inputs of one instant in the
//! engine's order, closes the instant with the pass trigger, and hands the
//! effects out as they are left. No code outside the engine changes its
//! state; a step's inputs, instant and [`Close`] are all a replay needs to
//! make the same changes (the server's journal records exactly these).

use super::{Cancelled, CheckpointRefused, Effect, Engine, Exit, HoldRefused, Past};
use crate::Time;
use crate::account::{AccountId, AccountTree};
use crate::allocation::Allocation;
use crate::cluster::{AddNodeError, ClusterId, NodeId, PoolId};
use crate::policy::Policy;
use crate::state::NodeEvent;
use crate::workload::{WorkloadId, WorkloadSpec};

/// Something that happened, as the engine takes it.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// The process of attempt `attempt` ended, or never started
    /// ([`Exit::NotStarted`]); stale reports are ignored.
    Exit { workload: WorkloadId, attempt: u32, exit: Exit },
    /// L-5: at a restart, the attempt still held GPUs and was not adopted
    /// (K8S-10); its process was stopped, and it ends now as
    /// [`super::closed_at_restart`] closes it.
    Lost { workload: WorkloadId, attempt: u32 },
    /// The clock reached the instant: time limits (CON-6), idle reclaims
    /// (CON-9) and grace deadlines (CON-2) due by now act. A closing
    /// [`Close`] adds it when the step has none.
    Time,
    /// MNT-5: a node named `name` joins `pool`, in service.
    AddNode { pool: PoolId, name: String },
    /// A node event (MNT-1, MNT-2; `outage` and `return` replayed one node
    /// at a time, FLEET-3/4). Its own `t` is the event's instant.
    Node(NodeEvent),
    /// FLEET-3: a cluster cannot be reached, for `why`.
    ClusterDown { cluster: ClusterId, why: String },
    /// FLEET-4: the cluster answers again and was reconciled.
    ClusterUp { cluster: ClusterId },
    /// K8S-11: `gpus` GPUs of the node are held by work Allot does not
    /// manage (a count replacing the last one).
    Outside { node: NodeId, gpus: u32 },
    /// ACC-1: the account tree replaced (ids kept).
    Accounts(AccountTree),
    /// CFG-1: the contract replaced by a config reload, from this instant
    /// (the budget periods kept: [`crate::Contract::restart_only`]).
    Contract(Box<crate::Contract>),
    /// ACC-3: the subtrees of `roots` were closed with stop, by `by`.
    StopAccounts { roots: Vec<AccountId>, by: String },
    /// The ledger's history of a live store (BUD-3), charged once at a
    /// restart.
    Usage(Vec<UsageSpan>),
    /// A workload arrives; the policy admits it or it is rejected.
    Arrive { spec: WorkloadSpec, retries: u32 },
    /// A workload recovered from a live store, queued with its past; one
    /// whose cancel was asked before the restart ends now (L-5).
    Restore { spec: WorkloadSpec, retries: u32, past: Past },
    /// K8S-10: a workload whose attempt kept running through a restart,
    /// holding `alloc` since `started` again.
    Adopt { spec: WorkloadSpec, retries: u32, past: Past, alloc: Allocation, started: Time },
    /// The executor started the attempt (MNT-3 counts launch failures in a
    /// row).
    Launched { workload: WorkloadId, attempt: u32 },
    /// A cancel; `detail` says who asked.
    Cancel { workload: WorkloadId, detail: String },
    /// HOLD-1: hold a pending workload.
    Hold { workload: WorkloadId },
    /// HOLD-1: release a held workload.
    Release { workload: WorkloadId },
    /// CON-7: the attempt reports a checkpoint completed at `at`.
    Checkpoint { workload: WorkloadId, attempt: u32, at: Time },
    /// CON-9: a sample of the mean utilisation (0..=1) of the attempt's
    /// GPUs.
    GpuUtil { workload: WorkloadId, attempt: u32, util: f64 },
    /// A pass at this instant whatever changed (a test's or an
    /// interpreter's start).
    Pass,
}

/// One recorded attempt as the ledger counts it ([`Input::Usage`]).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct UsageSpan {
    /// The account's path as recorded.
    pub account: String,
    pub user: String,
    pub start: Time,
    /// `None`: it still holds GPUs.
    pub end: Option<Time>,
    pub gpus: u32,
    /// The GPU type's weight.
    pub weight: f64,
}

impl Input {
    /// The workload the input names, if it names one.
    pub fn workload(&self) -> Option<WorkloadId> {
        match self {
            Input::Exit { workload, .. }
            | Input::Lost { workload, .. }
            | Input::Launched { workload, .. }
            | Input::Cancel { workload, .. }
            | Input::Hold { workload }
            | Input::Release { workload }
            | Input::Checkpoint { workload, .. }
            | Input::GpuUtil { workload, .. } => Some(*workload),
            _ => None,
        }
    }

    /// Where the input falls in its instant (the numbered steps of
    /// [`Engine::step`]).
    pub fn rank(&self) -> u8 {
        match self {
            Input::Exit { .. } | Input::Lost { .. } => 1,
            Input::Time => 2,
            Input::AddNode { .. } => 3,
            Input::Node(_) | Input::ClusterDown { .. } | Input::ClusterUp { .. } | Input::Outside { .. } => 4,
            Input::Accounts(_) | Input::Contract(_) | Input::StopAccounts { .. } | Input::Usage(_) => 5,
            Input::Arrive { .. } | Input::Restore { .. } | Input::Adopt { .. } => 6,
            Input::Launched { .. }
            | Input::Cancel { .. }
            | Input::Hold { .. }
            | Input::Release { .. }
            | Input::Checkpoint { .. }
            | Input::GpuUtil { .. } => 7,
            Input::Pass => 8,
        }
    }
}

/// What an input came to, for the interpreter that answers whoever sent it.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Taken; nothing to tell.
    Done,
    /// The id the workload got (arrive, restore, adopt).
    Workload(WorkloadId),
    Cancelled(Cancelled),
    /// ACC-3: each workload cancelled and how.
    Stopped(Vec<(WorkloadId, Cancelled)>),
    Hold(Result<(), HoldRefused>),
    /// CON-7: the attempt's progress now saved, or why the report was not
    /// taken.
    Checkpoint(Result<Time, CheckpointRefused>),
    NodeAdded(Result<NodeId, AddNodeError>),
    /// How many GPUs are set aside (K8S-11), nodes taken out or returned
    /// (FLEET-3/4), deadlines that acted (time), or whether a utilisation
    /// sample changed anything (1: an idle spell began or ended, CON-9).
    Count(usize),
}

impl Answer {
    /// The workload an arrival got.
    pub fn workload(&self) -> WorkloadId {
        match self {
            Answer::Workload(w) => *w,
            a => panic!("an arrival's answer is its workload, not {a:?}"),
        }
    }

    /// A count's value (0 for another answer).
    pub fn count(&self) -> usize {
        match self {
            Answer::Count(n) => *n,
            _ => 0,
        }
    }
}

/// How a step ends its instant.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Close {
    /// More inputs may come at this instant (the server feeds each request
    /// as it arrives): no deadline and no pass yet.
    Open,
    /// The instant ends: deadlines act, then a pass runs if something
    /// changed since the last or a planned wake-up is due, then the next
    /// wake-up is planned ([`Carry::may_change`]).
    Pass,
    /// The instant ends but no pass may run (the server's earlier writes
    /// wait for the store): deadlines act, and a wake-up due is kept as a
    /// change for the next closing step.
    Held,
}

/// An interpreter's part in a step: it carries out the effects as the
/// engine leaves them (after each input, deadline and pass) and may feed
/// back, at once, inputs they cause: the simulator's virtual processes
/// (a kill ends the process now, L-2; a launch reports its utilisation).
pub trait Carry {
    fn carry(&mut self, engine: &Engine, effects: &[Effect], now: Time, back: &mut Vec<Input>);

    /// Whether it takes the effects during the step (not: they stay for
    /// [`Engine::take_effects`]).
    fn during(&self) -> bool {
        true
    }

    /// Whether anything may still change after the instant: inputs may
    /// come (a live server: always) or a process may end. With nothing to
    /// come and no GPU held, no time-driven pass is planned (L-6).
    fn may_change(&self) -> bool {
        true
    }
}

/// What a step came to.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// One per input, in the order given.
    pub answers: Vec<Answer>,
    /// Whether the closing pass ran (step 8; not an asked [`Input::Pass`]).
    pub passed: bool,
    /// The step changed nothing: no input, no deadline, no pass, the same
    /// wake-up and the same pending change. A journal may leave it out:
    /// a replay without it is the same.
    pub idle: bool,
}

/// An interpreter that carries out the effects after the step: they stay
/// for [`Engine::take_effects`] (the live server, whose reports come back
/// as later inputs).
pub struct Later;

impl Carry for Later {
    fn carry(&mut self, _: &Engine, _: &[Effect], _: Time, _: &mut Vec<Input>) {}

    fn during(&self) -> bool {
        false
    }
}

impl Engine {
    /// One step at `now`, in the engine's order:
    ///
    /// 1. work that ended: exits reported (a completion at the instant its
    ///    grace ends is a completion, not a kill), attempts a restart lost;
    /// 2. time: deadlines due act (CON-6 time limits, CON-9 idle reclaims,
    ///    CON-2 grace over);
    /// 3. nodes added (MNT-5);
    /// 4. node events, cluster outages and returns, outside holds;
    /// 5. account trees, ACC-3 stops, a restart's usage;
    /// 6. arrivals (and a restart's restored and adopted workloads), in the
    ///    order given;
    /// 7. requests and reports: launches, cancels, holds, releases,
    ///    checkpoints, utilisation;
    /// 8. the pass, when the step closes the instant ([`Close::Pass`]) and
    ///    something changed or a wake-up is due, or when asked
    ///    ([`Input::Pass`]);
    /// 9. the next wake-up planned.
    ///
    /// Inputs of one step keep their order within a kind; the inputs an
    /// interpreter feeds back ([`Carry`]) are taken at once.
    pub fn step(
        &mut self,
        policy: &mut dyn Policy,
        now: Time,
        inputs: Vec<Input>,
        close: Close,
        carry: &mut dyn Carry,
    ) -> Step {
        let n = inputs.len();
        let before = (self.wake(), self.dirty);
        let mut order: Vec<(u8, usize, Input)> =
            inputs.into_iter().enumerate().map(|(i, input)| (input.rank(), i, input)).collect();
        if close != Close::Open && !order.iter().any(|(_, _, i)| *i == Input::Time) {
            order.push((Input::Time.rank(), usize::MAX, Input::Time));
        }
        order.sort_by_key(|(rank, i, _)| (*rank, *i));
        let mut answers = vec![Answer::Done; n];
        let mut back = Vec::new();
        let mut acted = 0;
        for (_, i, input) in order {
            let answer = self.take(policy, input, now);
            if i < n {
                answers[i] = answer;
            } else {
                acted = answer.count();
            }
            self.carry_out(policy, now, carry, &mut back);
        }
        let mut passed = false;
        match close {
            Close::Open => {}
            Close::Pass => {
                let woke = self.take_wake(now);
                if (self.dirty || woke) && !self.state.pending.is_empty() {
                    self.pass(policy, now);
                    passed = true;
                    self.carry_out(policy, now, carry, &mut back);
                }
                self.dirty = false;
                self.plan_wake(policy, now, carry.may_change());
            }
            Close::Held => {
                if self.take_wake(now) {
                    self.dirty = true;
                }
            }
        }
        let idle = n == 0 && acted == 0 && !passed && before == (self.wake(), self.dirty);
        Step { answers, passed, idle }
    }

    /// Hands the effects left to the interpreter, and takes what it feeds
    /// back, until nothing more is left.
    fn carry_out(&mut self, policy: &mut dyn Policy, now: Time, carry: &mut dyn Carry, back: &mut Vec<Input>) {
        if !carry.during() {
            return;
        }
        while !self.effects.is_empty() {
            let effects = std::mem::take(&mut self.effects);
            carry.carry(self, &effects, now, back);
            self.recycle(effects);
            for input in std::mem::take(back) {
                self.take(policy, input, now);
            }
        }
    }

    /// Takes one input: the one place every input changes the state.
    fn take(&mut self, policy: &mut dyn Policy, input: Input, now: Time) -> Answer {
        match input {
            Input::Exit { workload, attempt, exit } => {
                self.exited(workload, attempt, exit, now);
                Answer::Done
            }
            Input::Lost { workload, attempt } => {
                self.lost(workload, attempt, now);
                Answer::Done
            }
            Input::Time => Answer::Count(self.expire(now)),
            Input::AddNode { pool, name } => Answer::NodeAdded(self.add_node(pool, name)),
            Input::Node(e) => {
                self.node_event(&e);
                Answer::Done
            }
            Input::ClusterDown { cluster, why } => Answer::Count(self.cluster_down(cluster, &why, now)),
            Input::ClusterUp { cluster } => Answer::Count(self.cluster_up(cluster, now)),
            Input::Outside { node, gpus } => Answer::Count(self.hold_outside(node, gpus) as usize),
            Input::Accounts(tree) => {
                self.set_accounts(tree);
                Answer::Done
            }
            Input::Contract(contract) => {
                self.set_contract(*contract, now);
                Answer::Done
            }
            Input::StopAccounts { roots, by } => Answer::Stopped(self.stop_accounts(&roots, &by, now)),
            Input::Usage(spans) => {
                self.restore_usage(&spans);
                Answer::Done
            }
            Input::Arrive { spec, retries } => Answer::Workload(self.arrive(policy, spec, retries, now)),
            Input::Restore { spec, retries, past } => {
                let w = self.restore(spec, retries, &past, now);
                if past.cancel {
                    self.cancel(w, now, "cancelled (requested before the server restarted)");
                }
                Answer::Workload(w)
            }
            Input::Adopt { spec, retries, past, alloc, started } => {
                Answer::Workload(self.adopt(spec, retries, &past, alloc, started, now))
            }
            Input::Launched { workload, attempt } => {
                self.launched(workload, attempt);
                Answer::Done
            }
            Input::Cancel { workload, detail } => Answer::Cancelled(self.cancel(workload, now, &detail)),
            Input::Hold { workload } => Answer::Hold(self.hold(workload, now)),
            Input::Release { workload } => Answer::Hold(self.release(workload, now)),
            Input::Checkpoint { workload, attempt, at } => {
                Answer::Checkpoint(self.checkpointed(workload, attempt, at, now))
            }
            Input::GpuUtil { workload, attempt, util } => {
                Answer::Count(self.gpu_util(workload, attempt, util, now).into())
            }
            Input::Pass => {
                self.pass(policy, now);
                Answer::Done
            }
        }
    }
}

/// The start of an engine, as [`Entry::Start`] journals it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Start {
    /// The policy's name.
    pub policy: String,
    /// The fleet as laid out then (nodes added since are inputs).
    pub cluster: crate::Cluster,
    pub accounts: AccountTree,
    pub contract: crate::Contract,
}

/// A live run at one instant between steps: its engine and its policy's
/// memory. Restored, it carries the run on exactly as replaying the
/// journal up to it would, so the journal before it may be compacted.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// The policy's name.
    pub policy: String,
    pub engine: Engine,
    pub memory: Option<crate::policy::Memory>,
}

/// [`Snapshot`], borrowed: written without a copy of the engine (the same
/// encoding).
#[derive(serde::Serialize)]
pub struct SnapshotOf<'a> {
    pub policy: &'a str,
    pub engine: &'a Engine,
    pub memory: Option<crate::policy::Memory>,
}

/// One entry of a live run's journal: every step the engine took, with
/// its instant and how it closed, and where a server (re)started its
/// engine. Replayed in order through [`Engine::step`], the entries make
/// the same changes (a replay builds a new engine at each start, as the
/// server did).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    /// A new engine on this fleet, account tree and contract, under the
    /// policy named.
    Start(Box<Start>),
    /// One step.
    Step { t: Time, close: Close, inputs: Vec<Input> },
    /// At a restart, before the new engine starts: these attempts of the
    /// engine that stopped (workload id, attempt) were still open and not
    /// adopted; their processes were stopped, and they ended at `end` as
    /// [`super::closed_at_restart`] closes them (L-5).
    Lost { end: Time, attempts: Vec<(String, u32)> },
}
