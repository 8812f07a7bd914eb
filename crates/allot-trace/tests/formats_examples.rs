//! The files in `examples/` parse and describe what their comments promise.

use std::path::{Path, PathBuf};

use allot_core::{Class, NodeEventKind, Priority};
use allot_trace::config::load_config;
use allot_trace::events::load_events;
use allot_trace::trace::load_trace;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)
}

#[test]
fn example_cluster_has_the_documented_pools_and_accounts() {
    let cfg = load_config(&example("cluster.toml")).unwrap();
    let c = &cfg.cluster;
    let pools: Vec<(&str, u32, u32, u32, bool)> =
        c.pools.iter().map(|p| (p.name.as_str(), p.nodes, p.gpus_per_node, p.rack_size, p.shared)).collect();
    assert_eq!(pools, [("h100", 16, 8, 8, false), ("b200", 8, 8, 4, false), ("h100s", 2, 8, 2, true)]);
    assert_eq!(c.total_gpus(), 208);
    let b200 = c.gpu_type_by_name("B200").unwrap();
    assert_eq!(c.weight(b200), 2.0);

    let h100 = c.pool_by_name("h100").unwrap();
    let b200_pool = c.pool_by_name("b200").unwrap();
    let acc = |p: &str| cfg.accounts.account(cfg.accounts.get(p).unwrap_or_else(|| panic!("account {p}")));
    assert_eq!(acc("org/llm/pretrain").legacy_pools, Some(vec![h100]), "inherited from org/llm");
    assert_eq!(acc("org/rl/sim").legacy_pools, Some(vec![b200_pool]));
    assert_eq!(acc("org/infra/serve").legacy_pools, None, "only the shared pool");
    assert_eq!(acc("org/infra/serve").max_service_gpus, Some(16));

    // Budgets of the projects add up to about one period of capacity.
    let capacity_ngh: f64 = c.pools.iter().map(|p| f64::from(p.nodes * p.gpus_per_node) * c.weight(p.gpu)).sum::<f64>()
        * (cfg.contract.budget_period as f64 / 3600.0);
    let budgets: f64 =
        ["org/llm", "org/mm", "org/rl", "org/infra"].iter().filter_map(|p| acc(p).budget_gpu_hours).sum();
    assert!((0.9..=1.05).contains(&(budgets / capacity_ngh)), "budgets {budgets} vs capacity {capacity_ngh}");
    assert_eq!(cfg.contract, allot_core::Contract::default(), "the example spells out the defaults");
}

#[test]
fn example_trace_is_a_week_at_twice_capacity() {
    let cfg = load_config(&example("cluster.toml")).unwrap();
    let trace = load_trace(&example("trace.csv"), &cfg).unwrap();
    assert!((1400..=1600).contains(&trace.len()), "{} workloads", trace.len());
    assert!(trace.windows(2).all(|w| w[0].submit <= w[1].submit), "generated in submit order");
    assert!(trace.iter().all(|w| w.submit < 7 * 86_400));

    let demand_gpu_s: u64 = trace.iter().map(|w| u64::from(w.gpus) * w.work_s).sum();
    let capacity_gpu_s = cfg.cluster.total_gpus() * 7 * 86_400;
    let ratio = demand_gpu_s as f64 / capacity_gpu_s as f64;
    assert!((1.7..=2.3).contains(&ratio), "demand / capacity = {ratio}");

    let count = |f: &dyn Fn(&allot_core::WorkloadSpec) -> bool| trace.iter().filter(|w| f(w)).count();
    assert!(count(&|w| w.class == Class::Service) >= 3);
    assert!(count(&|w| w.class == Class::Interactive) >= 300);
    assert!(count(&|w| w.class == Class::Interactive && w.gpus <= 8 && w.work_s <= 8 * 3600) > 0);
    assert!(count(&|w| w.priority == Priority::High) * 2 > trace.len(), "most work is labelled high");
    let pretrain = cfg.accounts.get("org/llm/pretrain").unwrap();
    assert!(
        trace
            .iter()
            .filter(|w| w.account == pretrain && w.class == Class::Batch)
            .all(|w| w.gpus >= 16 && w.nodes * 8 == w.gpus && w.checkpoint_s == 1800 && !w.preemptible),
        "pre-training gangs on whole nodes"
    );
}

#[test]
fn example_events_drain_and_fail_nodes() {
    let cfg = load_config(&example("cluster.toml")).unwrap();
    let events = load_events(&example("events.csv"), &cfg).unwrap();
    assert!(events.added.is_empty(), "the example adds no node");
    let events = events.changes;
    let kinds: Vec<(u64, NodeEventKind)> = events.iter().map(|e| (e.t / 3600, e.kind)).collect();
    assert_eq!(
        kinds,
        [
            (48, NodeEventKind::Drain),
            (56, NodeEventKind::Undrain),
            (72, NodeEventKind::Fail),
            (78, NodeEventKind::Repair)
        ]
    );
    assert_eq!(events[2].node, events[3].node, "the failed node is repaired six hours later");
}
