//! The `ai2` generator: determinism, demand, class mix, fit, and the
//! behavioural parameters.

mod import_support;

use std::collections::BTreeSet;

use allot_core::{Class, Priority};
use allot_trace::generate::{Ai2Params, Generated, Kind, Scenario, generate};
use import_support::{check_config, config_text, trace_text};

fn params(gpus: u32, days: u32, seed: u64) -> Ai2Params {
    Ai2Params { gpus, days, seed, ..Ai2Params::default() }
}

fn gen_of(p: &Ai2Params) -> Generated {
    generate(Scenario::Ai2, p).unwrap()
}

fn demand_over_capacity(g: &Generated, p: &Ai2Params) -> f64 {
    let demand: f64 = g.rows.iter().map(|r| f64::from(r.gpus) * r.work_s as f64).sum();
    demand / (f64::from(p.gpus) * f64::from(p.days) * 86_400.0)
}

fn kind(id: &str) -> Kind {
    Kind::of_id(id).unwrap_or_else(|| panic!("id {id} names its kind"))
}

#[test]
fn same_seed_same_bytes_other_seed_differs() {
    let p = params(256, 14, 42);
    let (a, b) = (gen_of(&p), gen_of(&p));
    assert_eq!(trace_text(&a.rows), trace_text(&b.rows));
    assert_eq!(config_text(&a.config), config_text(&b.config));
    let c = gen_of(&params(256, 14, 43));
    assert_ne!(trace_text(&a.rows), trace_text(&c.rows));
}

#[test]
fn demand_matches_load_within_15_percent() {
    let cases =
        [("default", 1024, 30, 2.5), ("small cluster", 88, 30, 2.5), ("light", 512, 14, 1.5), ("heavy", 256, 21, 3.0)];
    for (name, gpus, days, load) in cases {
        let p = Ai2Params { load, ..params(gpus, days, 7) };
        let g = gen_of(&p);
        let ratio = demand_over_capacity(&g, &p);
        assert!((ratio / load - 1.0).abs() <= 0.15, "case {name}: demand/capacity {ratio:.3} vs load {load}");
        assert!((g.stats.demand_over_capacity - ratio).abs() < 1e-9, "case {name}: stats agree");
    }
}

#[test]
fn default_size_is_bounded_and_has_every_kind_and_class() {
    let p = params(1024, 30, 1);
    let g = gen_of(&p);
    assert!(g.rows.len() < 100_000, "{} workloads", g.rows.len());
    let kinds: BTreeSet<Kind> = g.rows.iter().map(|r| kind(&r.id)).collect();
    assert_eq!(kinds.len(), Kind::ALL.len(), "kinds present: {kinds:?}");
    let classes: BTreeSet<Class> = g.rows.iter().map(|r| r.class).collect();
    assert_eq!(classes.len(), 3);
    for r in &g.rows {
        match kind(&r.id) {
            Kind::Interactive | Kind::Squat => {
                assert!(r.class == Class::Interactive && r.gpus <= 8 && r.work_s <= 8 * 3600)
            }
            Kind::Service => assert_eq!(r.class, Class::Service),
            Kind::Pretrain => {
                assert!(r.class == Class::Batch && r.nodes >= 2 && r.checkpoint_s > 0 && !r.gpu_type.is_empty())
            }
            _ => assert_eq!(r.class, Class::Batch),
        }
        assert!(r.work_s >= 1 && (0.0..=1.0).contains(&r.util));
    }
    let users: BTreeSet<&str> = g.rows.iter().map(|r| r.user.as_str()).collect();
    assert!((120..=150).contains(&users.len()), "{} distinct users", users.len());
    assert!(g.rows.windows(2).all(|w| w[0].submit_s <= w[1].submit_s), "sorted by submit");
}

