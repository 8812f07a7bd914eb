//! The discrete-event simulator: the engine's interpreter in virtual time.
//!
//! Every state change is the engine's ([`allot_core::Engine`]); the
//! simulator supplies what a live fleet would: a launched attempt's process
//! ends when its work is done, a killed one at once, and time advances to
//! the next thing due. Integer virtual time. At one instant the simulator processes, in this
//! order: completions (work done, grace ended), nodes added (MNT-5), node
//! events, account changes, arrivals, then
//! one scheduling pass; decisions are applied at once. A pass runs when
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
use std::collections::BinaryHeap;

use allot_core::engine::{Change, Ended, Outcome};
use allot_core::{
    Effect, Engine, Exit, NodeAdded, NodeEvent, NodeEvents, Policy, Reason, State, Time, Transition, WorkloadId,
    WorkloadSpec,
};

use crate::record::{Attempt, AttemptEnd, CapacityStep, ClusterCapacity, LogEvent, SimOutput};

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
    opts: SimOptions,
    /// When launched attempts complete their work: (time, workload, attempt).
    heap: BinaryHeap<Reverse<(Time, WorkloadId, u32)>>,
    out: SimOutput,
    /// Trace id → workload, for requests (kept only when there are some).
    ids: std::collections::HashMap<String, WorkloadId>,
    track: bool,
    /// Budget threshold events already logged (with `keep_log`).
    alerts: allot_core::alerts::Alerts,
    /// Told every instant the run reaches ([`simulate_observed`]).
    observe: &'p mut dyn FnMut(Time),
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
    let mut sim = Sim {
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
        engine: Engine::new(state),
        policy,
        opts: opts.clone(),
        heap: BinaryHeap::new(),
        ids: std::collections::HashMap::new(),
        track: !requests.is_empty(),
        alerts: Default::default(),
        observe,
    };
    sim.record_capacity(0);
    sim.run(workloads, (events, nodes_added), requests, trees);
    let Sim { engine, out, .. } = sim;
    (engine.into_state(), out)
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
        loop {
            self.drop_timed_out();
            let next = [
                self.heap.peek().map(|Reverse((t, _, _))| *t),
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
            if self.opts.until.is_some_and(|u| t > u) {
                break;
            }
            now = t;
            (self.observe)(t);
            self.budget_events(t);
            self.engine.clear_dirty();
            // Work completed first, then grace over, as they fall due.
            while let Some(&Reverse((tt, w, attempt))) = self.heap.peek() {
                if tt != t {
                    break;
                }
                self.heap.pop();
                self.out.events += 1;
                self.engine.exited(w, attempt, Exit::Completed, t);
                self.apply(t);
            }
            self.out.events += self.engine.expire(t) as u64;
            self.apply(t);
            while added.peek().is_some_and(|a| a.t == t) {
                let a = added.next().expect("peeked");
                self.out.events += 1;
                self.add_node(&a);
                self.apply(t);
            }
            while node_events.peek().is_some_and(|e| e.t == t) {
                let e = node_events.next().expect("peeked");
                self.out.events += 1;
                self.count_failure(&e);
                self.engine.node_event(&e);
                self.apply(t);
            }
            while trees.peek().is_some_and(|(tt, _)| *tt == t) {
                let (_, tree) = trees.next().expect("peeked");
                self.out.events += 1;
                self.engine.set_accounts(tree);
            }
            while arrivals.peek().is_some_and(|w| w.submit == t) {
                let spec = arrivals.next().expect("peeked");
                self.out.events += 1;
                let id = self.track.then(|| spec.id.clone());
                let w = self.engine.arrive(&*self.policy, spec, RETRIES, t);
                if let Some(id) = id {
                    self.ids.insert(id, w);
                }
                self.apply(t);
            }
            while requests.peek().is_some_and(|r| r.t == t) {
                let r = requests.next().expect("peeked");
                self.out.events += 1;
                self.request(&r);
            }
            let woke = self.engine.take_wake(t);
            if (self.engine.dirty() || woke) && !self.engine.state().pending.is_empty() {
                self.out.passes += 1;
                self.engine.pass(self.policy, t);
                self.apply(t);
            }
            if self.opts.check_invariants
                && let Err(e) = self.engine.state().sanity_check(t)
            {
                panic!("invariant broken at t={t}: {e}");
            }
            let inputs = arrivals.peek().is_some()
                || node_events.peek().is_some()
                || added.peek().is_some()
                || requests.peek().is_some();
            self.engine.plan_wake(&*self.policy, t, inputs || !self.heap.is_empty());
        }
        self.finish_run(now);
    }

    /// MNT-5: the node joins its pool in service; its GPUs count in the
    /// fleet's (and its cluster's) total from now on.
    fn add_node(&mut self, a: &NodeAdded) {
        let got = self.engine.add_node(a.pool, a.name.as_str());
        assert_eq!(got, Ok(a.node), "node {} added at t={} must get the id its events were resolved to", a.name, a.t);
        let cluster = &self.engine.state().cluster;
        let gpus = u64::from(cluster.node(a.node).gpus);
        self.out.added_gpus.push((a.t, gpus));
        if let Some(c) = self.out.clusters.get_mut(cluster.cluster_of(a.node).0 as usize) {
            c.added_gpus.push((a.t, gpus));
        }
    }

    /// MNT-2: a `fail` event on a node that is not already down is a node
    /// failure (one on a failed node changes nothing); so is an `outage`
    /// one on a node in service (FLEET-3).
    fn count_failure(&mut self, e: &NodeEvent) {
        let health = self.engine.state().health[e.node.0 as usize];
        let fails = match e.kind {
            allot_core::NodeEventKind::Fail => health != allot_core::Health::Down,
            allot_core::NodeEventKind::Outage => health.in_service(),
            _ => false,
        };
        if fails {
            self.out.node_failures += 1;
        }
    }

    /// CON-6, CON-9: the completion planned for an attempt that ended at
    /// its time limit or for idle GPUs will never come; it must not keep
    /// the replay going.
    fn drop_timed_out(&mut self) {
        while let Some(&Reverse((_, w, attempt))) = self.heap.peek() {
            let run = self.engine.state().run(w);
            let ended = self.engine.timed_out(w) || self.engine.reclaimed(w);
            if !(ended && run.attempts == attempt && run.phase.is_terminal()) {
                break;
            }
            self.heap.pop();
        }
    }

    fn request(&mut self, r: &Request) {
        let Some(&w) = self.ids.get(&r.workload) else { return };
        match &r.kind {
            RequestKind::Cancel { by } => {
                self.engine.cancel(w, r.t, &format!("cancelled by {by}"));
            }
            RequestKind::Exit { code } => {
                let attempt = self.engine.state().run(w).attempts;
                self.engine.exited(w, attempt, Exit::Status { code: Some(*code), signal: None }, r.t);
            }
        }
        self.apply(r.t);
    }

    /// Carries out the engine's effects: the virtual processes and the
    /// record.
    fn apply(&mut self, t: Time) {
        loop {
            let effects = self.engine.take_effects();
            if effects.is_empty() {
                self.engine.recycle(effects);
                return;
            }
            let mut capacity = false;
            for e in &effects {
                match e {
                    Effect::Launch { workload: w, attempt, .. } => {
                        let finish = self.engine.state().finish_time(*w).expect("started");
                        self.heap.push(Reverse((finish, *w, *attempt)));
                        // A replay's workload uses its GPUs at its trace
                        // `util` throughout (CON-9 reads it as telemetry).
                        let util = self.engine.state().spec(*w).util;
                        self.engine.gpu_util(*w, *attempt, util, t);
                    }
                    // The virtual process runs on until its work is done or
                    // it is killed; one that checkpoints on the signal
                    // (CON-8) reports it at once, and stays for the grace
                    // (with none, it has no time to save).
                    Effect::Signal { workload: w, attempt, stop_at } => {
                        if *stop_at > t && self.engine.state().spec(*w).checkpoint_on_signal {
                            let _ = self.engine.checkpointed(*w, *attempt, t, t);
                        }
                    }
                    Effect::Idle { .. } => {}
                    Effect::Kill { workload, attempt } => self.engine.exited(*workload, *attempt, Exit::KILLED, t),
                    Effect::Record(tr) => self.record(tr),
                    Effect::Health { .. } => capacity = true,
                    Effect::NodeAction { .. } => {}
                }
            }
            if capacity {
                self.record_capacity(t);
            }
            self.engine.recycle(effects);
        }
    }

    fn record(&mut self, tr: &Transition) {
        if let Some(ended) = &tr.ended {
            let a = self.attempt_record(tr.workload, ended, tr.t);
            self.out.attempts.push(a);
        }
        if self.opts.keep_log && tr.change != Change::Abort {
            self.log(tr);
        }
    }

    /// Logs the budget thresholds reached by `t`, before anything changes
    /// at `t` (so each event's time is exact).
    fn budget_events(&mut self, t: Time) {
        if !self.opts.keep_log {
            return;
        }
        let st = self.engine.state();
        for e in self.alerts.check(&st.ledger, &st.accounts, &st.contract.budget_alerts, t) {
            self.out.log.push(LogEvent {
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
        let end = self.opts.until.unwrap_or(now);
        self.budget_events(end);
        self.out.horizon_end = end;
        let state = self.engine.state();
        // Attempts still holding GPUs at the horizon are cut there; their
        // progress so far counts as useful (it has not been lost).
        for &w in &state.running {
            let (spec, run) = (state.spec(w), state.run(w));
            let progress = run.progress(end);
            let (gpu, weight, cluster) = placed(state, run.alloc.as_ref().expect("holding"));
            let a = Attempt {
                workload: w,
                account: spec.account,
                class: spec.class,
                gpus: spec.gpus,
                cluster,
                gpu,
                weight,
                util: spec.util,
                start: run.started.expect("holding"),
                end,
                useful_gpu_s: progress * u64::from(spec.gpus),
                outcome: AttemptEnd::Cut,
            };
            self.out.attempts.push(a);
        }
        // Pending workloads keep the explanation of why they wait: the
        // policy's, or the condition they wait on (HOLD-1, DEP-1, ARR-1).
        self.engine.keep_reasons(&*self.policy, end);
    }

    fn attempt_record(&self, w: WorkloadId, ended: &Ended, t: Time) -> Attempt {
        let state = self.engine.state();
        let spec = state.spec(w);
        let (gpu, weight, cluster) = placed(state, &ended.alloc);
        Attempt {
            workload: w,
            account: spec.account,
            class: spec.class,
            gpus: spec.gpus,
            cluster,
            gpu,
            weight,
            util: spec.util,
            start: ended.started,
            end: t,
            useful_gpu_s: ended.stop.useful_gpu_s,
            outcome: match ended.outcome {
                Outcome::Finished => AttemptEnd::Finished,
                // A simulated process is never lost with its server; were
                // one, it was interrupted from outside as a preemption is.
                Outcome::Preempted | Outcome::Lost => AttemptEnd::Preempted,
                // CON-9: an idle reclaim ends the workload as a cancel
                // does; the engine tells which it was.
                Outcome::Cancelled if self.engine.reclaimed(w) => AttemptEnd::IdleReclaimed,
                Outcome::Cancelled => AttemptEnd::Cancelled,
                Outcome::NodeFailed | Outcome::Failed | Outcome::LaunchFailed => AttemptEnd::Failed,
            },
        }
    }

    fn log(&mut self, tr: &Transition) {
        let state = self.engine.state();
        let alloc = match &tr.ended {
            Some(e) => Some(&e.alloc),
            None => state.run(tr.workload).alloc.as_ref(),
        };
        let nodes = alloc.map(|a| a.nodes().map(|n| state.cluster.node(n).name.clone()).collect()).unwrap_or_default();
        let spec = state.spec(tr.workload);
        let e = LogEvent {
            t: tr.t,
            event: tr.change.as_str(),
            workload: spec.id.clone(),
            nodes,
            gpus: spec.gpus,
            reason: Reason::to_string(&tr.reason),
            by: tr.by.map(|b| state.spec(b).id.clone()),
        };
        self.out.log.push(e);
    }

    fn record_capacity(&mut self, t: Time) {
        let state = self.engine.state();
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
