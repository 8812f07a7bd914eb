//! Hand-built scenarios for the `slurm` policy (SLURM-1 … SLURM-5).

use allot_core::placement::find;
use allot_core::policy::{FairTree, Multifactor, SlurmPolicy, SlurmPreempt};
use allot_core::workload::Phase;
use allot_core::{Action, Decision, Policy, PolicyKind, Priority, Reason, Rule, State, Time, WorkloadId};
use allot_testkit::{StateBuilder, Wl};
use proptest::prelude::*;

mod allot_support;
use allot_support::{started, sub_wl};

fn id(state: &State, name: &str) -> WorkloadId {
    WorkloadId(state.specs.iter().position(|s| s.id == name).expect("known workload") as u32)
}

/// Submits `wl` and starts it at `at` wherever it fits.
fn run(state: &mut State, wl: Wl, at: Time) -> WorkloadId {
    let s = wl.build(state);
    let w = state.submit(s);
    let alloc = find(&state.cluster, &state.free, state.spec(w), &|_| true).expect("room");
    state.start(w, alloc, at, Reason::new(Rule::SlurmMain, "test"));
    w
}

/// One 8-GPU node; `r` (6 GPUs, limit 100 s) runs since 0; the top
/// waiting workload `top` wants all 8 GPUs (limit 100 s), so backfill
/// reserves the node for it from t = 100.
fn reserved_node() -> State {
    let mut state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/x").build();
    run(&mut state, Wl::new("r").account("org/x").gpus(6).time_limit(100), 0);
    sub_wl(&mut state, Wl::new("top").account("org/x").gpus(8).time_limit(100).submit(1));
    state
}

#[test]
fn backfill_respects_the_top_reservation() {
    struct Case {
        name: &'static str,
        /// (gpus, time limit) of the one candidate submitted after `top`.
        limit: Option<Time>,
        want: &'static [&'static str],
    }
    for c in [
        Case { name: "short job backfills into the hole", limit: Some(50), want: &["small"] },
        Case { name: "ends exactly at the reservation", limit: Some(90), want: &["small"] },
        Case { name: "would delay the reservation", limit: Some(200), want: &[] },
        Case { name: "no time limit cannot cross a reservation", limit: None, want: &[] },
    ] {
        let mut state = reserved_node();
        let mut wl = Wl::new("small").account("org/x").gpus(2).submit(2);
        if let Some(l) = c.limit {
            wl = wl.time_limit(l);
        }
        sub_wl(&mut state, wl);
        let mut p = SlurmPolicy::new();
        let d = p.schedule(&state, 10);
        assert_eq!(started(&state, &d), c.want, "{}", c.name);
        assert!(d.iter().all(|d| d.reason.rule == Rule::SlurmBackfill), "{}: {d:?}", c.name);
        let top = id(&state, "top");
        assert_eq!(p.reservation(top), Some(100), "{}", c.name);
        let why = p.explain(&state, top, 10);
        assert_eq!(why.rule, Rule::SlurmBackfill, "{}", c.name);
        assert!(why.detail.contains("first in priority order"), "{}: {why}", c.name);
        assert!(why.detail.contains("start by t=100 (in 1 min)"), "{}: {why}", c.name);
        if c.want.is_empty() {
            let small = id(&state, "small");
            assert!(p.explain(&state, small, 10).detail.contains("waits for 1 workload of higher priority"));
        }
    }
}

#[test]
fn without_a_reservation_a_job_without_limit_backfills() {
    // The top workload fits nowhere within bf_window: nothing is reserved,
    // so an unlimited job may take the free GPUs.
    let mut state =
        StateBuilder::new().pool("p", "H100", 1, 8).account("org/x").contract(|c| c.slurm.bf_window = 50).build();
    run(&mut state, Wl::new("r").account("org/x").gpus(6).time_limit(100), 0);
    sub_wl(&mut state, Wl::new("top").account("org/x").gpus(8).submit(1));
    sub_wl(&mut state, Wl::new("free").account("org/x").gpus(2).submit(2));
    let mut p = SlurmPolicy::new();
    let d = p.schedule(&state, 10);
    assert_eq!(started(&state, &d), ["free"]);
    assert_eq!(p.reservation(id(&state, "top")), None);
    let why = p.explain(&state, id(&state, "top"), 10).to_string();
    assert!(why.contains("no start found within bf_window (50s)"), "{why}");
}

#[test]
fn default_time_limit_lets_unlimited_jobs_backfill() {
    let mut state = reserved_node();
    state.contract.slurm.default_time_limit = Some(60);
    sub_wl(&mut state, Wl::new("small").account("org/x").gpus(2).submit(2));
    let d = SlurmPolicy::new().schedule(&state, 10);
    assert_eq!(started(&state, &d), ["small"]);
}

