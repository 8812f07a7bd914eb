//! Hand-built scenarios for the baseline policies (FIFO-1, FIFO-2, PRIO-1 … PRIO-3).

use allot_core::{Action, Decision, PolicyKind, Priority, Rule, State, WorkloadId};
use allot_testkit::{StateBuilder, Wl};

fn started(state: &State, d: &[Decision]) -> Vec<String> {
    d.iter()
        .filter_map(|d| match &d.action {
            Action::Start { workload, .. } => Some(state.spec(*workload).id.clone()),
            _ => None,
        })
        .collect()
}

fn preempted(state: &State, d: &[Decision]) -> Vec<(String, String)> {
    d.iter()
        .filter_map(|d| match &d.action {
            Action::Preempt { workload, by } => {
                Some((state.spec(*workload).id.clone(), state.spec(by.expect("preemptor")).id.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Applies a pass's decisions (starts only) so the next pass sees them.
fn apply(state: &mut State, d: Vec<Decision>, now: u64) {
    for Decision { action, reason } in d {
        match action {
            Action::Start { workload, alloc } => state.start(workload, alloc, now, reason),
            Action::Preempt { workload, .. } => {
                let g = state.contract.grace;
                state.signal(workload, now, g, reason);
            }
            Action::Reject { .. } | Action::Claim { .. } => unreachable!(),
        }
    }
}

#[test]
fn fifo_strict_and_backfill() {
    // One node of 8 GPUs; queue A(6) B(4) C(2) in submit order.
    struct Case {
        policy: PolicyKind,
        want: &'static [&'static str],
    }
    for c in
        [Case { policy: PolicyKind::Fifo, want: &["a"] }, Case { policy: PolicyKind::FifoBackfill, want: &["a", "c"] }]
    {
        let mut state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/x").build();
        for (id, g, t) in [("a", 6, 0), ("b", 4, 1), ("c", 2, 2)] {
            let s = Wl::new(id).account("org/x").gpus(g).submit(t).build(&state);
            state.submit(s);
        }
        let mut p = c.policy.build();
        let d = p.schedule(&state, 5);
        assert_eq!(started(&state, &d), c.want, "{}", p.name());
        let rule = if c.policy == PolicyKind::Fifo { Rule::FifoOrder } else { Rule::FifoBackfill };
        assert!(d.iter().all(|d| d.reason.rule == rule));
        apply(&mut state, d, 5);
        state.sanity_check(5).unwrap();
        let why = p.explain(&state, WorkloadId(1), 5);
        assert!(why.detail.contains("waiting for 4 GPUs"), "{why}");
    }
}

#[test]
fn fifo_ties_go_by_trace_order() {
    let mut state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/x").build();
    for id in ["z", "y", "x"] {
        let s = Wl::new(id).account("org/x").gpus(8).submit(7).build(&state);
        state.submit(s);
    }
    let d = PolicyKind::Fifo.build().schedule(&state, 7);
    assert_eq!(started(&state, &d), ["z"]);
}

fn legacy_state() -> State {
    StateBuilder::new()
        .pool("ta", "H100", 1, 8)
        .pool("tb", "H100", 1, 8)
        .pool("sh", "H100", 1, 8)
        .shared()
        .account("org/a/p")
        .account("org/b/p")
        .account("org/c/p")
        .legacy("org/a", &["ta"])
        .legacy("org/b", &["tb"])
        .build()
}

#[test]
fn priority_confines_teams_to_their_pools_plus_shared() {
    let mut state = legacy_state();
    // Team a submits 3 full-node jobs: it gets its own pool and the shared one, never b's idle pool.
    for (i, id) in ["a1", "a2", "a3"].into_iter().enumerate() {
        let s = Wl::new(id).account("org/a/p").gpus(8).submit(i as u64).build(&state);
        state.submit(s);
    }
    // Team c has no legacy pools: shared only.
    let s = Wl::new("c1").account("org/c/p").gpus(8).submit(5).build(&state);
    state.submit(s);
    let mut p = PolicyKind::Priority.build();
    let d = p.schedule(&state, 10);
    let placed: Vec<(String, String)> = d
        .iter()
        .filter_map(|d| match &d.action {
            Action::Start { workload, alloc } => {
                Some((state.spec(*workload).id.clone(), state.cluster.node(alloc.parts[0].0).name.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(placed, [("a1".to_string(), "ta-0".to_string()), ("a2".into(), "sh-0".into())]);
    apply(&mut state, d, 10);
    let why = p.explain(&state, WorkloadId(2), 10);
    assert_eq!(why.rule, Rule::PrioPools);
    assert!(why.detail.contains("legacy pools of org/a/p"), "{why}");
    // A workload that can never fit its pools is refused at admission.
    let big = Wl::new("big").account("org/c/p").gpus(16).build(&state);
    assert_eq!(p.admit(&state, &big).unwrap_err().rule, Rule::PrioPools);
}

#[test]
fn priority_order_then_fifo() {
    let mut state = StateBuilder::new().pool("p", "H100", 1, 8).shared().account("org/x").build();
    for (id, pr, t) in
        [("n", Priority::Normal, 0), ("l", Priority::Low, 1), ("u", Priority::Urgent, 2), ("h", Priority::High, 3)]
    {
        let s = Wl::new(id).account("org/x").gpus(8).priority(pr).submit(t).build(&state);
        state.submit(s);
    }
    let d = PolicyKind::Priority.build().schedule(&state, 4);
    assert_eq!(started(&state, &d), ["u"]);
    assert_eq!(d[0].reason.rule, Rule::PrioOrder);
}

#[test]
fn priority_preemption_table() {
    struct Case {
        name: &'static str,
        victim_priority: Priority,
        victim_preemptible: bool,
        newcomer: Priority,
        want_preempt: bool,
    }
    let cases = [
        Case {
            name: "higher preempts preemptible lower",
            victim_priority: Priority::Low,
            victim_preemptible: true,
            newcomer: Priority::High,
            want_preempt: true,
        },
        Case {
            name: "non-preemptible is never preempted",
            victim_priority: Priority::Low,
            victim_preemptible: false,
            newcomer: Priority::Urgent,
            want_preempt: false,
        },
        Case {
            name: "equal priority never preempts",
            victim_priority: Priority::High,
            victim_preemptible: true,
            newcomer: Priority::High,
            want_preempt: false,
        },
        Case {
            name: "lower never preempts higher",
            victim_priority: Priority::High,
            victim_preemptible: true,
            newcomer: Priority::Normal,
            want_preempt: false,
        },
    ];
    for c in cases {
        let mut state = StateBuilder::new().pool("p", "H100", 1, 8).shared().account("org/x").account("org/y").build();
        let mut v = Wl::new("v").account("org/x").gpus(8).priority(c.victim_priority);
        if c.victim_preemptible {
            v = v.preemptible();
        }
        let v = v.build(&state);
        state.submit(v);
        let mut p = PolicyKind::Priority.build();
        let d = p.schedule(&state, 0);
        apply(&mut state, d, 0);
        let n = Wl::new("n").account("org/y").gpus(4).priority(c.newcomer).submit(100).build(&state);
        state.submit(n);
        let d = p.schedule(&state, 100);
        let got = preempted(&state, &d);
        if c.want_preempt {
            assert_eq!(got, [("v".to_string(), "n".to_string())], "{}", c.name);
            assert_eq!(d[0].reason.rule, Rule::PrioPreempt);
            apply(&mut state, d, 100);
            // While v is in its grace period, n waits for v's GPUs: no second preemption.
            let d2 = p.schedule(&state, 101);
            assert!(d2.is_empty(), "{}: {d2:?}", c.name);
        } else {
            assert!(got.is_empty(), "{}: {got:?}", c.name);
        }
    }
}

#[test]
fn priority_victims_are_lowest_priority_then_latest_and_minimal() {
    let mut state = StateBuilder::new().pool("p", "H100", 2, 8).shared().account("org/x").build();
    let mut p = PolicyKind::Priority.build();
    for (id, pr, t) in [("old-low", Priority::Low, 0), ("new-low", Priority::Low, 10), ("normal", Priority::Normal, 20)]
    {
        let s = Wl::new(id).account("org/x").gpus(4).priority(pr).submit(t).preemptible().build(&state);
        state.submit(s);
        let d = p.schedule(&state, t);
        apply(&mut state, d, t);
    }
    let s = Wl::new("urgent").account("org/x").gpus(12).priority(Priority::Urgent).submit(30).build(&state);
    state.submit(s);
    let d = p.schedule(&state, 30);
    // 4 GPUs are free; 8 more are needed: both low ones go, the normal one stays.
    let mut got: Vec<String> = preempted(&state, &d).into_iter().map(|(v, _)| v).collect();
    got.sort();
    assert_eq!(got, ["new-low", "old-low"]);
    // With room for one victim only, the most recently started low one goes.
    let mut state = StateBuilder::new().pool("p", "H100", 2, 8).shared().account("org/x").build();
    for (id, t) in [("old-low", 0), ("new-low", 10)] {
        let s = Wl::new(id).account("org/x").gpus(8).priority(Priority::Low).submit(t).preemptible().build(&state);
        state.submit(s);
        let d = p.schedule(&state, t);
        apply(&mut state, d, t);
    }
    let s = Wl::new("urgent").account("org/x").gpus(8).priority(Priority::Urgent).submit(30).build(&state);
    state.submit(s);
    let d = p.schedule(&state, 30);
    assert_eq!(preempted(&state, &d), [("new-low".to_string(), "urgent".to_string())]);
}

/// `explain_all` gives each policy's `explain`, workload by workload: on a
/// busy cluster with work waiting at every priority, in two accounts.
#[test]
fn explain_all_is_explain_of_each() {
    for kind in PolicyKind::ALL {
        let mut state = StateBuilder::new()
            .pool("a", "H100", 2, 8)
            .pool("b", "H100", 1, 8)
            .account("org/x")
            .account("org/y")
            .legacy("org/x", &["a"])
            .legacy("org/y", &["b"])
            .build();
        for i in 0..24u64 {
            let s = Wl::new(format!("w{i}"))
                .account(if i % 3 == 0 { "org/y" } else { "org/x" })
                .gpus([1, 2, 4, 8, 16][i as usize % 5])
                .nodes(if i % 5 == 4 { 2 } else { 0 })
                .priority(Priority::ALL[i as usize % 4])
                .submit(i)
                .build(&state);
            state.submit(s);
        }
        let mut p = kind.build();
        let d = p.schedule(&state, 30);
        apply(&mut state, d, 30);
        let waiting: Vec<WorkloadId> = state.pending.iter().map(|(_, w)| *w).collect();
        assert!(waiting.len() > 10, "{}: work waits", p.name());
        let one_by_one: Vec<_> = waiting.iter().map(|&w| p.explain(&state, w, 40)).collect();
        assert_eq!(p.explain_all(&state, &waiting, 40), one_by_one, "{}", p.name());
        // A subset, out of order.
        let some: Vec<WorkloadId> = waiting.iter().rev().step_by(3).copied().collect();
        let each: Vec<_> = some.iter().map(|&w| p.explain(&state, w, 40)).collect();
        assert_eq!(p.explain_all(&state, &some, 40), each, "{} (subset)", p.name());
    }
}
