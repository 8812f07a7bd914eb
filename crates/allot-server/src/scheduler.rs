//! The scheduler task: the one owner of the scheduler state (docs/style.md rule 5, like
//! nextest's dispatcher). HTTP handlers, executor events and the scheduling
//! tick reach it only by messages.
//!
//! Every state change is the engine's ([`allot_core::Engine`], the same
//! code the simulator runs); this task is its live interpreter. It feeds
//! the engine what arrives (submissions, cancels, node actions, executor
//! reports, the clock) and carries out the effects it leaves:
//! * every step's writes are committed to the store *before* the executor is
//!   told (a start is recorded as `starting` before its process is launched,
//!   a signal before it is sent);
//! * a stopping workload releases its GPUs when its process has exited (the
//!   executor kills it when the engine says grace is over), never before,
//!   so no GPU is given to two processes;
//! * the executor reports exit codes, which the engine reads (ENG-1, CON-3),
//!   and GPU samples, folded into each attempt's telemetry summary
//!   (`Scheduler::on_telemetry`).
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
mod fleet;
mod next;
pub use next::{NextStart, Victim};
#[cfg(test)]
mod parity;
mod reports;
mod requests;
mod telemetry;
pub(crate) use telemetry::Telemetry;
#[cfg(test)]
mod testing;
pub use reports::{IDLE_WARNING, MARKER, MARKER_POLL};
pub(crate) use reports::{Markers, watch_markers};

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use allot_core::engine::{Answer, Close, Entry, Input, Later, Past};
use allot_core::{Engine, NodeEventKind, Policy, Time, WorkloadId, WorkloadSpec};
use tokio::sync::{mpsc, oneshot};

use crate::clock;
use crate::executor::{AttemptKey, ExecEvent, Executor, Launch};
use crate::metrics::Metrics;
use crate::store::{Op, Store, StoreError};
use crate::views::{AccountView, NodeView};

/// CFG-1: the changes a config reload (`crate::api::reload`) asks of the
/// scheduler task (it owns the engine,
/// the account book, the webhook and the telemetry settings).
#[derive(Debug)]
pub struct ReloadPlan {
    /// The account edits, in the book's order.
    pub edits: Vec<allot_core::AccountEdit>,
    /// The config's declared accounts now: what `null` means in an edit.
    pub seed: Vec<allot_core::AccountSpec>,
    pub contract: Option<allot_core::Contract>,
    /// `[alerts]` changed: the webhook to post to now (`None`: none).
    pub alerts: Option<Option<crate::webhook::Target>>,
    pub telemetry: Option<allot_trace::config::TelemetryConfig>,
}

