//! `allot` preemption: the time-slicing contract (CON-1 … CON-5), budgets
//! (BUD-2), the interactive lane (INT-1) and services (SVC-1, SVC-2).

mod allot_support;

use allot_core::policy::AllotPolicy;
use allot_core::{Class, Phase, Policy, Rule, State};
use allot_support::{advance, charge, held, pass, preempted, started, sub, sub_int, sub_wl};
use allot_testkit::{StateBuilder, Wl};

const SLICE: u64 = 7200;
const GRACE: u64 = 600;

fn two_accounts(nodes: u32) -> State {
    StateBuilder::new().pool("p", "H100", nodes, 8).account("org/a").account("org/b").build()
}

/// org/a's eight 1-GPU workloads start at 0 on the one 8-GPU node; org/b's
/// eight wait from 10.
fn a_holds_b_waits(state: &mut State, p: &mut AllotPolicy) {
    for i in 0..8 {
        sub(state, &format!("a{i}"), "org/a", 1, 0);
    }
    pass(p, state, 0);
    for i in 0..8 {
        sub(state, &format!("b{i}"), "org/b", 1, 10);
    }
}

#[test]
fn no_policy_preemption_before_the_slice() {
    let mut state = two_accounts(1);
    let mut p = AllotPolicy::new();
    a_holds_b_waits(&mut state, &mut p);
    for t in [10, 3600, SLICE - 1] {
        let d = pass(&mut p, &mut state, t);
        assert!(d.is_empty(), "t={t}: {d:?}");
    }
    // At the slice end b preempts until the accounts are level (CON-4).
    let d = pass(&mut p, &mut state, SLICE);
    let pre = preempted(&state, &d);
    assert_eq!(pre.len(), 4, "{pre:?}");
    assert!(pre.iter().all(|(v, by, r)| v.starts_with('a') && by.starts_with('b') && *r == Rule::NoPingPong));
    assert!(d[0].reason.detail.contains("usage/entitlement org/b 0.00 -> 0.12 vs org/a"), "{}", d[0].reason);
    // During grace nothing new happens: the GPUs are claimed for b.
    assert!(pass(&mut p, &mut state, SLICE + 30).is_empty());
    advance(&mut state, SLICE + GRACE);
    let d = pass(&mut p, &mut state, SLICE + GRACE);
    assert_eq!(started(&state, &d).len(), 4);
    assert_eq!((held(&state, "org/a"), held(&state, "org/b")), (4, 4));
    // Level accounts do not preempt each other back (no ping-pong).
    for t in [2 * SLICE + GRACE, 3 * SLICE, 10 * SLICE] {
        assert!(pass(&mut p, &mut state, t).is_empty(), "t={t}");
    }
}

#[test]
fn over_budget_work_has_no_slice() {
    let mut state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account_with("org/a", |a| a.budget_gpu_hours = Some(10.0))
        .account("org/b")
        .build();
    charge(&mut state, "org/a", 8, 0, 12.0);
    let mut p = AllotPolicy::new();
    sub(&mut state, "a1", "org/a", 8, 10_000);
    pass(&mut p, &mut state, 10_000);
    sub(&mut state, "b1", "org/b", 8, 10_100);
    let d = pass(&mut p, &mut state, 10_100);
    assert_eq!(preempted(&state, &d), [("a1".into(), "b1".into(), Rule::BudgetOver)]);
    assert!(d[0].reason.detail.contains("over budget 12.2/10 NGH"), "{}", d[0].reason);
    advance(&mut state, 10_100 + GRACE);
    let d = pass(&mut p, &mut state, 10_100 + GRACE);
    assert_eq!(started(&state, &d), ["b1"]);
}

