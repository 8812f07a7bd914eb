//! The `ai2-fleet` generator: the fleet's shape and scaling, pins to home
//! clusters, demand, legacy pools per cluster, fit, determinism.

mod import_support;

use std::collections::{BTreeMap, BTreeSet};

use allot_trace::generate::{
    Ai2Params, FLEET, FLEET_MIN_GPUS, FLEET_PIN_FRACTION, FLEET_REFERENCE_GPUS, Generated, Scenario, TEAM_HOMES, TEAMS,
    generate,
};
use import_support::{config_text, trace_text};

fn params(gpus: u32, days: u32, seed: u64) -> Ai2Params {
    Ai2Params { gpus, days, seed, ..Ai2Params::default() }
}

fn gen_of(p: &Ai2Params) -> Generated {
    generate(Scenario::Ai2Fleet, p).unwrap()
}

/// GPUs per cluster, in config order.
fn cluster_gpus(g: &Generated) -> Vec<(String, u64)> {
    g.config.fleet().into_iter().map(|(c, pools)| (c.to_string(), pools.iter().map(|p| p.gpus()).sum())).collect()
}

fn team_of(account: &str) -> usize {
    let team = account.split('/').nth(1).expect("ai2/<team>/<project>");
    TEAMS.iter().position(|t| t.name == team).expect("a known team")
}

#[test]
fn the_reference_fleet_has_five_clusters_of_88_to_1024_gpus_of_mixed_types() {
    assert_eq!(FLEET.iter().map(|c| c.gpus).sum::<u32>(), FLEET_REFERENCE_GPUS);
    let g = gen_of(&params(FLEET_REFERENCE_GPUS, 7, 1));
    let sizes = cluster_gpus(&g);
    let want: Vec<(String, u64)> = FLEET.iter().map(|c| (c.name.to_string(), u64::from(c.gpus))).collect();
    assert_eq!(sizes, want);
    assert!(sizes.iter().all(|(_, n)| (88..=1024).contains(n)), "{sizes:?}");
    let types: BTreeSet<&str> = g.config.pools.iter().map(|p| p.gpu.as_str()).collect();
    assert_eq!(types, BTreeSet::from(["B200", "B300", "H100"]));
    // One cluster mixes two types.
    let mixed =
        g.config.fleet().iter().filter(|(_, ps)| ps.iter().map(|p| &p.gpu).collect::<BTreeSet<_>>().len() > 1).count();
    assert_eq!(mixed, 1);
    let text = config_text(&g.config);
    assert_eq!(text.matches("[[clusters]]").count(), 5, "{text}");
}

#[test]
fn gpus_scale_the_clusters_in_proportion_each_at_least_88() {
    for gpus in [440, 1024, 2560, 5120] {
        let g = gen_of(&params(gpus, 3, 2));
        let sizes = cluster_gpus(&g);
        assert_eq!(sizes.iter().map(|s| s.1).sum::<u64>(), u64::from(gpus), "{gpus}: {sizes:?}");
        assert!(sizes.iter().all(|s| s.1 >= u64::from(FLEET_MIN_GPUS) && s.1 % 8 == 0), "{gpus}: {sizes:?}");
        // Order of size kept (ties allowed at the minimum).
        assert!(sizes.windows(2).all(|w| w[0].1 >= w[1].1), "{gpus}: {sizes:?}");
        // Above the minimum, within a node or two of the proportional size.
        for ((_, got), plan) in sizes.iter().zip(&FLEET) {
            let ideal = f64::from(plan.gpus) * f64::from(gpus) / f64::from(FLEET_REFERENCE_GPUS);
            if ideal > 2.0 * f64::from(FLEET_MIN_GPUS) {
                assert!((*got as f64 - ideal).abs() <= 0.15 * ideal, "{gpus}: {} got {got}, ideal {ideal}", plan.name);
            }
        }
    }
    for bad in [432, 100] {
        assert!(generate(Scenario::Ai2Fleet, &params(bad, 3, 1)).is_err(), "{bad} GPUs");
    }
}

#[test]
fn same_seed_same_bytes_and_ai2_is_not_pinned() {
    let p = params(1024, 7, 42);
    let (a, b) = (gen_of(&p), gen_of(&p));
    assert_eq!(trace_text(&a.rows), trace_text(&b.rows));
    assert_eq!(config_text(&a.config), config_text(&b.config));
    assert_ne!(trace_text(&a.rows), trace_text(&gen_of(&params(1024, 7, 43)).rows));
    let single = generate(Scenario::Ai2, &p).unwrap();
    assert!(single.rows.iter().all(|r| r.clusters.is_empty()));
    assert!(single.config.fleet().is_empty());
    assert_eq!(Scenario::parse("ai2-fleet"), Some(Scenario::Ai2Fleet));
}

