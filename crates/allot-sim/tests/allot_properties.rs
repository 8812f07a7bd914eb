//! The properties of the `allot` policy (docs/design.md §2), each a simulated
//! scenario asserting the property with numbers, plus property tests over
//! random clusters and traces.

use std::collections::{BTreeMap, BTreeSet};

use allot_core::policy::AllotPolicy;
use allot_core::{AccountId, Class, NodeEvent, NodeEventKind, NodeId, Phase, State, Time, WorkloadSpec};
use allot_sim::{AttemptEnd, SimOptions, SimOutput, simulate};
use allot_testkit::{StateBuilder, Wl};
use proptest::prelude::*;

const HOUR: Time = 3600;
const DAY: Time = 24 * HOUR;

/// A small deterministic generator (splitmix64) for scenario traces.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

fn run(state: State, specs: Vec<WorkloadSpec>, events: Vec<NodeEvent>, until: Option<Time>) -> (State, SimOutput) {
    let opts = SimOptions { until, check_invariants: false, keep_log: true, ..Default::default() };
    simulate(state, specs, events, &mut AllotPolicy::new(), &opts)
}

/// GPU-seconds assigned to an account's subtree within `[t0, t1]`.
fn delivered(state: &State, out: &SimOutput, path: &str, t0: Time, t1: Time) -> u64 {
    let a = state.accounts.get(path).expect("known account");
    out.attempts
        .iter()
        .filter(|x| state.accounts.is_within(x.account, a))
        .map(|x| u64::from(x.gpus) * x.end.min(t1).saturating_sub(x.start.max(t0)))
        .sum()
}

/// `n` batch jobs of 1 GPU for `path` submitted at `submit`, 3–9 h of
/// work each, checkpointing every 30 minutes.
fn backlog(state: &State, mix: &mut Mix, path: &str, user: &str, n: usize, submit: Time) -> Vec<WorkloadSpec> {
    (0..n)
        .map(|i| {
            Wl::new(format!("{path}-{user}-{i}"))
                .account(path)
                .user(user)
                .submit(submit)
                .work(mix.range(3 * HOUR, 9 * HOUR))
                .checkpoint(1800)
                .build(state)
        })
        .collect()
}

#[test]
fn p1_delivered_time_follows_shares_3_to_1() {
    let state = StateBuilder::new()
        .pool("p", "H100", 2, 8)
        .account_with("org/a", |a| a.share = Some(3.0))
        .account_with("org/b", |a| a.share = Some(1.0))
        .contract(|c| {
            c.usage_half_life = DAY;
            c.scheduling_interval = 60;
        })
        .build();
    let mut mix = Mix(1);
    // org/a arrives alone and fills the cluster; org/b arrives an hour later.
    let mut specs = backlog(&state, &mut mix, "org/a", "u", 400, 0);
    specs.extend(backlog(&state, &mut mix, "org/b", "u", 400, HOUR));
    let until = 6 * DAY;
    let (state, out) = run(state, specs, vec![], Some(until));
    let a = delivered(&state, &out, "org/a", 0, until) as f64;
    let b = delivered(&state, &out, "org/b", 0, until) as f64;
    let ratio = a / b;
    assert!((ratio - 3.0).abs() / 3.0 < 0.05, "delivered org/a : org/b = {ratio:.3}");
    // Saturating: the cluster was busy all along (horizon of 72 slices).
    assert!(a + b >= 0.99 * (16 * until) as f64);
}

fn p2_run(x1_users: usize) -> (f64, f64, f64) {
    let state = StateBuilder::new()
        .pool("p", "H100", 2, 8)
        .account("x/x1")
        .account("x/x2")
        .account("y/y1")
        .contract(|c| {
            c.usage_half_life = DAY;
            c.scheduling_interval = 60;
        })
        .build();
    let mut mix = Mix(2);
    let mut specs = Vec::new();
    for u in 0..x1_users {
        specs.extend(backlog(&state, &mut mix, "x/x1", &format!("u{u}"), 120 / x1_users, 0));
    }
    specs.extend(backlog(&state, &mut mix, "x/x2", "u", 120, 0));
    specs.extend(backlog(&state, &mut mix, "y/y1", "u", 200, 0));
    let until = 5 * DAY;
    let (state, out) = run(state, specs, vec![], Some(until));
    let d = |p| delivered(&state, &out, p, 0, until) as f64;
    (d("x/x1"), d("x/x2"), d("y/y1"))
}

