//! Small drivers for the `allot` policy tests: submit, run a pass and apply
//! its decisions, let time pass (finishes and grace ends).

#![allow(dead_code, reason = "each test file uses a different subset")]

use allot_core::{Action, Class, Decision, Phase, Policy, Reason, Rule, State, Time, WorkloadId};
use allot_testkit::Wl;

/// Submits `gpus` GPUs of batch work for `account` at `submit`.
pub fn sub(state: &mut State, id: &str, account: &str, gpus: u32, submit: Time) -> WorkloadId {
    let s = Wl::new(id).account(account).gpus(gpus).submit(submit).work(100_000).build(state);
    state.submit(s)
}

/// Submits a workload built by `wl`.
pub fn sub_wl(state: &mut State, wl: Wl) -> WorkloadId {
    let s = wl.build(state);
    state.submit(s)
}

/// Submits an interactive workload.
pub fn sub_int(state: &mut State, id: &str, account: &str, gpus: u32, submit: Time) -> WorkloadId {
    sub_wl(state, Wl::new(id).account(account).gpus(gpus).submit(submit).work(3600).class(Class::Interactive))
}

/// Applies decisions the way the simulator does (in order).
pub fn apply(state: &mut State, d: &[Decision], now: Time) {
    for Decision { action, reason } in d.iter().cloned() {
        match action {
            Action::Start { workload, alloc } => state.start(workload, alloc, now, reason),
            Action::Preempt { workload, .. } => {
                let g = state.contract.grace;
                state.signal(workload, now, g, reason);
            }
            Action::Reject { workload } => state.end_pending(workload, now, Phase::Rejected, reason),
            Action::Claim { workload, alloc } => state.claim(workload, alloc),
        }
    }
}

/// Runs one pass at `now`, applies it, checks the invariants.
pub fn pass(p: &mut dyn Policy, state: &mut State, now: Time) -> Vec<Decision> {
    state.prune_claims();
    let d = p.schedule(state, now);
    apply(state, &d, now);
    state.sanity_check(now).unwrap();
    d
}

/// Ends grace periods and completes finished work up to `now`.
pub fn advance(state: &mut State, now: Time) {
    let holding: Vec<WorkloadId> = state.running.iter().copied().collect();
    for w in holding {
        let r = state.run(w);
        if r.phase == Phase::Stopping && r.stop_at.is_some_and(|t| t <= now) {
            let t = r.stop_at.unwrap();
            state.stop(w, t, Reason::new(Rule::Grace, "grace ended"));
        } else if r.phase == Phase::Running && state.finish_time(w).is_some_and(|t| t <= now) {
            let t = state.finish_time(w).unwrap();
            state.finish(w, t, Reason::new(Rule::Completed, "done"));
        }
    }
}

pub fn id(state: &State, w: WorkloadId) -> String {
    state.spec(w).id.clone()
}

pub fn started(state: &State, d: &[Decision]) -> Vec<String> {
    d.iter()
        .filter_map(|d| match &d.action {
            Action::Start { workload, .. } => Some(id(state, *workload)),
            _ => None,
        })
        .collect()
}

/// (victim, preemptor, rule) of every preemption.
pub fn preempted(state: &State, d: &[Decision]) -> Vec<(String, String, Rule)> {
    d.iter()
        .filter_map(|d| match &d.action {
            Action::Preempt { workload, by } => {
                Some((id(state, *workload), by.map_or_else(String::new, |b| id(state, b)), d.reason.rule))
            }
            _ => None,
        })
        .collect()
}

/// GPUs held by running (not stopping) workloads of an account subtree.
pub fn held(state: &State, path: &str) -> u32 {
    let a = state.accounts.get(path).unwrap();
    state
        .running
        .iter()
        .filter(|w| state.run(**w).phase == Phase::Running && state.accounts.is_within(state.spec(**w).account, a))
        .map(|w| state.spec(*w).gpus)
        .sum()
}

/// Charges `gpu_hours` of usage to `path` by running a workload from `t0`.
pub fn charge(state: &mut State, path: &str, gpus: u32, t0: Time, hours: f64) {
    charge_as(state, path, "u", gpus, t0, hours);
}

/// [`charge`] as user `user`.
pub fn charge_as(state: &mut State, path: &str, user: &str, gpus: u32, t0: Time, hours: f64) {
    let secs = (hours * 3600.0 / f64::from(gpus)).round() as Time;
    let wl = Wl::new(format!("usage-{path}-{user}-{t0}")).account(path).user(user).gpus(gpus).submit(t0).work(secs);
    let w = sub_wl(state, wl);
    let alloc = allot_core::placement::place(&state.cluster, &state.free, state.spec(w), &|_| true).unwrap();
    state.start(w, alloc, t0, Reason::new(Rule::FairShare, "usage"));
    state.finish(w, t0 + secs, Reason::new(Rule::Completed, "usage"));
}
