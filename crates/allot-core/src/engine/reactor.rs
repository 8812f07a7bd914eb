//! The engine's inputs and how each changes the state.

use std::collections::{BTreeMap, BTreeSet};

use super::{Change, Effect, Ended, Exit, LaunchFault, Outcome, Transition};
use crate::Time;
use crate::allocation::Allocation;
use crate::cluster::{AddNodeError, ClusterId, Health, NodeId, PoolId};
use crate::decision::{Action, Decision};
use crate::placement::full_mask;
use crate::policy::Policy;
use crate::rule::{Reason, Rule};
use crate::state::{NodeEvent, NodeEventKind, State, StopOutcome};
use crate::workload::{Phase, WorkloadId, WorkloadSpec};

mod gate;
mod reports;
pub use gate::HoldRefused;
pub use reports::CheckpointRefused;

/// MNT-3: launch failures in a row outside the workloads that take a node
/// out of service.
pub const LAUNCH_FAILURES_TO_DRAIN: u32 = 3;

/// What the engine keeps of a workload beyond its [`crate::Run`].
#[derive(Copy, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Extra {
    /// Failed exits retried before the workload fails for good.
    retries: u32,
    failures: u32,
    /// A cancel was asked while it held GPUs: it ends when it stops.
    cancel: bool,
    /// CON-6: the attempt reached its time limit: it ends when it stops.
    timed_out: bool,
    /// CON-9: since when the current attempt's GPUs have been idle.
    idle_since: Option<Time>,
    /// CON-9: the current attempt was warned of its idle GPUs.
    warned: bool,
    /// CON-9: the attempt was stopped for idle GPUs: it ends when it stops.
    reclaimed: bool,
}

/// What became of a cancel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// It was pending and has ended.
    Ended,
    /// It holds GPUs: signalled (or already stopping), it ends when it stops.
    Stopping,
    /// It had already ended.
    AlreadyEnded,
}

/// Past attempts of a workload recovered from a live store.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Past {
    /// Progress kept by its attempts (seconds).
    pub kept_s: Time,
    pub attempts: u32,
    pub preemptions: u32,
    pub first_start: Option<Time>,
    pub lost_gpu_s: u64,
    pub failures: u32,
    pub cancel: bool,
    /// CON-7: some attempt of it reported a checkpoint, so it is a
    /// workload that reports them.
    pub reports: bool,
}

/// The state and everything that changes it. A snapshot of it (serde)
/// between steps, with its policy's, carries a live run on exactly.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Engine {
    pub(in crate::engine) state: State,
    extra: Vec<Extra>,
    /// Grace deadlines of signalled attempts still holding GPUs: (stop at,
    /// workload, attempt).
    deadlines: BTreeSet<(Time, WorkloadId, u32)>,
    /// CON-6: time limits of running attempts: (limit reached at,
    /// workload, attempt).
    limits: BTreeSet<(Time, WorkloadId, u32)>,
    /// CON-9: idle warnings and reclaims due: (at, workload, attempt).
    idle: BTreeSet<(Time, WorkloadId, u32)>,
    wake: Option<Time>,
    pub(in crate::engine) dirty: bool,
    /// Empty between steps, when snapshots are taken.
    #[serde(skip)]
    pub(in crate::engine) effects: Vec<Effect>,
    /// MNT-3: launch failures in a row outside the workloads, per node.
    launch_failures: BTreeMap<NodeId, u32>,
    /// HOLD-1, DEP-1, ARR-1: what parked workloads wait for.
    gate: gate::Gate,
    /// How many times the fleet's nodes or the account tree changed
    /// ([`Engine::shape`]).
    shape: u64,
}

impl Engine {
    pub fn new(state: State) -> Engine {
        Engine {
            extra: vec![Extra::default(); state.specs.len()],
            state,
            deadlines: BTreeSet::new(),
            limits: BTreeSet::new(),
            idle: BTreeSet::new(),
            wake: None,
            dirty: false,
            effects: Vec::new(),
            launch_failures: BTreeMap::new(),
            gate: gate::Gate::default(),
            shape: 0,
        }
    }

    /// The engine's state, to read: only the engine changes it.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// A count that changes whenever what admission reads changes: a node
    /// added (MNT-5), the account tree replaced (ACC-1). An interpreter
    /// that checks submissions off its engine's thread takes a new
    /// [`Engine::admission_view`] when it moved.
    pub fn shape(&self) -> u64 {
        self.shape
    }

    /// What a submission is checked against before it reaches the engine:
    /// the engine's own fleet (with the nodes added since the start), its
    /// account tree and contract, and no workloads, so admission never
    /// reads a copy kept in step by hand.
    pub fn admission_view(&self) -> State {
        State::new(self.state.cluster.clone(), self.state.accounts.clone(), self.state.contract)
    }

    /// The state, the engine given up (a replay's end).
    pub fn into_state(self) -> State {
        self.state
    }

    /// The effects left by the calls since the last take, in order.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Hands an emptied effect list back, to be filled again without
    /// allocating.
    pub fn recycle(&mut self, mut effects: Vec<Effect>) {
        if self.effects.is_empty() {
            effects.clear();
            self.effects = effects;
        }
    }

    /// Something changed since the last pass: a pass may start
    /// or stop something.
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// When the next time-driven pass is due.
    pub fn wake(&self) -> Option<Time> {
        self.wake
    }

