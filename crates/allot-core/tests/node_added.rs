//! MNT-5: nodes that appear at run time join their pool in service. The
//! topology grows without renumbering, every per-node table grows with it,
//! and placement uses added nodes exactly like laid-out ones (gangs mixing
//! both, racks extended or started, spread pools).

use allot_core::cluster::{ClusterId, PoolPlacement};
use allot_core::engine::Change;
use allot_core::placement::place;
use allot_core::{
    AddNodeError, Effect, Engine, Exit, Health, NodeEvent, NodeEventKind, NodeId, Phase, Policy, PolicyKind, PoolId,
    Rule, State, Time, WorkloadId,
};
use allot_testkit::{Drive, StateBuilder, Wl};
use proptest::prelude::*;

/// One pool `p` of `nodes` nodes of 8 H100 in racks of `rack`, a second
/// pool `q` of 2 nodes of 4 B200 (so added ids are not next to their
/// pool's), one account.
fn state(nodes: u32, rack: u32) -> State {
    StateBuilder::new()
        .pool("p", "H100", nodes, 8)
        .racks_of(rack)
        .pool("q", "B200", 2, 4)
        .account("org/a")
        .contract(|c| c.grace = 100)
        .build()
}

struct Run {
    engine: Engine,
    policy: Box<dyn Policy>,
}

impl Run {
    fn new(state: State, kind: PolicyKind) -> Run {
        Run { engine: Engine::new(state), policy: kind.build() }
    }

    fn check(&mut self, t: Time) -> Vec<Effect> {
        self.engine.state().sanity_check(t).expect("invariants hold after every step");
        self.engine.take_effects()
    }

    fn submit(&mut self, id: &str, gpus: u32, nodes: u32, gpu: &str, t: Time) -> WorkloadId {
        let spec =
            Wl::new(id).account("org/a").gpus(gpus).nodes(nodes).gpu_type(gpu).submit(t).build(self.engine.state());
        let w = self.engine.arrive(&mut *self.policy, spec, 0, t);
        self.check(t);
        w
    }

    fn pass(&mut self, t: Time) -> Vec<Effect> {
        self.engine.pass(self.policy.as_mut(), t);
        self.check(t)
    }

    fn add(&mut self, pool: &str, name: &str, t: Time) -> NodeId {
        let pool = self.engine.state().cluster.pool_by_name(pool).expect("a pool");
        let n = self.engine.add_node(pool, name.to_string()).expect("a new name");
        let fx = self.check(t);
        assert_eq!(fx, [Effect::Health { node: n, health: Health::Up }], "MNT-5: the node is in service");
        assert!(self.engine.dirty(), "MNT-5: the next pass sees the new capacity");
        n
    }

    /// (node, rack) of each part of the workload's allocation.
    fn placed(&self, w: WorkloadId) -> Vec<(u32, u32)> {
        let st = &self.engine.state();
        let a = st.run(w).alloc.as_ref().expect("holds GPUs");
        a.nodes().map(|n| (n.0, st.cluster.node(n).rack)).collect()
    }
}

/// A gang case: pool `p` of `nodes` nodes in racks of `rack`, its first
/// `busy` nodes filled, then nodes added; the gang of two whole nodes must
/// wait until the adds, then run on `want` (node, global rack).
struct GangCase {
    name: &'static str,
    nodes: u32,
    rack: u32,
    busy: u32,
    adds: &'static [&'static str],
    want: &'static [(u32, u32)],
}

