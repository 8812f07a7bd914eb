//! The measures of a real replay: the hand-checked schedule of `golden.rs`
//! (priority policy, one preemption, one node failure) measured end to end.

use allot_core::{NodeEvent, NodeEventKind, NodeId, PolicyKind, Priority, State};
use allot_sim::measures::measure;
use allot_sim::report::{summary_table, write_workloads_csv};
use allot_sim::{SimOptions, SimOutput, simulate};
use allot_testkit::{StateBuilder, Wl};

fn replay() -> (State, SimOutput) {
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
    let events = vec![
        NodeEvent { t: 1000, node: NodeId(1), kind: NodeEventKind::Fail },
        NodeEvent { t: 1100, node: NodeId(1), kind: NodeEventKind::Repair },
    ];
    let mut policy = PolicyKind::Priority.build();
    simulate(state, trace, events, policy.as_mut(), &SimOptions::default())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn measures_of_the_golden_schedule() {
    // Attempts: a 0–160 (8 GPUs, preempted, nothing kept), b 160–360 (4),
    // c 160–660 (4), a 660–1000 (8, node failure, 300 s of 340 kept),
    // a 1100–1800 (8). Node p-1 (4 GPUs) is down from 1000 to 1100.
    let (state, out) = replay();
    assert_eq!(out.horizon_end, 1800, "the run ends when a finishes");
    let r = measure(&state, &out);
    let m = &r.metrics;
    let available = 8.0 * 1800.0 - 4.0 * 100.0;
    let assigned = 8.0 * 160.0 + 4.0 * 200.0 + 4.0 * 500.0 + 8.0 * 340.0 + 8.0 * 700.0;
    assert!(close(m.availability, available / (8.0 * 1800.0)));
    assert!(close(m.occupancy, assigned / available));
    assert!(close(m.useful_gpu_hours, (8.0 * 1000.0 + 4.0 * 200.0 + 4.0 * 500.0) / 3600.0));
    // Preemption: 60 s grace + 100 s of unsaved progress on 8 GPUs.
    assert_eq!(m.preemptions, 1);
    assert!(close(m.preemption_overhead_gpu_hours, 8.0 * (60.0 + 100.0) / 3600.0));
    assert!(close(m.preemption_overhead_fraction, 8.0 * 160.0 / assigned));
    assert_eq!(m.failures, 1);
    assert!(close(m.lost_gpu_hours_failures, 8.0 * 40.0 / 3600.0));
    // Queue times: a 0, b 60, c 10.
    let q = m.queue_time_s.unwrap();
    assert_eq!((q.p50, q.p95, q.p99), (10, 60, 60));
    assert!(close(q.mean, 70.0 / 3.0));
    let jct = m.jct_s.unwrap();
    assert_eq!((jct.p50, jct.p99), (510, 1800), "JCTs 260, 510, 1800");
    assert_eq!((m.completed_workloads, m.unfinished_workloads), (3, 0));
    assert!(close(r.accounts["org/x"].gpu_hours, assigned / 3600.0));
    assert_eq!(r.accounts["org/x"].delivered_share, 1.0);
    assert_eq!(m.jain_index, Some(1.0), "one saturating account");
}

#[test]
fn report_outputs_cover_every_workload() {
    let (state, out) = replay();
    let mut csv = Vec::new();
    write_workloads_csv(&mut csv, &state, out.horizon_end).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    assert_eq!(csv.lines().count(), 1 + state.specs.len());
    assert!(csv.lines().nth(1).unwrap().starts_with("a,org/x,batch,8,0,0,1800,0,1800,2,"), "{csv}");
    let r = measure(&state, &out);
    let table = summary_table(&[&r]);
    assert!(table.lines().next().unwrap().ends_with(&r.policy), "{table}");
}
