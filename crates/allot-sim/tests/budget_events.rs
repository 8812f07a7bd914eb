//! Budget threshold events in the simulator: each threshold fires exactly
//! once per account and period, at the instant it is reached.

use allot_core::policy::AllotPolicy;
use allot_sim::{SimOptions, simulate};
use allot_testkit::{StateBuilder, Wl};

#[test]
fn thresholds_fire_once_per_period_at_the_instant_reached() {
    // 8 GPUs against 10 NGH per 2 h: 80 % at 3600 s, 100 % at 4500 s, in
    // each of the three periods the work spans; none for org/b (no budget).
    let state = StateBuilder::new()
        .pool("p", "H100", 2, 8)
        .account_with("org/a", |a| a.budget_gpu_hours = Some(10.0))
        .account("org/b")
        .contract(|c| c.budget_period = 7200)
        .build();
    let wl = [
        Wl::new("a").account("org/a").gpus(8).work(3 * 7200 - 600).build(&state),
        Wl::new("b").account("org/b").gpus(8).work(3 * 7200).build(&state),
    ];
    let opts = SimOptions { keep_log: true, ..Default::default() };
    let (_, out) = simulate(state, wl.to_vec(), Vec::new(), &mut AllotPolicy::new(), &opts);
    let events: Vec<(u64, String)> =
        out.log.iter().filter(|e| e.event == "budget").map(|e| (e.t, e.reason.clone())).collect();
    let times: Vec<u64> = events.iter().map(|e| e.0).collect();
    assert_eq!(times, [3600, 4500, 7200 + 3600, 7200 + 4500, 14_400 + 3600, 14_400 + 4500], "{events:?}");
    assert!(
        events[0].1.contains("BUD-1: account org/a reached 80% of its budget this period (8/10 NGH)"),
        "{events:?}"
    );
    assert!(events[1].1.contains("reached 100%"), "{events:?}");
    assert!(events.iter().all(|e| e.1.contains("org/a")));
}