#[test]
fn p2_hierarchy_splits_1_1_2_and_users_do_not_add_share() {
    let (x1, x2, y1) = p2_run(1);
    for (name, got) in [("x1/y1", x1 / y1), ("x2/y1", x2 / y1)] {
        assert!((got - 0.5).abs() / 0.5 < 0.05, "{name} = {got:.3} (x1 {x1}, x2 {x2}, y1 {y1})");
    }
    let (x1_three_users, _, _) = p2_run(3);
    assert!(x1_three_users <= x1 * 1.01, "three users raised x/x1 from {x1} to {x1_three_users}");
}

#[test]
fn p3_no_gpu_idles_while_a_fitting_workload_waits() {
    let interval = 30;
    let state = StateBuilder::new()
        .pool("p", "H100", 4, 8)
        .account_with("org/a", |a| a.share = Some(2.0))
        .account("org/b")
        .contract(|c| {
            c.scheduling_interval = interval;
            c.min_slice.batch = 100 * DAY; // no preemption: backfill alone
        })
        .build();
    let mut mix = Mix(3);
    let specs: Vec<WorkloadSpec> = (0..300)
        .map(|i| {
            Wl::new(format!("j{i}"))
                .account(if i % 3 == 0 { "org/b" } else { "org/a" })
                .gpus([1, 2, 4, 8][mix.range(0, 4) as usize])
                .nodes(1)
                .submit(mix.range(0, 2 * DAY))
                .work(mix.range(1800, 6 * HOUR))
                .build(&state)
        })
        .collect();
    let by_id: BTreeMap<String, (u32, Time)> = specs.iter().map(|s| (s.id.clone(), (s.gpus, s.submit))).collect();
    let (state, out) = run(state, specs, vec![], None);
    // Replay the log: free GPUs per node and the waiting set, instant by instant.
    let mut free: BTreeMap<String, u32> = state.cluster.nodes.iter().map(|n| (n.name.clone(), n.gpus)).collect();
    let mut running: BTreeSet<String> = BTreeSet::new();
    let mut submits: Vec<(Time, String)> = by_id.iter().map(|(id, (_, t))| (*t, id.clone())).collect();
    submits.sort();
    let mut times: BTreeSet<Time> = out.log.iter().map(|e| e.t).collect();
    times.extend(submits.iter().map(|(t, _)| *t));
    let (mut waiting, mut next_submit, mut li) = (BTreeSet::new(), 0, 0);
    let mut idle_since: Option<Time> = None;
    let mut worst = 0;
    for t in times {
        while next_submit < submits.len() && submits[next_submit].0 == t {
            waiting.insert(submits[next_submit].1.clone());
            next_submit += 1;
        }
        while li < out.log.len() && out.log[li].t == t {
            let e = &out.log[li];
            li += 1;
            let g = by_id[&e.workload].0;
            match e.event {
                "start" => {
                    *free.get_mut(&e.nodes[0]).unwrap() -= g;
                    waiting.remove(&e.workload);
                    running.insert(e.workload.clone());
                }
                "finish" | "stop" => {
                    *free.get_mut(&e.nodes[0]).unwrap() += g;
                    running.remove(&e.workload);
                    if e.event == "stop" {
                        waiting.insert(e.workload.clone());
                    }
                }
                _ => {}
            }
        }
        let max_free = free.values().copied().max().unwrap_or(0);
        let fits = waiting.iter().any(|w| by_id[w].0 <= max_free);
        if let Some(s) = idle_since {
            worst = worst.max(t - s);
        }
        idle_since = match (fits, idle_since) {
            (true, None) => Some(t),
            (true, s) => s,
            (false, _) => None,
        };
    }
    assert!(worst <= interval, "a GPU idled {worst} s while a workload that fits on it waited");
    assert!(out.attempts.iter().all(|a| a.outcome == AttemptEnd::Finished));
}