    /// Whether the planned wake-up is due at `now`; it is consumed.
    pub(in crate::engine) fn take_wake(&mut self, now: Time) -> bool {
        let due = self.wake.is_some_and(|w| w <= now);
        if due {
            self.wake = None;
        }
        due
    }

    /// The earliest grace deadline, time limit or idle warning or reclaim
    /// (CON-2, CON-6, CON-9).
    pub fn next_deadline(&self) -> Option<Time> {
        [&self.deadlines, &self.limits, &self.idle].into_iter().filter_map(|s| s.first().map(|(t, _, _)| *t)).min()
    }

    /// CON-9: whether the workload ended (or is ending) for idle GPUs.
    pub fn reclaimed(&self, w: WorkloadId) -> bool {
        self.extra[w.0 as usize].reclaimed
    }

    /// CON-9: since when the current attempt's GPUs have been idle.
    pub fn idle_since(&self, w: WorkloadId) -> Option<Time> {
        self.extra[w.0 as usize].idle_since
    }

    /// CON-6: whether the workload ended (or is ending) at its time limit.
    pub fn timed_out(&self, w: WorkloadId) -> bool {
        self.extra[w.0 as usize].timed_out
    }

    /// Failed exits so far.
    pub fn failures(&self, w: WorkloadId) -> u32 {
        self.extra[w.0 as usize].failures
    }

    pub fn retries(&self, w: WorkloadId) -> u32 {
        self.extra[w.0 as usize].retries
    }

    /// The workload's attempt holding GPUs, as a restart that loses it
    /// closes it ([`super::closed_at_restart`], L-5); `None` when it holds
    /// none.
    pub fn open_attempt(&self, w: WorkloadId) -> Option<super::OpenAttempt> {
        let (spec, run) = (self.state.spec(w), self.state.run(w));
        let started = run.started.filter(|_| run.phase.holds_gpus())?;
        Some(super::OpenAttempt {
            attempt: run.attempts,
            started,
            signalled: run.progress_at_signal.map(|p| started + p),
            remaining: run.remaining,
            checkpoint_s: spec.checkpoint_s,
            reports: run.reports,
            reported: run.reported,
            cancel: self.extra[w.0 as usize].cancel,
        })
    }

    pub fn cancel_requested(&self, w: WorkloadId) -> bool {
        self.extra[w.0 as usize].cancel
    }

    fn record(&mut self, t: Time, w: WorkloadId, change: Change, reason: Reason) {
        let attempt = self.state.run(w).attempts;
        self.effects.push(Effect::Record(Transition::new(t, w, attempt, change, reason)));
    }

    fn set_health(&mut self, n: NodeId, h: Health) {
        self.state.set_health(n, h);
        self.effects.push(Effect::Health { node: n, health: h });
    }

    /// A workload arrives: the policy admits it (queued) or refuses it
    /// (rejected at once).
    pub(in crate::engine) fn arrive(
        &mut self,
        policy: &dyn Policy,
        spec: WorkloadSpec,
        retries: u32,
        now: Time,
    ) -> WorkloadId {
        let verdict = admit_account(&self.state, &spec).and_then(|()| policy.admit(&self.state, &spec));
        let w = self.submit(spec, retries, now);
        match verdict {
            Ok(()) => self.dirty = true,
            Err(reason) => {
                self.record(now, w, Change::Reject, reason.clone());
                self.end_pending(w, now, Phase::Rejected, reason);
            }
        }
        w
    }

    /// Adds a workload: queued, or, with conditions (HOLD-1, DEP-1, ARR-1),
    /// through the gate.
    fn submit(&mut self, spec: WorkloadSpec, retries: u32, now: Time) -> WorkloadId {
        debug_assert!((spec.account.0 as usize) < self.state.accounts.len(), "a workload of an account that exists");
        let gated = spec.has_conditions();
        let w = self.state.submit_as(spec, gated);
        debug_assert_eq!(w.0 as usize, self.extra.len());
        self.extra.push(Extra { retries, ..Extra::default() });
        if gated {
            self.open_gate(w, now);
        }
        w
    }

    /// Ends a pending workload for good; what waited on it follows
    /// (DEP-1, DEP-2, ARR-1).
    fn end_pending(&mut self, w: WorkloadId, now: Time, phase: Phase, reason: Reason) {
        self.state.end_pending(w, now, phase, reason);
        self.gate_ended(w, now);
    }

    /// A workload recovered from a live store, queued with its past
    /// (remaining work = its work less the progress its attempts kept).
    pub(in crate::engine) fn restore(
        &mut self,
        spec: WorkloadSpec,
        retries: u32,
        past: &Past,
        now: Time,
    ) -> WorkloadId {
        let w = self.submit(spec, retries, now);
        let work = self.state.spec(w).work_s;
        let r = &mut self.state.runs[w.0 as usize];
        r.remaining = work.saturating_sub(past.kept_s).max(1);
        r.attempts = past.attempts;
        r.preemptions = past.preemptions;
        r.first_start = past.first_start;
        r.lost_gpu_s = past.lost_gpu_s;
        r.reports = past.reports;
        let x = &mut self.extra[w.0 as usize];
        x.failures = past.failures;
        x.cancel = past.cancel;
        self.dirty = true;
        w
    }

