//! The scheduler task: the one owner of the scheduler state (STYLE 5, like
//! nextest's dispatcher). HTTP handlers, executor events and the scheduling
//! tick reach it only by messages.
//!
//! Decisions are applied exactly as the simulator applies them
//! (`allot_sim::sim`): `Start` → [`State::start`]; `Preempt` →
//! [`State::signal`] and a stop after `grace` (CON-2); completions →
//! [`State::finish`] / [`State::stop`]. What is live-only:
//! * every step's writes are committed to the store *before* the executor is
//!   told (a start is recorded as `starting` before its process is launched,
//!   a signal before it is sent);
//! * a stopping workload releases its GPUs when its process has exited (the
//!   executor sends SIGKILL when grace is over), never before, so no GPU is
//!   given to two processes;
//! * exit code 0 finishes a running workload; any other exit fails it, and it
//!   is requeued while it has retries left. Once signalled, any exit means
//!   "stopped": the workload is requeued (CON-3) or, when cancelled, ends.
//!
//! The store may fail (down, busy, full, read-only): a step whose writes
//! could not be committed keeps them, in order, with the executor commands
//! they allow, and no pass runs until they are committed (retried every
//! `RETRY`); requests that need a write are answered "unavailable" in the
//! meantime. Only a lost lease ends the task ([`StoreError::is_fenced`]):
//! another server owns the store. Executor commands also wait while the
//! lease is not surely held ([`crate::store::Fence::fresh`]).
//!
//! A pass runs when something changed, at the policy's wake-ups
//! (`Policy::next_wakeup`) and, for periodic policies, every
//! `scheduling_interval` while work waits. Messages that arrive together are
//! handled together before one pass.

mod apply;
mod requests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use allot_core::{AccountSpec, NodeEventKind, Policy, State, Time, WorkloadId, WorkloadSpec};
use tokio::sync::{mpsc, oneshot};

use crate::accounts::Overrides;
use crate::clock;
use crate::executor::{AttemptKey, ExecEvent, Executor, Launch};
use crate::metrics::Metrics;
use crate::store::{Op, Store, StoreError};
use crate::views::{AccountView, NodeView};

/// A request to the scheduler task.
#[derive(Debug)]
pub enum Msg {
    /// A submission, already committed to the store; `accepted` is
    /// answered once the state has it.
    Submitted {
        seq: i64,
        spec: WorkloadSpec,
        command: Vec<String>,
        env: BTreeMap<String, String>,
        retries: i64,
        accepted: oneshot::Sender<()>,
    },
    /// Cancel a workload (the API checked who may).
    Cancel {
        seq: i64,
        by: String,
        reply: oneshot::Sender<Result<String, Refusal>>,
    },
    /// Why a workload waits or was stopped, as the policy sees it now.
    Explain {
        seq: i64,
        reply: oneshot::Sender<Option<String>>,
    },
    Accounts {
        reply: oneshot::Sender<Vec<AccountView>>,
    },
    Nodes {
        reply: oneshot::Sender<Vec<NodeView>>,
    },
    /// Set (`Some`) or unset (`None`) a budget or share.
    SetAccount {
        path: String,
        field: AccountField,
        value: Option<f64>,
        by: String,
        reply: Reply<AccountView>,
    },
    /// An operator's node action.
    Node {
        name: String,
        kind: NodeEventKind,
        by: String,
        reply: Reply<NodeView>,
    },
}

pub type Reply<T> = oneshot::Sender<Result<T, Refusal>>;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AccountField {
    Budget,
    Share,
}

impl AccountField {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountField::Budget => "budget",
            AccountField::Share => "share",
        }
    }
}

/// Why the scheduler refused a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    NotFound(String),
    Conflict(String),
    Invalid { field: String, message: String },
    Unavailable(String),
}

/// Live-only facts about a workload in the state.
#[derive(Clone, Debug)]
pub struct Live {
    pub seq: i64,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub retries: i64,
    pub failures: i64,
    pub cancel: bool,
    /// Attempt number of the current (or last) attempt in the store.
    pub attempt: i64,
}

/// Where attempts keep their files.
#[derive(Clone, Debug)]
pub struct Paths {
    pub data_dir: PathBuf,
}

impl Paths {
    pub fn checkpoint_dir(&self, id: &str) -> PathBuf {
        self.data_dir.join("checkpoints").join(id)
    }