#[test]
fn over_budget_work_respects_the_slice_of_other_over_budget_work() {
    let mut state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account_with("org/a", |a| a.budget_gpu_hours = Some(1.0))
        .account_with("org/b", |a| a.budget_gpu_hours = Some(1.0))
        .build();
    charge(&mut state, "org/a", 8, 0, 2.0);
    charge(&mut state, "org/b", 8, 0, 2.0);
    let mut p = AllotPolicy::new();
    for i in 0..8 {
        sub(&mut state, &format!("a{i}"), "org/a", 1, 10_000);
    }
    pass(&mut p, &mut state, 10_000);
    for i in 0..8 {
        sub(&mut state, &format!("b{i}"), "org/b", 1, 10_001);
    }
    assert!(pass(&mut p, &mut state, 10_001).is_empty());
    let d = pass(&mut p, &mut state, 10_000 + SLICE);
    assert_eq!(preempted(&state, &d).len(), 4);
    assert!(d.iter().all(|d| d.reason.rule == Rule::NoPingPong));
}

#[test]
fn interactive_lane_preempts_batch_past_its_slice_with_least_loss() {
    let mut state = two_accounts(1);
    let mut p = AllotPolicy::new();
    // Eight batch jobs of org/a with different checkpoint intervals.
    for (i, ck) in [0u64, 3000, 1000, 5000, 4000, 0, 7000, 3000].into_iter().enumerate() {
        sub_wl(&mut state, Wl::new(format!("a{i}")).account("org/a").checkpoint(ck).work(100_000));
    }
    pass(&mut p, &mut state, 0);
    // Within the slice the lane does not preempt.
    sub_int(&mut state, "i0", "org/a", 2, 100);
    assert!(pass(&mut p, &mut state, 100).is_empty());
    // At 8,000 s, a2 (ck 1000) and a4 (ck 4000) have nothing unsaved.
    let d = pass(&mut p, &mut state, 8000);
    let mut victims: Vec<String> = preempted(&state, &d)
        .into_iter()
        .map(|(v, _, r)| {
            assert_eq!(r, Rule::Interactive);
            v
        })
        .collect();
    victims.sort();
    assert_eq!(victims, ["a2", "a4"]);
    advance(&mut state, 8000 + GRACE);
    let d = pass(&mut p, &mut state, 8000 + GRACE);
    assert_eq!(started(&state, &d), ["i0"]);
    assert_eq!(d[0].reason.rule, Rule::Interactive);
    // Requeued with their work, same id and submit time.
    let a2 = state.specs.iter().position(|s| s.id == "a2").unwrap();
    assert_eq!(state.runs[a2].phase, Phase::Pending);
    assert_eq!(state.runs[a2].remaining, 100_000 - 8000);
}

#[test]
fn lane_work_is_not_preempted_for_fair_share() {
    let mut state = two_accounts(1);
    let mut p = AllotPolicy::new();
    for i in 0..4 {
        sub_int(&mut state, &format!("i{i}"), "org/a", 2, 0);
    }
    pass(&mut p, &mut state, 0);
    // Batch may not undo the lane, nor may other interactive work of a
    // better-ranked account: lane work is short by definition.
    sub(&mut state, "b", "org/b", 2, 10);
    sub_int(&mut state, "ib", "org/b", 2, 20);
    for t in [20, 3 * SLICE] {
        assert!(pass(&mut p, &mut state, t).is_empty(), "t={t}");
    }
}

#[test]
fn services_are_never_preempted_and_capped() {
    let mut state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account_with("org/a", |a| a.max_service_gpus = Some(6))
        .account("org/b")
        .build();
    let mut p = AllotPolicy::new();
    let svc = |id: &str| Wl::new(id).account("org/a").class(Class::Service).gpus(4).work(1_000_000);
    sub_wl(&mut state, svc("s1"));
    sub_wl(&mut state, svc("s2"));
    let d = pass(&mut p, &mut state, 0);
    assert_eq!(started(&state, &d), ["s1"], "SVC-2 caps org/a at 6 service GPUs");
    let s2 = state.specs.iter().position(|s| s.id == "s2").unwrap();
    let why = p.explain(&state, allot_core::WorkloadId(s2 as u32), 0);
    assert_eq!(why.rule, Rule::ServiceCap);
    assert!(why.detail.contains("holds 4 service GPUs; 4 more would exceed its cap of 6"), "{why}");
    // A service bigger than the cap is refused at admission.
    let big = Wl::new("big").account("org/a").class(Class::Service).gpus(8).build(&state);
    assert_eq!(p.admit(&state, &big).unwrap_err().rule, Rule::ServiceCap);
    sub(&mut state, "b", "org/b", 8, 10);
    assert!(
        pass(&mut p, &mut state, 100 * SLICE).iter().all(|d| !matches!(d.action, allot_core::Action::Preempt { .. }))
    );
}

