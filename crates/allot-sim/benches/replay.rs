//! Replay benchmark: a generated 100k-workload trace on a 1,024-GPU cluster
//! under each policy (workloads/s, events/s), and one scheduling pass with
//! 10,000 pending workloads. Prints figures; asserts nothing.
//!
//! `cargo bench -p allot-sim --bench replay [-- WORKLOADS] [-- pass]`
//! (`pass`: only the single passes).

use std::time::Instant;

use allot_core::{Action, Class, Policy, PolicyKind, Priority, State, Time, WorkloadSpec};
use allot_sim::{SimOptions, simulate};
use allot_testkit::{StateBuilder, Wl};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const TEAMS: usize = 8;
const PROJECTS: usize = 3;

fn cluster() -> State {
    let mut b = StateBuilder::new().pool("h100", "H100", 96, 8).racks_of(16).pool("b200", "B200", 32, 8).racks_of(16);
    b = b.gpu_weight("B200", 2.0);
    for t in 0..TEAMS {
        for p in 0..PROJECTS {
            b = b.account_with(&format!("org/t{t}/p{p}"), |a| a.budget_gpu_hours = Some(20_000.0));
        }
        let pool = if t % 4 == 3 { "b200" } else { "h100" };
        b = b.legacy(&format!("org/t{t}"), &[pool]);
    }
    b.contract(|c| c.scheduling_interval = 60).build()
}

/// A mixed trace whose GPU demand is about `load` × capacity.
fn trace(state: &State, n: usize, load: f64, seed: u64) -> Vec<WorkloadSpec> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sizes = [(1u32, 0.45), (2, 0.15), (4, 0.15), (8, 0.15), (16, 0.05), (32, 0.03), (64, 0.02)];
    let mean_gpus: f64 = sizes.iter().map(|(g, p)| f64::from(*g) * p).sum();
    let mean_work = 3600.0 * 2.0;
    let capacity = state.cluster.total_gpus() as f64;
    let gap = mean_gpus * mean_work / (capacity * load);
    let mut t = 0.0f64;
    (0..n)
        .map(|i| {
            t += -gap * (1.0 - rng.r#gen::<f64>()).ln();
            let mut x = rng.r#gen::<f64>();
            let gpus = sizes
                .iter()
                .find(|(_, p)| {
                    x -= p;
                    x <= 0.0
                })
                .map_or(1, |s| s.0);
            let work = (mean_work * (-(1.0 - rng.r#gen::<f64>()).ln())).max(60.0) as Time;
            let team = rng.gen_range(0..TEAMS);
            let class = if gpus <= 4 && rng.gen_bool(0.15) { Class::Interactive } else { Class::Batch };
            let prio = if rng.gen_bool(0.6) { Priority::High } else { Priority::Normal };
            let mut w = Wl::new(format!("w{i}"))
                .account(&format!("org/t{team}/p{}", rng.gen_range(0..PROJECTS)))
                .user(&format!("u{}", rng.gen_range(0..150)))
                .class(class)
                .gpus(gpus)
                .nodes(if gpus > 8 { gpus / 8 } else { 0 })
                .submit(t as Time)
                .work(if class == Class::Interactive { work.min(4 * 3600) } else { work })
                .checkpoint(1800)
                .util(0.3 + 0.6 * rng.r#gen::<f64>())
                .priority(prio);
            if rng.gen_bool(0.3) {
                w = w.preemptible();
            }
            w.build(state)
        })
        .collect()
}

fn main() {
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(100_000);
    if std::env::args().any(|a| a == "pass") {
        pass_bench();
        return;
    }
    let base = cluster();
    let specs = trace(&base, n, 0.9, 7);
    println!("replay: {n} workloads, {} GPUs, offered load 0.9", base.cluster.total_gpus());
    println!(
        "{:<14} {:>9} {:>12} {:>12} {:>10} {:>9}",
        "policy", "seconds", "workloads/s", "events/s", "passes", "finished"
    );
    for kind in PolicyKind::ALL {
        let mut policy = kind.build();
        let t0 = Instant::now();
        let (state, out) = simulate(base.clone(), specs.clone(), Vec::new(), policy.as_mut(), &SimOptions::default());
        let s = t0.elapsed().as_secs_f64();
        let done = state.runs.iter().filter(|r| r.phase == allot_core::Phase::Finished).count();
        println!(
            "{:<14} {:>9.3} {:>12.0} {:>12.0} {:>10} {:>9}",
            kind.as_str(),
            s,
            n as f64 / s,
            out.events as f64 / s,
            out.passes,
            done
        );
    }
    pass_bench();
}

/// One scheduling pass at 1,024 GPUs with 10,000 pending workloads: with
/// the cluster ~90% busy (some work starts), and with every GPU busy (none
/// can start; within the batch slice, so `allot` may not preempt either).
fn pass_bench() {
    for (busy, now) in [(940, 7200), (1024, 60)] {
        let state = filled(busy);
        println!(
            "\none pass at t={now}: {} pending, {} running, {} of 1024 GPUs busy",
            state.pending.len(),
            state.running.len(),
            1024 - state.free.pool_free.iter().sum::<u32>(),
        );
        println!("{:<14} {:>12} {:>10}", "policy", "ms/pass", "decisions");
        for kind in PolicyKind::ALL {
            let mut policy: Box<dyn Policy> = kind.build();
            let mut times = Vec::new();
            let mut decisions = 0;
            for _ in 0..5 {
                let t0 = Instant::now();
                decisions = policy.schedule(&state, now).len();
                times.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            times.sort_by(f64::total_cmp);
            println!("{:<14} {:>12.3} {:>10}", kind.as_str(), times[2], decisions);
        }
    }
}

/// 11,000 workloads submitted at once, the first that fit started at t=0
/// until `busy` GPUs are held.
fn filled(busy: u32) -> State {
    let mut state = cluster();
    let specs = trace(&state, 11_000, 50.0, 11);
    for s in specs {
        state.submit(s);
    }
    // Fill the cluster with the first workloads that fit.
    let mut fill = PolicyKind::FifoBackfill.build();
    let mut filled = 0;
    loop {
        let mut started = false;
        for d in fill.schedule(&state, 0) {
            if let Action::Start { workload, alloc } = d.action {
                if filled + alloc.gpus() > busy {
                    continue;
                }
                filled += alloc.gpus();
                state.start(workload, alloc, 0, d.reason);
                started = true;
            }
        }
        if !started || filled == busy {
            return state;
        }
    }
}
