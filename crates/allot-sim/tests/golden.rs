//! A small trace whose whole schedule was worked out by hand (see the
//! comments), replayed under `priority` with a preemption and a node failure.

use allot_core::{NodeEvent, NodeEventKind, NodeId, PolicyKind, Priority};
use allot_sim::{AttemptEnd, SimOptions, simulate};
use allot_testkit::{StateBuilder, Wl};

#[test]
fn golden_priority_schedule() {
    schedule(NodeEventKind::Fail, NodeEventKind::Repair, "MNT-2");
}

/// The same schedule with p-1 taken out by its cluster's outage and given
/// back by its return (FLEET-3, FLEET-4), as a live server's exported
/// events file has them: the same decisions, the abort citing FLEET-3.
#[test]
fn golden_schedule_through_an_outage() {
    schedule(NodeEventKind::Outage, NodeEventKind::Return, "FLEET-3");
}

fn schedule(fail: NodeEventKind, back: NodeEventKind, fail_rule: &str) {
    // 2 nodes × 4 GPUs in one shared pool; grace 60 s.
    let state =
        StateBuilder::new().pool("p", "H100", 2, 4).shared().account("org/x").contract(|c| c.grace = 60).build();
    let trace = [
        Wl::new("a").account("org/x").gpus(8).nodes(2).work(1000).checkpoint(300).priority(Priority::Low).preemptible(),
        Wl::new("b").account("org/x").gpus(4).submit(100).work(200).priority(Priority::High),
        Wl::new("c").account("org/x").gpus(4).submit(150).work(500),
    ]
    .iter()
    .map(|w| w.build(&state))
    .collect();
    let events =
        vec![NodeEvent { t: 1000, node: NodeId(1), kind: fail }, NodeEvent { t: 1100, node: NodeId(1), kind: back }];
    let mut policy = PolicyKind::Priority.build();
    let opts = SimOptions { check_invariants: true, keep_log: true, ..Default::default() };
    let (state, out) = simulate(state, trace, events, policy.as_mut(), &opts);

    // t=0    a starts on both nodes (finish due at 1000).
    // t=100  b (high) cannot fit: a (low, preemptible) is signalled; its
    //        progress (100 s) is frozen, nothing was checkpointed yet.
    // t=150  c arrives; b and c both wait for a's GPUs (claimed, no new victim).
    // t=160  a's grace ends: stopped, 160 s × 8 GPUs lost, requeued with 1000 s
    //        left; b starts on p-0, c on p-1.
    // t=360  b finishes. t=660 c finishes; a restarts (due at 1660).
    // t=1000 p-1 fails: a had 340 s of progress, 300 checkpointed, 40 lost;
    //        requeued with 700 s left; it needs both nodes, so it waits.
    // t=1100 p-1 repaired: a restarts, finishes at 1800.
    let log: Vec<(u64, &str, &str, Vec<&str>, &str)> = out
        .log
        .iter()
        .map(|e| {
            (
                e.t,
                e.event,
                e.workload.as_str(),
                e.nodes.iter().map(|s| s.as_str()).collect(),
                &e.reason[..e.reason.find(':').unwrap()],
            )
        })
        .collect();
    let want: Vec<(u64, &str, &str, Vec<&str>, &str)> = vec![
        (0, "start", "a", vec!["p-0", "p-1"], "PRIO-1"),
        (100, "preempt", "a", vec!["p-0", "p-1"], "PRIO-3"),
        (160, "stop", "a", vec!["p-0", "p-1"], "CON-3"),
        (160, "start", "b", vec!["p-0"], "PRIO-1"),
        (160, "start", "c", vec!["p-1"], "PRIO-1"),
        (360, "finish", "b", vec!["p-0"], "ENG-1"),
        (660, "finish", "c", vec!["p-1"], "ENG-1"),
        (660, "start", "a", vec!["p-0", "p-1"], "PRIO-1"),
        (1000, "fail", "a", vec!["p-0", "p-1"], fail_rule),
        (1100, "start", "a", vec!["p-0", "p-1"], "PRIO-1"),
        (1800, "finish", "a", vec!["p-0", "p-1"], "ENG-1"),
    ];
    assert_eq!(log, want);
    assert_eq!(out.log[1].by.as_deref(), Some("b"));

    let attempts: Vec<(&str, u64, u64, u64, AttemptEnd)> = out
        .attempts
        .iter()
        .map(|a| (state.spec(a.workload).id.as_str(), a.start, a.end, a.useful_gpu_s, a.outcome))
        .collect();
    assert_eq!(
        attempts,
        vec![
            ("a", 0, 160, 0, AttemptEnd::Preempted),
            ("b", 160, 360, 800, AttemptEnd::Finished),
            ("c", 160, 660, 2000, AttemptEnd::Finished),
            ("a", 660, 1000, 2400, AttemptEnd::Failed),
            ("a", 1100, 1800, 5600, AttemptEnd::Finished),
        ]
    );
    assert_eq!(out.horizon_end, 1800);
    // p-1 out of service for 100 s.
    let cap: Vec<(u64, u64)> = out.capacity.iter().map(|c| (c.t, c.gpus)).collect();
    assert_eq!(cap, vec![(0, 8), (1000, 4), (1100, 8)]);
    let a = state.run(allot_core::WorkloadId(0));
    assert_eq!((a.first_start, a.end, a.preemptions, a.lost_gpu_s), (Some(0), Some(1800), 2, 1280 + 320));
}