    /// The ledger's history recovered from a live store: every recorded
    /// attempt charged to its account and user from its start to its end
    /// (`None`: it still holds GPUs, adopted), as the engine charged it
    /// live (BUD-3). Takes before releases at one instant keep the
    /// allocation non-negative. Attempts of an account the tree no longer
    /// has are skipped.
    pub(in crate::engine) fn restore_usage(&mut self, spans: &[super::UsageSpan]) {
        let mut changes: Vec<(Time, u8, crate::AccountId, &str, i64, f64)> = Vec::with_capacity(spans.len() * 2);
        for s in spans {
            let Some(acc) = self.state.accounts.get(&s.account) else { continue };
            changes.push((s.start, 0, acc, s.user.as_str(), i64::from(s.gpus), s.weight));
            if let Some(end) = s.end {
                changes.push((end, 1, acc, s.user.as_str(), -i64::from(s.gpus), s.weight));
            }
        }
        changes.sort_by_key(|x| (x.0, x.1));
        for (t, _, acc, user, gpus, weight) in changes {
            self.state.charge(acc, user, t, gpus, weight);
        }
    }

    /// K8S-10: a workload recovered from a live store whose attempt kept
    /// running through the restart (its cluster holds the running state):
    /// restored with the past of its ended attempts, then holding `alloc`
    /// since `started` as its next attempt, without a launch. Its
    /// conditions were met when it started. The ledger is not charged: the
    /// server replays the attempt into it from its recorded start.
    pub(in crate::engine) fn adopt(
        &mut self,
        mut spec: WorkloadSpec,
        retries: u32,
        past: &Past,
        alloc: Allocation,
        started: Time,
        now: Time,
    ) -> WorkloadId {
        spec.hold = false;
        spec.after.clear();
        let w = self.restore(spec, retries, past, now);
        // An array element already counts among its array's active ones
        // (ARR-1); it is never left parked.
        self.state.unpark(w, now);
        let reason = Reason::new(
            Rule::Adopt,
            format!("attempt {} was still running when the server restarted: adopted", past.attempts + 1),
        );
        self.state.resume(w, alloc, started, reason);
        let attempt = self.state.run(w).attempts;
        if let Some(limit) = self.state.spec(w).time_limit_s {
            self.limits.insert((started.saturating_add(limit), w, attempt));
        }
        w
    }

    /// K8S-11: `gpus` GPUs of node `n` are held by work Allot does not
    /// manage (a count, replacing the last one); returns how many of them
    /// are set aside (GPUs Allot's workloads hold never are).
    pub(in crate::engine) fn hold_outside(&mut self, n: NodeId, gpus: u32) -> u32 {
        let before = self.state.outside[n.0 as usize];
        let held = self.state.hold_outside(n, gpus);
        if self.state.outside[n.0 as usize] != before {
            self.dirty = true;
        }
        held
    }

    /// One scheduling pass: the policy's decisions, applied in order.
    pub(in crate::engine) fn pass(&mut self, policy: &mut dyn Policy, now: Time) {
        self.state.prune_claims();
        let decisions = policy.schedule(&self.state, now);
        for Decision { action, reason } in decisions {
            match action {
                Action::Start { workload: w, alloc } => self.start(w, alloc, now, reason),
                Action::Preempt { workload: w, by } => {
                    if self.state.run(w).phase == Phase::Running {
                        let grace = self.state.contract.grace;
                        self.preempt(w, now, grace, reason, by);
                    }
                }
                Action::Reject { workload: w } => {
                    self.record(now, w, Change::Reject, reason.clone());
                    self.end_pending(w, now, Phase::Rejected, reason);
                }
                Action::Claim { workload: w, alloc } => self.state.claim(w, alloc),
            }
        }
    }

    fn start(&mut self, w: WorkloadId, alloc: Allocation, now: Time, reason: Reason) {
        self.state.start(w, alloc, now, reason.clone());
        let x = &mut self.extra[w.0 as usize];
        (x.timed_out, x.idle_since, x.warned, x.reclaimed) = (false, None, false, false);
        let attempt = self.state.run(w).attempts;
        if let Some(limit) = self.state.spec(w).time_limit_s {
            self.limits.insert((now.saturating_add(limit), w, attempt));
        }
        self.record(now, w, Change::Start, reason);
        self.effects.push(Effect::Launch { workload: w, attempt });
    }

    /// CON-2: signals a running workload; it is killed at `now + grace`
    /// unless it ends first.
    fn preempt(&mut self, w: WorkloadId, now: Time, grace: Time, reason: Reason, by: Option<WorkloadId>) {
        let stop_at = self.state.signal(w, now, grace, reason.clone());
        let attempt = self.state.run(w).attempts;
        self.deadlines.insert((stop_at, w, attempt));
        self.effects.push(Effect::Record(Transition::new(now, w, attempt, Change::Preempt, reason).caused_by(by)));
        self.effects.push(Effect::Signal { workload: w, attempt, stop_at });
    }

    /// Time limits reached at or before `now` signal their attempts
    /// (CON-6), then grace is over for the attempts whose deadline is at or
    /// before `now`: they are killed. Returns how many deadlines expired.
    pub(in crate::engine) fn expire(&mut self, now: Time) -> usize {
        let mut n = self.limit_reached(now) + self.idle_due(now);
        while let Some(&(t, w, attempt)) = self.deadlines.first() {
            if t > now {
                break;
            }
            self.deadlines.pop_first();
            n += 1;
            let run = self.state.run(w);
            if run.attempts == attempt && run.phase == Phase::Stopping && run.stop_at == Some(t) {
                self.effects.push(Effect::Kill { workload: w, attempt });
            }
        }
        n
    }