#[test]
fn claims_gpus_being_released_instead_of_preempting_again() {
    let mut state = two_accounts(2);
    let mut p = AllotPolicy::new();
    sub(&mut state, "a8", "org/a", 8, 0);
    sub(&mut state, "a4", "org/a", 4, 0);
    pass(&mut p, &mut state, 0);
    sub(&mut state, "b8", "org/b", 8, 8000);
    let d = pass(&mut p, &mut state, 8000);
    // CON-5: a4 loses less work than a8 and suffices with the 4 free GPUs.
    assert_eq!(preempted(&state, &d), [("a4".into(), "b8".into(), Rule::NoPingPong)]);
    // Later passes during grace: no new victim, and the free half-node is
    // held for b8 (nothing else starts there).
    sub(&mut state, "a1", "org/a", 1, 8010);
    for t in [8010, 8300] {
        assert!(pass(&mut p, &mut state, t).is_empty(), "t={t}");
    }
    let b8 = state.specs.iter().position(|s| s.id == "b8").unwrap();
    let why = p.explain(&state, allot_core::WorkloadId(b8 as u32), 8300);
    assert_eq!(why.rule, Rule::Grace, "{why}");
    advance(&mut state, 8000 + GRACE);
    let d = pass(&mut p, &mut state, 8000 + GRACE);
    assert_eq!(started(&state, &d), ["b8"]);
}

#[test]
fn victims_are_pruned_to_a_minimal_set() {
    let mut state = two_accounts(2);
    let mut p = AllotPolicy::new();
    // org/a holds two 4-GPU jobs on node 0 and one 8-GPU job on node 1; the
    // 8-GPU job has nothing unsaved so it goes first and suffices.
    sub_wl(&mut state, Wl::new("big").account("org/a").gpus(8).checkpoint(1000).work(100_000));
    sub(&mut state, "s1", "org/a", 4, 1);
    sub(&mut state, "s2", "org/a", 4, 2);
    pass(&mut p, &mut state, 10);
    sub(&mut state, "b", "org/b", 8, 100);
    let d = pass(&mut p, &mut state, 8010);
    assert_eq!(preempted(&state, &d), [("big".into(), "b".into(), Rule::NoPingPong)]);
}

#[test]
fn the_swap_must_leave_the_preemptor_strictly_better() {
    // 16 GPUs in 8-GPU jobs. When a holds both nodes, b asking 8 ranks
    // better after the swap (8 vs 8 plus a's history) and preempts; when b
    // already holds one node, b would hold 16 against a's 0 and may not.
    for (b_holds, want) in [(false, 1usize), (true, 0)] {
        let mut state = two_accounts(2);
        let mut p = AllotPolicy::new();
        sub(&mut state, "a1", "org/a", 8, 0);
        let other = if b_holds { ("b0", "org/b") } else { ("a2", "org/a") };
        sub(&mut state, other.0, other.1, 8, 0);
        pass(&mut p, &mut state, 0);
        sub(&mut state, "b", "org/b", 8, 1);
        let d = pass(&mut p, &mut state, SLICE);
        assert_eq!(preempted(&state, &d).len(), want, "b holds a node: {b_holds}: {d:?}");
    }
}