#[test]
fn p4_in_budget_first_and_over_budget_uses_idle_capacity() {
    let build = || {
        StateBuilder::new()
            .pool("p", "H100", 2, 8)
            .account("org/a")
            .account_with("org/b", |a| a.budget_gpu_hours = Some(20.0))
            .contract(|c| c.budget_period = DAY)
            .build()
    };
    let trace = |state: &State| {
        let mut specs = Vec::new();
        for i in 0..64 {
            specs.push(Wl::new(format!("b{i}")).account("org/b").work(10 * HOUR).checkpoint(600).build(state));
        }
        for i in 0..8 {
            specs.push(Wl::new(format!("a{i}")).account("org/a").submit(4 * HOUR).work(3 * HOUR).build(state));
        }
        for i in 0..16 {
            specs.push(Wl::new(format!("a2-{i}")).account("org/a").submit(12 * HOUR).work(3 * HOUR).build(state));
        }
        specs
    };
    let state = build();
    let specs = trace(&state);
    let (state, out) = run(state, specs, vec![], Some(20 * HOUR));
    let c = state.contract;
    // org/b crosses 20 NGH at 1.25 h, then keeps the idle cluster until org/a comes.
    let over_at = 20 * HOUR / 16;
    assert_eq!(delivered(&state, &out, "org/b", over_at, 4 * HOUR), 16 * (4 * HOUR - over_at));
    // In-budget work gets GPUs within grace + one interval, by preempting
    // over-budget work (BUD-2), and is never preempted by it.
    for (i, spec) in state.specs.iter().enumerate().filter(|(_, s)| s.id.starts_with('a')) {
        let first = state.runs[i].first_start.expect("started");
        assert!(first - spec.submit <= c.grace + c.scheduling_interval, "{} waited {} s", spec.id, first - spec.submit);
        assert_eq!(state.runs[i].preemptions, 0, "{} was preempted", spec.id);
    }
    let bud2 = out.log.iter().filter(|e| e.event == "preempt" && e.reason.starts_with("BUD-2")).count();
    assert!(bud2 >= 8 + 16, "{bud2} BUD-2 preemptions");
    // At any instant, waiting in-budget work ranks ahead of over-budget work.
    for t in [4 * HOUR, 12 * HOUR + 1] {
        let state = build();
        let specs = trace(&state);
        let (state, _) = run(state, specs, vec![], Some(t));
        let order = AllotPolicy::new().ranking(&state, t);
        let ids: Vec<&str> = order.iter().map(|w| state.spec(*w).id.as_str()).collect();
        let first_b = ids.iter().position(|id| id.starts_with('b')).unwrap_or(ids.len());
        assert!(ids[first_b..].iter().all(|id| id.starts_with('b')), "t={t}: {ids:?}");
        assert!(first_b > 0, "t={t}: no in-budget work waits: {ids:?}");
    }
}

/// A busy mixed trace on 4 × 8 GPUs with three accounts.
fn mixed(state: &State, seed: u64, n: usize, span: Time) -> Vec<WorkloadSpec> {
    let mut mix = Mix(seed);
    let accounts = ["org/a", "org/b", "lab/c"];
    (0..n)
        .map(|i| {
            let interactive = mix.range(0, 6) == 0;
            let (gpus, work) = if interactive {
                (mix.range(1, 5) as u32, mix.range(600, 2 * HOUR))
            } else {
                ([1u32, 2, 4, 8, 16][mix.range(0, 5) as usize], mix.range(HOUR, 12 * HOUR))
            };
            Wl::new(format!("m{i}"))
                .account(accounts[mix.range(0, 3) as usize])
                .class(if interactive { Class::Interactive } else { Class::Batch })
                .gpus(gpus)
                .submit(mix.range(0, span))
                .work(work)
                .checkpoint([0, 900, 3600][mix.range(0, 3) as usize])
                .build(state)
        })
        .collect()
}

fn mixed_state() -> State {
    StateBuilder::new()
        .pool("p", "H100", 4, 8)
        .racks_of(2)
        .account_with("org/a", |a| a.share = Some(2.0))
        .account("org/b")
        .account("lab/c")
        .build()
}

