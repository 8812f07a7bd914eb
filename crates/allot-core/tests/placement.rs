//! Table-driven tests of placement (PLACE-1 … PLACE-6).

use allot_core::placement::{Allocation, FreeMap, place};
use allot_core::{Health, NodeId, Rule, State};
use allot_testkit::{StateBuilder, Wl};

/// Occupies `used[i]` GPUs (the lowest indices) on node i.
fn occupy(state: &mut State, used: &[u32]) {
    for (i, &u) in used.iter().enumerate() {
        if u > 0 {
            let a = Allocation { parts: vec![(NodeId(i as u32), (1u64 << u) - 1)] };
            state.free.take(&state.cluster, &a);
        }
    }
}

fn nodes_of(a: &Allocation) -> Vec<(u32, u32)> {
    a.parts.iter().map(|(n, m)| (n.0, m.count_ones())).collect()
}

struct Case {
    name: &'static str,
    /// GPUs already used per node (4 nodes of 8 H100 in racks of 2, then 2 nodes of 8 B200).
    used: [u32; 6],
    down: &'static [u32],
    gpus: u32,
    nodes: u32,
    gpu_type: Option<&'static str>,
    /// Expected (node, gpus) parts, or None when it must not fit.
    want: Option<&'static [(u32, u32)]>,
}

#[test]
fn placement_table() {
    let cases = [
        Case {
            name: "best fit picks the fullest node that fits",
            used: [0, 5, 2, 0, 0, 0],
            down: &[],
            gpus: 3,
            nodes: 0,
            gpu_type: None,
            want: Some(&[(1, 3)]),
        },
        Case {
            name: "single GPU goes to a partly used node, not an empty one",
            used: [0, 7, 0, 0, 0, 0],
            down: &[],
            gpus: 1,
            nodes: 0,
            gpu_type: None,
            want: Some(&[(1, 1)]),
        },
        Case {
            name: "gang is all or nothing across the cluster",
            used: [8, 8, 8, 8, 8, 0],
            down: &[],
            gpus: 9,
            nodes: 0,
            gpu_type: None,
            want: None,
        },
        Case {
            name: "exact node count takes gpus/k on each",
            used: [0, 0, 0, 0, 8, 8],
            down: &[],
            gpus: 8,
            nodes: 2,
            gpu_type: None,
            want: Some(&[(0, 4), (1, 4)]),
        },
        Case {
            name: "multi-node stays inside one rack when possible",
            used: [0, 4, 0, 0, 8, 8],
            down: &[],
            gpus: 16,
            nodes: 2,
            gpu_type: None,
            want: Some(&[(2, 8), (3, 8)]),
        },
        Case {
            name: "multi-node spans racks only when no rack can hold it",
            used: [0, 8, 0, 8, 8, 8],
            down: &[],
            gpus: 16,
            nodes: 2,
            gpu_type: None,
            want: Some(&[(0, 8), (2, 8)]),
        },
        Case {
            name: "any packing uses fewest nodes and best fit for the rest",
            used: [0, 0, 4, 2, 8, 8],
            down: &[],
            gpus: 12,
            nodes: 0,
            gpu_type: None,
            want: Some(&[(0, 8), (1, 4)]),
        },
        Case {
            name: "GPU type constraint selects the pool",
            used: [0, 0, 0, 0, 0, 0],
            down: &[],
            gpus: 8,
            nodes: 0,
            gpu_type: Some("B200"),
            want: Some(&[(4, 8)]),
        },
        Case {
            name: "GPU type constraint with no room waits",
            used: [0, 0, 0, 0, 8, 8],
            down: &[],
            gpus: 1,
            nodes: 0,
            gpu_type: Some("B200"),
            want: None,
        },
        Case {
            name: "down nodes get no work",
            used: [0, 0, 8, 8, 8, 8],
            down: &[0],
            gpus: 8,
            nodes: 0,
            gpu_type: None,
            want: Some(&[(1, 8)]),
        },
        Case {
            name: "never spans pools",
            used: [8, 8, 8, 4, 4, 8],
            down: &[],
            gpus: 8,
            nodes: 0,
            gpu_type: None,
            want: None,
        },
    ];
    for c in cases {
        let mut state =
            StateBuilder::new().pool("h", "H100", 4, 8).racks_of(2).pool("b", "B200", 2, 8).account("org/x").build();
        occupy(&mut state, &c.used);
        for &d in c.down {
            state.set_health(NodeId(d), Health::Down);
        }
        let mut wl = Wl::new("w").account("org/x").gpus(c.gpus).nodes(c.nodes);
        if let Some(t) = c.gpu_type {
            wl = wl.gpu_type(t);
        }
        let spec = wl.build(&state);
        let got = place(&state.cluster, &state.free, &spec, &|_| true);
        match (c.want, got) {
            (Some(want), Ok(a)) => {
                assert_eq!(nodes_of(&a), want, "{}", c.name);
                assert_eq!(a.gpus(), c.gpus, "{}: gang size", c.name);
                for (n, m) in &a.parts {
                    assert_eq!(state.free.free[n.0 as usize] & m, *m, "{}: GPUs not free", c.name);
                }
            }
            (None, Err(_)) => {}
            (want, got) => panic!("{}: want {want:?}, got {got:?}", c.name),
        }
    }
}