/// One 8-GPU node: over-budget a holds 4 GPUs, 4 are free; in-budget b
/// waits for 8 and preempts a (BUD-2), taking a's 4 and the 4 free beside
/// them. During a's grace an interactive 4-GPU workload of c arrives.
fn claim_scene(keep: bool) -> (State, AllotPolicy) {
    let mut state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account_with("org/a", |a| a.budget_gpu_hours = Some(1.0))
        .account("org/b")
        .account("org/c")
        .contract(|k| k.keep_claims = keep)
        .build();
    charge(&mut state, "org/a", 8, 0, 2.0);
    let mut p = AllotPolicy::new();
    sub(&mut state, "a", "org/a", 4, 10_000);
    let d = pass(&mut p, &mut state, 10_000);
    assert_eq!(started(&state, &d), ["a"]);
    sub(&mut state, "b", "org/b", 8, 10_100);
    let d = pass(&mut p, &mut state, 10_100);
    assert_eq!(preempted(&state, &d), [("a".into(), "b".into(), Rule::BudgetOver)]);
    assert_eq!(state.claims.len(), usize::from(keep), "CON-10 keeps b's 8 GPUs only when on");
    sub_int(&mut state, "c", "org/c", 4, 10_160);
    (state, p)
}

#[test]
fn a_kept_claim_holds_the_free_gpus_beside_the_victims_until_its_workload_starts() {
    let t = 10_100;
    // keep_claims off (the default): interactive c ranks first in the next
    // pass and starts on the free half, so when a has stopped b does not
    // fit and the preemption was for nothing: a starts again on its own
    // GPUs (capacity no in-budget work can use).
    let (mut state, mut p) = claim_scene(false);
    let d = pass(&mut p, &mut state, t + 60);
    assert_eq!(started(&state, &d), ["c"]);
    advance(&mut state, t + GRACE);
    let d = pass(&mut p, &mut state, t + GRACE);
    assert_eq!(started(&state, &d), ["a"], "a is back on the GPUs it was stopped for");
    // keep_claims on: c waits (the free half is b's), and b starts on its
    // 8 GPUs when a has stopped, citing CON-10.
    let (mut state, mut p) = claim_scene(true);
    assert!(pass(&mut p, &mut state, t + 60).is_empty());
    let b = state.pending.iter().find(|(_, w)| state.spec(*w).id == "b").unwrap().1;
    let why = p.explain(&state, b, t + 60);
    assert!(why.detail.contains("being released"), "{why}");
    advance(&mut state, t + GRACE);
    let d = pass(&mut p, &mut state, t + GRACE);
    assert_eq!(started(&state, &d), ["b"]);
    assert_eq!(d[0].reason.rule, Rule::ClaimKept, "{}", d[0].reason);
    assert!(state.claims.is_empty(), "a started workload keeps no claim");
}

#[test]
fn a_kept_claim_ends_when_its_workload_leaves_the_queue_or_a_gpu_of_it_is_lost() {
    let t = 10_100;
    // b is cancelled in the grace: its claim goes, and c starts at once.
    let (mut state, mut p) = claim_scene(true);
    let b = state.pending.iter().find(|(_, w)| state.spec(*w).id == "b").unwrap().1;
    state.end_pending(b, t + 30, Phase::Cancelled, allot_core::Reason::new(Rule::Completed, "cancelled"));
    assert!(state.claims.is_empty());
    let d = pass(&mut p, &mut state, t + 60);
    assert_eq!(started(&state, &d), ["c"]);
    // The node fails in the grace: the claim cannot be had as it was, so it
    // is dropped before the next pass.
    let (mut state, mut p) = claim_scene(true);
    state.set_health(allot_core::NodeId(0), allot_core::Health::Down);
    pass(&mut p, &mut state, t + 60);
    assert!(state.claims.is_empty());
}