#[test]
fn a_gang_waits_for_added_nodes_then_runs_on_them_inside_a_rack() {
    // Pool q (2 nodes, one rack) is laid out after p: p's racks are
    // 0 .. ceil(nodes / rack), q's rack comes next, added racks after it;
    // added nodes get ids from nodes + 2 on.
    let cases = [
        GangCase {
            name: "laid-out node + added node in the last rack, which had room",
            nodes: 3,
            rack: 2,
            busy: 2,
            adds: &["p-3"],
            // p: racks 0 = {0, 1}, 1 = {2}; q: rack 2 = {3, 4}; p-3 is node 5 in rack 1.
            want: &[(2, 1), (5, 1)],
        },
        GangCase {
            name: "the last rack is full: the added node starts a new rack; the gang spans racks",
            nodes: 2,
            rack: 2,
            busy: 1,
            adds: &["p-2"],
            // p: rack 0 = {0, 1}; q (nodes 2, 3): rack 1; p-2 is node 4 in
            // the new rack 2.
            want: &[(1, 0), (4, 2)],
        },
        GangCase {
            name: "two added nodes fill a new rack: the gang stays inside it (PLACE-3)",
            nodes: 2,
            rack: 2,
            busy: 1,
            adds: &["p-2", "p-3"],
            want: &[(4, 2), (5, 2)],
        },
        GangCase {
            name: "a full pool: the gang runs on two added nodes",
            nodes: 2,
            rack: 1,
            busy: 2,
            adds: &["p-new-a", "p-new-b"],
            // p: racks 0, 1; q (nodes 2, 3): rack 2; racks of one node:
            // each added node starts its own rack.
            want: &[(4, 3), (5, 4)],
        },
    ];
    for kind in [PolicyKind::FifoBackfill, PolicyKind::Allot] {
        for c in &cases {
            let mut r = Run::new(state(c.nodes, c.rack), kind);
            for b in 0..c.busy {
                r.submit(&format!("fill{b}"), 8, 1, "H100", 0);
            }
            r.pass(0);
            let gang = r.submit("gang", 16, 2, "H100", 10);
            r.pass(10);
            assert_eq!(r.engine.state().run(gang).phase, Phase::Pending, "{}: the gang waits before the add", c.name);
            let nodes_before = r.engine.state().cluster.nodes.len() as u32;
            for (k, name) in c.adds.iter().enumerate() {
                assert_eq!(r.add("p", name, 20), NodeId(nodes_before + k as u32), "{}: appended", c.name);
            }
            let fx = r.pass(20);
            assert!(fx.iter().any(|e| matches!(e, Effect::Launch { workload, .. } if *workload == gang)), "{}", c.name);
            assert_eq!(r.placed(gang), c.want, "{} ({})", c.name, kind.as_str());
            // The fillers never moved.
            for b in 0..c.busy {
                assert_eq!(r.placed(WorkloadId(b)), [(b, b / c.rack)], "{}: existing allocations untouched", c.name);
            }
        }
    }
}

#[test]
fn added_nodes_count_in_every_total() {
    let mut st = state(2, 2);
    let (total, h100) = (st.cluster.total_gpus(), st.cluster.cluster_gpus(ClusterId(0)));
    let wide = |st: &State| st.cluster.fits_anywhere(24, 3, None, allot_core::cluster::ClusterSet::ANY);
    assert!(!wide(&st), "3 nodes of 8 fit no pool of 2 nodes");
    let n = st.add_node(PoolId(0), "p-2").expect("a new name");
    assert_eq!(n, NodeId(4));
    assert_eq!(st.cluster.total_gpus(), total + 8);
    assert_eq!(st.cluster.cluster_gpus(ClusterId(0)), h100 + 8);
    assert_eq!(st.usable_gpus(), total + 8);
    assert!(wide(&st), "MNT-5: a gang of 3 whole nodes fits now");
    assert_eq!(st.cluster.node_by_name("p-2"), Some(n));
    assert_eq!(st.cluster.pool_nodes(PoolId(0)).collect::<Vec<_>>(), [NodeId(0), NodeId(1), n]);
    let node = st.cluster.node(n);
    assert_eq!((node.pool, node.gpus, node.gpu), (PoolId(0), 8, st.cluster.pool(PoolId(0)).gpu));
    // Diagnosis numbers count the added node's free GPUs.
    let spec = Wl::new("w").account("org/a").gpus(32).nodes(4).gpu_type("H100").build(&st);
    let fail = place(&st.cluster, &st.free, &spec, &|_| true).expect_err("4 nodes do not exist");
    assert_eq!((fail.free_in_pools, fail.best_node_free), (24, 8));
    st.sanity_check(0).expect("invariants hold");
}