    /// CON-6: running attempts whose time limit is at or before `now` are
    /// signalled and stop after grace (as CON-2); they will end, not be
    /// requeued. One already stopping keeps its stop. Returns how many
    /// limits were reached.
    fn limit_reached(&mut self, now: Time) -> usize {
        let mut n = 0;
        while let Some(&(t, w, attempt)) = self.limits.first() {
            if t > now {
                break;
            }
            self.limits.pop_first();
            n += 1;
            let run = self.state.run(w);
            if run.attempts != attempt || run.phase != Phase::Running {
                continue;
            }
            let limit = self.state.spec(w).time_limit_s.unwrap_or(0);
            self.extra[w.0 as usize].timed_out = true;
            let grace = self.state.contract.grace;
            let reason = Reason::new(
                Rule::TimeLimit,
                format!("ran {limit} s, its time limit; stopping after grace ({grace} s)"),
            );
            self.preempt(w, t, grace, reason, None);
        }
        n
    }

    /// The executor started attempt `attempt`: launches on its nodes work
    /// again (MNT-3 counts failures in a row).
    pub(in crate::engine) fn launched(&mut self, w: WorkloadId, attempt: u32) {
        if self.state.run(w).attempts != attempt {
            return;
        }
        if let Some(a) = self.state.run(w).alloc.as_ref() {
            for n in a.nodes() {
                self.launch_failures.remove(&n);
            }
        }
    }

    /// The process of attempt `attempt` ended (or never started). Stale
    /// reports (an older attempt, a workload no longer holding GPUs) are
    /// ignored.
    pub(in crate::engine) fn exited(&mut self, w: WorkloadId, attempt: u32, exit: Exit, now: Time) {
        let run = self.state.run(w);
        if run.attempts != attempt || !run.phase.holds_gpus() {
            return;
        }
        let stopping = run.phase == Phase::Stopping;
        match exit {
            Exit::Completed => self.finish(w, now, Some(0)),
            // Once signalled, any end is a stop: an exit code cannot tell
            // "done" from "checkpointed and stopped" (CON-3).
            _ if stopping => self.stopped(w, now, exit.code()),
            Exit::Status { code: Some(0), .. } => self.finish(w, now, Some(0)),
            Exit::Status { code, signal } => {
                let how = match (code, signal) {
                    (Some(c), _) => format!("exited with code {c}"),
                    (None, Some(s)) => format!("killed by signal {s}"),
                    (None, None) => "ended".to_string(),
                };
                self.crashed(w, now, code, &how);
            }
            Exit::NotStarted { message, fault: LaunchFault::Workload, .. } => {
                self.crashed(w, now, None, &format!("could not start: {message}"));
            }
            Exit::NotStarted { message, fault: LaunchFault::Infrastructure, node } => {
                self.launch_failed(w, now, &message, node);
            }
            Exit::NotStarted { message, fault: LaunchFault::Setup, .. } => self.setup_missing(w, now, &message),
        }
    }

    /// Releases a holding workload's GPUs and requeues it (CON-3): the
    /// state's stop, then live estimates are kept sane.
    fn release_requeue(&mut self, w: WorkloadId, now: Time, reason: Reason) -> (Allocation, Time, StopOutcome) {
        self.drop_deadline(w);
        let started = self.state.run(w).started.expect("holding workload has a start");
        let (o, alloc) = self.state.stop_releasing(w, now, reason);
        // Live remaining work is an estimate: a workload that ran past it
        // and was stopped keeps at least a second to do.
        let r = &mut self.state.runs[w.0 as usize];
        if r.remaining == 0 {
            r.remaining = 1;
        }
        (alloc, started, o)
    }

    /// An attempt that ends has no grace deadline or time limit left.
    fn drop_deadline(&mut self, w: WorkloadId) {
        let run = self.state.run(w);
        if let Some(stop_at) = run.stop_at {
            self.deadlines.remove(&(stop_at, w, run.attempts));
        }
        if let (Some(started), Some(limit)) = (run.started, self.state.spec(w).time_limit_s) {
            self.limits.remove(&(started.saturating_add(limit), w, run.attempts));
        }
        let idle = self.state.contract.idle_reclaim.get(self.state.spec(w).class);
        if let (Some(cfg), Some(since)) = (idle, self.extra[w.0 as usize].idle_since.take()) {
            let warn_at = since.saturating_add(cfg.after);
            self.idle.remove(&(warn_at, w, run.attempts));
            self.idle.remove(&(warn_at.saturating_add(cfg.warning), w, run.attempts));
        }
    }

    fn ended_record(&mut self, t: Time, w: WorkloadId, attempt: u32, change: Change, reason: Reason, ended: Ended) {
        self.effects.push(Effect::Record(Transition::new(t, w, attempt, change, reason).ended(ended)));
    }

    /// ENG-1: the work is done.
    fn finish(&mut self, w: WorkloadId, now: Time, exit_code: Option<i32>) {
        self.drop_deadline(w);
        let run = self.state.run(w);
        let (attempt, started) = (run.attempts, run.started.expect("holding"));
        let reason = Reason::new(Rule::Completed, "work completed");
        let (o, alloc) = self.state.finish_releasing(w, now, reason.clone());
        let nodes: Vec<NodeId> = alloc.nodes().collect();
        let ended = Ended::new(alloc, started, Outcome::Finished, o, exit_code, now, self.state.spec(w).gpus);
        self.ended_record(now, w, attempt, Change::Finish, reason, ended);
        self.gate_ended(w, now);
        self.after_release(&nodes);
    }

