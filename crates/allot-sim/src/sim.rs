//! The discrete-event simulator.
//!
//! Integer virtual time. At one instant the simulator processes, in this
//! order: completions (work done, grace ended), node events, arrivals, then
//! one scheduling pass; decisions are applied at once. A pass runs when
//! something happened at the instant, when the policy asked to be woken
//! (`Policy::next_wakeup`: a slice ends, a budget period rolls over), and,
//! for policies whose ranking drifts with time (`Policy::periodic`), every
//! `scheduling_interval` while work waits — the cadence of the live server.
//!
//! Arrivals and node events are pre-sorted lists walked by a cursor;
//! completions live in a binary heap keyed by (time, kind, sequence), so a
//! replay is O(events · log events) plus the policy's passes. Identical
//! inputs give identical outputs: every tie is broken by sequence numbers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use allot_core::{
    Action, Decision, Health, NodeEvent, NodeEventKind, NodeId, Phase, Policy, Reason, Rule, State, Time, WorkloadId,
    WorkloadSpec,
};

use crate::record::{Attempt, AttemptEnd, CapacityStep, LogEvent, SimOutput};

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

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timed {
    /// The attempt `.1` of a workload completes its work.
    Finish(WorkloadId, u32),
    /// The grace period of attempt `.1` ends: stop and requeue.
    Stop(WorkloadId, u32),
}

struct Sim<'p> {
    state: State,
    policy: &'p mut dyn Policy,
    opts: SimOptions,
    heap: BinaryHeap<Reverse<(Time, Timed)>>,
    out: SimOutput,
    /// Set when something changed at the current instant.
    dirty: bool,
    /// When the policy asked for its next pass.
    wake: Option<Time>,
}

/// Replays `workloads` (any order; sorted stably by submit time) and node
/// `events` on `state` (which must hold no workloads yet) under `policy`.
/// Returns the final state and the record of what happened.
pub fn simulate(
    state: State,
    mut workloads: Vec<WorkloadSpec>,
    mut events: Vec<NodeEvent>,
    policy: &mut dyn Policy,
    opts: &SimOptions,
) -> (State, SimOutput) {
    assert!(state.specs.is_empty(), "simulate starts from a state without workloads");
    workloads.sort_by_key(|w| w.submit);
    events.sort_by_key(|e| e.t);
    let total_gpus = state.cluster.total_gpus();
    let mut sim = Sim {
        out: SimOutput {
            policy: policy.name().to_string(),
            horizon_end: 0,
            total_gpus,
            attempts: Vec::new(),
            capacity: Vec::new(),
            log: Vec::new(),
            passes: 0,
            events: 0,
        },
        state,
        policy,
        opts: opts.clone(),
        heap: BinaryHeap::new(),
        dirty: false,
        wake: None,
    };
    sim.record_capacity(0);
    sim.run(workloads, events);
    let Sim { state, out, .. } = sim;
    (state, out)
}