/// A request to the scheduler task.
#[derive(Debug)]
pub enum Msg {
    /// A submission, already committed to the store; `accepted` is
    /// answered once the state has it.
    Submitted(Box<Submission>),
    /// HOLD-1: hold (or release) workloads (the API checked who may); per
    /// workload, its state after, or why not.
    Hold {
        seqs: Vec<i64>,
        hold: bool,
        reply: oneshot::Sender<Result<Vec<Result<String, String>>, Refusal>>,
    },
    /// Cancel workloads together (the API checked who may); per workload,
    /// its state after, or why not.
    CancelMany {
        seqs: Vec<i64>,
        by: String,
        reply: oneshot::Sender<Result<Vec<Result<String, Refusal>>, Refusal>>,
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
    /// Why each of these pending workloads waits, as the policy sees it
    /// now (one explanation pass for all of them); `None` for one that is
    /// not pending.
    ExplainPending {
        seqs: Vec<i64>,
        reply: oneshot::Sender<Vec<Option<String>>>,
    },
    Accounts {
        reply: oneshot::Sender<Vec<AccountView>>,
    },
    Nodes {
        reply: oneshot::Sender<Vec<NodeView>>,
    },
    /// The declared accounts now (an export).
    AccountDecls {
        reply: oneshot::Sender<Vec<crate::views::AccountDecl>>,
    },
    /// The edits that make the tree `specs` (an import).
    ImportAccounts {
        specs: Vec<allot_core::AccountSpec>,
        reply: oneshot::Sender<Vec<allot_core::AccountEdit>>,
    },
    /// Account tree edits, applied together (ACC-1); `stop` with a close:
    /// ACC-3; `dry_run`: only say what would change.
    EditAccounts {
        edits: Vec<allot_core::AccountEdit>,
        stop: bool,
        dry_run: bool,
        by: String,
        reply: Reply<crate::views::AccountEdits>,
    },
    /// CFG-1: a config reload's changes to the accounts, the contract,
    /// the webhook and the telemetry settings, applied together; one line
    /// per account change.
    Reload {
        plan: Box<ReloadPlan>,
        by: String,
        reply: Reply<Vec<String>>,
    },
    /// An operator's node action.
    Node {
        name: String,
        kind: NodeEventKind,
        by: String,
        /// Why, as the operator said (`--reason`).
        reason: Option<String>,
        reply: Reply<NodeView>,
    },
    /// CON-7: an attempt's checkpoint marker was touched at `at`.
    MarkerTouched {
        key: AttemptKey,
        at: Time,
    },
    /// CON-7: a checkpoint reported through the API with an attempt
    /// credential (checked by the scheduler, which issued it).
    CheckpointReport {
        seq: i64,
        token: String,
        reply: Reply<crate::views::CheckpointView>,
    },
    /// The waiting workloads the passes preempted running work for, in
    /// the order they were chosen (`scheduler/next.rs`): O(listed), no pass.
    NextStarts {
        reply: oneshot::Sender<Vec<NextStart>>,
    },
}

pub type Reply<T> = oneshot::Sender<Result<T, Refusal>>;

/// Why the scheduler refused a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    NotFound(String),
    Conflict(String),
    Invalid {
        field: String,
        message: String,
    },
    Unavailable(String),
    /// A credential that is not (or no longer) valid.
    Unauthorized(String),
    /// A valid credential that may not do this.
    Forbidden(String),
}

/// Live-only facts about a workload in the state: its row and what its
/// processes run.
#[derive(Clone, Debug)]
pub struct Live {
    pub seq: i64,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Where its command starts; `None`: the server's working directory.
    pub workdir: Option<std::path::PathBuf>,
    /// The Unix identity its processes run as.
    pub run_as: crate::identity::RunAs,
    /// DEP-1: its dependencies by seq.
    pub after: Vec<LiveDep>,
}

/// DEP-1: a dependency by seq, with the state its workload had when the
/// dependency was checked (the API at submission, the store at recovery):
/// the scheduler knows the workloads that have not ended, the others end
/// in that state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveDep {
    pub kind: allot_core::DepKind,
    pub seq: i64,
    pub phase: allot_core::Phase,
}

/// A submission, already committed to the store; `accepted` is answered
/// once the state has it.
#[derive(Debug)]
pub struct Submission {
    pub spec: WorkloadSpec,
    pub live: Live,
    pub retries: i64,
    pub accepted: oneshot::Sender<()>,
}

/// Where the scheduler reads the time: the system clock, or (tests) a
/// clock the test sets.
#[derive(Clone, Debug, Default)]
pub(crate) enum Clock {
    #[default]
    System,
    #[cfg(test)]
    Manual(Arc<std::sync::atomic::AtomicU64>),
}