#[test]
fn a_documented_share_is_pinned_to_each_teams_home_and_demand_follows_load() {
    for seed in [1, 2, 3] {
        let p = params(2560, 14, seed);
        let g = gen_of(&p);
        let mut pinned = 0usize;
        let mut per_team: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for r in &g.rows {
            let t = team_of(&r.account);
            let e = per_team.entry(t).or_default();
            e.1 += 1;
            if !r.clusters.is_empty() {
                assert_eq!(r.clusters, FLEET[TEAM_HOMES[t]].name, "{} is pinned to its team's home", r.id);
                pinned += 1;
                e.0 += 1;
            }
        }
        let share = pinned as f64 / g.rows.len() as f64;
        assert!((share - FLEET_PIN_FRACTION).abs() < 0.02, "seed {seed}: pinned share {share:.3}");
        for (t, (pins, all)) in per_team {
            let s = pins as f64 / all as f64;
            assert!((s - FLEET_PIN_FRACTION).abs() < 0.1, "seed {seed}: team {t} pinned {s:.3} of {all}");
        }
        let demand: f64 = g.rows.iter().map(|r| f64::from(r.gpus) * r.work_s as f64).sum();
        let ratio = demand / (f64::from(p.gpus) * f64::from(p.days) * 86_400.0);
        assert!((2.0..=3.0).contains(&ratio) && (ratio / p.load - 1.0).abs() <= 0.15, "seed {seed}: demand {ratio:.3}");
        // Every home cluster is used.
        let homes: BTreeSet<&str> = g.rows.iter().map(|r| r.clusters.as_str()).filter(|c| !c.is_empty()).collect();
        assert_eq!(homes.len(), FLEET.len());
    }
}

#[test]
fn legacy_pools_per_cluster_budgets_and_every_workload_fits_its_home() {
    let g = gen_of(&params(1024, 14, 5));
    let budgets: f64 = g.config.accounts.iter().filter_map(|a| a.budget_gpu_hours).sum();
    let capacity = g.config.capacity_ngh(7 * 86_400);
    assert!((budgets / capacity - 1.0).abs() < 0.01, "budgets {budgets} vs capacity {capacity}");
    for (ti, t) in TEAMS.iter().enumerate() {
        let account = g.config.accounts.iter().find(|a| a.path == format!("ai2/{}", t.name)).expect("team account");
        let pools = account.legacy_pools.as_ref().expect("legacy pools");
        let clusters: BTreeSet<&str> = pools.iter().map(|p| p.split_once('/').expect("<cluster>/<pool>").0).collect();
        assert_eq!(clusters.len(), FLEET.len(), "{}: a slice in every cluster: {pools:?}", t.name);
        for name in pools {
            let (c, pool) = name.split_once('/').unwrap();
            assert!(g.config.pools.iter().any(|p| p.cluster == c && p.name == pool && !p.shared), "{name}");
        }
        // Every workload of the team fits one of its pools in its home cluster.
        let home = FLEET[TEAM_HOMES[ti]].name;
        for r in g.rows.iter().filter(|r| team_of(&r.account) == ti) {
            let fits = g
                .config
                .pools
                .iter()
                .filter(|p| p.cluster == home && pools.contains(&format!("{}/{}", p.cluster, p.name)))
                .any(|p| p.fits(r.gpus, r.nodes, &r.gpu_type));
            assert!(fits, "{} ({} GPUs, type {:?}) fits {}'s pools on {home}", r.id, r.gpus, r.gpu_type, t.name);
        }
    }
    // The config and trace pass the project's parsers (fleet, pins, legacy pools).
    let parsed = allot_trace::config::parse_config(&config_text(&g.config), "fleet.toml").expect("config parses");
    assert_eq!(parsed.cluster.clusters.len(), 5);
    let trace = allot_trace::trace::parse_trace_csv(trace_text(&g.rows).as_bytes(), "fleet.csv", &parsed)
        .expect("the trace parses with this config");
    assert_eq!(trace.len(), g.rows.len());
    let (config, specs) = g.inputs("generated").expect("in-memory inputs check");
    assert_eq!(specs.len(), g.rows.len());
    assert!(config.cluster.is_fleet());
}
