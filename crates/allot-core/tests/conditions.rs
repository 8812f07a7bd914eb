//! Holds (HOLD-1), dependencies (DEP-1, DEP-2) and array limits (ARR-1),
//! driven through the engine under every policy, with the state's and the
//! gate's invariants checked after every step.

use allot_core::engine::{Change, HoldRefused};
use allot_core::{DepKind, Effect, Engine, Exit, Phase, Policy, PolicyKind, Rule, Time, WorkloadId, WorkloadSpec};
use allot_testkit::{Drive, StateBuilder, Wl};
use proptest::prelude::*;

struct Run {
    engine: Engine,
    policy: Box<dyn Policy>,
}

impl Run {
    /// `nodes` nodes of 8 GPUs under `kind`.
    fn new(nodes: u32, kind: PolicyKind) -> Run {
        let state = StateBuilder::new()
            .pool("p", "H100", nodes, 8)
            .account_with("org/a", |a| a.budget_gpu_hours = Some(1e9))
            .legacy("org/a", &["p"])
            .contract(|c| c.grace = 100)
            .build();
        Run { engine: Engine::new(state), policy: kind.build() }
    }

    fn check(&mut self, t: Time) -> Vec<Effect> {
        self.engine.state().sanity_check(t).expect("state invariants hold");
        self.engine.check_gate().expect("gate invariants hold");
        self.engine.take_effects()
    }

    fn wl(&self, id: &str, f: impl FnOnce(Wl) -> Wl, t: Time) -> WorkloadSpec {
        f(Wl::new(id).account("org/a").gpus(8).submit(t).work(1000)).build(self.engine.state())
    }

    fn arrive(&mut self, spec: WorkloadSpec, t: Time) -> WorkloadId {
        let w = self.engine.arrive(&mut *self.policy, spec, 0, t);
        self.check(t);
        w
    }

    fn pass(&mut self, t: Time) -> Vec<Effect> {
        self.engine.pass(self.policy.as_mut(), t);
        self.check(t)
    }

    fn exit(&mut self, w: WorkloadId, code: i32, t: Time) -> Vec<Effect> {
        let attempt = self.engine.state().run(w).attempts;
        self.engine.exited(w, attempt, Exit::Status { code: Some(code), signal: None }, t);
        self.check(t)
    }

    fn phase(&self, w: WorkloadId) -> Phase {
        self.engine.state().run(w).phase
    }

    fn why(&self, w: WorkloadId, t: Time) -> allot_core::Reason {
        self.engine.explain(&*self.policy, w, t)
    }
}

const POLICIES: [PolicyKind; 5] = PolicyKind::ALL;