    /// A signalled attempt is gone: requeued (CON-3, or MNT-2 after a node
    /// failure), or ended if a cancel was asked.
    fn stopped(&mut self, w: WorkloadId, now: Time, exit_code: Option<i32>) {
        let run = self.state.run(w);
        let attempt = run.attempts;
        let why = run.last_reason.clone().unwrap_or_else(|| Reason::new(Rule::Grace, ""));
        let progress = run.progress(now);
        let lost = progress - run.kept(progress, self.state.spec(w).checkpoint_s);
        let graced = run.stop_at.is_some_and(|s| now >= s);
        let x = self.extra[w.0 as usize];
        let (change, outcome, reason) = if x.cancel {
            (Change::Cancel, Outcome::Cancelled, None)
        } else if x.timed_out && why.rule == Rule::TimeLimit {
            (Change::Failed, Outcome::Failed, None)
        } else if x.reclaimed && why.rule == Rule::IdleReclaim {
            (Change::Cancel, Outcome::Cancelled, None)
        } else if matches!(why.rule, Rule::Failure | Rule::FleetOutage) {
            // Its node failed (MNT-2), alone or with its cluster (FLEET-3).
            (Change::Fail, Outcome::NodeFailed, Some(why.clone()))
        } else {
            (Change::Stop, Outcome::Preempted, None)
        };
        let requeue = reason.unwrap_or_else(|| {
            let when = if graced { "grace over" } else { "stopped after the signal" };
            Reason::new(
                Rule::Requeue,
                format!("{when}; {lost} s of progress since the last checkpoint lost, requeued ({})", why.rule.id()),
            )
        });
        let (alloc, started, o) = self.release_requeue(w, now, requeue.clone());
        let nodes: Vec<NodeId> = alloc.nodes().collect();
        let ended = Ended::new(alloc, started, outcome, o, exit_code, now, self.state.spec(w).gpus);
        if change == Change::Cancel {
            let r = if x.reclaimed && !x.cancel {
                let when = if graced { "killed after grace" } else { "stopped after the signal" };
                Reason::new(Rule::IdleReclaim, format!("idle GPUs reclaimed; ended, {when}"))
            } else {
                Reason::new(why.rule, "cancelled")
            };
            self.ended_record(now, w, attempt, change, r.clone(), ended);
            self.end_pending(w, now, Phase::Cancelled, r);
        } else if change == Change::Failed {
            let limit = self.state.spec(w).time_limit_s.unwrap_or(0);
            let r = Reason::new(
                Rule::TimeLimit,
                format!(
                    "time limit of {limit} s reached; {when_ended}",
                    when_ended = if graced { "killed after grace" } else { "stopped after the signal" }
                ),
            );
            self.ended_record(now, w, attempt, change, r.clone(), ended);
            self.end_pending(w, now, Phase::Failed, r);
        } else {
            self.ended_record(now, w, attempt, change, requeue, ended);
        }
        self.after_release(&nodes);
    }

    /// L-5: a restart lost attempt `attempt`: the server stopped while it
    /// held GPUs, and the next server stopped its process instead of
    /// adopting it. It ends now as [`super::closed_at_restart`] closes it
    /// (progress up to its signal or now, kept by its checkpoints), and its
    /// workload is requeued, or cancelled if a cancel was asked. A stale
    /// report (another attempt, GPUs no longer held) is ignored.
    pub(in crate::engine) fn lost(&mut self, w: WorkloadId, attempt: u32, now: Time) {
        let Some(open) = self.open_attempt(w).filter(|o| o.attempt == attempt) else { return };
        let closed = super::closed_at_restart(&open, now);
        let (alloc, started, o) = self.release_requeue(w, now, closed.reason.clone());
        let nodes: Vec<NodeId> = alloc.nodes().collect();
        let ended = Ended::new(alloc, started, closed.outcome, o, None, now, self.state.spec(w).gpus);
        debug_assert_eq!(ended.kept_s, closed.kept_s, "the engine keeps what closed_at_restart says");
        if closed.phase == Phase::Cancelled {
            self.ended_record(now, w, attempt, Change::Cancel, closed.reason.clone(), ended);
            self.end_pending(w, now, Phase::Cancelled, closed.reason);
        } else {
            self.ended_record(now, w, attempt, Change::Stop, closed.reason, ended);
        }
        self.after_release(&nodes);
    }

    /// A failure of the workload itself: retried while retries are left.
    fn crashed(&mut self, w: WorkloadId, now: Time, exit_code: Option<i32>, how: &str) {
        let attempt = self.state.run(w).attempts;
        let x = &mut self.extra[w.0 as usize];
        x.failures += 1;
        let (failures, retries) = (x.failures, x.retries);
        let retry = failures <= retries;
        let detail = if retry {
            format!("{how}; retry {failures} of {retries}")
        } else {
            format!("{how}; failed ({retries} retries)")
        };
        let (alloc, started, o) = self.release_requeue(w, now, Reason::new(Rule::Requeue, detail.clone()));
        let nodes: Vec<NodeId> = alloc.nodes().collect();
        let ended = Ended::new(alloc, started, Outcome::Failed, o, exit_code, now, self.state.spec(w).gpus);
        if retry {
            self.ended_record(now, w, attempt, Change::Retry, Reason::new(Rule::Requeue, detail), ended);
        } else {
            let reason = Reason::new(Rule::Completed, detail);
            self.ended_record(now, w, attempt, Change::Failed, reason.clone(), ended);
            self.end_pending(w, now, Phase::Failed, reason);
        }
        self.after_release(&nodes);
    }

