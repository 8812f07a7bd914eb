//! MNT-5 in a replay: a node that appears is capacity from its add on. A
//! queued workload starts on it at the add, a gang then runs on a laid-out
//! and the added node, and the capacity measures count the added GPUs only
//! from the add (not the initial nor the final node count).

use allot_core::{NodeAdded, NodeEvent, NodeEventKind, NodeEvents, NodeId, PolicyKind, PoolId, State};
use allot_sim::measures::measure;
use allot_sim::{CapacityStep, SimOptions, SimOutput, simulate};
use allot_testkit::{StateBuilder, Wl};

/// Cluster `a`: pool `p` (one node of 8 H100); with `fleet`, a second
/// cluster `b` with pool `q` (one node of 8 H100) that no workload may use.
fn replay(fleet: bool) -> (State, SimOutput) {
    let mut b = StateBuilder::new();
    if fleet {
        b = b.cluster("a");
    }
    b = b.pool("p", "H100", 1, 8).racks_of(2);
    if fleet {
        b = b.cluster("b").pool("q", "H100", 1, 8);
    }
    let state = b.account("org/x").build();
    let on = if fleet { vec!["a"] } else { Vec::new() };
    let trace = [
        Wl::new("first").account("org/x").gpus(8).nodes(1).work(1000),
        Wl::new("queued").account("org/x").gpus(8).nodes(1).submit(100).work(600),
        Wl::new("gang").account("org/x").gpus(16).nodes(2).submit(200).work(500),
    ]
    .iter()
    .map(|w| w.clone().on(&on).build(&state))
    .collect();
    let pool = if fleet { "a/p" } else { "p" };
    let n = state.cluster.nodes.len() as u32;
    let events = NodeEvents {
        changes: vec![NodeEvent { t: 1600, node: NodeId(n), kind: NodeEventKind::Drain }],
        added: vec![NodeAdded { t: 400, pool: PoolId(0), name: format!("{pool}-1"), node: NodeId(n) }],
    };
    let mut policy = PolicyKind::FifoBackfill.build();
    let opts = SimOptions { check_invariants: true, keep_log: true, until: Some(2000), ..Default::default() };
    simulate(state, trace, events, policy.as_mut(), &opts)
}

/// (event, workload, nodes) of the log's starts.
fn starts(out: &SimOutput) -> Vec<(u64, &str, Vec<&str>)> {
    out.log
        .iter()
        .filter(|e| e.event == "start")
        .map(|e| (e.t, e.workload.as_str(), e.nodes.iter().map(String::as_str).collect()))
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn a_queued_workload_starts_on_a_node_added_at_its_add() {
    let (state, out) = replay(false);
    assert_eq!(
        starts(&out),
        [(0, "first", vec!["p-0"]), (400, "queued", vec!["p-1"]), (1000, "gang", vec!["p-0", "p-1"]),],
        "the queued workload starts at the add; the gang then spans the laid-out and the added node"
    );
    assert_eq!(state.cluster.node(NodeId(1)).rack, 0, "p-1 joined p's rack (racks of 2)");
    // In service: 8 GPUs until the add, 16 until the drain (the node is
    // idle at 1600: drained at once), 8 after.
    let steps: Vec<(u64, u64)> = out.capacity.iter().map(|s: &CapacityStep| (s.t, s.gpus)).collect();
    assert_eq!(steps, [(0, 8), (400, 16), (1600, 8)]);
    assert_eq!((out.total_gpus, out.added_gpus.clone()), (8, vec![(400, 8)]));
    let m = measure(&state, &out).metrics;
    // Horizon 2000. GPUs that existed: 8 × 2000 + 8 × 1600 (from the add).
    // In service: 8 × 2000 + 8 × 1200 (add to drain).
    let (existed, available) = (8.0 * 2000.0 + 8.0 * 1600.0, 8.0 * 2000.0 + 8.0 * 1200.0);
    let assigned = 8.0 * 1000.0 + 8.0 * 600.0 + 16.0 * 500.0;
    assert!(close(m.availability, available / existed), "availability {} (not against 8 or 16 GPUs)", m.availability);
    assert!(close(m.occupancy, assigned / available), "occupancy {}", m.occupancy);
    assert!(close(m.utilization, assigned / available), "utilization {}", m.utilization);
    assert!(close(m.available_gpu_hours, available / 3600.0));
    let queued = state.specs.iter().position(|s| s.id == "queued").expect("in the trace");
    assert_eq!(state.runs[queued].first_start, Some(400));
}

#[test]
fn a_cluster_of_a_fleet_counts_its_added_node_from_the_add() {
    let (state, out) = replay(true);
    assert_eq!(starts(&out)[1], (400, "queued", vec!["a/p-1"]));
    let r = measure(&state, &out);
    let a = &r.clusters["a"];
    let (existed, available) = (8.0 * 2000.0 + 8.0 * 1600.0, 8.0 * 2000.0 + 8.0 * 1200.0);
    assert_eq!(a.gpus, 16, "its GPUs at the end");
    assert!(close(a.availability, available / existed), "cluster a availability {}", a.availability);
    let b = &r.clusters["b"];
    assert!(close(b.availability, 1.0), "cluster b is untouched: {}", b.availability);
    // The fleet: 16 GPUs at the start, 8 more from 400.
    let fleet_existed = 16.0 * 2000.0 + 8.0 * 1600.0;
    let fleet_available = 16.0 * 2000.0 + 8.0 * 1200.0;
    assert!(close(r.metrics.availability, fleet_available / fleet_existed));
}
