//! `allot` explanations (every reason names its rule and the numbers),
//! admission (INT-2, SVC-2, PLACE-*) and time-based wake-ups.

mod allot_support;

use allot_core::cluster::{Health, NodeId};
use allot_core::policy::AllotPolicy;
use allot_core::{Class, Policy, Rule, WorkloadId};
use allot_support::{charge, pass, sub, sub_int, sub_wl};
use allot_testkit::{StateBuilder, Wl};

#[test]
fn explanations_name_the_rule_and_the_numbers() {
    struct Case {
        name: &'static str,
        rule: Rule,
        contains: &'static str,
    }
    // 2 racks of 1 node × 8 GPUs. org/a used 1,204 NGH of a 1,000 budget.
    let mut state = StateBuilder::new()
        .pool("p", "H100", 4, 8)
        .racks_of(2)
        .account_with("org/a", |a| a.budget_gpu_hours = Some(1000.0))
        .account("org/b")
        .account("org/c")
        .build();
    charge(&mut state, "org/a", 32, 0, 1204.0);
    let t = 200_000;
    let mut p = AllotPolicy::new();
    // org/c holds 24 GPUs (in its slice); 8 are free, one node in rack 1.
    for i in 0..3 {
        sub(&mut state, &format!("c{i}"), "org/c", 8, t);
    }
    pass(&mut p, &mut state, t);
    let over = sub(&mut state, "over", "org/a", 16, t + 1);
    let big_b = sub_wl(&mut state, Wl::new("big-b").account("org/b").gpus(16).nodes(2).submit(t + 2).work(9999));
    let big_c = sub(&mut state, "big-c", "org/c", 16, t + 3);
    let cases = [
        (
            over,
            Case {
                name: "over budget",
                rule: Rule::BudgetFirst,
                contains: "account org/a over budget 1,204/1,000 NGH",
            },
        ),
        (
            big_b,
            Case {
                name: "placement at the top rank",
                rule: Rule::PlaceGang,
                contains: "waiting for 16 GPUs on exactly 2 nodes (8 each); 8 free in the pools it may use, best rack has 8",
            },
        ),
        (big_b, Case { name: "slice", rule: Rule::PlaceGang, contains: "the earliest slice ends at t=207200" }),
        (
            big_c,
            Case {
                name: "rank",
                rule: Rule::FairShare,
                contains: "rank 2 behind org/b (usage/entitlement 0.00 vs 1.13)",
            },
        ),
    ];
    for (w, c) in cases {
        let why = p.explain(&state, w, t + 10);
        assert_eq!(why.rule, c.rule, "{}: {why}", c.name);
        assert!(why.detail.contains(c.contains), "{}: {why}", c.name);
    }
}

#[test]
fn explains_users_and_fifo_within_a_project() {
    let mut state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/p").build();
    let mut p = AllotPolicy::new();
    sub_wl(&mut state, Wl::new("u1-run").account("org/p").user("u1").gpus(4).work(99_999));
    pass(&mut p, &mut state, 0);
    let u1 = sub_wl(&mut state, Wl::new("u1-big").account("org/p").user("u1").gpus(8).submit(1));
    let u2 = sub_wl(&mut state, Wl::new("u2-big").account("org/p").user("u2").gpus(8).submit(2));
    let u2b = sub_wl(&mut state, Wl::new("u2-big2").account("org/p").user("u2").gpus(8).submit(3));
    let why = p.explain(&state, u1, 10);
    assert_eq!(why.rule, Rule::FairUsers, "{why}");
    assert!(why.detail.contains("user u1 is behind user u2 (usage+held 4.0 vs 0.0 GPUs)"), "{why}");
    let why = p.explain(&state, u2b, 10);
    assert!(why.detail.contains("1 earlier workload of user u2 in org/p goes first"), "{why}");
    let why = p.explain(&state, u2, 10);
    assert!(why.detail.starts_with("waiting for 8 GPUs"), "{why}");
}