#[test]
fn failure_reason_has_the_numbers() {
    let mut state = StateBuilder::new().pool("h", "H100", 4, 8).racks_of(2).account("org/x").build();
    occupy(&mut state, &[4, 4, 4, 4]);
    let spec = Wl::new("w").account("org/x").gpus(16).nodes(2).build(&state);
    let f = place(&state.cluster, &state.free, &spec, &|_| true).unwrap_err();
    assert_eq!((f.free_in_pools, f.best_rack_free, f.best_node_free), (16, 8, 4));
    assert_eq!(f.rule, Rule::PlaceNodes);
    let text = f.to_string();
    assert!(text.contains("16 GPUs on exactly 2 nodes (8 each)") && text.contains("best rack has 8"), "{text}");
}

#[test]
fn draining_node_is_not_usable_but_keeps_its_gpus() {
    let mut state = StateBuilder::new().pool("h", "H100", 2, 8).account("org/x").build();
    state.set_health(NodeId(0), Health::Draining);
    assert_eq!(state.free.pool_free[0], 8);
    let spec = Wl::new("w").account("org/x").gpus(16).nodes(2).build(&state);
    assert!(place(&state.cluster, &state.free, &spec, &|_| true).is_err());
    state.set_health(NodeId(0), Health::Up);
    assert!(place(&state.cluster, &state.free, &spec, &|_| true).is_ok());
    let _ = FreeMap::new(&state.cluster);
}

/// A fleet of two clusters: c1 with one 8-GPU H100 node, c2 with two.
fn fleet() -> State {
    StateBuilder::new()
        .cluster("c1")
        .pool("h", "H100", 1, 8)
        .cluster("c2")
        .pool("h", "H100", 2, 8)
        .account("org/a")
        .build()
}

#[test]
fn fleet_names_pools_and_nodes_by_cluster() {
    let state = fleet();
    let names: Vec<&str> = state.cluster.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["c1/h-0", "c2/h-0", "c2/h-1"]);
    assert_eq!(state.cluster.node_by_name("c2/h-1"), Some(NodeId(2)));
    assert_eq!(state.cluster.cluster_gpus(allot_core::cluster::ClusterId(1)), 16);
}

#[test]
fn a_pinned_workload_runs_only_on_its_cluster() {
    // FLEET-1: pinned to c1 it lands on c1 even though c2 is emptier.
    let state = fleet();
    let spec = Wl::new("w").account("org/a").gpus(4).on(&["c1"]).build(&state);
    let a = place(&state.cluster, &state.free, &spec, &|_| true).unwrap();
    assert_eq!(nodes_of(&a), [(0, 4)]);
    // c1 full: it waits, and the reason names the best eligible cluster.
    let mut state = fleet();
    occupy(&mut state, &[8, 0, 0]);
    let spec = Wl::new("w").account("org/a").gpus(4).on(&["c1"]).build(&state);
    let f = place(&state.cluster, &state.free, &spec, &|_| true).unwrap_err();
    assert!(f.to_string().contains("best is c1 with 0 of 8 GPUs free"), "{f}");
}

#[test]
fn a_gang_never_spans_clusters() {
    // FLEET-1: 16 GPUs on 2 nodes fit only in c2 (c1 has one node), and
    // 24 GPUs never fit although the fleet has 24.
    let state = fleet();
    let spec = Wl::new("g").account("org/a").gpus(16).nodes(2).build(&state);
    let a = place(&state.cluster, &state.free, &spec, &|_| true).unwrap();
    assert_eq!(nodes_of(&a), [(1, 8), (2, 8)]);
    let spec = Wl::new("g").account("org/a").gpus(24).nodes(3).build(&state);
    assert!(!state.cluster.fits_anywhere(24, 3, None, spec.clusters));
}

#[test]
fn fleet_placement_prefers_best_fit_then_most_free_then_config_order() {
    // FLEET-2, table: (free GPUs per node before, want, expected node).
    let cases: &[(&[u32], u32, u32)] = &[
        // Best fit first: the node with 4 free takes a 4-GPU job.
        (&[8, 4, 8], 4, 1),
        // Equal fit (empty nodes): the cluster with the most free (c2).
        (&[8, 8, 8], 8, 1),
        // Equal fit and equal free: config order (c1).
        (&[8, 8, 0], 8, 0),
    ];
    for &(free, want, node) in cases {
        let mut state = fleet();
        let used: Vec<u32> = free.iter().map(|f| 8 - f).collect();
        occupy(&mut state, &used);
        let spec = Wl::new("w").account("org/a").gpus(want).build(&state);
        let a = place(&state.cluster, &state.free, &spec, &|_| true).unwrap();
        assert_eq!(nodes_of(&a)[0].0, node, "free {free:?}, want {want}");
    }
}