    pub fn log_path(&self, id: &str, attempt: i64) -> PathBuf {
        self.data_dir.join("logs").join(id).join(format!("attempt-{attempt}.log"))
    }
}

/// The task's state.
pub struct Scheduler {
    pub(crate) state: State,
    pub(crate) policy: Box<dyn Policy>,
    pub(crate) store: Store,
    pub(crate) exec: Arc<dyn Executor>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) paths: Paths,
    pub(crate) base_accounts: Vec<AccountSpec>,
    pub(crate) overrides: Overrides,
    /// Indexed by `WorkloadId`.
    pub(crate) live: Vec<Live>,
    pub(crate) by_seq: HashMap<i64, WorkloadId>,
    /// SIGKILL deadlines of stopping attempts: (time, workload, attempt).
    pub(crate) kill_at: BTreeSet<(Time, WorkloadId, i64)>,
    pub(crate) wake: Option<Time>,
    pub(crate) dirty: bool,
    pub(crate) now: Time,
    /// Writes of the current step, then the executor commands they allow.
    pub(crate) ops: Vec<Op>,
    pub(crate) launches: Vec<Launch>,
    pub(crate) signals: Vec<AttemptKey>,
    pub(crate) kills: Vec<AttemptKey>,
    /// Launch failures in a row outside the workloads, per node (MNT-3).
    pub(crate) launch_failures: BTreeMap<allot_core::NodeId, u32>,
    last_gauges: Option<std::time::Instant>,
    /// Since when the step's writes could not be committed.
    pub(crate) outage: Option<std::time::Instant>,
}

/// How often uncommitted writes (or commands held for the lease) are retried.
const RETRY: Duration = Duration::from_millis(250);

impl Scheduler {
    #[expect(clippy::too_many_arguments, reason = "assembled once by recovery")]
    pub(crate) fn new(
        state: State,
        policy: Box<dyn Policy>,
        store: Store,
        exec: Arc<dyn Executor>,
        metrics: Arc<Metrics>,
        paths: Paths,
        base_accounts: Vec<AccountSpec>,
        overrides: Overrides,
    ) -> Scheduler {
        Scheduler {
            state,
            policy,
            store,
            exec,
            metrics,
            paths,
            base_accounts,
            overrides,
            live: Vec::new(),
            by_seq: HashMap::new(),
            kill_at: BTreeSet::new(),
            wake: None,
            dirty: true,
            now: clock::now(),
            ops: Vec::new(),
            launches: Vec::new(),
            signals: Vec::new(),
            kills: Vec::new(),
            launch_failures: BTreeMap::new(),
            last_gauges: None,
            outage: None,
        }
    }

    /// Adds a pending workload (new or recovered) to the state.
    pub(crate) fn add(&mut self, spec: WorkloadSpec, live: Live) -> WorkloadId {
        let seq = live.seq;
        let w = self.state.submit(spec);
        debug_assert_eq!(w.0 as usize, self.live.len());
        self.live.push(live);
        self.by_seq.insert(seq, w);
        self.dirty = true;
        w
    }

    fn tick_now(&mut self) -> Time {
        // The ledger needs time never to go backwards.
        self.now = self.now.max(clock::now());
        self.now
    }