impl Clock {
    pub(crate) fn now(&self) -> Time {
        match self {
            Clock::System => clock::now(),
            #[cfg(test)]
            Clock::Manual(t) => t.load(std::sync::atomic::Ordering::SeqCst),
        }
    }
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

/// A workload whose attempt kept running through the restart (K8S-10).
pub struct Adopted {
    pub spec: WorkloadSpec,
    pub live: Live,
    pub retries: u32,
    /// Of its ended attempts.
    pub past: Past,
    pub alloc: allot_core::Allocation,
    pub started: Time,
}

/// The task's state.
pub struct Scheduler {
    pub(crate) engine: Engine,
    /// DEP-1: submissions handed over before a workload they depend on
    /// (committed just before them); they arrive right after it.
    pub(crate) early: Vec<Submission>,
    pub(crate) policy: Box<dyn Policy>,
    pub(crate) store: Store,
    pub(crate) exec: Arc<dyn Executor>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) paths: Paths,
    /// The live account tree (ACC-1); the engine's tree is its tree.
    pub(crate) book: allot_core::AccountBook,
    /// The API's view of the tree, updated with every edit.
    pub(crate) catalog: Option<Arc<crate::submission::Catalog>>,
    /// The engine's shape the catalog was last given ([`Scheduler::publish_shape`]).
    pub(crate) published_shape: u64,
    /// Indexed by `WorkloadId`.
    pub(crate) live: Vec<Live>,
    pub(crate) by_seq: HashMap<i64, WorkloadId>,
    pub(crate) clock: Clock,
    pub(crate) now: Time,
    /// Writes of the current step, then the executor commands they allow.
    pub(crate) ops: Vec<Op>,
    pub(crate) launches: Vec<Launch>,
    pub(crate) signals: Vec<AttemptKey>,
    pub(crate) kills: Vec<AttemptKey>,
    last_gauges: Option<std::time::Instant>,
    /// A change since the gauges were last refreshed (the refresh was
    /// held back by [`GAUGES_EVERY`]): the task wakes to refresh them.
    gauges_stale: bool,
    /// Since when the step's writes could not be committed.
    pub(crate) outage: Option<std::time::Instant>,
    /// Why each node out of service (or draining) was taken out, as its
    /// operator (or the executor that took it out) said.
    pub(crate) node_reasons: HashMap<allot_core::NodeId, String>,
    /// Budget thresholds fired (each once per account, period, threshold),
    /// and those not yet recorded in the store.
    pub(crate) alerts: allot_core::alerts::Alerts,
    pub(crate) unrecorded_events: Vec<crate::store::budget::BudgetEventRow>,
    /// Where newly recorded budget events are posted (`[alerts]`), if anywhere.
    pub(crate) webhook: Option<crate::webhook::Webhook>,
    /// `[telemetry]` and the running attempts' GPU measures.
    pub(crate) telemetry: Telemetry,
    /// CON-7: the credentials of running attempts, and their markers.
    pub(crate) credentials: reports::Credentials,
    pub(crate) markers: Markers,
    /// The API's address as attempts reach it (`ALLOT_SERVER`).
    pub(crate) api_url: Option<String>,
    /// What the passes preempted work for: next to start (`Msg::NextStarts`).
    pub(crate) chosen: Arc<std::sync::Mutex<next::Chosen>>,
    /// The decision log, kept when a test asks for it.
    #[cfg(test)]
    pub(crate) decisions: Option<Vec<parity::Line>>,
    /// Journal entries written since the last snapshot of the run.
    pub(crate) since_snapshot: u64,
    /// How many journal entries a snapshot follows (0: none is taken),
    /// and how many snapshots the compacted journal keeps.
    pub(crate) snapshots: Snapshots,
}

/// When the scheduler snapshots its run and how much of the journal it
/// keeps (`allot serve --snapshot-every`, `--snapshots-kept`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshots {
    pub every: u64,
    pub keep: u32,
}

impl Default for Snapshots {
    fn default() -> Snapshots {
        Snapshots { every: 50_000, keep: 2 }
    }
}

/// Keeps why node `n` is out of service after an event of `kind`: a drain
/// or failure sets it (or clears it, said without a reason); an undrain or
/// repair clears it.
pub(crate) fn note_node_reason(
    reasons: &mut HashMap<allot_core::NodeId, String>,
    n: allot_core::NodeId,
    kind: NodeEventKind,
    reason: Option<String>,
) {
    match (kind, reason) {
        (NodeEventKind::Drain | NodeEventKind::Fail | NodeEventKind::Outage, Some(r)) => {
            reasons.insert(n, r);
        }
        _ => {
            reasons.remove(&n);
        }
    }
}