    /// MNT-3: could not start for a reason outside the workload: requeued
    /// without spending a retry (a signalled one stops as it would have);
    /// the failure counts against the node named, else all its nodes.
    fn launch_failed(&mut self, w: WorkloadId, now: Time, message: &str, node: Option<NodeId>) {
        let nodes: Vec<NodeId> = self.state.run(w).alloc.as_ref().map(|a| a.nodes().collect()).unwrap_or_default();
        if self.state.run(w).phase == Phase::Stopping {
            self.stopped(w, now, None);
        } else {
            let attempt = self.state.run(w).attempts;
            let reason = Reason::new(
                Rule::LaunchFailure,
                format!("could not start: {message}; requeued without spending a retry"),
            );
            let (alloc, started, o) = self.release_requeue(w, now, reason.clone());
            let ended = Ended::new(alloc, started, Outcome::LaunchFailed, o, None, now, self.state.spec(w).gpus);
            self.ended_record(now, w, attempt, Change::LaunchFailed, reason, ended);
            self.after_release(&nodes);
        }
        let blamed = match node {
            Some(n) => vec![n],
            None => nodes,
        };
        for n in blamed {
            let count = self.launch_failures.entry(n).or_insert(0);
            *count += 1;
            let count = *count;
            if count < LAUNCH_FAILURES_TO_DRAIN || self.state.health[n.0 as usize] != Health::Up {
                continue;
            }
            self.launch_failures.remove(&n);
            let name = &self.state.cluster.node(n).name;
            let cause = Reason::new(
                Rule::LaunchFailure,
                format!("{count} launches in a row failed on {name} (last: {message})"),
            );
            self.effects.push(Effect::NodeAction { node: n, kind: NodeEventKind::Drain, cause });
            self.node_event(&NodeEvent { t: now, node: n, kind: NodeEventKind::Drain });
        }
    }

    /// MNT-4: the workload's own setup is missing where it was placed (its
    /// working directory on the node): it ends as failed now, without
    /// spending a retry (another attempt would fail alike) and without
    /// counting against the node (MNT-3's count is left as it is).
    fn setup_missing(&mut self, w: WorkloadId, now: Time, message: &str) {
        let attempt = self.state.run(w).attempts;
        let reason = Reason::new(Rule::LaunchSetup, format!("could not start: {message}; not retried"));
        let (alloc, started, o) = self.release_requeue(w, now, reason.clone());
        let nodes: Vec<NodeId> = alloc.nodes().collect();
        let ended = Ended::new(alloc, started, Outcome::LaunchFailed, o, None, now, self.state.spec(w).gpus);
        self.ended_record(now, w, attempt, Change::Failed, reason.clone(), ended);
        self.end_pending(w, now, Phase::Failed, reason);
        self.after_release(&nodes);
    }

    /// GPUs were released on `nodes`: drains of nodes now empty are done.
    fn after_release(&mut self, nodes: &[NodeId]) {
        self.dirty = true;
        for &n in nodes {
            if self.state.health[n.0 as usize] == Health::Draining && self.node_idle(n) {
                self.set_health(n, Health::Drained);
            }
        }
    }

    fn node_idle(&self, n: NodeId) -> bool {
        let i = n.0 as usize;
        self.state.free.free[i] == full_mask(self.state.cluster.nodes[i].gpus)
    }

    /// A node event (MNT-1 drain, MNT-2 failure, undrain, repair), from an
    /// events file, an operator or an executor; `outage` and `return`
    /// (FLEET-3, FLEET-4) as [`Engine::cluster_down`] and
    /// [`Engine::cluster_up`] apply them to one node, as recovery replays
    /// them.
    pub(in crate::engine) fn node_event(&mut self, e: &NodeEvent) {
        let n = e.node;
        let health = self.state.health[n.0 as usize];
        self.dirty = true;
        match e.kind {
            NodeEventKind::Fail => {
                // An operator's failure outlasts the cluster's outage.
                self.state.by_outage.remove(&n);
                let reason = Reason::new(Rule::Failure, format!("node {} failed", self.state.cluster.node(n).name));
                self.fail_node(n, e.t, reason);
            }
            NodeEventKind::Outage => {
                let cluster = self.state.cluster.cluster_name(self.state.cluster.cluster_of(n)).to_string();
                self.outage_node(n, e.t, &format!("cluster {cluster} is out of service"));
            }
            NodeEventKind::Return => {
                if self.state.by_outage.remove(&n) && health == Health::Down {
                    self.set_health(n, Health::Up);
                }
            }
            NodeEventKind::Drain => {
                if health == Health::Down {
                    return; // a failed node is already out of service
                }
                self.set_health(n, Health::Draining);
                let grace = self.state.contract.grace;
                let name = self.state.cluster.node(n).name.clone();
                for w in self.state.workloads_on(n) {
                    if self.state.run(w).phase == Phase::Running {
                        let reason = Reason::new(Rule::Drain, format!("node {name} drained for maintenance"));
                        self.preempt(w, e.t, grace, reason, None);
                    }
                }
                if self.node_idle(n) {
                    self.set_health(n, Health::Drained);
                }
            }
            NodeEventKind::Repair | NodeEventKind::Undrain => {
                if e.kind == NodeEventKind::Undrain && health == Health::Down {
                    return; // undrain does not repair a failed node
                }
                self.state.by_outage.remove(&n);
                self.set_health(n, Health::Up);
            }
        }
    }