#[test]
fn every_workload_fits_its_teams_pools() {
    for (gpus, seed) in [(88, 3), (1024, 5)] {
        let g = gen_of(&params(gpus, 14, seed));
        check_config(&g.config, &g.rows);
        assert_eq!(g.config.total_gpus(), u64::from(gpus));
        for pool in &g.config.pools {
            assert!(["H100", "B200", "B300"].contains(&pool.gpu.as_str()), "{pool:?}");
            assert!(pool.gpus_per_node == 8 && pool.rack_size <= 16 && !pool.shared, "{pool:?}");
        }
        let budgets: f64 = g.config.accounts.iter().filter_map(|a| a.budget_gpu_hours).sum();
        let capacity = g.config.capacity_ngh(7 * 86_400);
        assert!((budgets / capacity - 1.0).abs() < 0.01, "budgets {budgets} vs capacity {capacity}");
        let teams = g.config.accounts.iter().filter(|a| a.legacy_pools.is_some()).count();
        assert!((6..=10).contains(&teams));
    }
}

/// Share of submissions on a weekday between 08:00 and 19:00.
fn working_hours_share(g: &Generated, keep: impl Fn(Kind) -> bool) -> f64 {
    let (mut inside, mut all) = (0usize, 0usize);
    for r in g.rows.iter().filter(|r| keep(kind(&r.id))) {
        let (day, hour) = (r.submit_s / 86_400, r.submit_s % 86_400 / 3600);
        all += 1;
        inside += usize::from(day % 7 < 5 && (8..19).contains(&hour));
    }
    inside as f64 / all as f64
}

#[test]
fn interactive_arrivals_concentrate_in_working_hours() {
    let g = gen_of(&params(512, 28, 11));
    let interactive = working_hours_share(&g, |k| k == Kind::Interactive);
    let batch = working_hours_share(&g, |k| matches!(k, Kind::PostTrain | Kind::RlSim | Kind::Eval));
    // Weekday 08:00-19:00 is 33% of the week.
    assert!(interactive >= 0.85, "interactive share in working hours {interactive:.3}");
    assert!(batch < interactive - 0.2, "batch {batch:.3} is spread more than interactive {interactive:.3}");
}

#[test]
fn behaviour_parameters_shape_the_labels() {
    let base = params(256, 28, 9);
    let g = gen_of(&base);
    let b = &base.behaviour;
    let (first, last) = (g.stats.high_share_first_week, g.stats.high_share_last_week);
    let start = b.urgent_share + b.high_share_start + (b.high_share - b.high_share_start) * 3.5 / 28.0;
    let end = b.urgent_share + b.high_share - (b.high_share - b.high_share_start) * 3.5 / 28.0;
    assert!((first - start).abs() < 0.05 && (last - end).abs() < 0.05, "inflation {first:.3} -> {last:.3}");
    assert!(g.rows.iter().any(|r| kind(&r.id) == Kind::Squat && r.util <= 0.03));

    let mut p = base.clone();
    p.behaviour.high_share = 0.0;
    p.behaviour.high_share_start = 0.0;
    p.behaviour.urgent_share = 0.0;
    p.behaviour.squat_fraction = 0.0;
    p.behaviour.preemptible_fraction = 1.0;
    let g = gen_of(&p);
    assert!(g.rows.iter().all(|r| r.class == Class::Service || r.priority <= Priority::Normal));
    assert!(g.rows.iter().all(|r| kind(&r.id) != Kind::Squat));
    for r in &g.rows {
        let should = r.class == Class::Batch && r.priority <= Priority::Normal;
        assert_eq!(r.preemptible, should, "{}", r.id);
    }
    p.behaviour.preemptible_fraction = 0.0;
    assert!(gen_of(&p).rows.iter().all(|r| !r.preemptible));
}

#[test]
fn invalid_parameters_are_errors() {
    for (name, p) in [
        ("gpus not a multiple of 8", params(100, 7, 1)),
        ("too few gpus for the teams", params(32, 7, 1)),
        ("zero days", params(256, 0, 1)),
        ("negative load", Ai2Params { load: -1.0, ..params(256, 7, 1) }),
    ] {
        assert!(generate(Scenario::Ai2, &p).is_err(), "case {name}");
    }
}