/// ARR-1: an array element learns its place in its environment.
fn array_env(spec: &WorkloadSpec, live: &mut Live) {
    if let Some(a) = spec.array {
        live.env.insert("ALLOT_ARRAY_ID".into(), a.array.to_string());
        live.env.insert("ALLOT_ARRAY_INDEX".into(), a.index.to_string());
        live.env.insert("ALLOT_ARRAY_COUNT".into(), a.count.to_string());
    }
}

/// A journal entry as the store keeps it: written with the step's other
/// writes, in their order.
pub(crate) fn journal(t: Time, entry: &Entry) -> Op {
    Op::Journal { t: t as i64, entry: serde_json::to_string(entry).expect("a journal entry is JSON") }
}

/// How often uncommitted writes (or commands held for the lease) are retried.
const RETRY: Duration = Duration::from_millis(250);

/// The gauges are refreshed at most this often (and at least this soon
/// after a change).
const GAUGES_EVERY: Duration = Duration::from_secs(1);

impl Scheduler {
    pub(crate) fn new(
        engine: Engine,
        policy: Box<dyn Policy>,
        store: Store,
        exec: Arc<dyn Executor>,
        metrics: Arc<Metrics>,
        paths: Paths,
        book: allot_core::AccountBook,
    ) -> Scheduler {
        let chosen = Arc::default();
        Scheduler {
            engine,
            policy: next::Noting::wrap(policy, Arc::clone(&chosen)),
            store,
            exec,
            metrics,
            paths,
            book,
            catalog: None,
            published_shape: 0,
            live: Vec::new(),
            by_seq: HashMap::new(),
            clock: Clock::System,
            now: clock::now(),
            ops: Vec::new(),
            launches: Vec::new(),
            signals: Vec::new(),
            kills: Vec::new(),
            last_gauges: None,
            gauges_stale: false,
            outage: None,
            node_reasons: HashMap::new(),
            alerts: Default::default(),
            unrecorded_events: Vec::new(),
            webhook: None,
            telemetry: Telemetry::default(),
            credentials: Default::default(),
            markers: Default::default(),
            api_url: None,
            chosen,
            early: Vec::new(),
            #[cfg(test)]
            decisions: None,
            since_snapshot: 0,
            snapshots: Snapshots::default(),
        }
    }

    /// Reads the time from `clock` from now on (tests).
    #[cfg(test)]
    pub(crate) fn set_clock(&mut self, clock: Clock) {
        self.now = clock.now();
        self.clock = clock;
    }

    /// A submission arrives (admitted again on the live state: a refusal
    /// is recorded as a rejection).
    pub(crate) fn arrive(&mut self, mut spec: WorkloadSpec, mut live: Live, retries: u32, now: Time) -> WorkloadId {
        self.conditions(&mut spec, &mut live);
        let w = self.feed(Input::Arrive { spec, retries }, now).workload();
        self.track(w, live);
        self.apply(now);
        w
    }

    /// A workload recovered from the store, queued with its past; one whose
    /// cancel was asked before the restart ends now.
    pub(crate) fn restore(&mut self, mut spec: WorkloadSpec, mut live: Live, retries: u32, past: &Past, now: Time) {
        self.conditions(&mut spec, &mut live);
        let w = self.feed(Input::Restore { spec, retries, past: past.clone() }, now).workload();
        self.track(w, live);
        self.apply(now);
    }

    /// L-5: carries on a run its journal's replay left in the engine: each
    /// workload's live facts, in id order, then the inputs of the restart
    /// (the attempts lost end, a contract edited meanwhile applies, CFG-1),
    /// their writes and journal entry as any step's.
    pub(crate) fn carry_on(&mut self, lives: Vec<Live>, inputs: Vec<Input>, end: Time) {
        debug_assert!(self.live.is_empty());
        for (i, mut live) in lives.into_iter().enumerate() {
            let w = WorkloadId(i as u32);
            array_env(self.engine.state().spec(w), &mut live);
            self.track(w, live);
        }
        for input in inputs {
            self.feed(input, end);
        }
        self.publish_shape();
        self.apply(end);
    }

