//! The discrete-event simulator: the engine's interpreter in virtual time.
//!
//! Every state change is the engine's ([`allot_core::Engine`]); the
//! simulator supplies what a live fleet would: a launched attempt's process
//! ends when its work is done, a killed one at once, and time advances to
//! the next thing due. Integer virtual time. The simulator gathers what
//! happens at one instant (completions, node events, account changes,
//! arrivals, requests) and hands it to one closing step of the engine
//! (`Engine::step`), which takes it in its own order, the live server's;
//! its `Carrier` carries out the effects as they are left, and a killed
//! process ends at once (L-2). A pass runs when
//! something happened at the instant, when the policy asked to be woken
//! (`Policy::next_wakeup`: a slice ends, a budget period rolls over), and,
//! for policies whose ranking drifts with time (`Policy::periodic`), every
//! `scheduling_interval` while work waits — the cadence of the live server.
//!
//! Arrivals and node events are pre-sorted lists walked by a cursor;
//! completions live in a binary heap keyed by (time, workload, attempt) and
//! grace deadlines in the engine, so a replay is O(events · log events)
//! plus the policy's passes. Identical
//! inputs give identical outputs: every tie is broken by sequence numbers.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use allot_core::engine::{Answer, Carry, Change, Close, Ended, Input, Outcome};
use allot_core::{
    Effect, Engine, Exit, NodeAdded, NodeEvent, NodeEvents, Policy, State, Time, Transition, WorkloadId, WorkloadSpec,
};

use crate::record::{Attempt, AttemptEnd, CapacityStep, ClusterCapacity, LogEvent, Signalled, SimOutput};

/// Options of a run.
#[derive(Clone, Debug, Default)]
pub struct SimOptions {
    /// Stop at this time (measures cover `[0, until]`); default: run until
    /// nothing is left to happen.
    pub until: Option<Time>,
    /// Check every state invariant after each instant (tests; slow).
    pub check_invariants: bool,
    /// Keep the per-event log (needed for `--log`; costs memory).
    pub keep_log: bool,
    /// Carry the run on, from the first instant after this one, from a
    /// snapshot of itself: the engine and the policy's memory encoded and
    /// decoded as a live server stores them (tests: a snapshot changes
    /// nothing).
    pub snapshot_after: Option<Time>,
}

/// An input beyond arrivals and node events, as a live server receives
/// them: the simulator replays them to show that both run the same engine
/// (traces carry neither).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub t: Time,
    /// The workload's trace id.
    pub workload: String,
    pub kind: RequestKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// Cancelled (by `by`).
    Cancel { by: String },
    /// Its process, if running, exits with `code` (a failure unless 0).
    Exit { code: i32 },
}

/// Retries of every workload of a replay (traces carry none).
const RETRIES: u32 = 0;

struct Sim<'p> {
    engine: Engine,
    policy: &'p mut dyn Policy,
    /// The virtual processes and the record: what carries out the
    /// engine's effects.
    c: Carrier,
    /// Trace id → workload, for requests (kept only when there are some).
    ids: std::collections::HashMap<String, WorkloadId>,
    track: bool,
    /// Budget threshold events already logged (with `keep_log`).
    alerts: allot_core::alerts::Alerts,
    /// Told every instant the run reaches ([`simulate_observed`]).
    observe: &'p mut dyn FnMut(Time),
}

/// The simulator's side of a step ([`Carry`]): a launched attempt's
/// process ends when its work is done (the heap), a killed one at once
/// (L-2), one that checkpoints on the signal reports it (CON-8); and the
/// record.
struct Carrier {
    opts: SimOptions,
    /// When launched attempts complete their work: (time, workload, attempt).
    heap: BinaryHeap<Reverse<(Time, WorkloadId, u32)>>,
    out: SimOutput,
    /// Each node's health as the effects told it: a failure is a node
    /// going down that was not down (MNT-2, FLEET-3).
    health: Vec<allot_core::Health>,
    /// Inputs still to come after the instant (L-6).
    more: bool,
    /// The attempts signalled and not yet ended: why and when (for the
    /// record of a preempted attempt).
    signalled: BTreeMap<(WorkloadId, u32), Signalled>,
}