#[test]
fn main_scheduler_stops_a_partition_at_its_first_blocked_job() {
    // H100 and A100 partitions of one 8-GPU node each; backfill tests no
    // job, so only the main scheduler acts.
    let mut state = StateBuilder::new()
        .pool("h", "H100", 1, 8)
        .pool("a", "A100", 1, 8)
        .account("org/x")
        .contract(|c| c.slurm.bf_max_job_test = 0)
        .build();
    run(&mut state, Wl::new("r").account("org/x").gpus(6).gpu_type("H100"), 0);
    for (name, g, t, s) in [("big", 8, "H100", 1), ("h2", 2, "H100", 2), ("a2", 2, "A100", 3), ("any", 1, "", 4)] {
        let mut wl = Wl::new(name).account("org/x").gpus(g).submit(s);
        if !t.is_empty() {
            wl = wl.gpu_type(t);
        }
        sub_wl(&mut state, wl);
    }
    let mut p = SlurmPolicy::new();
    let d = p.schedule(&state, 10);
    // h2 fits the H100 node but waits behind big; `any` may use A100.
    assert_eq!(started(&state, &d), ["a2", "any"]);
    assert!(d.iter().all(|d| d.reason.rule == Rule::SlurmMain));
    let why = p.explain(&state, id(&state, "h2"), 10);
    assert_eq!(why.rule, Rule::SlurmMain);
    assert!(why.detail.contains("stops its partition at higher-priority big"), "{why}");
}

/// Once every partition is blocked the main scheduler looks at nothing
/// lower, yet each workload below still learns who blocks its partition.
#[test]
fn workloads_below_a_fully_blocked_queue_are_told_who_blocks_them() {
    let mut state = StateBuilder::new()
        .pool("h", "H100", 1, 8)
        .pool("a", "A100", 1, 8)
        .account("org/x")
        .contract(|c| c.slurm.bf_max_job_test = 0)
        .build();
    run(&mut state, Wl::new("rh").account("org/x").gpus(6).gpu_type("H100"), 0);
    run(&mut state, Wl::new("ra").account("org/x").gpus(6).gpu_type("A100"), 0);
    let queue = [("bigh", 8, "H100"), ("biga", 8, "A100"), ("one", 1, ""), ("onea", 1, "A100"), ("oneh", 1, "H100")];
    for (s, (name, g, t)) in queue.into_iter().enumerate() {
        let mut wl = Wl::new(name).account("org/x").gpus(g).submit(s as Time + 1);
        if !t.is_empty() {
            wl = wl.gpu_type(t);
        }
        sub_wl(&mut state, wl);
    }
    let mut p = SlurmPolicy::new();
    assert!(started(&state, &p.schedule(&state, 10)).is_empty(), "each small one fits, but behind a blocked partition");
    for (name, by) in [("biga", None), ("one", Some("bigh")), ("onea", Some("biga")), ("oneh", Some("bigh"))] {
        let why = p.explain(&state, id(&state, name), 10);
        match by {
            Some(by) => {
                assert_eq!(why.rule, Rule::SlurmMain, "{name}: {why}");
                assert!(why.detail.contains(&format!("stops its partition at higher-priority {by},")), "{name}: {why}");
            }
            None => assert!(!why.detail.contains("stops its partition"), "{name}: {why}"),
        }
    }
}

/// The policy keeps priorities between passes and reads only what changed
/// in the queue: a workload parked, requeued or ended while parked is
/// never started from a stale entry, and one queued again is seen.
#[test]
fn the_kept_queue_follows_parking_and_ends_while_parked() {
    let mut state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/x").build();
    let r = run(&mut state, Wl::new("r").account("org/x").gpus(8), 0);
    let gone = sub_wl(&mut state, Wl::new("gone").account("org/x").gpus(8).submit(1));
    let back = sub_wl(&mut state, Wl::new("back").account("org/x").gpus(8).submit(2));
    let mut p = SlurmPolicy::new();
    assert!(p.schedule(&state, 10).is_empty(), "the node is full");
    // Both have priorities now; `gone` is parked and cancelled while
    // parked, `back` parked and queued again.
    state.park(gone);
    state.park(back);
    assert!(p.schedule(&state, 20).is_empty());
    state.end_pending(gone, 25, Phase::Cancelled, Reason::new(Rule::SlurmMain, "test"));
    state.unpark(back, 26);
    state.finish(r, 30, Reason::new(Rule::SlurmMain, "test"));
    let d = p.schedule(&state, 30);
    assert_eq!(started(&state, &d), ["back"], "the cancelled one is not started, the requeued one is");
}