#[test]
fn a_name_that_exists_or_a_pool_that_does_not_is_refused() {
    let mut st = state(2, 2);
    let cases: [(&str, PoolId, &str, AddNodeError); 4] = [
        ("a laid-out name", PoolId(0), "p-1", AddNodeError::NameTaken("p-1".into())),
        ("a name of another pool", PoolId(0), "q-0", AddNodeError::NameTaken("q-0".into())),
        ("no such pool", PoolId(7), "p-9", AddNodeError::UnknownPool(7)),
        ("an empty name", PoolId(0), "", AddNodeError::EmptyName),
    ];
    for (name, pool, node, want) in cases {
        assert_eq!(st.add_node(pool, node), Err(want), "{name}");
        assert_eq!(st.cluster.nodes.len(), 4, "{name}: nothing changed");
    }
    st.add_node(PoolId(1), "q-extra").expect("a new name");
    assert_eq!(st.add_node(PoolId(0), "q-extra"), Err(AddNodeError::NameTaken("q-extra".into())), "added twice");
    assert_eq!(AddNodeError::NameTaken("x".into()).to_string(), "node x already exists");
    st.sanity_check(0).expect("invariants hold");
}

#[test]
fn a_spread_pool_takes_gpus_from_laid_out_and_added_nodes() {
    let mut st = state(1, 1);
    st.cluster.set_placement(PoolId(0), PoolPlacement::Spread);
    let mut r = Run::new(st, PolicyKind::FifoBackfill);
    r.submit("five", 5, 1, "H100", 0);
    r.pass(0);
    let six = r.submit("six", 6, 0, "H100", 1);
    r.pass(1);
    assert_eq!(r.engine.state().run(six).phase, Phase::Pending, "3 free GPUs in the pool");
    let n = r.add("p", "p-1", 2);
    r.submit("fill", 5, 1, "H100", 2);
    r.pass(2);
    // "six" first (FIFO): 6 fit on the added node alone (one node), which
    // started rack 2 (p's rack 0 is full, q's is rack 1).
    assert_eq!(r.placed(six), [(n.0, 2)]);
    let seven = r.submit("seven", 4, 0, "H100", 3);
    r.pass(3);
    // 3 free on node 0, 2 on node 3: PLACE-7 spreads over both.
    let parts: Vec<(u32, u32)> = r
        .engine
        .state()
        .run(seven)
        .alloc
        .as_ref()
        .expect("runs")
        .parts
        .iter()
        .map(|(n, m)| (n.0, m.count_ones()))
        .collect();
    assert_eq!(parts, [(0, 3), (n.0, 1)]);
}

#[test]
fn an_added_node_fails_and_is_repaired_like_any_other() {
    let mut r = Run::new(state(1, 1), PolicyKind::FifoBackfill);
    let n = r.add("p", "p-1", 0);
    let w = r.submit("gang", 16, 2, "H100", 0);
    r.pass(0);
    assert_eq!(r.placed(w).len(), 2);
    r.engine.node_event(&NodeEvent { t: 50, node: n, kind: NodeEventKind::Fail });
    let fx = r.check(50);
    assert!(fx.iter().any(|e| matches!(e, Effect::Kill { workload, .. } if *workload == w)));
    r.engine.exited(w, 1, Exit::KILLED, 50);
    let fx = r.check(50);
    assert!(
        fx.iter().any(|e| matches!(e, Effect::Record(t) if t.change == Change::Fail && t.reason.rule == Rule::Failure))
    );
    r.pass(50);
    assert_eq!(r.engine.state().run(w).phase, Phase::Pending, "one node of p is down");
    r.engine.node_event(&NodeEvent { t: 60, node: n, kind: NodeEventKind::Repair });
    r.check(60);
    r.pass(60);
    assert_eq!(r.engine.state().run(w).phase, Phase::Running);
}