/// Cancels recorded, with their rules.
fn cancels(effects: &[Effect]) -> Vec<(WorkloadId, Rule)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Record(t) if t.change == Change::Cancel => Some((t.workload, t.reason.rule)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_held_workload_never_starts_until_released_under_every_policy() {
    for kind in POLICIES {
        let mut r = Run::new(2, kind);
        let spec = r.wl("h", Wl::hold, 0);
        let h = r.arrive(spec, 0);
        r.pass(0);
        assert_eq!(r.phase(h), Phase::Pending, "{kind:?}: free GPUs, but held");
        assert_eq!(r.why(h, 0).rule, Rule::Hold, "{kind:?}");
        assert!(r.engine.held(h));
        r.engine.release(h, 10).expect("held");
        r.check(10);
        r.pass(10);
        assert_eq!(r.phase(h), Phase::Running, "{kind:?}: released");
        assert_eq!(r.engine.state().run(h).queued, Some(10), "queue time counts from the release");
    }
}

#[test]
fn hold_and_release_are_refused_where_they_mean_nothing() {
    let mut r = Run::new(1, PolicyKind::FifoBackfill);
    let spec = r.wl("a", |w| w, 0);
    let a = r.arrive(spec, 0);
    assert_eq!(r.engine.release(a, 0), Err(HoldRefused::NotHeld));
    r.pass(0);
    assert_eq!(r.engine.hold(a, 1), Err(HoldRefused::NotPending("running")));
    // A queued workload held leaves the queue; held again, nothing changes.
    let spec = r.wl("b", |w| w, 2);
    let b = r.arrive(spec, 2);
    r.engine.hold(b, 3).expect("pending");
    r.engine.hold(b, 3).expect("held again");
    r.check(3);
    r.exit(a, 0, 5);
    r.pass(5);
    assert_eq!(r.phase(b), Phase::Pending, "held, the freed GPUs are not its");
    r.engine.release(b, 6).expect("held");
    r.check(6);
    r.pass(6);
    assert_eq!(r.phase(b), Phase::Running);
}

/// a ← b (afterok) ← c (afterok), after the first pass.
fn chain(kind: PolicyKind) -> (Run, [WorkloadId; 3]) {
    let mut r = Run::new(4, kind);
    let spec = r.wl("a", |w| w, 0);
    let a = r.arrive(spec, 0);
    let spec = r.wl("b", |w| w.after(DepKind::AfterOk, a), 0);
    let b = r.arrive(spec, 0);
    let spec = r.wl("c", |w| w.after(DepKind::AfterOk, b), 0);
    let c = r.arrive(spec, 0);
    r.pass(0);
    (r, [a, b, c])
}

#[test]
fn afterok_waits_for_success_and_a_failure_cancels_the_chain() {
    for kind in POLICIES {
        // a ← b (afterok) ← c (afterok): a finishes, b runs.
        let (mut r, [a, b, c]) = chain(kind);
        assert_eq!((r.phase(a), r.phase(b), r.phase(c)), (Phase::Running, Phase::Pending, Phase::Pending), "{kind:?}");
        let why = r.why(b, 0);
        assert_eq!(why.rule, Rule::DepWait);
        assert_eq!(why.detail, "waits for afterok:a (running)");
        r.exit(a, 0, 100);
        r.pass(100);
        assert_eq!((r.phase(b), r.phase(c)), (Phase::Running, Phase::Pending), "{kind:?}");
        assert_eq!(r.engine.state().run(b).queued, Some(100));

        // The same chain whose head fails: both dependents are cancelled, in turn.
        let (mut r, [a, b, c]) = chain(kind);
        let effects = r.exit(a, 3, 50);
        assert_eq!(cancels(&effects), [(b, Rule::DepNever), (c, Rule::DepNever)], "{kind:?}");
        assert_eq!((r.phase(a), r.phase(b), r.phase(c)), (Phase::Failed, Phase::Cancelled, Phase::Cancelled));
        let reason = r.engine.state().run(c).last_reason.clone().expect("a reason");
        assert_eq!(
            reason.to_string(),
            "DEP-2: dependency afterok:b can never be satisfied: b ended cancelled; cancelled"
        );
    }
}

#[test]
fn afternotok_and_afterany() {
    let mut r = Run::new(4, PolicyKind::Allot);
    let spec = r.wl("a", |w| w, 0);
    let a = r.arrive(spec, 0);
    let spec = r.wl("cleanup", |w| w.after(DepKind::AfterNotOk, a), 0);
    let not_ok = r.arrive(spec, 0);
    let spec = r.wl("report", |w| w.after(DepKind::AfterAny, a), 0);
    let any = r.arrive(spec, 0);
    r.pass(0);
    let effects = r.exit(a, 0, 10);
    assert_eq!(cancels(&effects), [(not_ok, Rule::DepNever)], "a finished: afternotok never holds");
    r.pass(10);
    assert_eq!(r.phase(any), Phase::Running);

    let mut r = Run::new(4, PolicyKind::Allot);
    let spec = r.wl("a", |w| w, 0);
    let a = r.arrive(spec, 0);
    let spec = r.wl("cleanup", |w| w.after(DepKind::AfterNotOk, a).after(DepKind::AfterAny, a), 0);
    let not_ok = r.arrive(spec, 0);
    r.pass(0);
    r.engine.cancel(a, 5, "cancelled by test");
    r.check(5);
    r.exit(a, 143, 6);
    r.pass(6);
    assert_eq!(r.phase(a), Phase::Cancelled);
    assert_eq!(r.phase(not_ok), Phase::Running, "a cancel satisfies afternotok and afterany");
}

#[test]
fn a_dependency_on_a_workload_already_ended_is_decided_at_arrival() {
    let mut r = Run::new(2, PolicyKind::FifoBackfill);
    let spec = r.wl("a", |w| w, 0);
    let a = r.arrive(spec, 0);
    r.pass(0);
    r.exit(a, 0, 10);
    let spec = r.wl("ok", |w| w.after(DepKind::AfterOk, a), 20);
    let ok = r.arrive(spec, 20);
    let spec = r.wl("never", |w| w.after(DepKind::AfterNotOk, a), 20);
    let never = r.arrive(spec, 20);
    let effects = r.pass(20);
    assert_eq!(r.phase(ok), Phase::Running);
    assert_eq!(r.engine.state().run(ok).queued, Some(20));
    assert_eq!(r.phase(never), Phase::Cancelled);
    assert!(cancels(&effects).is_empty(), "the cancel was recorded at arrival");
}

/// Issue 30, point 5: a dependency on an array waits for each element,
/// and its reason names the array once, by the id people gave it, with
/// its elements' phases, never the elements' internal ids.
#[test]
fn a_dependency_on_an_array_names_the_array_once() {
    let mut r = Run::new(2, PolicyKind::Allot);
    let ids: Vec<WorkloadId> = (0..4)
        .map(|i| {
            let spec = r.wl(&format!("{}", 3 + i), |w| w.array(3, i, 4, Some(2)), 0);
            r.arrive(spec, 0)
        })
        .collect();
    let spec = r.wl(
        "9",
        |mut w| {
            for e in &ids {
                w = w.after(DepKind::AfterOk, *e);
            }
            w
        },
        0,
    );
    let after = r.arrive(spec, 0);
    r.pass(0);
    let why = r.why(after, 0);
    assert_eq!(why.rule, Rule::DepWait);
    assert_eq!(why.detail, "waits for afterok:3 (array of 4: 2 running, 2 pending)");
    r.exit(ids[0], 0, 10);
    r.pass(10);
    let why = r.why(after, 10);
    assert_eq!(why.detail, "waits for afterok:3 (array of 4: 1 finished, 2 running, 1 pending)", "{why}");

    // Ten workloads of their own: eight are named, the others counted.
    let mut r = Run::new(1, PolicyKind::Allot);
    let singles: Vec<WorkloadId> = (0..10)
        .map(|i| {
            let spec = r.wl(&format!("s{i}"), |w| w, 0);
            r.arrive(spec, 0)
        })
        .collect();
    let spec = r.wl(
        "after",
        |mut w| {
            for s in &singles {
                w = w.after(DepKind::AfterAny, *s);
            }
            w
        },
        0,
    );
    let after = r.arrive(spec, 0);
    r.pass(0);
    let why = r.why(after, 0);
    assert!(why.detail.starts_with("waits for afterany:s0 (running), afterany:s1 (pending),"), "{why}");
    assert!(why.detail.ends_with("afterany:s7 (pending) and 2 more"), "{why}");
}

#[test]
fn an_array_limit_caps_what_runs_and_admits_the_lowest_index_next() {
    for kind in POLICIES {
        // 10 nodes for 6 elements of one node each, at most 2 at once.
        let mut r = Run::new(10, kind);
        let ids: Vec<WorkloadId> = (0..6)
            .map(|i| {
                let spec = r.wl(&format!("7_{i}"), |w| w.array(7, i, 6, Some(2)), 0);
                r.arrive(spec, 0)
            })
            .collect();
        r.pass(0);
        let running = |r: &Run| ids.iter().filter(|w| r.phase(**w).holds_gpus()).count();
        assert_eq!(running(&r), 2, "{kind:?}");
        assert_eq!((r.phase(ids[0]), r.phase(ids[1])), (Phase::Running, Phase::Running));
        assert_eq!(r.why(ids[5], 0).rule, Rule::ArrayLimit);
        // Holding a waiting element lets the next index through first.
        r.engine.hold(ids[2], 1).expect("pending");
        r.check(1);
        let mut t = 100;
        r.exit(ids[0], 0, t);
        r.pass(t);
        assert_eq!(r.phase(ids[3]), Phase::Running, "{kind:?}: index 2 is held, 3 is next");
        assert_eq!(r.phase(ids[2]), Phase::Pending);
        r.engine.release(ids[2], t).expect("held");
        r.check(t);
        while ids.iter().any(|w| !r.phase(*w).is_terminal()) {
            assert!(running(&r) <= 2, "{kind:?}: at most 2 at once");
            let w = *ids.iter().find(|w| r.phase(**w) == Phase::Running).expect("one runs");
            t += 100;
            r.exit(w, 0, t);
            r.pass(t);
        }
        assert!(ids.iter().all(|w| r.phase(*w) == Phase::Finished), "{kind:?}: every element ran");
    }
}

#[test]
fn a_preempted_element_keeps_its_place() {
    let mut r = Run::new(1, PolicyKind::Allot);
    let ids: Vec<WorkloadId> = (0..3)
        .map(|i| {
            let spec = r.wl(&format!("1_{i}"), |w| w.array(1, i, 3, Some(1)).preemptible(), 0);
            r.arrive(spec, 0)
        })
        .collect();
    r.pass(0);
    assert_eq!(r.phase(ids[0]), Phase::Running);
    // A failure that is retried requeues it: still its array's one place.
    let attempt = r.engine.state().run(ids[0]).attempts;
    r.engine.node_event(&allot_core::NodeEvent {
        t: 10,
        node: allot_core::NodeId(0),
        kind: allot_core::NodeEventKind::Fail,
    });
    r.check(10);
    r.engine.exited(ids[0], attempt, Exit::KILLED, 10);
    r.check(10);
    assert_eq!(r.phase(ids[0]), Phase::Pending);
    assert!(!r.engine.state().parked.contains(&ids[0]), "requeued, queued");
    assert!(r.engine.state().parked.contains(&ids[1]), "still waiting for the place");
}

/// One step of a random scenario.
#[derive(Clone, Debug)]
enum Step {
    Arrive { hold: bool, deps: Vec<(u8, usize)>, array: Option<(u8, u8)> },
    Pass,
    Exit { pick: usize, code: i32 },
    Hold(usize),
    Release(usize),
    Cancel(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (any::<bool>(), proptest::collection::vec((0u8..3, any::<usize>()), 0..3), proptest::option::of((0u8..3, 1u8..3)))
            .prop_map(|(hold, deps, array)| Step::Arrive { hold: hold && deps.is_empty(), deps, array }),
        3 => Just(Step::Pass),
        3 => (any::<usize>(), prop_oneof![Just(0), Just(1)]).prop_map(|(pick, code)| Step::Exit { pick, code }),
        1 => any::<usize>().prop_map(Step::Hold),
        1 => any::<usize>().prop_map(Step::Release),
        1 => any::<usize>().prop_map(Step::Cancel),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever happens: no parked workload holds GPUs, no array exceeds
    /// its limit, no workload starts before its dependencies are
    /// satisfied, and nothing is lost (every workload ends once all its
    /// conditions can be met and the holds are released).
    #[test]
    fn conditions_hold_whatever_happens(steps in proptest::collection::vec(step(), 1..60), policy in 0usize..4) {
        let kind = POLICIES[policy];
        let mut r = Run::new(3, kind);
        let mut ws: Vec<WorkloadId> = Vec::new();
        let mut t = 0;
        for s in steps {
            t += 10;
            match s {
                Step::Arrive { hold, deps, array } => {
                    let n = ws.len();
                    let idx = array.map(|(a, _)| ws.iter().filter(|w| r.engine.state().spec(**w).array.is_some_and(|p| p.array == u64::from(a))).count() as u32);
                    let spec = r.wl(&format!("w{n}"), |mut w| {
                        if hold { w = w.hold(); }
                        for (k, pick) in &deps {
                            if n > 0 { w = w.after(DepKind::ALL[*k as usize], ws[pick % n]); }
                        }
                        if let (Some((a, limit)), Some(i)) = (array, idx) { w = w.array(u64::from(a), i, 99, Some(u32::from(limit))); }
                        w.gpus(4)
                    }, t);
                    ws.push(r.arrive(spec, t));
                }
                Step::Pass => { r.pass(t); }
                Step::Exit { pick, code } => {
                    let running: Vec<_> = ws.iter().copied().filter(|w| r.phase(*w) == Phase::Running).collect();
                    if !running.is_empty() { r.exit(running[pick % running.len()], code, t); }
                }
                Step::Hold(i) if !ws.is_empty() => { let _ = r.engine.hold(ws[i % ws.len()], t); r.check(t); }
                Step::Release(i) if !ws.is_empty() => { let _ = r.engine.release(ws[i % ws.len()], t); r.check(t); }
                Step::Cancel(i) if !ws.is_empty() => { r.engine.cancel(ws[i % ws.len()], t, "test"); r.check(t); }
                _ => {}
            }
            // Started work had its dependencies satisfied.
            for &w in &ws {
                let run = r.engine.state().run(w);
                if run.first_start.is_some() {
                    for d in &r.engine.state().spec(w).after {
                        let allot_core::DepTarget::Workload(o) = d.on else { continue };
                        prop_assert_eq!(d.kind.satisfied_by(r.phase(o)), Some(true), "{} started before its dependency", r.engine.state().spec(w).id);
                    }
                }
            }
        }
        // Release every hold and drain: everything ends.
        for &w in &ws { let _ = r.engine.release(w, t); }
        r.check(t);
        for _ in 0..10_000 {
            t += 10;
            r.pass(t);
            let running: Vec<_> = ws.iter().copied().filter(|w| r.phase(*w).holds_gpus()).collect();
            if running.is_empty() { break; }
            for w in running {
                if r.phase(w) == Phase::Running { r.exit(w, 0, t); }
                else { let a = r.engine.state().run(w).attempts; r.engine.exited(w, a, Exit::KILLED, t); r.check(t); }
            }
        }
        for &w in &ws {
            prop_assert!(r.phase(w).is_terminal(), "{} is {:?}: {:?}", r.engine.state().spec(w).id, r.phase(w), r.why(w, t));
        }
    }
}