/// The account tree of the Fair Tree page's example (root ⇒ Acct1 ⇒
/// Acct12 ⇒ UserA, root ⇒ Acct1 ⇒ Acct16 ⇒ UserB), with a sibling
/// account and users of no usage to exercise the ordering.
#[test]
fn fair_tree_ranks_the_documented_example() {
    let mut state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account_with("acct1/acct12", |a| {
            a.users.insert("userc".into(), 1.0);
        })
        .account("acct1/acct16")
        .account("acct2")
        .build();
    let acct = |s: &State, p: &str| s.accounts.get(p).unwrap();
    // One hour of use: userA 4 GPUs, userB 1, userD 2; userC none.
    for (path, user, g) in [("acct1/acct12", "usera", 4), ("acct1/acct16", "userb", 1), ("acct2", "userd", 2)] {
        let a = acct(&state, path);
        state.charge(a, user, 0, g, 1.0);
        state.charge(a, user, 3600, -g, 1.0);
    }
    let t = FairTree::compute(&state, 3600);
    assert_eq!(t.users(), 4);
    // Root: acct2 (LF 0.5 / (2/7) = 1.75) before acct1 (0.5 / (5/7) = 0.7).
    // In acct1: acct16 (0.5 / 0.2) before acct12 (0.5 / 0.8). In acct12:
    // userc (no usage: infinite) before usera.
    let want = [
        ("acct2", "userd", 1.0),
        ("acct1/acct16", "userb", 0.75),
        ("acct1/acct12", "userc", 0.5),
        ("acct1/acct12", "usera", 0.25),
    ];
    for (path, user, f) in want {
        assert_eq!(t.factor(acct(&state, path), user), f, "{path} {user}");
    }
    // UserB ranks above UserA because Acct16 has the higher Level FS.
    assert!(t.factor(acct(&state, "acct1/acct16"), "userb") > t.factor(acct(&state, "acct1/acct12"), "usera"));
}

#[test]
fn fair_tree_charges_billing_when_given() {
    // teama: 4 GPUs for 1 h; teamb: 1 GPU for 2 h; each job billed 1 (one
    // CPU, no TRESBillingWeights) or not billed (its normalised GPUs).
    for (billed, first) in [(true, "teama"), (false, "teamb")] {
        let mut state = StateBuilder::new().pool("p", "H100", 2, 4).account("teama").account("teamb").build();
        let wl = |name: &str, team: &str, gpus: u32| {
            let w = Wl::new(name).account(team).user(team).gpus(gpus);
            if billed { w.billing(1) } else { w }
        };
        let a = run(&mut state, wl("a", "teama", 4), 0);
        let b = run(&mut state, wl("b", "teamb", 1), 0);
        state.finish(a, 3600, Reason::new(Rule::SlurmMain, "test"));
        state.finish(b, 7200, Reason::new(Rule::SlurmMain, "test"));
        let t = FairTree::compute(&state, 7200);
        let (ta, tb) = (state.accounts.get("teama").unwrap(), state.accounts.get("teamb").unwrap());
        let (fa, fb) = (t.factor(ta, "teama"), t.factor(tb, "teamb"));
        let want = if first == "teama" { (1.0, 0.5) } else { (0.5, 1.0) };
        assert_eq!((fa, fb), want, "billed {billed}");
        // Allot's own usage (FS-*, budgets) is GPU-time either way.
        assert!(state.ledger.decayed_ngs_at(ta, 7200) > state.ledger.decayed_ngs_at(tb, 7200), "billed {billed}");
        assert_eq!(state.ledger.at(ta, 7200).charged_gpu_s, 4 * 3600);
        // Nothing held: nothing accrues.
        assert_eq!(state.ledger.at(ta, 7200).priority_rate, 0.0);
    }
}