/// A step of the property test.
#[derive(Clone, Debug)]
enum Op {
    /// Adds a node to pool 0 or 1.
    Add(u32),
    /// Submits a workload of this many GPUs on exactly this many nodes (0: any).
    Submit(u32, u32),
    /// A pass.
    Pass,
    /// The oldest running workload completes.
    Finish,
    /// Fails / repairs node i (mod the node count).
    Fail(u32),
    Repair(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..2).prop_map(Op::Add),
        (1u32..=24, 0u32..=3).prop_map(|(g, n)| if n == 0 {
            Op::Submit(g, 0)
        } else {
            Op::Submit(n * g.div_ceil(n).min(8), n)
        }),
        Just(Op::Pass),
        Just(Op::Pass),
        Just(Op::Finish),
        (0u32..16).prop_map(Op::Fail),
        (0u32..16).prop_map(Op::Repair),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever interleaving of adds, submissions, passes, completions and
    /// failures: the invariants hold after every step, no GPU is placed on
    /// a node that is not up, and no gang spans pools.
    #[test]
    fn adding_nodes_keeps_the_state_sane(ops in proptest::collection::vec(op(), 1..60), allot in any::<bool>()) {
        let st = StateBuilder::new()
            .pool("p", "H100", 2, 8).racks_of(2)
            .pool("q", "H100", 1, 8).racks_of(2)
            .account("org/a")
            .build();
        let kind = if allot { PolicyKind::Allot } else { PolicyKind::FifoBackfill };
        let mut r = Run::new(st, kind);
        let mut added = 0;
        for (t, o) in ops.into_iter().enumerate() {
            let t = t as Time * 10;
            match o {
                Op::Add(p) => {
                    let pool = if p == 0 { "p" } else { "q" };
                    r.add(pool, &format!("{pool}-added-{added}"), t);
                    added += 1;
                }
                Op::Submit(g, n) => {
                    let spec = Wl::new(format!("w{t}")).account("org/a").gpus(g).nodes(n).submit(t).build(r.engine.state());
                    r.engine.arrive(&mut *r.policy, spec, 0, t);
                    r.check(t);
                }
                Op::Pass => {
                    let fx = r.pass(t);
                    let st = &r.engine.state();
                    for e in fx {
                        if let Effect::Launch { workload, .. } = e {
                            let a = st.run(workload).alloc.as_ref().expect("launched");
                            prop_assert!(a.nodes().all(|n| st.health[n.0 as usize] == Health::Up));
                            let pools: std::collections::BTreeSet<_> = a.nodes().map(|n| st.cluster.node(n).pool).collect();
                            prop_assert_eq!(pools.len(), 1);
                        }
                    }
                }
                Op::Finish => {
                    if let Some(&w) = r.engine.state().running.first() {
                        let attempt = r.engine.state().run(w).attempts;
                        r.engine.exited(w, attempt, Exit::Completed, t);
                        r.check(t);
                    }
                }
                Op::Fail(i) | Op::Repair(i) => {
                    let node = NodeId(i % r.engine.state().cluster.nodes.len() as u32);
                    let kind = if matches!(o, Op::Fail(_)) { NodeEventKind::Fail } else { NodeEventKind::Repair };
                    r.engine.node_event(&NodeEvent { t, node, kind });
                    // Killed attempts end at once, as an interpreter reports.
                    for e in r.check(t) {
                        if let Effect::Kill { workload, attempt } = e {
                            r.engine.exited(workload, attempt, Exit::KILLED, t);
                            r.check(t);
                        }
                    }
                }
            }
        }
        prop_assert_eq!(r.engine.state().cluster.nodes.len(), 3 + added);
    }
}