#[test]
fn p5_no_policy_preemption_before_min_slice() {
    let state = mixed_state();
    let specs = mixed(&state, 5, 160, 2 * DAY);
    let events = vec![
        NodeEvent { t: DAY, node: NodeId(0), kind: NodeEventKind::Drain },
        NodeEvent { t: DAY + 6 * HOUR, node: NodeId(0), kind: NodeEventKind::Undrain },
        NodeEvent { t: 36 * HOUR, node: NodeId(1), kind: NodeEventKind::Fail },
        NodeEvent { t: 40 * HOUR, node: NodeId(1), kind: NodeEventKind::Repair },
    ];
    let (state, out) = run(state, specs, events, None);
    let class: BTreeMap<&str, Class> = state.specs.iter().map(|s| (s.id.as_str(), s.class)).collect();
    let mut started: BTreeMap<&str, Time> = BTreeMap::new();
    let mut policy = 0;
    for e in &out.log {
        match e.event {
            "start" => {
                started.insert(e.workload.as_str(), e.t);
            }
            "preempt" if !e.reason.starts_with("MNT-") => {
                policy += 1;
                let ran = e.t - started[e.workload.as_str()];
                let slice = state.contract.min_slice.get(class[e.workload.as_str()]);
                assert!(ran >= slice, "{} preempted after {ran} s < {slice} s: {}", e.workload, e.reason);
            }
            _ => {}
        }
    }
    assert!(policy > 0, "the scenario exercises policy preemption");
}

#[test]
fn p6_grace_and_loss_are_exact_and_work_completes() {
    let state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/a").account("org/b").build();
    let mut specs = Vec::new();
    for (i, ck) in [1000u64, 3000, 0, 4000, 700, 5000, 1000, 0].into_iter().enumerate() {
        specs.push(Wl::new(format!("a{i}")).account("org/a").work(20_000).checkpoint(ck).build(&state));
    }
    for i in 0..4 {
        specs.push(Wl::new(format!("b{i}")).account("org/b").submit(100).work(3000).build(&state));
    }
    let (state, out) = run(state, specs, vec![], None);
    let grace = state.contract.grace;
    let signals: BTreeMap<&str, Time> =
        out.log.iter().filter(|e| e.event == "preempt").map(|e| (e.workload.as_str(), e.t)).collect();
    assert_eq!(signals.len(), 4, "org/b takes half the node");
    for (i, spec) in state.specs.iter().enumerate() {
        let mine: Vec<_> = out.attempts.iter().filter(|a| a.workload.0 as usize == i).collect();
        if let Some(&sig) = signals.get(spec.id.as_str()) {
            let first = mine.iter().find(|a| a.outcome == AttemptEnd::Preempted).expect("preempted attempt");
            assert_eq!(first.end - sig, grace, "{} kept its GPUs for grace", spec.id);
            let progress = sig - first.start;
            let kept = progress.checked_div(spec.checkpoint_s).map_or(0, |n| n * spec.checkpoint_s);
            assert_eq!(first.useful_gpu_s, kept, "{} keeps only checkpointed progress", spec.id);
            assert_eq!(state.runs[i].lost_gpu_s, progress - kept + grace, "{} lost", spec.id);
        }
        assert_eq!(state.runs[i].phase, Phase::Finished, "{}", spec.id);
        let useful: u64 = mine.iter().map(|a| a.useful_gpu_s).sum();
        assert_eq!(useful, spec.work_s * u64::from(spec.gpus), "{} total work", spec.id);
    }
}