#[test]
fn fair_tree_ties() {
    struct Case {
        name: &'static str,
        /// (account, user, GPUs used for an hour).
        usage: &'static [(&'static str, &'static str, i64)],
        want: &'static [(&'static str, &'static str, f64)],
    }
    for c in [
        Case {
            // No usage anywhere: every LF is infinite; a and b are merged
            // and all three users share the top rank.
            name: "all tied",
            usage: &[],
            want: &[("a", "u1", 1.0), ("a", "u2", 1.0), ("b", "u3", 1.0)],
        },
        Case {
            // a and b used the same: tied, so their children are merged
            // and sorted together by their own LF: u2 (no usage), u3 (1),
            // then u1 (0.5): b's user between a's.
            name: "tied accounts merge their children",
            usage: &[("a", "u1", 2), ("b", "u3", 2)],
            want: &[("a", "u2", 1.0), ("b", "u3", 2.0 / 3.0), ("a", "u1", 1.0 / 3.0)],
        },
        Case {
            // b used more: all of a's users rank above b's.
            name: "a higher account ranks all its users first",
            usage: &[("a", "u1", 4), ("b", "u3", 5)],
            want: &[("a", "u2", 1.0), ("a", "u1", 2.0 / 3.0), ("b", "u3", 1.0 / 3.0)],
        },
    ] {
        let mut state = StateBuilder::new()
            .pool("p", "H100", 1, 8)
            .account_with("a", |a| {
                a.users.insert("u1".into(), 1.0);
                a.users.insert("u2".into(), 1.0);
            })
            .account_with("b", |a| {
                a.users.insert("u3".into(), 1.0);
            })
            .build();
        for &(path, user, g) in c.usage {
            let a = state.accounts.get(path).unwrap();
            state.charge(a, user, 0, g, 1.0);
            state.charge(a, user, 3600, -g, 1.0);
        }
        let t = FairTree::compute(&state, 3600);
        for &(path, user, f) in c.want {
            let got = t.factor(state.accounts.get(path).unwrap(), user);
            assert!((got - f).abs() < 1e-12, "{}: {path} {user} = {got}, want {f}", c.name);
        }
    }
}

#[test]
fn multifactor_weights_and_factors() {
    struct Case {
        name: &'static str,
        favor_small: bool,
        label: Priority,
        gpu: &'static str,
        /// `PriorityWeightTRES` `GRES/gpu`.
        tres: u32,
        /// The site's largest QOS priority, if not a label's.
        qos_max: Option<u32>,
        /// Weighted: age, fairshare, jobsize, partition, qos, tres; priority.
        want: [f64; 6],
        priority: u32,
    }
    let case = |name, favor_small, label, gpu, want, priority| Case {
        name,
        favor_small,
        label,
        gpu,
        tres: 0,
        qos_max: None,
        want,
        priority,
    };
    for c in [
        case("favor large", false, Priority::High, "A100", [500.0, 0.0, 37.5, 5.0, 5000.0, 0.0], 5542),
        case("favor small", true, Priority::Urgent, "H100", [500.0, 0.0, 62.5, 10.0, 10_000.0, 0.0], 10_572),
        case("low QOS", false, Priority::Low, "H100", [500.0, 0.0, 37.5, 10.0, 0.0, 0.0], 547),
        // Slurm divides by the largest QOS priority of the site, used or not.
        Case {
            qos_max: Some(200),
            ..case(
                "QOS over the site's largest",
                false,
                Priority::High,
                "A100",
                [500.0, 0.0, 37.5, 5.0, 2500.0, 0.0],
                3042,
            )
        },
        // 4 of the cluster's 16 GPUs, as sprio's `gres/gpu=25`.
        Case {
            tres: 100,
            ..case("GPU TRES weight", false, Priority::Low, "H100", [500.0, 0.0, 37.5, 10.0, 0.0, 25.0], 572)
        },
    ] {
        let mut state = StateBuilder::new()
            .pool("h", "H100", 1, 8)
            .pool("a", "A100", 1, 8)
            .account("org/x")
            .contract(|k| {
                let s = &mut k.slurm;
                (s.weight_age, s.weight_fairshare, s.weight_job_size, s.weight_partition, s.weight_qos) =
                    (1000, 0, 100, 10, 10_000);
                s.max_age = 1000;
                s.favor_small = c.favor_small;
                s.qos_priority = [0, 10, 50, 100];
                s.qos_priority_max = c.qos_max;
                s.weight_tres_gpu = c.tres;
            })
            .build();
        let (h, a) = (state.cluster.gpu_type_by_name("H100").unwrap(), state.cluster.gpu_type_by_name("A100").unwrap());
        state.contract.slurm.partition_priority[h.0 as usize] = 10;
        state.contract.slurm.partition_priority[a.0 as usize] = 5;
        let w = sub_wl(&mut state, Wl::new("w").account("org/x").gpus(4).gpu_type(c.gpu).priority(c.label));
        let p = Multifactor::new(&state, 500).of(&state, w, 500);
        assert_eq!(p.weighted, c.want, "{}", c.name);
        assert_eq!(p.priority, c.priority, "{}", c.name);
        // Age saturates at PriorityMaxAge.
        assert_eq!(Multifactor::new(&state, 5000).of(&state, w, 5000).factors[0], 1.0, "{}", c.name);
    }
}

