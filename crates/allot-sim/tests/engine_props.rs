//! Property tests of the engine under every baseline policy: no GPU in two
//! workloads, gangs all-or-nothing, nothing on unhealthy nodes, GPU-time
//! conserved (assigned = useful + lost), determinism.

use allot_core::{Class, NodeEvent, NodeEventKind, NodeId, Phase, PolicyKind, Priority, State, WorkloadSpec};
use allot_sim::{AttemptEnd, SimOptions, SimOutput, simulate};
use allot_testkit::{StateBuilder, Wl};
use proptest::prelude::*;

/// submit, gpus, exact nodes, work, checkpoint, priority, preemptible, account.
type Job = (u64, u32, bool, u64, u64, u8, bool, usize);

#[derive(Clone, Debug)]
struct Scenario {
    pools: Vec<(u32, u32, u32)>, // nodes, gpus per node, rack size
    grace: u64,
    jobs: Vec<Job>,
    events: Vec<(u64, usize, u8)>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let pools = prop::collection::vec((1u32..5, prop::sample::select(vec![1u32, 2, 4, 8]), 1u32..4), 1..3);
    let jobs = prop::collection::vec(
        (
            0u64..5000,
            1u32..17,
            any::<bool>(),
            1u64..3000,
            prop::sample::select(vec![0u64, 100, 500]),
            0u8..4,
            any::<bool>(),
            0usize..3,
        ),
        1..40,
    );
    let events = prop::collection::vec((0u64..6000, 0usize..20, 0u8..4), 0..6);
    (pools, 0u64..200, jobs, events).prop_map(|(pools, grace, jobs, events)| Scenario { pools, grace, jobs, events })
}

fn build(s: &Scenario) -> (State, Vec<WorkloadSpec>, Vec<NodeEvent>) {
    let mut b = StateBuilder::new();
    for (i, &(n, g, r)) in s.pools.iter().enumerate() {
        b = b.pool(&format!("p{i}"), "H100", n, g).racks_of(r);
        if i == 0 {
            b = b.shared();
        }
    }
    b = b.account("org/a").account("org/b/x").account("org/c").legacy("org/b", &["p0"]);
    let state = b.contract(|c| c.grace = s.grace).build();
    let accounts = ["org/a", "org/b/x", "org/c"];
    let mut specs = Vec::new();
    for (i, &(submit, gpus, exact, work, ckpt, prio, pre, acct)) in s.jobs.iter().enumerate() {
        // Shrink the gang until it fits some pool, keeping the shape valid.
        let mut gpus = gpus;
        let mut nodes = 0;
        let gpn = s.pools.iter().map(|p| p.1).max().unwrap();
        if exact && gpus > gpn && gpus % gpn == 0 {
            nodes = gpus / gpn;
        }
        while !state.cluster.fits_anywhere(gpus, nodes, None, allot_core::cluster::ClusterSet::ANY) {
            gpus -= 1;
            nodes = 0;
        }
        let mut w = Wl::new(format!("j{i}"))
            .account(accounts[acct])
            .gpus(gpus)
            .nodes(nodes)
            .submit(submit)
            .work(work)
            .checkpoint(ckpt)
            .priority(Priority::ALL[prio as usize])
            .class(if i % 5 == 0 { Class::Interactive } else { Class::Batch });
        if pre {
            w = w.preemptible();
        }
        specs.push(w.build(&state));
    }
    let n = state.cluster.nodes.len();
    let kinds = [NodeEventKind::Fail, NodeEventKind::Repair, NodeEventKind::Drain, NodeEventKind::Undrain];
    let events = s
        .events
        .iter()
        .map(|&(t, node, k)| NodeEvent { t, node: NodeId((node % n) as u32), kind: kinds[k as usize] })
        .collect();
    (state, specs, events)
}

fn run(s: &Scenario, kind: PolicyKind) -> (State, SimOutput) {
    run_with(s, kind, None)
}

/// With `snapshot_after`: the run carried on from a snapshot of itself.
fn run_with(s: &Scenario, kind: PolicyKind, snapshot_after: Option<u64>) -> (State, SimOutput) {
    let (state, specs, events) = build(s);
    let opts = SimOptions { check_invariants: true, keep_log: true, snapshot_after, ..Default::default() };
    simulate(state, specs, events, kind.build().as_mut(), &opts)
}

/// Whether a node is up after the events up to `t`: a failure is cleared
/// only by a repair; a drain by an undrain or a repair.
fn up_after(events: &[NodeEvent], node: NodeId, t: u64) -> bool {
    let (mut failed, mut drained) = (false, false);
    for e in events.iter().filter(|e| e.node == node && e.t <= t) {
        match e.kind {
            NodeEventKind::Fail => failed = true,
            NodeEventKind::Repair => (failed, drained) = (false, false),
            NodeEventKind::Drain if !failed => drained = true,
            NodeEventKind::Undrain if !failed => drained = false,
            _ => {}
        }
    }
    !failed && !drained
}

