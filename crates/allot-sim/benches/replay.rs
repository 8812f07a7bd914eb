//! Replay benchmark: a generated 100k-workload trace on a 1,024-GPU cluster
//! under each policy (workloads/s, events/s), and one scheduling pass with
//! 10,000 pending workloads; for fleets, a year of 1,000,000 workloads on
//! ~5,000 GPUs in five clusters, and the passes of a 16,384-GPU fleet with
//! 100,000 waiting. Prints figures; asserts nothing.
//!
//! `cargo bench -p allot-sim --bench replay [-- WORKLOADS] [-- pass]`
//! (`pass`: only the single passes), `-- fleet-year [WORKLOADS]`,
//! `-- fleet-pass`.

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

/// A fleet of clusters (name, GPU type, nodes of 8 GPUs, in racks of 16),
/// the same accounts as [`cluster`], each team's legacy pool in its home
/// cluster (team t's is cluster t mod n).
fn fleet(clusters: &[(&str, &str, u32)]) -> State {
    let mut b = StateBuilder::new().gpu_weight("B200", 2.0).gpu_weight("B300", 2.5);
    for (name, gpu, nodes) in clusters {
        b = b.cluster(name).pool(&format!("{name}-{}", gpu.to_lowercase()), gpu, *nodes, 8).racks_of(16);
    }
    for t in 0..TEAMS {
        for p in 0..PROJECTS {
            b = b.account_with(&format!("org/t{t}/p{p}"), |a| a.budget_gpu_hours = Some(2_000_000.0));
        }
        let (home, gpu, _) = clusters[t % clusters.len()];
        b = b.legacy(&format!("org/t{t}"), &[&format!("{home}-{}", gpu.to_lowercase())]);
    }
    b.contract(|c| c.scheduling_interval = 60).build()
}

/// A mixed trace whose GPU demand is about `load` × capacity.
fn trace(state: &State, n: usize, load: f64, seed: u64) -> Vec<WorkloadSpec> {
    trace_with(state, n, load, seed, 3600.0 * 2.0, 0.0)
}

/// [`trace`] with a mean work of `mean_work` seconds and a fraction
/// `pinned` of the workloads pinned to one cluster (data locality).
fn trace_with(state: &State, n: usize, load: f64, seed: u64, mean_work: f64, pinned: f64) -> Vec<WorkloadSpec> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sizes = [(1u32, 0.45), (2, 0.15), (4, 0.15), (8, 0.15), (16, 0.05), (32, 0.03), (64, 0.02)];
    let mean_gpus: f64 = sizes.iter().map(|(g, p)| f64::from(*g) * p).sum();
    let names = state.cluster.clusters.clone();
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
            if pinned > 0.0 && rng.gen_bool(pinned) {
                w = w.on(&[names[rng.gen_range(0..names.len())].as_str()]);
            }
            w.build(state)
        })
        .collect()
}

fn main() {
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(100_000);
    if std::env::args().any(|a| a == "fleet-year") {
        fleet_year(std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1_000_000));
        return;
    }
    if std::env::args().any(|a| a == "fleet-pass") {
        fleet_pass();
        return;
    }
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

/// The policies named in `ALLOT_BENCH_POLICIES` (comma-separated), else
/// `default`.
fn policies(default: &[PolicyKind]) -> Vec<PolicyKind> {
    match std::env::var("ALLOT_BENCH_POLICIES") {
        Ok(v) => {
            v.split(',').map(|p| PolicyKind::parse(p.trim()).unwrap_or_else(|| panic!("unknown policy {p}"))).collect()
        }
        Err(_) => default.to_vec(),
    }
}

/// Peak resident memory of this process (Linux `VmHWM`), in MiB.
fn peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 =
        status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb / 1024.0)
}

/// A fleet year: `n` workloads (20% pinned to one cluster) over about 365
/// days on five clusters of 4,984 GPUs (H100, B200, B300), offered load 0.9,
/// under `allot`; wall time and peak memory.
fn fleet_year(n: usize) {
    let base =
        fleet(&[("a", "H100", 128), ("b", "H100", 128), ("c", "B200", 128), ("d", "B300", 128), ("e", "H100", 111)]);
    let gpus = base.cluster.total_gpus();
    // Mean work such that n arrivals at load 0.9 span a year.
    let mean_gpus = 5.59;
    let mean_work = 0.9 * gpus as f64 * (365.0 * 86_400.0 / n as f64) / mean_gpus;
    let t0 = Instant::now();
    let specs = trace_with(&base, n, 0.9, 7, mean_work, 0.2);
    let generated = t0.elapsed().as_secs_f64();
    let horizon = specs.last().map_or(0, |s| s.submit) as f64 / 86_400.0;
    println!(
        "fleet year: {n} workloads over {horizon:.0} days, {gpus} GPUs in {} clusters, mean work {:.1} h, 20% pinned",
        base.cluster.clusters.len(),
        mean_work / 3600.0
    );
    println!(
        "{:<10} {:>9} {:>12} {:>10} {:>9} {:>9}",
        "policy", "seconds", "workloads/s", "passes", "finished", "peak MiB"
    );
    for kind in policies(&[PolicyKind::Allot]) {
        let mut policy = kind.build();
        let t0 = Instant::now();
        let (state, out) = simulate(base.clone(), specs.clone(), Vec::new(), policy.as_mut(), &SimOptions::default());
        let s = t0.elapsed().as_secs_f64();
        let done = state.runs.iter().filter(|r| r.phase == allot_core::Phase::Finished).count();
        let peak = peak_mib().map_or("?".into(), |m| format!("{m:.0}"));
        println!("{:<10} {:>9.2} {:>12.0} {:>10} {:>9} {:>9}", kind.as_str(), s, n as f64 / s, out.passes, done, peak);
    }
    println!("(trace generation {generated:.2} s, not counted)");
}