/// SLURM-1, SLURM-2: priorities are computed when a workload is first seen
/// queued and again at each `PriorityCalcPeriod`; between, usage changes
/// nothing (as Slurm's decay thread).
#[test]
fn priorities_hold_between_calc_periods() {
    struct Case {
        name: &'static str,
        /// When the second pass runs.
        at: Time,
        /// Which of the two waiting users' workloads is first then.
        first: &'static str,
    }
    for c in [
        Case { name: "same period: both still tied, earlier submission first", at: 59, first: "a-wait" },
        Case { name: "next period: a's usage counted, b first", at: 60, first: "b-wait" },
        Case { name: "a later pass of the next period", at: 119, first: "b-wait" },
    ] {
        let mut state = StateBuilder::new()
            .pool("p", "H100", 1, 8)
            .account("org/a")
            .account("org/b")
            .contract(|k| {
                let s = &mut k.slurm;
                (s.weight_fairshare, s.calc_period, s.decay_half_life) = (10_000, 60, 600);
            })
            .build();
        // a runs on 6 GPUs from 0; a and b each wait with 4 GPUs.
        run(&mut state, Wl::new("a-run").account("org/a").user("a").gpus(6), 0);
        sub_wl(&mut state, Wl::new("a-wait").account("org/a").user("a").gpus(4));
        sub_wl(&mut state, Wl::new("b-wait").account("org/b").user("b").gpus(4));
        let mut p = SlurmPolicy::new();
        let first = |p: &SlurmPolicy, at: Time| {
            let why = p.explain(&state, id(&state, "b-wait"), at);
            if why.detail.contains("first in priority order") { "b-wait" } else { "a-wait" }
        };
        // At t = 0 nobody has usage: both factors 1, a first by its id.
        p.schedule(&state, 0);
        assert_eq!(first(&p, 0), "a-wait", "{}", c.name);
        p.schedule(&state, c.at);
        assert_eq!(first(&p, c.at), c.first, "{}", c.name);
    }
}

#[test]
fn priority_orders_the_queue() {
    // The later, urgent workload goes first when QOS is weighted.
    let mut state = StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account("org/x")
        .contract(|k| {
            k.slurm.weight_qos = 1000;
            k.slurm.qos_priority = [0, 1, 2, 3];
        })
        .build();
    sub_wl(&mut state, Wl::new("old").account("org/x").gpus(8).submit(0));
    sub_wl(&mut state, Wl::new("urgent").account("org/x").gpus(8).submit(5).priority(Priority::Urgent));
    let mut p = SlurmPolicy::new();
    let d = p.schedule(&state, 10);
    assert_eq!(started(&state, &d), ["urgent"]);
    assert!(
        d[0].reason.detail.contains("priority 1000 (age 0, fairshare 0, jobsize 0, partition 0, qos 1000)"),
        "{}",
        d[0].reason
    );
}

#[test]
fn qos_preemption_on_and_off() {
    struct Case {
        name: &'static str,
        preempt: SlurmPreempt,
        preemptible: bool,
        want: &'static [(&'static str, &'static str)],
    }
    for c in [
        Case { name: "off by default", preempt: SlurmPreempt::Off, preemptible: true, want: &[] },
        Case {
            name: "qos preempts lower label",
            preempt: SlurmPreempt::Qos,
            preemptible: true,
            want: &[("low", "high")],
        },
        Case { name: "never a non-preemptible job", preempt: SlurmPreempt::Qos, preemptible: false, want: &[] },
    ] {
        let mut state = StateBuilder::new()
            .pool("p", "H100", 1, 8)
            .account("org/x")
            .contract(|k| k.slurm.preempt = c.preempt)
            .build();
        let mut low = Wl::new("low").account("org/x").gpus(8).priority(Priority::Low);
        if c.preemptible {
            low = low.preemptible();
        }
        run(&mut state, low, 0);
        sub_wl(&mut state, Wl::new("high").account("org/x").gpus(8).submit(1).priority(Priority::High));
        sub_wl(&mut state, Wl::new("same").account("org/x").gpus(8).submit(2).priority(Priority::Low));
        let mut p = SlurmPolicy::new();
        let d = p.schedule(&state, 10);
        let got: Vec<(String, String)> = d
            .iter()
            .filter_map(|d| match &d.action {
                Action::Preempt { workload, by } => {
                    Some((state.spec(*workload).id.clone(), state.spec(by.unwrap()).id.clone()))
                }
                _ => None,
            })
            .collect();
        let want: Vec<(String, String)> = c.want.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        assert_eq!(got, want, "{}", c.name);
        assert!(started(&state, &d).is_empty(), "{}", c.name);
        if !want.is_empty() {
            assert_eq!(d[0].reason.rule, Rule::SlurmPreempt);
            // A second pass does not preempt again while the victim stops.
            let g = state.contract.grace;
            let v = id(&state, "low");
            state.signal(v, 10, g, d[0].reason.clone());
            let again = p.schedule(&state, 11);
            assert!(again.iter().all(|d| !matches!(d.action, Action::Preempt { .. })), "{}", c.name);
        }
    }
}