#[test]
fn p7_interactive_time_to_gpu_within_grace_plus_interval() {
    let state = StateBuilder::new().pool("p", "H100", 8, 8).account("org/a").account("org/b").account("org/i").build();
    let mut mix = Mix(7);
    let mut specs = Vec::new();
    for i in 0..64 {
        let a = if i % 2 == 0 { "org/a" } else { "org/b" };
        specs.push(Wl::new(format!("batch{i}")).account(a).gpus(4).work(3 * DAY).checkpoint(HOUR).build(&state));
    }
    let mut t = 3 * HOUR;
    for i in 0..60 {
        t += mix.range(10 * 60, 90 * 60);
        let acct = ["org/a", "org/b", "org/i"][i % 3];
        let gpus = [1, 2, 4, 8][mix.range(0, 4) as usize];
        specs.push(
            Wl::new(format!("int{i}"))
                .account(acct)
                .class(Class::Interactive)
                .gpus(gpus)
                .submit(t)
                .work(1800)
                .build(&state),
        );
    }
    let (state, out) = run(state, specs, vec![], Some(t + DAY));
    let c = state.contract;
    let mut waits: Vec<Time> = state
        .specs
        .iter()
        .zip(&state.runs)
        .filter(|(s, _)| s.class == Class::Interactive)
        .map(|(s, r)| r.first_start.expect("interactive started") - s.submit)
        .collect();
    waits.sort_unstable();
    let p99 = waits[(waits.len() * 99).div_ceil(100) - 1];
    assert!(p99 <= c.grace + c.scheduling_interval, "interactive p99 time-to-GPU {p99} s; waits {waits:?}");
    assert!(out.log.iter().any(|e| e.event == "preempt" && e.reason.starts_with("INT-1")));
}

#[test]
fn p8_equal_accounts_do_not_ping_pong() {
    let state = StateBuilder::new().pool("p", "H100", 4, 8).account("org/a").account("org/b").build();
    let mut mix = Mix(8);
    let specs: Vec<WorkloadSpec> = (0..200)
        .map(|i| {
            Wl::new(format!("j{i}"))
                .account(if i % 2 == 0 { "org/a" } else { "org/b" })
                .gpus([1, 2, 4, 8][mix.range(0, 4) as usize])
                .submit(mix.range(0, 4 * HOUR))
                .work(mix.range(4 * HOUR, 12 * HOUR))
                .checkpoint(1800)
                .build(&state)
        })
        .collect();
    let until = 4 * DAY;
    let (state, out) = run(state, specs, vec![], Some(until));
    let preemptions = out.log.iter().filter(|e| e.event == "preempt").count() as u64;
    let bound = 2 * until / state.contract.min_slice.batch;
    assert!(preemptions <= bound, "{preemptions} preemptions > {bound}");
    let (a, b) = (delivered(&state, &out, "org/a", 0, until), delivered(&state, &out, "org/b", 0, until));
    assert!(a.abs_diff(b) as f64 / ((a + b) as f64) < 0.1, "org/a {a} vs org/b {b}");
}

#[test]
fn p9_drain_stops_everything_within_grace_and_starts_nothing() {
    let state = mixed_state();
    let specs = mixed(&state, 9, 120, DAY);
    let drain_at = 10 * HOUR;
    let node = state.cluster.nodes[2].name.clone();
    let events = vec![NodeEvent { t: drain_at, node: NodeId(2), kind: NodeEventKind::Drain }];
    let (state, out) = run(state, specs, events, Some(2 * DAY));
    let mut on_node: BTreeSet<&str> = BTreeSet::new();
    let mut ended_by: BTreeMap<&str, Time> = BTreeMap::new();
    for e in &out.log {
        let here = e.nodes.contains(&node);
        match e.event {
            "start" if here && e.t >= drain_at => panic!("{} started on drained {node} at {}", e.workload, e.t),
            "start" if here => {
                on_node.insert(e.workload.as_str());
            }
            "stop" | "finish" | "fail" if here => {
                if e.t <= drain_at {
                    on_node.remove(e.workload.as_str());
                } else {
                    ended_by.insert(e.workload.as_str(), e.t);
                }
            }
            _ => {}
        }
    }
    assert!(!on_node.is_empty(), "the node was busy at the drain");
    for w in &on_node {
        let t = ended_by.get(w).copied().unwrap_or(Time::MAX);
        assert!(t <= drain_at + state.contract.grace, "{w} still on {node} at {t}");
    }
    assert_eq!(state.health[2], allot_core::Health::Drained);
}

// ---------------------------------------------------------------------------
// Property tests: random small clusters and traces.

/// submit, gpus, work, checkpoint, class (0..3), account index.
type Job = (u64, u32, u64, u64, u8, usize);