    /// MNT-2: node `n` is down; its workloads stop at once, for `reason`.
    fn fail_node(&mut self, n: NodeId, t: Time, reason: Reason) {
        self.set_health(n, Health::Down);
        for w in self.state.workloads_on(n) {
            let attempt = self.state.run(w).attempts;
            if self.state.run(w).phase == Phase::Running {
                // Signalled without grace, so that the store knows it is
                // being stopped, and killed at once.
                self.state.signal(w, t, 0, reason.clone());
                self.record(t, w, Change::Abort, reason.clone());
            } else {
                self.state.runs[w.0 as usize].last_reason = Some(reason.clone());
            }
            self.effects.push(Effect::Kill { workload: w, attempt });
        }
    }

    /// FLEET-3: node `n` fails because its cluster is out of service
    /// (`why`), unless something else took it out of service before (a
    /// drained or failed node stays as it was, and FLEET-4 leaves it so).
    /// Returns whether it was taken out.
    fn outage_node(&mut self, n: NodeId, t: Time, why: &str) -> bool {
        if !self.state.health[n.0 as usize].in_service() {
            return false;
        }
        self.dirty = true;
        self.state.by_outage.insert(n);
        let name = &self.state.cluster.node(n).name;
        let reason = Reason::new(Rule::FleetOutage, format!("{why}; node {name} failed (MNT-2)"));
        self.fail_node(n, t, reason);
        true
    }

    /// FLEET-3: cluster `c` cannot be reached (`why`): every node of it in
    /// service fails (MNT-2) and is remembered as the outage's; its
    /// running work is aborted and requeued as on any failed node (CON-3).
    /// Each node taken out is left as an [`Effect::NodeAction`] of kind
    /// `outage` for the interpreter to record, before its workloads'
    /// changes. Returns how many nodes it took out.
    pub(in crate::engine) fn cluster_down(&mut self, c: ClusterId, why: &str, now: Time) -> usize {
        let cluster = self.state.cluster.cluster_name(c).to_string();
        let why = format!("cluster {cluster} is out of service: {why}");
        let nodes: Vec<NodeId> = (0..self.state.cluster.nodes.len() as u32)
            .map(NodeId)
            .filter(|&n| self.state.cluster.cluster_of(n) == c && self.state.health[n.0 as usize].in_service())
            .collect();
        for &n in &nodes {
            let cause = Reason::new(Rule::FleetOutage, why.clone());
            self.effects.push(Effect::NodeAction { node: n, kind: NodeEventKind::Outage, cause });
            self.outage_node(n, now, &why);
        }
        nodes.len()
    }

    /// FLEET-4: cluster `c` answers again and was reconciled: the nodes
    /// its outage took out of service, and only those, return (each left
    /// as an [`Effect::NodeAction`] of kind `return`). Returns how many.
    pub(in crate::engine) fn cluster_up(&mut self, c: ClusterId, now: Time) -> usize {
        let cluster = self.state.cluster.cluster_name(c).to_string();
        let nodes: Vec<NodeId> =
            self.state.by_outage.iter().copied().filter(|&n| self.state.cluster.cluster_of(n) == c).collect();
        for &n in &nodes {
            let cause = Reason::new(Rule::FleetReturn, format!("cluster {cluster} answers again and was reconciled"));
            self.effects.push(Effect::NodeAction { node: n, kind: NodeEventKind::Return, cause });
            self.node_event(&NodeEvent { t: now, node: n, kind: NodeEventKind::Return });
        }
        nodes.len()
    }

    /// The clusters with nodes an outage took out of service (FLEET-3),
    /// as recovery leaves them.
    pub fn clusters_out(&self) -> BTreeSet<ClusterId> {
        self.state.by_outage.iter().map(|&n| self.state.cluster.cluster_of(n)).collect()
    }

    /// MNT-5: a node named `name` appears in `pool` (a Kubernetes Node
    /// joining, an events file's `add`): it joins the pool in service with
    /// all its GPUs free, and the next pass may place work on it like on
    /// any laid-out node of the pool. It is appended, so it gets
    /// `NodeId(nodes.len())` and no existing id, allocation or workload
    /// changes; [`Effect::Health`] `Up` tells the interpreters that
    /// in-service capacity grew. A name some node has already is refused
    /// (nothing changes). Workloads rejected at submission because they
    /// fit no pool stay rejected (a rejection is final); later
    /// submissions are admitted against the grown pool.
    pub(in crate::engine) fn add_node(
        &mut self,
        pool: PoolId,
        name: impl Into<String>,
    ) -> Result<NodeId, AddNodeError> {
        let n = self.state.add_node(pool, name)?;
        self.dirty = true;
        self.shape += 1;
        self.effects.push(Effect::Health { node: n, health: Health::Up });
        Ok(n)
    }

    /// Cancels a workload: a pending one ends now; one holding GPUs is
    /// signalled (CON-2) and ends when it stops. `detail` says who asked.
    pub(in crate::engine) fn cancel(&mut self, w: WorkloadId, now: Time, detail: &str) -> Cancelled {
        self.cancel_under(w, now, Rule::Grace, detail)
    }