#[test]
fn admission_refuses_what_no_partition_holds() {
    let state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/x").build();
    let p = PolicyKind::Slurm.build();
    assert_eq!(p.name(), "slurm");
    let ok = Wl::new("ok").account("org/x").gpus(8).build(&state);
    let big = Wl::new("big").account("org/x").gpus(9).build(&state);
    assert!(p.admit(&state, &ok).is_ok());
    let why = p.admit(&state, &big).unwrap_err();
    assert_eq!(why.rule, Rule::SlurmMain);
    assert_eq!(why.detail, "9 GPUs never fit any partition");
}

#[test]
fn next_wakeup_is_the_next_backfill_while_work_waits() {
    let state = reserved_node();
    let mut p = SlurmPolicy::new();
    p.schedule(&state, 10);
    assert_eq!(p.next_wakeup(&state, 10), Some(40));
    // Backfill does not run again before bf_interval: a job submitted that
    // only backfill could start waits until then.
    let mut state = state;
    sub_wl(&mut state, Wl::new("small").account("org/x").gpus(2).time_limit(20).submit(12));
    assert!(started(&state, &p.schedule(&state, 20)).is_empty());
    assert_eq!(started(&state, &p.schedule(&state, 40)), ["small"]);
}

/// Two clusters `a` and `b` of one 8-GPU H100 node each, in the split
/// shape a per-cluster run gets (accounts `a/org/x`, `b/org/x`), every
/// workload pinned to one cluster.
fn two_clusters(f: impl FnOnce(&mut allot_core::Contract)) -> State {
    StateBuilder::new()
        .cluster("a")
        .pool("p", "H100", 1, 8)
        .cluster("b")
        .pool("p", "H100", 1, 8)
        .account("a/org/x")
        .account("b/org/x")
        .contract(f)
        .build()
}

/// Submits `name` with `gpus` GPUs pinned to cluster `c` (account
/// `c/org/x`), with a time limit.
fn pinned(state: &mut State, name: &str, c: &str, gpus: u32, limit: Time, submit: Time) -> WorkloadId {
    sub_wl(state, Wl::new(name).account(&format!("{c}/org/x")).on(&[c]).gpus(gpus).time_limit(limit).submit(submit))
}

/// With one controller per cluster, the main scheduler's blocked partition
/// is one cluster's (SLURM-3) and `bf_max_job_test` counts each
/// controller's queue (SLURM-4); with one controller for the fleet, a GPU
/// type spans both clusters and the limit counts the whole queue.
#[test]
fn one_controller_per_cluster_blocks_and_backfills_per_cluster() {
    struct Case {
        name: &'static str,
        per_cluster: bool,
        bf_max_job_test: u32,
        /// Whether `top-b` (8 GPUs on b) waits ahead of the small ones.
        top_b: bool,
        want: &'static [&'static str],
        /// Who the main scheduler says blocks `small-b`, if anyone.
        small_b_blocked_by: Option<&'static str>,
    }
    for c in [
        Case {
            name: "one controller: big-a blocks the fleet's H100 partition",
            per_cluster: false,
            bf_max_job_test: 0,
            top_b: false,
            want: &[],
            small_b_blocked_by: Some("big-a"),
        },
        Case {
            name: "per cluster: big-a blocks only a's partition",
            per_cluster: true,
            bf_max_job_test: 0,
            top_b: false,
            want: &["small-b"],
            small_b_blocked_by: None,
        },
        Case {
            name: "one controller, two tests: backfill tests big-a and top-b only",
            per_cluster: false,
            bf_max_job_test: 2,
            top_b: true,
            want: &[],
            small_b_blocked_by: Some("big-a"),
        },
        Case {
            name: "per cluster, two tests each: small-a backfills before big-a's reservation",
            per_cluster: true,
            bf_max_job_test: 2,
            top_b: true,
            want: &["small-a"],
            small_b_blocked_by: None,
        },
    ] {
        let mut state = two_clusters(|k| k.slurm.bf_max_job_test = c.bf_max_job_test);
        for (name, cl) in [("ra", "a"), ("rb", "b")] {
            let w = pinned(&mut state, name, cl, 6, 100, 0);
            let alloc = find(&state.cluster, &state.free, state.spec(w), &|_| true).expect("room");
            state.start(w, alloc, 0, Reason::new(Rule::SlurmMain, "test"));
        }
        // big-a (8 GPUs) waits for a's node; small-a (2 GPUs, 50 s) fits
        // a's 2 free GPUs and ends before big-a's reservation at t = 100;
        // small-b (1 GPU, 500 s) fits b's free GPUs but would outlive
        // top-b's reservation, so only the main scheduler can start it.
        pinned(&mut state, "big-a", "a", 8, 100, 1);
        if c.top_b {
            pinned(&mut state, "top-b", "b", 8, 100, 2);
        }
        pinned(&mut state, "small-a", "a", 2, 50, 3);
        pinned(&mut state, "small-b", "b", 1, 500, 4);
        let mut p = if c.per_cluster { SlurmPolicy::per_cluster() } else { SlurmPolicy::new() };
        let d = p.schedule(&state, 10);
        let mut got = started(&state, &d);
        got.sort();
        assert_eq!(got, c.want, "{}", c.name);
        if !got.contains(&"small-b".to_string()) {
            let why = p.explain(&state, id(&state, "small-b"), 10);
            match c.small_b_blocked_by {
                Some(by) => assert!(
                    why.detail.contains(&format!("stops its partition at higher-priority {by},")),
                    "{}: {why}",
                    c.name
                ),
                None => assert!(!why.detail.contains("stops its partition"), "{}: {why}", c.name),
            }
        }
    }
}