    /// K8S-10: a workload whose attempt kept running through the restart,
    /// holding its GPUs again as that attempt.
    pub(crate) fn adopt(&mut self, a: Adopted, now: Time) {
        let Adopted { mut spec, mut live, retries, past, alloc, started } = a;
        self.conditions(&mut spec, &mut live);
        let w = self.feed(Input::Adopt { spec, retries, past, alloc, started }, now).workload();
        self.track(w, live);
        self.apply(now);
    }

    /// DEP-1: dependencies by seq become the engine's (a workload the
    /// scheduler knows, or one that ended as recorded); ARR-1: an array
    /// element learns its place in its environment.
    fn conditions(&mut self, spec: &mut WorkloadSpec, live: &mut Live) {
        spec.after = live
            .after
            .iter()
            .map(|d| allot_core::Dependency {
                kind: d.kind,
                on: match self.by_seq.get(&d.seq) {
                    Some(&w) => allot_core::DepTarget::Workload(w),
                    None => allot_core::DepTarget::Ended { phase: d.phase, label: d.seq.max(0) as u64 },
                },
            })
            .collect();
        array_env(spec, live);
    }

    /// Whether every dependency of a submission is known: on a workload
    /// the scheduler has, or one that had ended when it was checked. A
    /// submission committed just before this one may not have been handed
    /// over yet.
    pub(crate) fn dependencies_known(&self, live: &Live) -> bool {
        live.after.iter().all(|d| d.phase.is_terminal() || self.by_seq.contains_key(&d.seq))
    }

    fn track(&mut self, w: WorkloadId, live: Live) {
        debug_assert_eq!(w.0 as usize, self.live.len());
        self.by_seq.insert(live.seq, w);
        self.live.push(live);
    }