#[test]
fn a_swap_margin_keeps_close_ranks_from_trading_gpus() {
    // As in no_policy_preemption_before_the_slice: a holds the node, b waits
    // with eight 1-GPU workloads; at the slice end b preempts while it ranks
    // better after the swap. With a margin (CON-11) it stops sooner: a swap
    // must leave b's side below (1 - margin) x a's.
    struct Case {
        margin: f64,
        preemptions: usize,
    }
    let cases = [
        Case { margin: 0.0, preemptions: 4 },
        Case { margin: 0.3, preemptions: 3 },
        Case { margin: 0.6, preemptions: 2 },
        Case { margin: 0.9, preemptions: 0 },
    ];
    for c in cases {
        let mut state = StateBuilder::new()
            .pool("p", "H100", 1, 8)
            .account("org/a")
            .account("org/b")
            .contract(|k| k.swap_margin = c.margin)
            .build();
        let mut p = AllotPolicy::new();
        a_holds_b_waits(&mut state, &mut p);
        let d = pass(&mut p, &mut state, SLICE);
        let pre = preempted(&state, &d);
        assert_eq!(pre.len(), c.preemptions, "margin {}: {pre:?}", c.margin);
        if let Some(first) = d.first().filter(|_| c.margin > 0.0) {
            assert!(first.reason.detail.contains("CON-11: below"), "{}", first.reason);
        }
    }
}

/// CON-12: org/a (far above its share: 2,000 GPU-hours of earlier use, a
/// ninth of org/b's share) starts the 8-GPU `a` at T0; it checkpoints every
/// 4,000 s of progress. org/b's `b` waits for the whole node. At the slice
/// end (T0 + 7,200) a swap is due (CON-4); `a` would lose 3,200 s and its
/// next checkpoint is 800 s away. A `checkpoint_wait` shorter than that
/// signals it at once; one that covers it waits (and `b` is told why)
/// until the first periodic pass after the checkpoint, which signals it
/// with 10 s unsaved. Work that saves on the signal (CON-8) or declares no
/// interval is never waited for, nor is work that would wait longer than
/// it saves (a 5,000 s interval: 2,800 s away, 2,200 s unsaved).
#[test]
fn a_swap_waits_for_a_checkpoint_due_within_checkpoint_wait() {
    struct Case {
        name: &'static str,
        wait: u64,
        checkpoint: u64,
        on_signal: bool,
        /// When `a` is signalled (after T0), and the progress it loses.
        signalled_at: u64,
        lost: u64,
    }
    let cases = [
        Case { name: "off", wait: 0, checkpoint: 4000, on_signal: false, signalled_at: SLICE, lost: 3200 },
        Case { name: "too far", wait: 799, checkpoint: 4000, on_signal: false, signalled_at: SLICE, lost: 3200 },
        Case { name: "due", wait: 800, checkpoint: 4000, on_signal: false, signalled_at: 8010, lost: 10 },
        Case { name: "saves less", wait: 3600, checkpoint: 5000, on_signal: false, signalled_at: SLICE, lost: 2200 },
        Case { name: "no interval", wait: 800, checkpoint: 0, on_signal: false, signalled_at: SLICE, lost: SLICE },
        Case { name: "saves on signal", wait: 800, checkpoint: 4000, on_signal: true, signalled_at: SLICE, lost: 0 },
    ];
    const T0: u64 = 900_000;
    for c in cases {
        let mut state = StateBuilder::new()
            .pool("p", "H100", 1, 8)
            .account("org/a")
            .account_with("org/b", |a| a.share = Some(9.0))
            .contract(|k| k.checkpoint_wait = c.wait)
            .build();
        charge(&mut state, "org/a", 8, 0, 2000.0);
        let mut p = AllotPolicy::new();
        let wl = Wl::new("a").account("org/a").gpus(8).submit(T0).work(100_000).checkpoint(c.checkpoint);
        let mut spec = wl.build(&state);
        spec.checkpoint_on_signal = c.on_signal;
        let a = state.submit(spec);
        pass(&mut p, &mut state, T0);
        let b = sub(&mut state, "b", "org/b", 8, T0 + 10);
        // Passes every scheduling_interval while work waits, as the engine runs them.
        let every = state.contract.scheduling_interval;
        let mut at = T0 + SLICE;
        let d = loop {
            let d = pass(&mut p, &mut state, at);
            if !d.is_empty() {
                break d;
            }
            let why = p.explain(&state, b, at);
            assert_eq!(why.rule, Rule::CheckpointWait, "{}: {why}", c.name);
            let at_checkpoint = format!("preempts a for it just after their checkpoint at t={}", T0 + 8000);
            assert!(why.detail.contains(&at_checkpoint), "{}: {why}", c.name);
            let lead = why.situation.as_deref().unwrap_or_default();
            assert!(lead.contains("right after that work saves a checkpoint"), "{}: {why}", c.name);
            at += every;
            assert!(at <= T0 + 8000 + every, "{}: still waiting at {at}", c.name);
        };
        assert_eq!(preempted(&state, &d), [("a".into(), "b".into(), Rule::NoPingPong)], "{}", c.name);
        assert_eq!(at - T0, c.signalled_at, "{}", c.name);
        let unsaved = state.run(a).unsaved_progress(state.spec(a), at);
        let lost = if c.on_signal { 0 } else { unsaved };
        assert_eq!(lost, c.lost, "{}", c.name);
    }
}