/// SLURM-2 per cluster: each cluster's Fair Tree ranks its own users
/// alone (n = its users), so the heaviest user of one cluster does not
/// push the users of the other down; with one tree, four users share
/// the ranks 4 … 1.
#[test]
fn fair_tree_per_cluster_ranks_each_cluster_alone() {
    let mut state = StateBuilder::new()
        .cluster("a")
        .pool("p", "H100", 1, 8)
        .cluster("b")
        .pool("p", "H100", 1, 8)
        .account("a/org/x")
        .account("a/org/y")
        .account("b/org/x")
        .account("b/org/y")
        .contract(|k| k.slurm.weight_fairshare = 1000)
        .build();
    let acct = |s: &State, p: &str| s.accounts.get(p).unwrap();
    // One hour: on a, p 4 GPUs and q 1; on b, r 8 GPUs and s 2.
    for (path, user, g) in [("a/org/x", "p", 4), ("a/org/y", "q", 1), ("b/org/x", "r", 8), ("b/org/y", "s", 2)] {
        let a = acct(&state, path);
        state.charge(a, user, 0, g, 1.0);
        state.charge(a, user, 3600, -g, 1.0);
    }
    // One waiting workload per user, so that each has a priority.
    for (path, user, cl) in [("a/org/x", "p", "a"), ("a/org/y", "q", "a"), ("b/org/x", "r", "b"), ("b/org/y", "s", "b")]
    {
        sub_wl(&mut state, Wl::new(format!("w-{user}")).account(path).user(user).on(&[cl]).gpus(8).submit(3600));
    }
    let fairshare = |p: &mut SlurmPolicy, name: &str| -> String {
        p.schedule(&state, 3600);
        let why = p.explain(&state, id(&state, name), 3600).to_string();
        let at = why.find("fairshare ").expect("sprio factors") + "fairshare ".len();
        why[at..].split(',').next().unwrap().to_string()
    };
    let mut per = SlurmPolicy::per_cluster();
    // Per cluster: a ranks q (less usage) 2 of 2, p 1 of 2; b ranks s, r.
    for (name, want) in [("w-q", "1000"), ("w-p", "500"), ("w-s", "1000"), ("w-r", "500")] {
        assert_eq!(fairshare(&mut per, name), want, "per cluster, {name}");
    }
    // One tree: a (usage 5) before b (usage 10); four ranks.
    let mut one = SlurmPolicy::new();
    for (name, want) in [("w-q", "1000"), ("w-p", "750"), ("w-s", "500"), ("w-r", "250")] {
        assert_eq!(fairshare(&mut one, name), want, "one controller, {name}");
    }
}