impl Sim<'_> {
    fn run(&mut self, workloads: Vec<WorkloadSpec>, events: Vec<NodeEvent>) {
        let mut arrivals = workloads.into_iter().peekable();
        let mut node_events = events.into_iter().peekable();
        let mut now: Time = 0;
        loop {
            let next = [
                self.heap.peek().map(|Reverse((t, _))| *t),
                node_events.peek().map(|e| e.t),
                arrivals.peek().map(|w| w.submit),
                self.wake,
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(t) = next else { break };
            if self.opts.until.is_some_and(|u| t > u) {
                break;
            }
            now = t;
            self.dirty = false;
            while let Some(Reverse((tt, ev))) = self.heap.peek().copied() {
                if tt != t {
                    break;
                }
                self.heap.pop();
                self.out.events += 1;
                self.timed(t, ev);
            }
            while node_events.peek().is_some_and(|e| e.t == t) {
                let e = node_events.next().expect("peeked");
                self.out.events += 1;
                self.node_event(&e);
            }
            while arrivals.peek().is_some_and(|w| w.submit == t) {
                let w = arrivals.next().expect("peeked");
                self.out.events += 1;
                self.arrive(w, t);
            }
            let woke = self.wake == Some(t);
            if woke {
                self.wake = None;
            }
            if (self.dirty || woke) && !self.state.pending.is_empty() {
                self.pass(t);
            }
            if self.opts.check_invariants
                && let Err(e) = self.state.sanity_check(t)
            {
                panic!("invariant broken at t={t}: {e}");
            }
            self.plan_wake(t, arrivals.peek().is_some() || node_events.peek().is_some());
        }
        self.finish_run(now);
    }

    /// Decides when the next time-driven pass is due.
    fn plan_wake(&mut self, t: Time, future_inputs: bool) {
        // With nothing pending, or nothing that could ever change (no GPUs
        // held, no future input), no time-driven pass can start anything.
        let stuck = self.state.running.is_empty() && !future_inputs && self.heap.is_empty();
        if self.state.pending.is_empty() || stuck {
            self.wake = None;
            return;
        }
        let mut next = self.policy.next_wakeup(&self.state, t).filter(|w| *w > t);
        // Periodic passes only while something can still change.
        if self.policy.periodic() {
            let p = t + self.state.contract.scheduling_interval.max(1);
            next = Some(next.map_or(p, |n| n.min(p)));
        }
        // Keep an earlier wake-up already planned, if still in the future.
        self.wake = match (self.wake.filter(|w| *w > t), next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    fn finish_run(&mut self, now: Time) {
        let end = self.opts.until.unwrap_or(now);
        self.out.horizon_end = end;
        // Attempts still holding GPUs at the horizon are cut there; their
        // progress so far counts as useful (it has not been lost).
        let holding: Vec<WorkloadId> = self.state.running.iter().copied().collect();
        for w in holding {
            let (spec, run) = (self.state.spec(w), self.state.run(w));
            let progress = run.progress(end);
            let a = Attempt {
                workload: w,
                account: spec.account,
                class: spec.class,
                gpus: spec.gpus,
                weight: self.weight(w),
                util: spec.util,
                start: run.started.expect("holding"),
                end,
                useful_gpu_s: progress * u64::from(spec.gpus),
                outcome: AttemptEnd::Cut,
            };
            self.out.attempts.push(a);
        }
        // Pending workloads keep the policy's explanation of why they wait.
        let waiting: Vec<WorkloadId> = self.state.pending.iter().map(|(_, w)| *w).collect();
        for w in waiting {
            let r = self.policy.explain(&self.state, w, end);
            self.state.runs[w.0 as usize].last_reason = Some(r);
        }
    }

    fn weight(&self, w: WorkloadId) -> f64 {
        let run = self.state.run(w);
        let node = run.alloc.as_ref().and_then(|a| a.parts.first()).map(|(n, _)| *n);
        node.map_or(1.0, |n| self.state.cluster.weight(self.state.cluster.node(n).gpu))
    }

    fn node_names(&self, w: WorkloadId) -> Vec<String> {
        let run = self.state.run(w);
        run.alloc
            .as_ref()
            .map(|a| a.nodes().map(|n| self.state.cluster.node(n).name.clone()).collect())
            .unwrap_or_default()
    }

    fn log(&mut self, t: Time, event: &'static str, w: WorkloadId, reason: &Reason, by: Option<WorkloadId>) {
        if !self.opts.keep_log {
            return;
        }
        let nodes = self.node_names(w);
        let spec = self.state.spec(w);
        let e = LogEvent {
            t,
            event,
            workload: spec.id.clone(),
            nodes,
            gpus: spec.gpus,
            reason: reason.to_string(),
            by: by.map(|b| self.state.spec(b).id.clone()),
        };
        self.out.log.push(e);
    }

    fn timed(&mut self, t: Time, ev: Timed) {
        match ev {
            Timed::Finish(w, attempt) => {
                let run = self.state.run(w);
                if run.attempts != attempt || !run.phase.holds_gpus() {
                    return; // stale: the attempt was stopped earlier
                }
                let reason = Reason::new(Rule::Completed, "work completed");
                self.log(t, "finish", w, &reason, None);
                let attempt = self.attempt_record(w, t, AttemptEnd::Finished);
                let nodes: Vec<NodeId> =
                    self.state.run(w).alloc.as_ref().map(|a| a.nodes().collect()).unwrap_or_default();
                let o = self.state.finish(w, t, reason);
                self.out.attempts.push(Attempt { useful_gpu_s: o.useful_gpu_s, ..attempt });
                self.after_release(&nodes, t);
            }
            Timed::Stop(w, attempt) => {
                let run = self.state.run(w);
                if run.attempts != attempt || run.phase != Phase::Stopping || run.stop_at != Some(t) {
                    return;
                }
                let progress = run.progress(t);
                let why = run.last_reason.as_ref().map(|r| r.rule).unwrap_or(Rule::Grace);
                let reason = Reason::new(
                    Rule::Requeue,
                    format!(
                        "grace over; {} s of progress since the last checkpoint lost, requeued ({})",
                        progress - allot_core::workload::saved(progress, self.state.spec(w).checkpoint_s),
                        why.id()
                    ),
                );
                self.stop(w, t, reason, AttemptEnd::Preempted, "stop");
            }
        }
    }

    fn attempt_record(&self, w: WorkloadId, t: Time, outcome: AttemptEnd) -> Attempt {
        let (spec, run) = (self.state.spec(w), self.state.run(w));
        Attempt {
            workload: w,
            account: spec.account,
            class: spec.class,
            gpus: spec.gpus,
            weight: self.weight(w),
            util: spec.util,
            start: run.started.expect("holding"),
            end: t,
            useful_gpu_s: 0,
            outcome,
        }
    }

    /// Stops a holding workload now and requeues it.
    fn stop(&mut self, w: WorkloadId, t: Time, reason: Reason, outcome: AttemptEnd, event: &'static str) {
        self.log(t, event, w, &reason, None);
        let attempt = self.attempt_record(w, t, outcome);
        let nodes: Vec<NodeId> = self.state.run(w).alloc.as_ref().map(|a| a.nodes().collect()).unwrap_or_default();
        let o = self.state.stop(w, t, reason);
        self.out.attempts.push(Attempt { useful_gpu_s: o.useful_gpu_s, ..attempt });
        self.after_release(&nodes, t);
    }

    /// GPUs were released on `nodes`: finish drains that are now empty.
    fn after_release(&mut self, nodes: &[NodeId], t: Time) {
        self.dirty = true;
        for &n in nodes {
            if self.state.health[n.0 as usize] == Health::Draining && self.node_idle(n) {
                self.state.set_health(n, Health::Drained);
                self.record_capacity(t);
            }
        }
    }

    fn node_idle(&self, n: NodeId) -> bool {
        let i = n.0 as usize;
        self.state.free.free[i] == allot_core::placement::full_mask(self.state.cluster.nodes[i].gpus)
    }

    fn record_capacity(&mut self, t: Time) {
        let (mut gpus, mut milli) = (0u64, 0u64);
        for (node, h) in self.state.cluster.nodes.iter().zip(&self.state.health) {
            if h.in_service() {
                gpus += u64::from(node.gpus);
                milli += (u64::from(node.gpus) as f64 * self.state.cluster.weight(node.gpu) * 1000.0).round() as u64;
            }
        }
        let step = CapacityStep { t, gpus, ngpus_milli: milli };
        match self.out.capacity.last_mut() {
            Some(last) if last.t == t => *last = step,
            Some(last) if last.gpus == gpus && last.ngpus_milli == milli => {}
            _ => self.out.capacity.push(step),
        }
    }

    fn node_event(&mut self, e: &NodeEvent) {
        let n = e.node;
        let i = n.0 as usize;
        let name = self.state.cluster.node(n).name.clone();
        self.dirty = true;
        match e.kind {
            NodeEventKind::Fail => {
                self.state.set_health(n, Health::Down);
                for w in self.state.workloads_on(n) {
                    let reason = Reason::new(Rule::Failure, format!("node {name} failed"));
                    self.stop(w, e.t, reason, AttemptEnd::Failed, "fail");
                }
            }
            NodeEventKind::Drain => {
                if self.state.health[i] == Health::Down {
                    return; // a failed node is already out of service
                }
                self.state.set_health(n, Health::Draining);
                let grace = self.state.contract.grace;
                for w in self.state.workloads_on(n) {
                    if self.state.run(w).phase == Phase::Running {
                        let reason = Reason::new(Rule::Drain, format!("node {name} drained for maintenance"));
                        self.preempt(w, e.t, grace, reason, None);
                    }
                }
                if self.node_idle(n) {
                    self.state.set_health(n, Health::Drained);
                }
            }
            NodeEventKind::Repair | NodeEventKind::Undrain => {
                if e.kind == NodeEventKind::Undrain && self.state.health[i] == Health::Down {
                    return; // undrain does not repair a failed node
                }
                self.state.set_health(n, Health::Up);
            }
        }
        self.record_capacity(e.t);
    }

    fn arrive(&mut self, spec: WorkloadSpec, t: Time) {
        let verdict = self.policy.admit(&self.state, &spec);
        let w = self.state.submit(spec);
        match verdict {
            Ok(()) => self.dirty = true,
            Err(reason) => {
                self.log(t, "reject", w, &reason, None);
                self.state.end_pending(w, t, Phase::Rejected, reason);
            }
        }
    }

    /// Signals a running workload; it stops after `grace` unless its work
    /// completes first.
    fn preempt(&mut self, w: WorkloadId, t: Time, grace: Time, reason: Reason, by: Option<WorkloadId>) {
        self.log(t, "preempt", w, &reason, by);
        let finish = self.state.finish_time(w).expect("running");
        let stop_at = self.state.signal(w, t, grace, reason);
        if finish > stop_at {
            let attempt = self.state.run(w).attempts;
            self.heap.push(Reverse((stop_at, Timed::Stop(w, attempt))));
        }
    }

    fn pass(&mut self, t: Time) {
        self.out.passes += 1;
        let decisions = self.policy.schedule(&self.state, t);
        for Decision { action, reason } in decisions {
            match action {
                Action::Start { workload: w, alloc } => {
                    self.state.start(w, alloc, t, reason.clone());
                    self.log(t, "start", w, &reason, None);
                    let finish = self.state.finish_time(w).expect("started");
                    let attempt = self.state.run(w).attempts;
                    self.heap.push(Reverse((finish, Timed::Finish(w, attempt))));
                }
                Action::Preempt { workload: w, by } => {
                    if self.state.run(w).phase == Phase::Running {
                        let grace = self.state.contract.grace;
                        self.preempt(w, t, grace, reason, by);
                    }
                }
                Action::Reject { workload: w } => {
                    self.log(t, "reject", w, &reason, None);
                    self.state.end_pending(w, t, Phase::Rejected, reason);
                }
            }
        }
    }
}
