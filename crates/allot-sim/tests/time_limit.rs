//! CON-6 in a replay: a workload that reaches its time limit is stopped
//! after grace and ends as failed, its GPUs go to the next workload, and a
//! limit longer than the work changes nothing.

use allot_core::{Phase, PolicyKind, Rule, WorkloadId};
use allot_sim::{SimOptions, simulate};
use allot_testkit::{StateBuilder, Wl};

#[test]
fn a_replay_ends_workloads_at_their_limit_plus_grace() {
    let state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/x").contract(|c| c.grace = 60).build();
    let trace = [
        Wl::new("limited").account("org/x").gpus(8).work(1000).time_limit(300),
        Wl::new("next").account("org/x").gpus(8).work(500),
        Wl::new("roomy").account("org/x").gpus(8).work(100).time_limit(2000),
    ]
    .iter()
    .map(|w| w.build(&state))
    .collect();
    let mut policy = PolicyKind::FifoBackfill.build();
    let opts = SimOptions { check_invariants: true, ..SimOptions::default() };
    let (state, out) = simulate(state, trace, Vec::new(), policy.as_mut(), &opts);
    let limited = state.run(WorkloadId(0));
    assert_eq!((limited.phase, limited.end, limited.attempts), (Phase::Failed, Some(360), 1));
    let why = limited.last_reason.as_ref().expect("a reason");
    assert_eq!(why.rule, Rule::TimeLimit, "{why}");
    assert_eq!(why.to_string(), "CON-6: time limit of 300 s reached; killed after grace");
    let next = state.run(WorkloadId(1));
    assert_eq!((next.phase, next.first_start, next.end), (Phase::Finished, Some(360), Some(860)));
    let roomy = state.run(WorkloadId(2));
    assert_eq!((roomy.phase, roomy.end), (Phase::Finished, Some(960)), "a longer limit changes nothing");
    assert_eq!(out.horizon_end, 960);
}