fn check(s: &Scenario, kind: PolicyKind) -> Result<(), TestCaseError> {
    let (state, out) = run(s, kind);
    // Conservation per workload: Σ useful of its attempts = progress kept;
    // finished ones kept exactly work × gpus; lost = assigned − useful.
    for (i, spec) in state.specs.iter().enumerate() {
        let r = &state.runs[i];
        let mine: Vec<_> = out.attempts.iter().filter(|a| a.workload.0 as usize == i).collect();
        let assigned: u64 = mine.iter().map(|a| a.assigned_gpu_s()).sum();
        let useful: u64 = mine.iter().map(|a| a.useful_gpu_s).sum();
        let interrupted: u64 = mine
            .iter()
            .filter(|a| a.outcome != AttemptEnd::Finished && a.outcome != AttemptEnd::Cut)
            .map(|a| a.assigned_gpu_s() - a.useful_gpu_s)
            .sum();
        prop_assert_eq!(assigned, useful + interrupted, "workload {}", spec.id);
        prop_assert_eq!(interrupted, r.lost_gpu_s, "workload {} lost", spec.id);
        if r.phase == Phase::Finished {
            prop_assert_eq!(useful, spec.work_s * u64::from(spec.gpus), "workload {} useful", spec.id);
        }
        let kept = if r.phase == Phase::Finished { spec.work_s } else { useful / u64::from(spec.gpus) };
        prop_assert_eq!(spec.work_s - r.remaining, kept, "workload {} remaining", spec.id);
    }
    // Ledger: Σ charged to top-level accounts = Σ assigned.
    let assigned: u64 = out.attempts.iter().map(|a| a.assigned_gpu_s()).sum();
    let charged: u64 = state
        .accounts
        .ids()
        .filter(|a| state.accounts.account(*a).parent == Some(allot_core::AccountId::ROOT))
        .map(|a| state.ledger.at(a, out.horizon_end).charged_gpu_s)
        .sum();
    prop_assert_eq!(charged, assigned);
    // Nothing starts on a node that is not up at that moment.
    let (_, _, mut events) = build(s);
    events.sort_by_key(|e| e.t); // the simulator applies them in time order, stably
    for e in out.log.iter().filter(|e| e.event == "start") {
        for n in &e.nodes {
            let id = state.cluster.node_by_name(n).unwrap();
            prop_assert!(up_after(&events, id, e.t), "start of {} on {n} while not up", e.workload);
        }
    }
    // Without a horizon every admitted workload ends unless nodes stay down.
    let all_up_at_end = (0..state.cluster.nodes.len()).all(|n| up_after(&events, NodeId(n as u32), u64::MAX));
    if all_up_at_end {
        for (i, r) in state.runs.iter().enumerate() {
            prop_assert!(
                matches!(r.phase, Phase::Finished | Phase::Rejected),
                "{} ended {:?}",
                state.specs[i].id,
                r.phase
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_under_every_baseline(s in scenario()) {
        for kind in [PolicyKind::Fifo, PolicyKind::FifoBackfill, PolicyKind::Priority, PolicyKind::Slurm] {
            check(&s, kind)?;
        }
    }

    #[test]
    fn same_inputs_same_outputs(s in scenario()) {
        for kind in [PolicyKind::FifoBackfill, PolicyKind::Priority, PolicyKind::Slurm] {
            let (_, a) = run(&s, kind);
            let (_, b) = run(&s, kind);
            prop_assert_eq!(serde_json::to_string(&a.log).unwrap(), serde_json::to_string(&b.log).unwrap());
            prop_assert_eq!(a.attempts, b.attempts);
        }
    }

    /// A live server's snapshot (the engine and the policy's memory,
    /// encoded as the store keeps them) carries the run on exactly: every
    /// decision, attempt and measure as without it, under every policy
    /// (SLURM-2's priorities of the period are the policy's memory).
    #[test]
    fn a_snapshot_changes_nothing(s in scenario(), at in 0u64..6000) {
        for kind in [PolicyKind::FifoBackfill, PolicyKind::Priority, PolicyKind::Slurm, PolicyKind::Allot] {
            let (sa, a) = run(&s, kind);
            let (sb, b) = run_with(&s, kind, Some(at));
            prop_assert_eq!(serde_json::to_string(&a.log).unwrap(), serde_json::to_string(&b.log).unwrap());
            prop_assert_eq!(a.attempts, b.attempts);
            prop_assert_eq!(&sa.runs, &sb.runs);
        }
    }
}