/// Replays `workloads` (any order; sorted stably by submit time) and node
/// `events` on `state` (which must hold no workloads yet) under `policy`.
/// `events` are health changes (a `Vec<NodeEvent>`) or [`NodeEvents`],
/// which may add nodes (MNT-5): each [`NodeAdded`] must carry the id the
/// engine gives it (nodes are appended in time order, as
/// `allot_trace::events` resolves them). Returns the final state and the
/// record of what happened.
pub fn simulate(
    state: State,
    workloads: Vec<WorkloadSpec>,
    events: impl Into<NodeEvents>,
    policy: &mut dyn Policy,
    opts: &SimOptions,
) -> (State, SimOutput) {
    simulate_requests(state, workloads, events, Vec::new(), policy, opts)
}

/// [`simulate`], with cancels and exits as a live server would receive
/// them (sorted stably by time; a request for a workload not yet
/// submitted is ignored).
pub fn simulate_requests(
    state: State,
    workloads: Vec<WorkloadSpec>,
    events: impl Into<NodeEvents>,
    requests: Vec<Request>,
    policy: &mut dyn Policy,
    opts: &SimOptions,
) -> (State, SimOutput) {
    simulate_with_accounts(state, workloads, events, requests, Vec::new(), policy, opts)
}

/// [`simulate_requests`], with the account tree replaced at given times
/// (`trees`: the tree in force from each time on, e.g. budgets changed
/// through the API, `allot_trace::changes`), as the server's account
/// changes replace it (`Engine::set_accounts`). At one instant the tree
/// changes after node events and before arrivals.
pub fn simulate_with_accounts(
    state: State,
    workloads: Vec<WorkloadSpec>,
    events: impl Into<NodeEvents>,
    requests: Vec<Request>,
    trees: Vec<(Time, allot_core::AccountTree)>,
    policy: &mut dyn Policy,
    opts: &SimOptions,
) -> (State, SimOutput) {
    simulate_observed(state, workloads, events, requests, trees, policy, opts, &mut |_| {})
}