/// CON-12 changes when a victim is signalled, never which: org/a runs `a`
/// (checkpoint due 800 s after the slice end, 3,200 s unsaved) and `e` (no
/// checkpoints, so a preemption would lose all its 7,200 s). CON-5 chooses `a`, the
/// one that loses least; the swap waits for its checkpoint rather than
/// stopping `e`, and holds `a` for `b` in each pass meanwhile, so `c`
/// (org/c, ranked after `b`) takes `e` instead of it.
#[test]
fn a_swap_that_waits_for_a_checkpoint_keeps_its_victim_and_holds_it() {
    const T0: u64 = 900_000;
    let mut state = StateBuilder::new()
        .pool("p", "H100", 2, 8)
        .account("org/a")
        .account_with("org/b", |a| a.share = Some(9.0))
        .account_with("org/c", |a| a.share = Some(3.0))
        .contract(|k| k.checkpoint_wait = 1800)
        .build();
    charge(&mut state, "org/a", 16, 0, 4000.0);
    let mut p = AllotPolicy::new();
    sub_wl(&mut state, Wl::new("a").account("org/a").gpus(8).submit(T0).work(100_000).checkpoint(4000));
    sub_wl(&mut state, Wl::new("e").account("org/a").gpus(8).submit(T0).work(100_000));
    pass(&mut p, &mut state, T0);
    sub(&mut state, "b", "org/b", 8, T0 + 10);
    let d = pass(&mut p, &mut state, T0 + SLICE);
    assert!(preempted(&state, &d).is_empty(), "{d:?}");
    sub(&mut state, "c", "org/c", 8, T0 + SLICE + 1);
    let d = pass(&mut p, &mut state, T0 + SLICE + 60);
    assert_eq!(preempted(&state, &d), [("e".into(), "c".into(), Rule::NoPingPong)]);
    advance(&mut state, T0 + SLICE + 60 + GRACE);
    let d = pass(&mut p, &mut state, T0 + SLICE + 60 + GRACE);
    // The GPUs e released go to the better-ranked b (CON-10 is off).
    assert_eq!(started(&state, &d), ["b"]);
    // Just after a's checkpoint c's swap has nothing to wait for.
    let d = pass(&mut p, &mut state, T0 + 8010);
    assert_eq!(preempted(&state, &d), [("a".into(), "c".into(), Rule::NoPingPong)]);
    let a = state.running.iter().copied().find(|w| state.spec(*w).id == "a").unwrap();
    assert_eq!(state.run(a).unsaved_progress(state.spec(a), T0 + 8010), 10);
}