/// Times every `schedule` call of the policy it wraps.
struct Timed {
    inner: Box<dyn Policy>,
    /// (ms, pending at the pass, time of the pass).
    passes: Vec<(f64, usize, Time)>,
    /// Print progress every 500 passes (`ALLOT_BENCH_TRACE=1`).
    trace: bool,
}

impl Policy for Timed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn admit(&self, state: &State, spec: &WorkloadSpec) -> Result<(), allot_core::Reason> {
        self.inner.admit(state, spec)
    }
    fn schedule(&mut self, state: &State, now: Time) -> Vec<allot_core::Decision> {
        let t0 = Instant::now();
        let d = self.inner.schedule(state, now);
        self.passes.push((t0.elapsed().as_secs_f64() * 1e3, state.pending.len(), now));
        if self.trace && self.passes.len().is_multiple_of(500) {
            let last = &self.passes[self.passes.len() - 500..];
            let mean = last.iter().map(|p| p.0).sum::<f64>() / 500.0;
            let max = last.iter().map(|p| p.0).fold(0.0, f64::max);
            eprintln!(
                "  {} passes, t={now} s, {} waiting, {} running: last 500 mean {mean:.2} ms, max {max:.2} ms",
                self.passes.len(),
                state.pending.len(),
                state.running.len()
            );
        }
        d
    }
    fn explain(&self, state: &State, w: allot_core::WorkloadId, now: Time) -> allot_core::Reason {
        self.inner.explain(state, w, now)
    }
    fn explain_all(&self, state: &State, ws: &[allot_core::WorkloadId], now: Time) -> Vec<allot_core::Reason> {
        self.inner.explain_all(state, ws, now)
    }
    fn next_wakeup(&self, state: &State, now: Time) -> Option<Time> {
        self.inner.next_wakeup(state, now)
    }
    fn periodic(&self) -> bool {
        self.inner.periodic()
    }
}

/// The passes of a 16,384-GPU fleet (16 clusters of 1,024 GPUs) with
/// about 100,000 waiting: 110,000 workloads arrive in the first minute and
/// a day is replayed; every pass after the last arrival is timed (p50,
/// p99, max).
fn fleet_pass() {
    let gpus = ["H100", "H100", "B200", "B300"];
    let names: Vec<String> = (0..16).map(|i| format!("c{i:02}")).collect();
    let spec: Vec<(&str, &str, u32)> = names.iter().enumerate().map(|(i, n)| (n.as_str(), gpus[i % 4], 128)).collect();
    let base = fleet(&spec);
    let specs: Vec<WorkloadSpec> = trace_with(&base, 110_000, 60_000.0, 13, 3600.0 * 24.0, 0.2);
    println!(
        "\nfleet passes: {} GPUs in {} clusters, {} workloads submitted by t={} s, one day replayed",
        base.cluster.total_gpus(),
        base.cluster.clusters.len(),
        specs.len(),
        specs.last().map_or(0, |s| s.submit)
    );
    println!(
        "{:<10} {:>8} {:>12} {:>9} {:>9} {:>9} {:>9}",
        "policy", "passes", "pending", "p50 ms", "p99 ms", "max ms", "mean ms"
    );
    for kind in policies(&[PolicyKind::Allot, PolicyKind::Priority]) {
        let trace = std::env::var("ALLOT_BENCH_TRACE").is_ok_and(|v| v == "1");
        let mut timed = Timed { inner: kind.build(), passes: Vec::new(), trace };
        let until = std::env::var("ALLOT_BENCH_UNTIL").ok().and_then(|v| v.parse().ok()).unwrap_or(86_400);
        let opts = SimOptions { until: Some(until), ..SimOptions::default() };
        simulate(base.clone(), specs.clone(), Vec::new(), &mut timed, &opts);
        // Passes once every workload has arrived.
        let last = specs.last().map_or(0, |s| s.submit);
        let after: Vec<&(f64, usize, Time)> = timed.passes.iter().filter(|p| p.2 > last).collect();
        let mut ms: Vec<f64> = after.iter().map(|p| p.0).collect();
        if ms.is_empty() {
            println!("{:<10} no pass after the last arrival", kind.as_str());
            continue;
        }
        let pending = after.iter().map(|p| p.1).min().unwrap_or(0);
        let worst = after.iter().max_by(|a, b| a.0.total_cmp(&b.0)).expect("a pass");
        ms.sort_by(f64::total_cmp);
        let q = |f: f64| ms[((ms.len() - 1) as f64 * f).round() as usize];
        let mean = ms.iter().sum::<f64>() / ms.len() as f64;
        println!(
            "{:<10} {:>8} {:>12} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            kind.as_str(),
            ms.len(),
            format!("≥{pending}"),
            q(0.5),
            q(0.99),
            ms[ms.len() - 1],
            mean
        );
        println!("{:<10} slowest pass at t={} s with {} waiting", "", worst.2, worst.1);
    }
}