/// [`simulate_with_accounts`], calling `observe(t)` with every instant `t`
/// the run reaches, in increasing order, before anything happens at it (a
/// progress display; it runs once per instant, so it must be cheap). It
/// sees nothing else and changes nothing.
#[expect(clippy::too_many_arguments, reason = "simulate_with_accounts's inputs and the observer")]
pub fn simulate_observed(
    state: State,
    mut workloads: Vec<WorkloadSpec>,
    events: impl Into<NodeEvents>,
    mut requests: Vec<Request>,
    mut trees: Vec<(Time, allot_core::AccountTree)>,
    policy: &mut dyn Policy,
    opts: &SimOptions,
    observe: &mut dyn FnMut(Time),
) -> (State, SimOutput) {
    assert!(state.specs.is_empty(), "simulate starts from a state without workloads");
    trees.sort_by_key(|(t, _)| *t);
    sort_arrivals(&mut workloads);
    let NodeEvents { changes: mut events, added: mut nodes_added } = events.into();
    events.sort_by_key(|e| e.t);
    nodes_added.sort_by_key(|a| a.t);
    requests.sort_by_key(|r| r.t);
    let total_gpus = state.cluster.total_gpus();
    let fleet = &state.cluster;
    let clusters = if fleet.is_fleet() {
        (0..fleet.clusters.len())
            .map(|c| {
                let id = allot_core::cluster::ClusterId(c as u16);
                let name = fleet.cluster_name(id).to_string();
                ClusterCapacity {
                    name,
                    total_gpus: fleet.cluster_gpus(id),
                    added_gpus: Vec::new(),
                    capacity: Vec::new(),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let health = state.health.clone();
    let mut sim = Sim {
        c: Carrier {
            opts: opts.clone(),
            heap: BinaryHeap::new(),
            health,
            more: true,
            signalled: BTreeMap::new(),
            out: SimOutput {
                policy: policy.name().to_string(),
                horizon_end: 0,
                total_gpus,
                added_gpus: Vec::new(),
                attempts: Vec::new(),
                capacity: Vec::new(),
                clusters,
                log: Vec::new(),
                passes: 0,
                events: 0,
                node_failures: 0,
            },
        },
        engine: Engine::new(state),
        policy,
        ids: std::collections::HashMap::new(),
        track: !requests.is_empty(),
        alerts: Default::default(),
        observe,
    };
    sim.c.record_capacity(&sim.engine, 0);
    sim.run(workloads, (events, nodes_added), requests, trees);
    let Sim { engine, c, .. } = sim;
    (engine.into_state(), c.out)
}

/// Sorts workloads stably by submit time; dependencies (DEP-1) name
/// workloads by their index in the list given, and are renumbered to the
/// sorted order, the [`WorkloadId`]s the engine gives them.
fn sort_arrivals(workloads: &mut Vec<WorkloadSpec>) {
    if workloads.iter().all(|w| w.after.is_empty()) {
        workloads.sort_by_key(|w| w.submit);
        return;
    }
    let mut order: Vec<usize> = (0..workloads.len()).collect();
    order.sort_by_key(|&i| workloads[i].submit);
    let mut new_of = vec![0u32; workloads.len()];
    for (new, &old) in order.iter().enumerate() {
        new_of[old] = new as u32;
    }
    let mut taken: Vec<Option<WorkloadSpec>> = std::mem::take(workloads).into_iter().map(Some).collect();
    *workloads = order.iter().map(|&i| taken[i].take().expect("each once")).collect();
    for w in workloads.iter_mut() {
        for d in &mut w.after {
            if let allot_core::DepTarget::Workload(o) = &mut d.on {
                *o = WorkloadId(new_of[o.0 as usize]);
            }
        }
    }
}

impl Sim<'_> {
    /// The engine and the policy's memory replaced by their encoded copy.
    fn carry_on_from_snapshot(&mut self) {
        let bytes = crate::replay::encode(&self.engine, &*self.policy);
        let snap = crate::replay::decode(&bytes).expect("a snapshot decodes");
        self.engine = snap.engine;
        // As a new server would: a new policy of the same kind, then the
        // snapshot's memory.
        if let Some(fresh) = allot_core::PolicyKind::parse(self.policy.name()).and_then(|k| k.build().memory()) {
            self.policy.remember(fresh);
        }
        if let Some(m) = snap.memory {
            self.policy.remember(m);
        }
    }

    fn run(
        &mut self,
        workloads: Vec<WorkloadSpec>,
        (events, added): (Vec<NodeEvent>, Vec<NodeAdded>),
        requests: Vec<Request>,
        trees: Vec<(Time, allot_core::AccountTree)>,
    ) {
        let mut trees = trees.into_iter().peekable();
        let mut arrivals = workloads.into_iter().peekable();
        let mut node_events = events.into_iter().peekable();
        let mut added = added.into_iter().peekable();
        let mut requests = requests.into_iter().peekable();
        let mut now: Time = 0;
        let mut inputs: Vec<Input> = Vec::new();
        loop {
            self.drop_timed_out();
            let next = [
                self.c.heap.peek().map(|Reverse((t, _, _))| *t),
                self.engine.next_deadline(),
                node_events.peek().map(|e| e.t),
                added.peek().map(|a| a.t),
                trees.peek().map(|(t, _)| *t),
                arrivals.peek().map(|w| w.submit),
                requests.peek().map(|r| r.t),
                self.engine.wake(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(t) = next else { break };
            if self.opts().until.is_some_and(|u| t > u) {
                break;
            }
            if self.opts().snapshot_after.is_some_and(|a| t > a && now <= a) {
                self.carry_on_from_snapshot();
            }
            now = t;
            (self.observe)(t);
            self.budget_events(t);
            // What happens at `t`, in any order: the engine takes it in its
            // own (`Engine::step`).
            inputs.clear();
            while let Some(&Reverse((tt, w, attempt))) = self.c.heap.peek() {
                if tt != t {
                    break;
                }
                self.c.heap.pop();
                inputs.push(Input::Exit { workload: w, attempt, exit: Exit::Completed });
            }
            let time = inputs.len();
            inputs.push(Input::Time);
            let mut nodes_added = Vec::new();
            while added.peek().is_some_and(|a| a.t == t) {
                let a = added.next().expect("peeked");
                inputs.push(Input::AddNode { pool: a.pool, name: a.name.clone() });
                nodes_added.push((inputs.len() - 1, a));
            }
            while node_events.peek().is_some_and(|e| e.t == t) {
                inputs.push(Input::Node(node_events.next().expect("peeked")));
            }
            while trees.peek().is_some_and(|(tt, _)| *tt == t) {
                inputs.push(Input::Accounts(trees.next().expect("peeked").1));
            }
            // Arrivals get the next ids in order: requests at the same
            // instant may name them.
            let first = self.engine.state().specs.len();
            let mut arrived = Vec::new();
            while arrivals.peek().is_some_and(|w| w.submit == t) {
                let spec = arrivals.next().expect("peeked");
                let w = WorkloadId((first + arrived.len()) as u32);
                if self.track {
                    self.ids.insert(spec.id.clone(), w);
                }
                arrived.push((inputs.len(), w));
                inputs.push(Input::Arrive { spec, retries: RETRIES });
            }
            let mut unknown = 0;
            while requests.peek().is_some_and(|r| r.t == t) {
                let r = requests.next().expect("peeked");
                match self.request(&r) {
                    Some(input) => inputs.push(input),
                    None => unknown += 1,
                }
            }
            self.c.more = arrivals.peek().is_some()
                || node_events.peek().is_some()
                || added.peek().is_some()
                || requests.peek().is_some();
            let given = std::mem::take(&mut inputs);
            let step = self.engine.step(&mut *self.policy, t, given, Close::Pass, &mut self.c);
            // Each input is an event (a request for a workload not yet
            // submitted too), and so is each deadline that acted.
            self.c.out.events += (step.answers.len() - 1 + unknown) as u64 + step.answers[time].count() as u64;
            if step.passed {
                self.c.out.passes += 1;
            }
            for (i, a) in nodes_added {
                self.node_added(&a, &step.answers[i]);
            }
            for (i, w) in arrived {
                assert_eq!(step.answers[i].workload(), w, "the engine gives arrivals the next ids in order");
            }
            if self.opts().check_invariants
                && let Err(e) = self.engine.state().sanity_check(t)
            {
                panic!("invariant broken at t={t}: {e}");
            }
        }
        self.finish_run(now);
    }

    fn opts(&self) -> &SimOptions {
        &self.c.opts
    }

    /// MNT-5: the node joins its pool in service; its GPUs count in the
    /// fleet's (and its cluster's) total from now on.
    fn node_added(&mut self, a: &NodeAdded, answer: &Answer) {
        assert_eq!(
            answer,
            &Answer::NodeAdded(Ok(a.node)),
            "node {} added at t={} must get the id its events were resolved to",
            a.name,
            a.t
        );
        let cluster = &self.engine.state().cluster;
        let gpus = u64::from(cluster.node(a.node).gpus);
        self.c.out.added_gpus.push((a.t, gpus));
        if let Some(c) = self.c.out.clusters.get_mut(cluster.cluster_of(a.node).0 as usize) {
            c.added_gpus.push((a.t, gpus));
        }
    }

    /// CON-6, CON-9: the completion planned for an attempt that ended at
    /// its time limit or for idle GPUs will never come; it must not keep
    /// the replay going.
    fn drop_timed_out(&mut self) {
        while let Some(&Reverse((_, w, attempt))) = self.c.heap.peek() {
            let run = self.engine.state().run(w);
            let ended = self.engine.timed_out(w) || self.engine.reclaimed(w);
            if !(ended && run.attempts == attempt && run.phase.is_terminal()) {
                break;
            }
            self.c.heap.pop();
        }
    }

    /// A request as the engine's input; `None` for a workload not (yet)
    /// submitted.
    fn request(&self, r: &Request) -> Option<Input> {
        let &w = self.ids.get(&r.workload)?;
        Some(match &r.kind {
            RequestKind::Cancel { by } => Input::Cancel { workload: w, detail: format!("cancelled by {by}") },
            RequestKind::Exit { code } => {
                // A workload arriving at this instant has no attempt yet:
                // the exit is stale (and exits come before arrivals).
                let run = self.engine.state().runs.get(w.0 as usize)?;
                Input::Exit {
                    workload: w,
                    attempt: run.attempts,
                    exit: Exit::Status { code: Some(*code), signal: None },
                }
            }
        })
    }

    /// Logs the budget thresholds reached by `t`, before anything changes
    /// at `t` (so each event's time is exact).
    fn budget_events(&mut self, t: Time) {
        if !self.opts().keep_log {
            return;
        }
        let st = self.engine.state();
        for e in self.alerts.check(&st.ledger, &st.accounts, &st.contract.budget_alerts, t) {
            self.c.out.log.push(LogEvent {
                t: e.t,
                event: "budget",
                workload: String::new(),
                nodes: Vec::new(),
                gpus: 0,
                reason: allot_core::alerts::describe(&e, &st.accounts),
                by: None,
            });
        }
    }

    fn finish_run(&mut self, now: Time) {
        let end = self.opts().until.unwrap_or(now);
        self.budget_events(end);
        self.c.out.horizon_end = end;
        let state = self.engine.state();
        // Attempts still holding GPUs at the horizon are cut there; their
        // progress so far counts as useful (it has not been lost).
        for &w in &state.running {
            let run = state.run(w);
            let alloc = run.alloc.as_ref().expect("holding");
            let useful = run.progress(end) * u64::from(state.spec(w).gpus);
            let a = attempt(state, w, alloc, (run.started.expect("holding"), end), useful, AttemptEnd::Cut);
            self.c.out.attempts.push(a);
        }
        // Pending workloads keep the explanation of why they wait: the
        // policy's, or the condition they wait on (HOLD-1, DEP-1, ARR-1).
        self.engine.keep_reasons(&*self.policy, end);
    }
}

impl Carry for Carrier {
    /// Carries out the engine's effects: the virtual processes and the
    /// record.
    fn carry(&mut self, engine: &Engine, effects: &[Effect], t: Time, back: &mut Vec<Input>) {
        let mut capacity = false;
        for e in effects {
            match e {
                Effect::Launch { workload: w, attempt } => {
                    let finish = engine.state().finish_time(*w).expect("started");
                    self.heap.push(Reverse((finish, *w, *attempt)));
                    // A replay's workload uses its GPUs at its trace
                    // `util` throughout (CON-9 reads it as telemetry).
                    let util = engine.state().spec(*w).util;
                    back.push(Input::GpuUtil { workload: *w, attempt: *attempt, util });
                }
                // The virtual process runs on until its work is done or
                // it is killed; one that checkpoints on the signal
                // (CON-8) reports it at once, and stays for the grace
                // (with none, it has no time to save).
                Effect::Signal { workload: w, attempt, stop_at } => {
                    if *stop_at > t && engine.state().spec(*w).checkpoint_on_signal {
                        back.push(Input::Checkpoint { workload: *w, attempt: *attempt, at: t });
                    }
                }
                Effect::Idle { .. } => {}
                Effect::Kill { workload, attempt } => {
                    back.push(Input::Exit { workload: *workload, attempt: *attempt, exit: Exit::KILLED });
                }
                Effect::Record(tr) => self.record(engine, tr),
                Effect::Health { node, health } => {
                    capacity = true;
                    let n = node.0 as usize;
                    if n == self.health.len() {
                        self.health.push(*health); // MNT-5: a node added
                    }
                    // MNT-2, FLEET-3: a node that was not down fails.
                    if *health == allot_core::Health::Down && self.health[n] != allot_core::Health::Down {
                        self.out.node_failures += 1;
                    }
                    self.health[n] = *health;
                }
                Effect::NodeAction { .. } => {}
            }
        }
        if capacity {
            self.record_capacity(engine, t);
        }
    }

    fn may_change(&self) -> bool {
        self.more || !self.heap.is_empty()
    }
}

impl Carrier {
    fn record(&mut self, engine: &Engine, tr: &Transition) {
        if tr.change == Change::Preempt {
            let s = Signalled { rule: tr.reason.rule, at: tr.t, by: tr.by };
            self.signalled.insert((tr.workload, tr.attempt), s);
        }
        if let Some(ended) = &tr.ended {
            let mut a = attempt_record(engine, tr.workload, ended, tr.t);
            let signal = self.signalled.remove(&(tr.workload, tr.attempt));
            if a.outcome == AttemptEnd::Preempted {
                a.preempted = signal;
            }
            self.out.attempts.push(a);
        }
        if self.opts.keep_log && tr.change != Change::Abort {
            self.log(engine, tr);
        }
    }
}

/// The record of an attempt that ended.
fn attempt_record(engine: &Engine, w: WorkloadId, ended: &Ended, t: Time) -> Attempt {
    let outcome = match ended.outcome {
        Outcome::Finished => AttemptEnd::Finished,
        // A simulated process is never lost with its server; were
        // one, it was interrupted from outside as a preemption is.
        Outcome::Preempted | Outcome::Lost => AttemptEnd::Preempted,
        // CON-9: an idle reclaim ends the workload as a cancel
        // does; the engine tells which it was.
        Outcome::Cancelled if engine.reclaimed(w) => AttemptEnd::IdleReclaimed,
        Outcome::Cancelled => AttemptEnd::Cancelled,
        Outcome::NodeFailed | Outcome::Failed | Outcome::LaunchFailed => AttemptEnd::Failed,
    };
    attempt(engine.state(), w, &ended.alloc, (ended.started, t), ended.stop.useful_gpu_s, outcome)
}

/// The record of an attempt of `w` on `alloc` over `(start, end)`.
fn attempt(
    state: &State,
    w: WorkloadId,
    alloc: &allot_core::Allocation,
    (start, end): (Time, Time),
    useful_gpu_s: u64,
    outcome: AttemptEnd,
) -> Attempt {
    let spec = state.spec(w);
    let (gpu, weight, cluster) = placed(state, alloc);
    Attempt {
        workload: w,
        account: spec.account,
        class: spec.class,
        gpus: spec.gpus,
        cluster,
        gpu,
        weight,
        util: spec.util,
        start,
        end,
        useful_gpu_s,
        outcome,
        preempted: None,
    }
}

impl Carrier {
    fn log(&mut self, engine: &Engine, tr: &Transition) {
        self.out.log.push(LogEvent::of(engine.state(), tr));
    }

    fn record_capacity(&mut self, engine: &Engine, t: Time) {
        let state = engine.state();
        let cluster = &state.cluster;
        // (GPUs, normalised milli-GPUs) in service: the fleet's, then per
        // cluster of a fleet of several.
        let mut sums = vec![(0u64, 0u64); 1 + self.out.clusters.len()];
        for (i, (node, h)) in cluster.nodes.iter().zip(&state.health).enumerate() {
            if h.in_service() {
                let gpus = u64::from(node.gpus);
                let milli = (gpus as f64 * cluster.weight(node.gpu) * 1000.0).round() as u64;
                sums[0].0 += gpus;
                sums[0].1 += milli;
                if !self.out.clusters.is_empty() {
                    let c = 1 + cluster.cluster_of(allot_core::NodeId(i as u32)).0 as usize;
                    sums[c].0 += gpus;
                    sums[c].1 += milli;
                }
            }
        }
        let step = |(gpus, ngpus_milli): (u64, u64)| CapacityStep { t, gpus, ngpus_milli };
        push_step(&mut self.out.capacity, step(sums[0]));
        for (c, sum) in self.out.clusters.iter_mut().zip(&sums[1..]) {
            push_step(&mut c.capacity, step(*sum));
        }
    }
}

/// Appends a step to a step function: replaces a step at the same instant,
/// skips one that changes nothing.
fn push_step(steps: &mut Vec<CapacityStep>, step: CapacityStep) {
    match steps.last_mut() {
        Some(last) if last.t == step.t => *last = step,
        Some(last) if last.gpus == step.gpus && last.ngpus_milli == step.ngpus_milli => {}
        _ => steps.push(step),
    }
}

/// Normalisation weight of the GPUs of an allocation (its first node's
/// type) and the cluster it is on (a gang never spans clusters, FLEET-1).
fn placed(
    state: &State,
    alloc: &allot_core::Allocation,
) -> (allot_core::GpuTypeId, f64, allot_core::cluster::ClusterId) {
    alloc.parts.first().map_or((allot_core::GpuTypeId(0), 1.0, allot_core::cluster::ClusterId(0)), |(n, _)| {
        let gpu = state.cluster.node(*n).gpu;
        (gpu, state.cluster.weight(gpu), state.cluster.cluster_of(*n))
    })
}