#[derive(Clone, Debug)]
struct Scenario {
    pools: Vec<(u32, u32, u32)>,
    shares: [f64; 4],
    budgets: [Option<f64>; 4],
    service_cap: Option<u32>,
    slice: u64,
    grace: u64,
    jobs: Vec<Job>,
    events: Vec<(u64, usize, u8)>,
    /// Impacts of the accounts (IMP-1, IMP-2; CON-4 among over-budget
    /// work), CON-10, CON-11 and CON-12.
    impacts: [f64; 4],
    keep_claims: bool,
    swap_margin: f64,
    checkpoint_wait: u64,
}

const ACCOUNTS: [&str; 4] = ["org/a", "org/b/x", "org/b/y", "lab"];

fn scenario() -> impl Strategy<Value = Scenario> {
    let pools = prop::collection::vec((1u32..4, prop::sample::select(vec![2u32, 4, 8]), 1u32..3), 1..3);
    let shares = prop::array::uniform4(prop::sample::select(vec![1.0f64, 2.0, 3.0]));
    let budgets = prop::array::uniform4(prop::option::weighted(0.3, prop::sample::select(vec![0.5f64, 2.0, 8.0])));
    let jobs = prop::collection::vec(
        (0u64..6000, 1u32..17, 60u64..4000, prop::sample::select(vec![0u64, 200, 700]), 0u8..3, 0usize..4),
        1..30,
    );
    let events = prop::collection::vec((0u64..8000, 0usize..12, 0u8..4), 0..4);
    let impacts = prop::array::uniform4(prop::sample::select(vec![1.0f64, 1.0, 3.0]));
    let knobs = (
        impacts,
        any::<bool>(),
        prop::sample::select(vec![0.0f64, 0.2, 0.5]),
        prop::sample::select(vec![0u64, 150, 600]),
    );
    (pools, shares, budgets, prop::option::of(2u32..9), 0u64..1500, 0u64..300, jobs, events, knobs).prop_map(
        |(pools, shares, budgets, service_cap, slice, grace, jobs, events, knobs)| {
            let (impacts, keep_claims, swap_margin, checkpoint_wait) = knobs;
            Scenario {
                pools,
                shares,
                budgets,
                service_cap,
                slice,
                grace,
                jobs,
                events,
                impacts,
                keep_claims,
                swap_margin,
                checkpoint_wait,
            }
        },
    )
}