    /// Runs until every sender of `rx` is gone or the lease is lost (the
    /// only error: another server owns the store).
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<Msg>,
        mut events: mpsc::UnboundedReceiver<ExecEvent>,
    ) -> Result<(), StoreError> {
        self.step().await?;
        loop {
            let mut wait = self.next_deadline().map(clock::until);
            if self.held() {
                wait = Some(wait.map_or(RETRY, |w| w.min(RETRY)));
            }
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => self.handle(m).await?,
                    None => break,
                },
                Some(e) = events.recv() => self.exec_event(e),
                _ = tokio::time::sleep(wait.unwrap_or(Duration::from_secs(3600))) => {}
            }
            // Take everything that is already waiting before one pass.
            for _ in 0..10_000 {
                if let Ok(e) = events.try_recv() {
                    self.exec_event(e);
                } else if let Ok(m) = rx.try_recv() {
                    self.handle(m).await?;
                } else {
                    break;
                }
            }
            self.step().await?;
        }
        self.flush().await.map(drop)
    }

    /// Timers, one pass if due, then the commit and the executor commands.
    pub(crate) async fn step(&mut self) -> Result<(), StoreError> {
        let now = self.tick_now();
        self.due_kills(now);
        let woke = self.wake.is_some_and(|w| w <= now);
        if woke {
            self.wake = None;
        }
        let held = self.held();
        if held {
            // The pass runs once the earlier writes are committed.
            self.dirty |= woke;
        } else {
            if (self.dirty || woke) && !self.state.pending.is_empty() {
                self.pass(now);
            }
            self.dirty = false;
        }
        self.flush().await?;
        if cfg!(debug_assertions)
            && let Err(e) = self.state.sanity_check(now)
        {
            panic!("scheduler state invariant broken at t={now}: {e}");
        }
        self.plan_wake(now);
        self.refresh_gauges(now);
        Ok(())
    }

    /// The earliest time something is due: a kill, a wake-up.
    fn next_deadline(&self) -> Option<Time> {
        let kill = self.kill_at.first().map(|(t, _, _)| *t);
        [kill, self.wake].into_iter().flatten().min()
    }

    /// Plans the next time-driven pass, as the simulator does.
    fn plan_wake(&mut self, t: Time) {
        if self.state.pending.is_empty() {
            self.wake = None;
            return;
        }
        let mut next = self.policy.next_wakeup(&self.state, t).filter(|w| *w > t);
        if self.policy.periodic() {
            let p = t + self.state.contract.scheduling_interval.max(1);
            next = Some(next.map_or(p, |n| n.min(p)));
        }
        self.wake = match (self.wake.filter(|w| *w > t), next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Sends SIGKILL to stopping attempts whose grace is over.
    fn due_kills(&mut self, now: Time) {
        while let Some(&(t, w, attempt)) = self.kill_at.first() {
            if t > now {
                break;
            }
            self.kill_at.pop_first();
            let seq = self.live[w.0 as usize].seq;
            if self.live[w.0 as usize].attempt == attempt && self.state.run(w).phase.holds_gpus() {
                tracing::info!(workload = seq, attempt, "grace over, killing");
                self.kills.push(AttemptKey { seq, attempt });
            }
        }
    }

    /// Writes or commands of an earlier step are still waiting (the store
    /// is unavailable or the lease is being renewed): no pass runs.
    pub(crate) fn held(&self) -> bool {
        self.outage.is_some() || self.has_commands() && !self.store.fence.fresh()
    }

    fn has_commands(&self) -> bool {
        !(self.launches.is_empty() && self.signals.is_empty() && self.kills.is_empty())
    }

    /// Commits the step's writes, then tells the executor. When the store
    /// fails, everything is kept for the next try; `Ok(false)`: not done.
    pub(crate) async fn flush(&mut self) -> Result<bool, StoreError> {
        if !self.ops.is_empty() {
            match self.store.apply(&self.ops).await {
                Ok(()) => self.ops.clear(),
                Err(e) if e.is_fenced() => return Err(e),
                Err(e) => {
                    if self.outage.is_none() {
                        tracing::error!(error = %e, pending_writes = self.ops.len(), "the store is unavailable; scheduling paused until it is back");
                        self.outage = Some(std::time::Instant::now());
                    }
                    return Ok(false);
                }
            }
            if let Some(since) = self.outage.take() {
                tracing::info!(after_s = since.elapsed().as_secs_f64(), "the store is back; scheduling resumed");
            }
        }
        if self.has_commands() && !self.store.fence.fresh() {
            if let Some(why) = self.store.fence.lost() {
                return Err(StoreError::new("act on the store's decisions", crate::store::StoreFailure::Fenced(why)));
            }
            // Not renewed in time: nothing is launched until it is.
            return Ok(false);
        }
        for job in std::mem::take(&mut self.launches) {
            self.exec.launch(job);
        }
        for key in std::mem::take(&mut self.signals) {
            self.exec.signal(key);
        }
        for key in std::mem::take(&mut self.kills) {
            self.exec.kill(key);
        }
        Ok(true)
    }

    fn refresh_gauges(&mut self, now: Time) {
        if self.last_gauges.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return;
        }
        self.last_gauges = Some(std::time::Instant::now());
        crate::scheduler::apply::gauges(self, now);
    }
}