/// SLURM-1 per cluster: job size and GPU TRES are relative to the
/// workload's own cluster (8 GPUs of a's 8 are all of it; of the fleet's
/// 32, a quarter).
#[test]
fn job_size_and_tres_per_cluster_are_relative_to_the_own_cluster() {
    let mut state = StateBuilder::new()
        .cluster("a")
        .pool("p", "H100", 1, 8)
        .cluster("b")
        .pool("p", "H100", 3, 8)
        .account("a/org/x")
        .account("b/org/x")
        .contract(|k| {
            k.slurm.weight_job_size = 1000;
            k.slurm.weight_tres_gpu = 100;
        })
        .build();
    run(&mut state, Wl::new("r").account("a/org/x").on(&["a"]).gpus(1), 0);
    let w = sub_wl(&mut state, Wl::new("w").account("a/org/x").on(&["a"]).gpus(8).submit(1));
    for (name, mut p, want) in [
        ("one controller", SlurmPolicy::new(), "jobsize 250, partition 0, qos 0, tres gres/gpu=25"),
        ("per cluster", SlurmPolicy::per_cluster(), "jobsize 1000, partition 0, qos 0, tres gres/gpu=100"),
    ] {
        p.schedule(&state, 10);
        let why = p.explain(&state, w, 10).to_string();
        assert!(why.contains(want), "{name}: {why}");
    }
}

/// A random scenario: running workloads on two 4-GPU nodes, a queue.
#[derive(Clone, Debug)]
struct Scenario {
    running: Vec<(u32, Option<Time>)>,
    queue: Vec<(u32, Option<Time>)>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let job = || (1u32..=4, prop::option::of(5u64..200));
    (prop::collection::vec(job(), 0..6), prop::collection::vec((1u32..=8, prop::option::of(5u64..200)), 1..10))
        .prop_map(|(running, queue)| Scenario { running, queue })
}

fn build(s: &Scenario) -> State {
    let mut state = StateBuilder::new().pool("p", "H100", 2, 4).account("org/x").build();
    for (i, &(g, l)) in s.running.iter().enumerate() {
        let mut wl = Wl::new(format!("r{i}")).account("org/x").gpus(g);
        if let Some(l) = l {
            wl = wl.time_limit(l);
        }
        let spec = wl.build(&state);
        let w = state.submit(spec);
        if let Some(alloc) = find(&state.cluster, &state.free, state.spec(w), &|_| true) {
            state.start(w, alloc, 0, Reason::new(Rule::SlurmMain, "test"));
        }
    }
    for (i, &(g, l)) in s.queue.iter().enumerate() {
        let mut wl = Wl::new(format!("q{i}")).account("org/x").gpus(g).submit(1 + i as Time);
        if let Some(l) = l {
            wl = wl.time_limit(l);
        }
        sub_wl(&mut state, wl);
    }
    state
}

fn apply(state: &mut State, d: &[Decision], now: Time) {
    for x in d {
        if let Action::Start { workload, alloc } = &x.action {
            assert!(state.can_hold(alloc), "start of {} on GPUs not free", state.spec(*workload).id);
            state.start(*workload, alloc.clone(), now, x.reason.clone());
        }
    }
}

/// When the top waiting workload `w` of a fresh pass on `state` can start.
fn top_start(state: &State, w: WorkloadId, now: Time) -> Option<Time> {
    let mut p = SlurmPolicy::new();
    let d = p.schedule(state, now);
    let starts_now = d.iter().any(|x| matches!(x.action, Action::Start { workload, .. } if workload == w));
    if starts_now { Some(now) } else { p.reservation(w) }
}

proptest! {
    #[test]
    fn starts_fit_and_backfill_never_delays_the_top_reservation(s in scenario()) {
        let now = 20;
        let mut state = build(&s);
        let mut p = SlurmPolicy::new();
        let d = p.schedule(&state, now);
        // On one cluster, one controller per cluster is the same controller.
        prop_assert_eq!(&SlurmPolicy::per_cluster().schedule(&state, now), &d);
        // One partition: the main scheduler starts a prefix of the queue and
        // stops at the top waiting workload; the rest started by backfill.
        let main: Vec<Decision> = d.iter().filter(|x| x.reason.rule == Rule::SlurmMain).cloned().collect();
        let mut before = state.clone();
        apply(&mut before, &main, now);
        apply(&mut state, &d, now);
        state.sanity_check(now).map_err(TestCaseError::fail)?;
        let top = before.pending.iter().map(|&(_, w)| w).next();
        if let Some(top) = top {
            let planned = top_start(&before, top, now);
            let after = if state.pending.iter().any(|&(_, w)| w == top) { top_start(&state, top, now) } else { Some(now) };
            if let Some(t) = planned {
                prop_assert!(after.is_some_and(|a| a <= t), "top {top:?} planned at {t}, after backfill {after:?}");
            }
        }
    }
}