fn build(s: &Scenario) -> (State, Vec<WorkloadSpec>, Vec<NodeEvent>) {
    let mut b = StateBuilder::new();
    for (i, &(n, g, r)) in s.pools.iter().enumerate() {
        b = b.pool(&format!("p{i}"), "H100", n, g).racks_of(r);
    }
    for (i, path) in ACCOUNTS.iter().enumerate() {
        b = b.account_with(path, |a| {
            a.share = Some(s.shares[i]);
            a.budget_gpu_hours = s.budgets[i];
            a.max_service_gpus = if i == 0 { s.service_cap } else { None };
            a.impact = Some(s.impacts[i]);
        });
    }
    let state = b
        .contract(|c| {
            c.min_slice.batch = s.slice;
            c.grace = s.grace;
            c.budget_period = 3000;
            c.usage_half_life = 2000;
            c.interactive_max_gpus = 4;
            c.interactive_max_duration = 2000;
            c.keep_claims = s.keep_claims;
            c.swap_margin = s.swap_margin;
            c.checkpoint_wait = s.checkpoint_wait;
        })
        .build();
    let mut specs = Vec::new();
    for (i, &(submit, gpus, work, ckpt, class, acct)) in s.jobs.iter().enumerate() {
        let mut gpus = gpus;
        while !state.cluster.fits_anywhere(gpus, 0, None, allot_core::cluster::ClusterSet::ANY) {
            gpus -= 1;
        }
        let class = [Class::Batch, Class::Interactive, Class::Service][class as usize];
        let w = Wl::new(format!("j{i}"))
            .account(ACCOUNTS[acct])
            .class(class)
            .gpus(gpus)
            .submit(submit)
            .work(work)
            .checkpoint(ckpt);
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

fn check(s: &Scenario) -> Result<(), TestCaseError> {
    let (state, specs, events) = build(s);
    let opts = SimOptions { until: Some(20_000), check_invariants: true, keep_log: true, ..Default::default() };
    let (state, out) = simulate(state, specs, events, &mut AllotPolicy::new(), &opts);
    // Ledger conservation: Σ charged to top-level accounts = Σ assigned.
    let assigned: u64 = out.attempts.iter().map(|a| a.assigned_gpu_s()).sum();
    let charged: u64 = state
        .accounts
        .ids()
        .filter(|a| state.accounts.account(*a).parent == Some(AccountId::ROOT))
        .map(|a| state.ledger.at(a, out.horizon_end).charged_gpu_s)
        .sum();
    prop_assert_eq!(charged, assigned);
    // CON-1: policy preemptions (not drains, not over budget) respect the slice.
    let mut started: BTreeMap<&str, Time> = BTreeMap::new();
    let class: BTreeMap<&str, Class> = state.specs.iter().map(|s| (s.id.as_str(), s.class)).collect();
    for e in &out.log {
        match e.event {
            "start" => {
                started.insert(e.workload.as_str(), e.t);
            }
            "preempt" if !e.reason.starts_with("MNT-") && !e.reason.starts_with("BUD-2") => {
                let c = class[e.workload.as_str()];
                prop_assert!(c != Class::Service, "service {} preempted by policy", e.workload);
                let ran = e.t - started[e.workload.as_str()];
                prop_assert!(ran >= state.contract.min_slice.get(c), "{} preempted after {} s", e.workload, ran);
            }
            _ => {}
        }
    }
    // INT-2: interactive work over the lane limits is rejected, with a
    // reason; so is a service bigger than the cap of org/a (SVC-2).
    for (spec, run) in state.specs.iter().zip(&state.runs) {
        let over_lane = spec.class == Class::Interactive && (spec.gpus > 4 || spec.work_s > 2000);
        let over_cap = spec.class == Class::Service
            && state.accounts.account(spec.account).path == "org/a"
            && s.service_cap.is_some_and(|c| spec.gpus > c);
        prop_assert_eq!(over_lane || over_cap, run.phase == Phase::Rejected, "{}", spec.id);
        let want = if over_lane { allot_core::Rule::InteractiveLimit } else { allot_core::Rule::ServiceCap };
        if over_lane || over_cap {
            prop_assert!(run.last_reason.as_ref().is_some_and(|r| r.rule == want), "{}", spec.id);
        }
    }
    // Every waiting workload has an explanation naming a rule.
    for (_, w) in &state.pending {
        prop_assert!(state.run(*w).last_reason.is_some());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn invariants_and_ledger_conservation_hold_under_allot(s in scenario()) {
        check(&s)?;
    }

    #[test]
    fn allot_is_deterministic(s in scenario()) {
        let (state, specs, events) = build(&s);
        let opts = SimOptions { until: Some(20_000), check_invariants: false, keep_log: true, ..Default::default() };
        let (_, a) = simulate(state.clone(), specs.clone(), events.clone(), &mut AllotPolicy::new(), &opts);
        let (_, b) = simulate(state, specs, events, &mut AllotPolicy::new(), &opts);
        prop_assert_eq!(serde_json::to_string(&a.log).unwrap(), serde_json::to_string(&b.log).unwrap());
        prop_assert_eq!(a.attempts, b.attempts);
    }
}

/// Fleet-wide fair share (one ledger, one tree): on two clusters of 16
/// GPUs, `org/pa` may run only on `a`, `org/pb` only on `b`, `org/x` and
/// `org/y` anywhere; every account keeps a saturating backlog of 1-GPU
/// jobs. Over 6 days each account's share of the fleet's GPU-time is within
/// 5% of its weight, whichever cluster served it, for several weightings
/// and seeds.
#[test]
fn fleet_wide_shares_follow_weights_across_pinned_and_free_accounts() {
    // Weights of (pa, pb, x, y); a pinned account's share never exceeds its
    // cluster's half of the fleet, so every weighting is attainable.
    let cases: &[[f64; 4]] = &[[1.0, 1.0, 1.0, 1.0], [3.0, 1.0, 2.0, 2.0], [1.0, 3.0, 3.0, 1.0]];
    let names = ["org/pa", "org/pb", "org/x", "org/y"];
    let pins: [&[&str]; 4] = [&["a"], &["b"], &[], &[]];
    for (ci, weights) in cases.iter().enumerate() {
        for seed in 1..=3u64 {
            let mut b = StateBuilder::new().cluster("a").pool("p", "H100", 2, 8).cluster("b").pool("q", "H100", 2, 8);
            for (name, w) in names.iter().zip(weights) {
                b = b.account_with(name, |a| a.share = Some(*w));
            }
            let state = b
                .contract(|c| {
                    c.usage_half_life = DAY;
                    c.scheduling_interval = 60;
                })
                .build();
            let mut mix = Mix(seed * 100 + ci as u64);
            let mut specs = Vec::new();
            for (name, pin) in names.iter().zip(pins) {
                for i in 0..400 {
                    let wl = Wl::new(format!("{name}-{i}"))
                        .account(name)
                        .submit(mix.range(0, HOUR))
                        .work(mix.range(3 * HOUR, 9 * HOUR))
                        .checkpoint(1800);
                    let wl = if pin.is_empty() { wl } else { wl.on(pin) };
                    specs.push(wl.build(&state));
                }
            }
            let until = 6 * DAY;
            let opts =
                SimOptions { until: Some(until), check_invariants: false, keep_log: false, ..Default::default() };
            let (state, out) = simulate(state, specs, Vec::new(), &mut AllotPolicy::new(), &opts);
            let r = allot_sim::measures::measure(&state, &out);
            assert!(r.metrics.occupancy > 0.99, "case {ci} seed {seed}: not saturated ({})", r.metrics.occupancy);
            let total: f64 = weights.iter().sum();
            for (name, w) in names.iter().zip(weights) {
                let got = r.accounts[*name].delivered_share;
                let want = w / total;
                assert!(
                    (got - want).abs() / want < 0.05,
                    "case {ci} seed {seed}: {name} delivered {got:.4}, weight {want:.4}"
                );
            }
        }
    }
}

/// FS-2 with user shares: under saturation the users of one account get the
/// account's time in proportion to their user shares (within 5%), the
/// default user (no share set) counting 1.
#[test]
fn user_shares_within_an_account_follow_weights() {
    // User shares of (alice, bob, carol); `None`: not set (share 1). Each
    // weighting splits the 16 GPUs into whole GPUs.
    let cases: &[[Option<f64>; 3]] = &[[Some(2.0), None, None], [Some(3.0), Some(1.0), Some(4.0)]];
    let users = ["alice", "bob", "carol"];
    for (ci, shares) in cases.iter().enumerate() {
        let state = StateBuilder::new()
            .pool("p", "H100", 2, 8)
            .account_with("org/llm", |a| {
                for (u, s) in users.iter().zip(shares) {
                    if let Some(s) = s {
                        a.users.insert(u.to_string(), *s);
                    }
                }
            })
            .contract(|c| {
                c.usage_half_life = DAY;
                c.scheduling_interval = 60;
            })
            .build();
        let mut mix = Mix(40 + ci as u64);
        let mut specs = Vec::new();
        for u in users {
            specs.extend(backlog(&state, &mut mix, "org/llm", u, 400, 0));
        }
        let until = 6 * DAY;
        let (state, out) = run(state, specs, vec![], Some(until));
        let mut got = BTreeMap::<&str, f64>::new();
        for x in &out.attempts {
            let user = state.spec(x.workload).user.as_str();
            let u = users.iter().find(|u| **u == user).expect("a known user");
            *got.entry(u).or_default() += (u64::from(x.gpus) * x.end.min(until).saturating_sub(x.start)) as f64;
        }
        let total: f64 = got.values().sum();
        assert!(total >= 0.99 * (16 * until) as f64, "case {ci}: not saturated ({total})");
        let weights: Vec<f64> = shares.iter().map(|s| s.unwrap_or(1.0)).collect();
        let wsum: f64 = weights.iter().sum();
        for (u, w) in users.iter().zip(&weights) {
            let share = got.get(u).copied().unwrap_or(0.0) / total;
            let want = w / wsum;
            assert!((share - want).abs() / want < 0.05, "case {ci}: {u} delivered {share:.4}, user share {want:.4}");
        }
    }
}