/// Issue 30, point 4: with every node it may use drained or down, a
/// waiting workload is told so (PLACE-6), not that better-ranked work took
/// the GPUs; with one back in service, it is placement's again.
#[test]
fn with_its_nodes_out_of_service_a_workload_is_told_so() {
    let mut state = StateBuilder::new().pool("p", "H100", 3, 8).account("org/a").account("org/b").build();
    state.set_health(NodeId(0), Health::Drained);
    state.set_health(NodeId(1), Health::Down);
    state.set_health(NodeId(2), Health::Draining);
    let mut p = AllotPolicy::new();
    let w = sub(&mut state, "w", "org/a", 4, 10);
    sub(&mut state, "x", "org/b", 8, 11);
    pass(&mut p, &mut state, 20);
    let why = p.explain(&state, w, 21);
    assert_eq!(why.rule, Rule::PlaceHealthy, "{why}");
    assert!(
        why.detail.contains("out of service (1 draining, 1 drained, 1 down; none is in service, it needs 4 GPUs)"),
        "{why}"
    );
    assert!(!why.detail.contains("better-ranked"), "{why}");
    state.set_health(NodeId(0), Health::Up);
    let w16 = sub(&mut state, "w16", "org/a", 16, 30);
    pass(&mut p, &mut state, 40);
    let why = p.explain(&state, w16, 41);
    assert_eq!(why.rule, Rule::PlaceHealthy, "16 GPUs on one 8-GPU node in service: {why}");
    assert!(why.detail.contains("those in service have 8 GPUs in all, it needs 16 GPUs"), "{why}");
    let why = p.explain(&state, w, 41);
    assert_ne!(why.rule, Rule::PlaceHealthy, "one node in service can hold it: {why}");
}

#[test]
fn admission_refuses_what_can_never_run() {
    let state = StateBuilder::new().pool("p", "H100", 2, 8).account("org/a").build();
    let p = AllotPolicy::new();
    let int = |g: u32, s: u64| Wl::new("i").account("org/a").class(Class::Interactive).gpus(g).work(s).build(&state);
    assert!(p.admit(&state, &int(8, 8 * 3600)).is_ok());
    let r = p.admit(&state, &int(16, 3600)).unwrap_err();
    assert_eq!(r.rule, Rule::InteractiveLimit);
    assert!(
        r.detail.contains("asks 16 GPUs for 3600 s; the interactive lane allows at most 8 GPUs for 28800 s"),
        "{r}"
    );
    assert_eq!(p.admit(&state, &int(1, 9 * 3600)).unwrap_err().rule, Rule::InteractiveLimit);
    let huge = Wl::new("h").account("org/a").gpus(24).build(&state);
    assert_eq!(p.admit(&state, &huge).unwrap_err().rule, Rule::PlaceGang);
    let wide = Wl::new("w").account("org/a").gpus(16).nodes(1).build(&state);
    assert_eq!(p.admit(&state, &wide).unwrap_err().rule, Rule::PlaceNodes);
}

#[test]
fn a_pass_rejects_lane_violations_it_was_not_asked_to_admit() {
    let mut state = StateBuilder::new().pool("p", "H100", 2, 8).account("org/a").build();
    let w = sub_int(&mut state, "i", "org/a", 12, 0);
    let d = pass(&mut AllotPolicy::new(), &mut state, 0);
    assert_eq!(d.len(), 1);
    assert!(matches!(d[0].action, allot_core::Action::Reject { workload } if workload == w));
    assert_eq!(d[0].reason.rule, Rule::InteractiveLimit);
}

#[test]
fn wakes_up_when_a_slice_or_a_grace_ends_or_a_budget_is_reached() {
    let mut state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account_with("org/a", |a| a.budget_gpu_hours = Some(10.0))
        .account("org/b")
        .build();
    let mut p = AllotPolicy::new();
    sub(&mut state, "a", "org/a", 4, 0);
    pass(&mut p, &mut state, 0);
    assert_eq!(p.next_wakeup(&state, 0), None, "nothing waits");
    sub(&mut state, "b", "org/b", 8, 5);
    // a's slice ends at 7,200 s; b would not rank better after a swap.
    assert_eq!(p.next_wakeup(&state, 5), Some(7200));
    assert!(pass(&mut p, &mut state, 7200).is_empty());
    // org/a reaches 10 NGH at 4 GPUs after 9,000 s.
    assert_eq!(p.next_wakeup(&state, 7200), Some(9000));
    assert!(p.periodic());
    let d = pass(&mut p, &mut state, 9000);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].reason.rule, Rule::BudgetOver);
    assert_eq!(p.next_wakeup(&state, 9000), Some(9600), "grace ends");
}

#[test]
fn explains_running_workloads_by_their_last_reason() {
    let mut state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/a").build();
    let mut p = AllotPolicy::new();
    let w = sub(&mut state, "a", "org/a", 4, 0);
    pass(&mut p, &mut state, 0);
    assert_eq!(p.explain(&state, w, 1).rule, Rule::FairShare);
    assert!(p.explain(&state, WorkloadId(w.0), 1).detail.contains("next by fair share"));
}
