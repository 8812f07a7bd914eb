//! Every workload has exactly one outcome, whatever the policy and the
//! shipped scenario; idle reclaim (CON-9) is Allot's, and a baseline's only
//! when asked (docs/baselines.md).

use allot_core::{PolicyKind, State};
use allot_sim::measures::{WorkloadOutcome, measure, outcomes};
use allot_sim::{SimOptions, simulate};
use allot_trace::generate::{Ai2Params, Scenario, generate};

/// A small run of `scenario` (seed 1) under `kind`; a baseline reclaims
/// idle GPUs only with `reclaim_baselines`. A fleet needs at least
/// `FLEET_MIN_GPUS` per cluster: it runs for one day.
fn run(scenario: Scenario, kind: PolicyKind, reclaim_baselines: bool) -> (State, allot_sim::SimOutput) {
    let (gpus, days) = match scenario {
        Scenario::Ai2 => (64, 2),
        Scenario::Ai2Fleet => (5 * allot_trace::generate::FLEET_MIN_GPUS, 1),
    };
    let params = Ai2Params { gpus, days, seed: 1, users: 30, ..Ai2Params::default() };
    let g = generate(scenario, &params).expect("generate");
    let (config, trace) = g.inputs("test").expect("inputs");
    let contract = kind.contract(config.contract, reclaim_baselines);
    let state = State::new(config.cluster.clone(), config.accounts.clone(), contract);
    let mut policy = kind.build();
    simulate(state, trace, Vec::new(), policy.as_mut(), &SimOptions::default())
}

#[test]
fn outcome_counts_add_up_to_the_workloads_for_every_policy_and_scenario() {
    for scenario in Scenario::ALL {
        let mut demand: Option<Vec<f64>> = None;
        for kind in PolicyKind::ALL {
            let (state, out) = run(scenario, kind, false);
            let r = measure(&state, &out);
            // What each account asked for is the trace's, whatever the
            // policy; the top-level accounts asked for all of it.
            let shares: Vec<f64> = r.accounts.values().map(|a| a.demand_share).collect();
            assert_eq!(*demand.get_or_insert_with(|| shares.clone()), shares, "{}", kind.as_str());
            let top: f64 = r.accounts.iter().filter(|(p, _)| !p.contains('/')).map(|(_, a)| a.demand_share).sum();
            assert!((top - 1.0).abs() < 1e-9, "top-level demand shares sum to {top}");
            let m = &r.metrics;
            let sum = m.completed_workloads
                + m.failed_workloads
                + m.cancelled_workloads
                + m.idle_reclaimed_workloads
                + m.rejected_workloads
                + m.unfinished_workloads;
            let name = format!("{} under {}", scenario.as_str(), kind.as_str());
            assert_eq!(sum, r.workloads, "{name}: {m:?}");
            assert_eq!(outcomes(&state, &out).len() as u64, r.workloads, "{name}");
            // The JSON report holds one `<outcome>_workloads` per outcome.
            let json = serde_json::to_value(&r).expect("json");
            let total: u64 = WorkloadOutcome::ALL
                .iter()
                .map(|o| {
                    let key = format!("{}_workloads", o.as_str().replace('-', "_"));
                    json["metrics"][&key].as_u64().unwrap_or_else(|| panic!("{name}: no metrics.{key}"))
                })
                .sum();
            assert_eq!(total, r.workloads, "{name}: the JSON counts");
        }
    }
}

#[test]
fn baselines_reclaim_idle_gpus_only_when_asked_and_it_is_not_a_preemption() {
    let (state, out) = run(Scenario::Ai2, PolicyKind::Allot, false);
    let allot = measure(&state, &out).metrics;
    assert!(allot.idle_reclaimed_workloads > 0, "the scenario's squatted sessions are reclaimed under allot");
    let (state, out) = run(Scenario::Ai2, PolicyKind::FifoBackfill, false);
    let off = measure(&state, &out).metrics;
    assert_eq!(off.idle_reclaimed_workloads, 0, "fifo-backfill reclaims nothing unless asked");
    assert_eq!(off.preemptions, 0, "fifo-backfill never preempts (docs/baselines.md)");
    let (state, out) = run(Scenario::Ai2, PolicyKind::FifoBackfill, true);
    let on = measure(&state, &out).metrics;
    assert!(on.idle_reclaimed_workloads > 0, "asked, fifo-backfill reclaims idle sessions too");
    assert_eq!(on.preemptions, 0, "an idle reclaim is its own outcome, not a preemption");
}