    /// ACC-3: the accounts `roots` were closed with stop. Every workload of
    /// their subtrees that has not ended (queued, parked, running or
    /// stopping) is cancelled, a running one after grace (CON-2). Returns
    /// each workload this cancelled and how; one that ends on the way (a
    /// dependent of another, DEP-2) is not among them.
    pub(in crate::engine) fn stop_accounts(
        &mut self,
        roots: &[crate::AccountId],
        by: &str,
        now: Time,
    ) -> Vec<(WorkloadId, Cancelled)> {
        let st = &self.state;
        let within = |w: WorkloadId| roots.iter().any(|&r| st.accounts.is_within(st.spec(w).account, r));
        let queued = st.pending.iter().map(|&(_, w)| w);
        let ws: BTreeSet<WorkloadId> =
            queued.chain(st.parked.iter().copied()).chain(st.running.iter().copied()).filter(|&w| within(w)).collect();
        let detail = format!("account closed with stop by {by}");
        let mut out = Vec::with_capacity(ws.len());
        for w in ws {
            match self.cancel_under(w, now, Rule::AccountStop, &detail) {
                Cancelled::AlreadyEnded => {}
                c => out.push((w, c)),
            }
        }
        out
    }

    /// A cancel under `rule`, with `detail` as its reason.
    fn cancel_under(&mut self, w: WorkloadId, now: Time, rule: Rule, detail: &str) -> Cancelled {
        match self.state.run(w).phase {
            Phase::Pending => {
                let reason = Reason::new(rule, detail.to_string());
                self.record(now, w, Change::Cancel, reason.clone());
                self.end_pending(w, now, Phase::Cancelled, reason);
                self.dirty = true;
                Cancelled::Ended
            }
            Phase::Running => {
                self.extra[w.0 as usize].cancel = true;
                let grace = self.state.contract.grace;
                self.preempt(w, now, grace, Reason::new(rule, format!("{detail}; stopping after grace")), None);
                Cancelled::Stopping
            }
            Phase::Stopping => {
                self.extra[w.0 as usize].cancel = true;
                Cancelled::Stopping
            }
            _ => Cancelled::AlreadyEnded,
        }
    }

    /// Replaces the account tree (a budget, share or impact changed; an
    /// account was created, renamed or closed). The tree must keep the ids
    /// of the accounts of the one it replaces (ACC-1: an
    /// [`crate::AccountBook`] edit does); new accounts start with nothing
    /// used.
    pub(in crate::engine) fn set_accounts(&mut self, tree: crate::AccountTree) {
        debug_assert!(tree.len() >= self.state.accounts.len(), "ACC-1: accounts are never removed");
        self.state.ledger.grow(tree.len());
        self.state.accounts = tree;
        self.dirty = true;
        self.shape += 1;
    }

    /// CFG-1: the contract replaced from `now` (a config reload). The
    /// ledger's decayed usage is brought to `now` under the old half-lives
    /// first; what was admitted keeps what admission gave it (its time
    /// limit, its class); slices, grace, lanes and weights act from the
    /// next pass. The budget periods cannot change live
    /// ([`crate::Contract::restart_only`]): the old ones are kept.
    pub(in crate::engine) fn set_contract(&mut self, contract: crate::Contract, now: Time) {
        debug_assert!(self.state.contract.restart_only(&contract).is_empty(), "CFG-1: periods change at a restart");
        let contract = crate::Contract {
            budget_period: self.state.contract.budget_period,
            budget_calendar: self.state.contract.budget_calendar,
            ..contract
        };
        self.state.ledger.retune(
            now,
            contract.usage_half_life,
            contract.slurm.decay_half_life,
            contract.budget_carry_over,
        );
        self.state.contract = contract;
        self.dirty = true;
        self.shape += 1;
    }

    /// Plans the next time-driven pass: the policy's next wake-up
    /// (`Policy::next_wakeup`: a slice ends, a budget period rolls over) and,
    /// for periodic policies, every `scheduling_interval` while work waits.
    /// `may_change`: inputs may still come (a live server: always), or a
    /// process may still end; with none and no GPU held, no time-driven
    /// pass could start anything.
    pub(in crate::engine) fn plan_wake(&mut self, policy: &dyn Policy, t: Time, may_change: bool) {
        let stuck = self.state.running.is_empty() && !may_change && self.deadlines.is_empty();
        if self.state.pending.is_empty() || stuck {
            self.wake = None;
            return;
        }
        let mut next = policy.next_wakeup(&self.state, t).filter(|w| *w > t);
        if policy.periodic() {
            let p = t + self.state.contract.scheduling_interval.max(1);
            next = Some(next.map_or(p, |n| n.min(p)));
        }
        // An earlier wake-up already planned is kept while in the future.
        self.wake = match (self.wake.filter(|w| *w > t), next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// ACC-2: a closed account, or one below a closed account, takes no new
/// work (whatever the policy).
fn admit_account(state: &State, spec: &WorkloadSpec) -> Result<(), Reason> {
    let tree = &state.accounts;
    let closed = tree.ancestry(spec.account).map(|a| tree.account(a)).find(|a| a.own_closed);
    match closed {
        None => Ok(()),
        Some(c) if c.path == tree.account(spec.account).path => {
            Err(Reason::new(Rule::AccountClosed, format!("account {} is closed", c.path)))
        }
        Some(c) => Err(Reason::new(
            Rule::AccountClosed,
            format!("account {} is closed: {} is closed", tree.account(spec.account).path, c.path),
        )),
    }
}