    pub(crate) fn tick_now(&mut self) -> Time {
        // The ledger needs time never to go backwards.
        self.now = self.now.max(self.clock.now());
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
            if self.gauges_stale {
                let due = self.last_gauges.map_or(Duration::ZERO, |t| GAUGES_EVERY.saturating_sub(t.elapsed()));
                wait = Some(wait.map_or(due, |w| w.min(due)));
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
        self.flush().await?;
        self.exec.shutdown();
        Ok(())
    }

    /// One input, as it arrives: an open step of the engine (the instant
    /// closes at [`Scheduler::step`]). Its effects wait for
    /// [`Scheduler::apply`].
    pub(crate) fn feed(&mut self, input: Input, now: Time) -> Answer {
        let sample = matches!(input, Input::GpuUtil { .. });
        let entry = Entry::Step { t: now, close: Close::Open, inputs: vec![input.clone()] };
        let step = self.engine.step(&mut *self.policy, now, vec![input], Close::Open, &mut Later);
        let answer = step.answers.into_iter().next().expect("one answer per input");
        // A utilisation sample that changed nothing (most of them) is left
        // out: a replay without it is the same (CON-9 acts on spells).
        if !(sample && answer == Answer::Count(0)) {
            self.ops.push(journal(now, &entry));
            self.since_snapshot += 1;
        }
        answer
    }

    /// Journals the start of a new engine (one no input has reached yet):
    /// a replay builds its own from the same tree (tests; recovery writes
    /// a restart's).
    #[cfg(test)]
    pub(crate) fn journal_start(&mut self) {
        let st = self.engine.state();
        debug_assert!(st.specs.is_empty(), "a new engine");
        let entry = Entry::Start(Box::new(allot_core::engine::Start {
            policy: self.policy.name().into(),
            cluster: st.cluster.clone(),
            accounts: st.accounts.clone(),
            contract: st.contract,
        }));
        self.ops.push(journal(0, &entry));
    }

    /// Closes the instant: deadlines, one pass if due (none while earlier
    /// writes wait for the store: it runs once they are committed), then
    /// the commit and the executor commands. A live server never plans as
    /// if stuck: inputs may always come (L-6).
    pub(crate) async fn step(&mut self) -> Result<(), StoreError> {
        let now = self.tick_now();
        self.budget_events(now).await?;
        let close = if self.held() { Close::Held } else { Close::Pass };
        let t0 = std::time::Instant::now();
        let step = self.engine.step(&mut *self.policy, now, Vec::new(), close, &mut Later);
        // A step that changed nothing (a timer with nothing due) is left
        // out: its replay would change nothing either.
        if !step.idle {
            self.ops.push(journal(now, &Entry::Step { t: now, close, inputs: Vec::new() }));
            self.since_snapshot += 1;
        }
        if step.passed {
            self.metrics.pass_seconds.observe(t0.elapsed().as_secs_f64());
        }
        self.apply(now);
        self.snapshot(now);
        self.flush().await?;
        if cfg!(debug_assertions)
            && let Err(e) = self.engine.state().sanity_check(now)
        {
            panic!("scheduler state invariant broken at t={now}: {e}");
        }
        self.refresh_gauges(now);
        Ok(())
    }

    /// A snapshot of the run once enough of the journal followed the last
    /// (the engine and the policy's memory, in the step's transaction),
    /// then the journal compacted to the snapshots kept: recovery restores
    /// the newest and replays only what followed it.
    fn snapshot(&mut self, now: Time) {
        let Snapshots { every, keep } = self.snapshots;
        if every == 0 || self.since_snapshot < every {
            return;
        }
        let t0 = std::time::Instant::now();
        let data = allot_sim::replay::encode(&self.engine, &*self.policy);
        tracing::info!(
            bytes = data.len(),
            entries = self.since_snapshot,
            took_ms = t0.elapsed().as_millis() as u64,
            "snapshot of the run; the journal before the oldest of the last {keep} is compacted"
        );
        self.ops.push(Op::Snapshot { t: now as i64, data });
        self.ops.push(Op::CompactJournal { keep: i64::from(keep.max(1)) });
        self.since_snapshot = 0;
    }

    /// Records the budget thresholds reached by `now` (before anything
    /// changes at `now`, as the simulator does); the store keeps each once,
    /// so a restart that notices one again adds nothing. A store failure
    /// keeps them for the next step and does not hold scheduling.
    async fn budget_events(&mut self, now: Time) -> Result<(), StoreError> {
        let st = self.engine.state();
        for e in self.alerts.check(&st.ledger, &st.accounts, &st.contract.budget_alerts, now) {
            self.unrecorded_events.push(crate::store::budget::BudgetEventRow {
                t: e.t as i64,
                account: st.accounts.account(e.account).path.clone(),
                period_start_t: e.period_start as i64,
                threshold: e.threshold,
                used_gpu_hours: e.used_ngh,
                budget_gpu_hours: e.budget_ngh,
            });
        }
        if self.unrecorded_events.is_empty() || self.outage.is_some() {
            return Ok(());
        }
        match self.store.record_budget_events(&self.unrecorded_events).await {
            Ok(new) => {
                for e in &new {
                    tracing::info!(account = %e.account, threshold = e.threshold, t = e.t, "budget threshold reached");
                    if let Some(w) = &self.webhook {
                        w.send(e); // queued: the delivery never holds the step
                    }
                }
                self.unrecorded_events.clear();
            }
            Err(e) if e.is_fenced() => return Err(e),
            Err(e) => tracing::warn!(error = %e, "budget events not recorded yet; retried at the next step"),
        }
        Ok(())
    }

    /// The earliest time something is due: a kill, a wake-up.
    pub(crate) fn next_deadline(&self) -> Option<Time> {
        [self.engine.next_deadline(), self.engine.wake()].into_iter().flatten().min()
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
        if self.last_gauges.is_some_and(|t| t.elapsed() < GAUGES_EVERY) {
            self.gauges_stale = true;
            return;
        }
        self.gauges_stale = false;
        self.last_gauges = Some(std::time::Instant::now());
        crate::scheduler::apply::gauges(self, now);
    }
}
