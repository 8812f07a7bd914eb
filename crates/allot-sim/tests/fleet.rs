//! Fleets in the simulator: per-cluster measures against hand-computed
//! values (fleet-wide fair share across clusters is in
//! `allot_properties.rs`).

use allot_core::{NodeEvent, NodeEventKind, PolicyKind, State, Time, WorkloadSpec};
use allot_sim::measures::measure;
use allot_sim::report::{Report, summary_table};
use allot_sim::{SimOptions, SimOutput, simulate};
use allot_testkit::{StateBuilder, Wl};

fn run(
    kind: PolicyKind,
    state: State,
    specs: Vec<WorkloadSpec>,
    events: Vec<NodeEvent>,
    until: Option<Time>,
) -> (State, SimOutput) {
    let opts = SimOptions { until, check_invariants: true, keep_log: false, ..Default::default() };
    let mut policy = kind.build();
    simulate(state, specs, events, policy.as_mut(), &opts)
}

/// Cluster `a`: one node of 8 GPUs; cluster `b`: one node of 4, which fails
/// at t = 150 and stays down.
///
/// * w1: 8 GPUs, util 0.5, at 0 for 100 s: only `a` fits it: `a` [0, 100);
/// * w2: 4 GPUs pinned to `b`, util 0.25, at 0 for 50 s: `b` [0, 50);
/// * w3: 8 GPUs, util 1, at 10 for 100 s: waits for `a`: `a` [100, 200), queued 90 s;
/// * w4: 2 GPUs pinned to `b`, util 1, at 100 for 40 s: `b` [100, 140).
fn two_clusters(kind: PolicyKind) -> Report {
    let state = StateBuilder::new()
        .cluster("a")
        .pool("p", "H100", 1, 8)
        .cluster("b")
        .pool("q", "H100", 1, 4)
        .account("org/t")
        .build();
    let wl = |id: &str, gpus, submit, work, util| {
        Wl::new(id).account("org/t").gpus(gpus).submit(submit).work(work).util(util)
    };
    let specs = vec![
        wl("w1", 8, 0, 100, 0.5).build(&state),
        wl("w2", 4, 0, 50, 0.25).on(&["b"]).build(&state),
        wl("w3", 8, 10, 100, 1.0).build(&state),
        wl("w4", 2, 100, 40, 1.0).on(&["b"]).build(&state),
    ];
    let node = state.cluster.node_by_name("b/q-0").expect("b's node");
    let events = vec![NodeEvent { t: 150, node, kind: NodeEventKind::Fail }];
    let (state, out) = run(kind, state, specs, events, None);
    measure(&state, &out)
}

#[test]
fn per_cluster_measures_match_hand_computed_values() {
    // (cluster, gpus, availability, occupancy, utilization, assigned GPU-h,
    //  started, queue p50, p95, mean)
    type Want = (&'static str, u64, f64, f64, f64, f64, u64, u64, u64, f64);
    let want: &[Want] = &[
        // a: 8 × 200 available; 8 × 100 + 8 × 100 assigned; 800 × 0.5 + 800 × 1.
        ("a", 8, 1.0, 1.0, 1200.0 / 1600.0, 1600.0 / 3600.0, 2, 0, 90, 45.0),
        // b: 4 × 150 available; 4 × 50 + 2 × 40 assigned; 200 × 0.25 + 80 × 1.
        ("b", 4, 0.75, 280.0 / 600.0, 130.0 / 600.0, 280.0 / 3600.0, 2, 0, 0, 0.0),
    ];
    for kind in [PolicyKind::Fifo, PolicyKind::Allot] {
        let r = two_clusters(kind);
        assert_eq!(r.horizon_s, 200, "{kind:?}");
        assert_eq!(r.clusters.len(), 2, "{kind:?}");
        for &(name, gpus, avail, occ, util, assigned_h, started, p50, p95, mean) in want {
            let c = &r.clusters[name];
            let close = |got: f64, want: f64, what: &str| {
                assert!((got - want).abs() < 1e-9, "{kind:?} {name} {what}: {got} != {want}");
            };
            assert_eq!(c.gpus, gpus, "{kind:?} {name}");
            close(c.availability, avail, "availability");
            close(c.occupancy, occ, "occupancy");
            close(c.utilization, util, "utilization");
            close(c.assigned_gpu_hours, assigned_h, "assigned GPU-h");
            assert_eq!(c.started_workloads, started, "{kind:?} {name} started");
            let q = c.queue_time_s.expect("started workloads");
            assert_eq!((q.p50, q.p95), (p50, p95), "{kind:?} {name} queue");
            close(q.mean, mean, "queue mean");
            assert_eq!(c.queue_time_by_class.interactive, None, "{kind:?} {name}");
        }
        // The clusters add up to the fleet: available and assigned time.
        let sum = |f: fn(&allot_sim::report::ClusterReport) -> f64| r.clusters.values().map(f).sum::<f64>();
        assert!((sum(|c| c.available_gpu_hours) - r.metrics.available_gpu_hours).abs() < 1e-9);
        assert!((sum(|c| c.assigned_gpu_hours) - r.metrics.assigned_gpu_hours).abs() < 1e-9);
        assert!((r.metrics.availability - 2200.0 / 2400.0).abs() < 1e-9);
        assert_eq!(r.clusters["a"].index, 0);
        assert_eq!(r.clusters["b"].index, 1);
    }
}

#[test]
fn the_per_cluster_table_and_keys_appear_only_for_fleets() {
    let fleet = two_clusters(PolicyKind::Fifo);
    let text = summary_table(&[&fleet]);
    assert!(text.contains("cluster a (8 GPUs)") && text.contains("cluster b (4 GPUs)"), "{text}");
    let json = serde_json::to_value(&fleet).expect("serialises");
    assert_eq!(json["clusters"]["b"]["availability"].as_f64(), Some(0.75));

    let state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/t").build();
    let specs = vec![Wl::new("w").account("org/t").gpus(8).work(100).build(&state)];
    let (state, out) = run(PolicyKind::Fifo, state, specs, Vec::new(), None);
    assert!(out.clusters.is_empty());
    let one = measure(&state, &out);
    assert!(one.clusters.is_empty());
    assert!(!summary_table(&[&one]).contains("cluster "), "a fleet of one has no per-cluster table");
    let json = serde_json::to_value(&one).expect("serialises");
    assert!(json.get("clusters").is_none(), "no clusters key for a fleet of one: {json}");
}
