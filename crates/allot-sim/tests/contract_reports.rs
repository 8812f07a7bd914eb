//! CON-8 and CON-9 in a replay: an idle session (trace `util` below the
//! threshold) is warned and reclaimed after exactly the configured idle
//! time plus warning and grace, and its GPUs go to the next workload; a
//! busy one is left alone; a workload that checkpoints on the signal loses
//! only the grace when preempted.

use allot_core::{Class, IdleReclaim, Phase, PolicyKind, Rule, WorkloadId};
use allot_sim::{SimOptions, simulate};
use allot_testkit::{StateBuilder, Wl};

#[test]
fn a_replay_reclaims_idle_sessions_after_idle_time_warning_and_grace() {
    let state = StateBuilder::new()
        .pool("p", "H100", 2, 8)
        .account("org/x")
        .contract(|c| {
            c.grace = 60;
            c.idle_reclaim.interactive = Some(IdleReclaim { threshold: 0.05, after: 1000, warning: 200 });
        })
        .build();
    let session =
        |id: &str, util: f64| Wl::new(id).account("org/x").class(Class::Interactive).gpus(8).work(5000).util(util);
    let trace =
        [session("squat", 0.01), session("busy", 0.6), Wl::new("next").account("org/x").gpus(8).work(500).submit(10)]
            .iter()
            .map(|w| w.build(&state))
            .collect();
    let mut policy = PolicyKind::Allot.build();
    let opts = SimOptions { check_invariants: true, keep_log: true, ..SimOptions::default() };
    let (state, out) = simulate(state, trace, Vec::new(), policy.as_mut(), &opts);
    let squat = state.run(WorkloadId(0));
    // Idle from its start at 0: warned at 1000, signalled at 1200, killed at 1260.
    assert_eq!((squat.phase, squat.end, squat.attempts), (Phase::Cancelled, Some(1260), 1));
    let why = squat.last_reason.as_ref().expect("a reason");
    assert_eq!(why.rule, Rule::IdleReclaim, "{why}");
    let warned: Vec<u64> = out.log.iter().filter(|e| e.event == "idle-warning").map(|e| e.t).collect();
    assert_eq!(warned, [1000], "warned once, at exactly the idle time");
    let busy = state.run(WorkloadId(1));
    assert_eq!((busy.phase, busy.end), (Phase::Finished, Some(5000)), "busy GPUs are never reclaimed");
    let next = state.run(WorkloadId(2));
    assert_eq!(next.first_start, Some(1260), "the reclaimed GPUs go to the waiting work");
}

#[test]
fn a_workload_that_checkpoints_on_the_signal_loses_only_the_grace() {
    for (on_signal, lost) in [(false, 1000 * 8 + 60 * 8), (true, 60 * 8)] {
        let state = StateBuilder::new().pool("p", "H100", 1, 8).account("org/x").contract(|c| c.grace = 60).build();
        let mut victim = Wl::new("v").account("org/x").gpus(8).work(5000).checkpoint(0);
        if on_signal {
            victim = victim.on_signal();
        }
        let trace = vec![victim.build(&state)];
        let events = vec![allot_core::NodeEvent {
            t: 1000,
            node: allot_core::NodeId(0),
            kind: allot_core::NodeEventKind::Drain,
        }];
        let mut policy = PolicyKind::Allot.build();
        let opts = SimOptions { check_invariants: true, until: Some(2000), ..SimOptions::default() };
        let (state, _) = simulate(state, trace, events, policy.as_mut(), &opts);
        assert_eq!(state.run(WorkloadId(0)).lost_gpu_s, lost, "on signal {on_signal}");
    }
}
