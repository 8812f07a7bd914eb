//! The measures of docs/design.md §3 on hand-built runs whose answers are worked
//! out by hand in each test.

use allot_core::{Allocation, Reason, Rule, State, Time, WorkloadId};
use allot_sim::measures::measure;
use allot_sim::report::{Report, markdown_table, summary_table, write_workloads_csv};
use allot_sim::{Attempt, AttemptEnd, CapacityStep, Signalled, SimOutput};
use allot_testkit::{StateBuilder, Wl};

/// A run written by hand: the state is driven through its public methods and
/// every attempt is recorded as the simulator would.
struct Run {
    state: State,
    out: SimOutput,
}

fn reason(rule: Rule) -> Reason {
    Reason::new(rule, "")
}

impl Run {
    fn new(state: State, horizon_end: Time) -> Run {
        let total_gpus = state.cluster.total_gpus();
        let out = SimOutput {
            policy: "hand".into(),
            horizon_end,
            total_gpus,
            added_gpus: Vec::new(),
            attempts: Vec::new(),
            capacity: vec![CapacityStep { t: 0, gpus: total_gpus, ngpus_milli: total_gpus * 1000 }],
            clusters: Vec::new(),
            log: Vec::new(),
            passes: 0,
            events: 0,
            node_failures: 0,
        };
        Run { state, out }
    }

    fn submit(&mut self, wl: Wl) -> WorkloadId {
        let spec = wl.build(&self.state);
        self.state.submit(spec)
    }

    /// Starts `w` at `t` on the lowest free GPUs of the named nodes, an equal
    /// part on each.
    fn start(&mut self, w: WorkloadId, nodes: &[&str], t: Time) {
        let per_node = self.state.spec(w).gpus / nodes.len() as u32;
        let parts = nodes
            .iter()
            .map(|name| {
                let n = self.state.cluster.node_by_name(name).expect("known node");
                let mut free = self.state.free.free[n.0 as usize];
                let mut mask = 0u64;
                for _ in 0..per_node {
                    let bit = free & free.wrapping_neg();
                    mask |= bit;
                    free &= !bit;
                }
                (n, mask)
            })
            .collect();
        self.state.start(w, Allocation { parts }, t, reason(Rule::FifoOrder));
    }

    fn record(&mut self, w: WorkloadId, end: Time, useful_gpu_s: u64, outcome: AttemptEnd) {
        let (spec, run) = (self.state.spec(w), self.state.run(w));
        let node = run.alloc.as_ref().expect("holds GPUs").parts[0].0;
        self.out.attempts.push(Attempt {
            workload: w,
            account: spec.account,
            class: spec.class,
            gpus: spec.gpus,
            cluster: self.state.cluster.cluster_of(node),
            gpu: self.state.cluster.node(node).gpu,
            weight: self.state.cluster.weight(self.state.cluster.node(node).gpu),
            util: spec.util,
            start: run.started.expect("started"),
            end,
            useful_gpu_s,
            outcome,
            preempted: None,
        });
    }

    fn finish(&mut self, w: WorkloadId, t: Time, why: Reason) {
        let useful = self.state.run(w).remaining * u64::from(self.state.spec(w).gpus);
        self.record(w, t, useful, AttemptEnd::Finished);
        let o = self.state.finish(w, t, why);
        assert_eq!(o.useful_gpu_s, useful);
    }

    /// Signals `w` at `t` and stops it after `grace` (CON-2, CON-3).
    fn preempt(&mut self, w: WorkloadId, t: Time, grace: Time) {
        self.preempt_by(w, t, grace, Rule::FairShare, None);
    }

    /// The same, signalled by `rule` for the waiting workload `by`.
    fn preempt_by(&mut self, w: WorkloadId, t: Time, grace: Time, rule: Rule, by: Option<WorkloadId>) {
        self.state.signal(w, t, grace, reason(rule));
        let mut probe = self.state.clone();
        let o = probe.stop(w, t + grace, reason(Rule::Requeue));
        self.record(w, t + grace, o.useful_gpu_s, AttemptEnd::Preempted);
        self.out.attempts.last_mut().expect("recorded").preempted = Some(Signalled { rule, at: t, by });
        self.state.stop(w, t + grace, reason(Rule::Requeue));
    }

    /// A node failure stops `w` at once (MNT-2).
    fn fail(&mut self, w: WorkloadId, t: Time) {
        let mut probe = self.state.clone();
        let o = probe.stop(w, t, reason(Rule::Failure));
        self.record(w, t, o.useful_gpu_s, AttemptEnd::Failed);
        self.state.stop(w, t, reason(Rule::Failure));
    }

    fn report(&self) -> Report {
        self.state.sanity_check(self.out.horizon_end).expect("consistent state");
        measure(&self.state, &self.out)
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

fn two_nodes() -> StateBuilder {
    StateBuilder::new().pool("a", "H100", 2, 8).account("org/a").account("org/b")
}

#[test]
fn one_workload_on_the_whole_cluster_for_half_the_horizon_is_half_occupancy() {
    let mut run = Run::new(two_nodes().build(), 1000);
    let w = run.submit(Wl::new("w").account("org/a").gpus(16).nodes(2).work(500).util(0.5));
    run.start(w, &["a-0", "a-1"], 0);
    run.finish(w, 500, reason(Rule::Completed));
    let m = run.report().metrics;
    assert_eq!(m.availability, 1.0);
    assert_eq!(m.occupancy, 0.5);
    assert_eq!(m.utilization, 0.25);
    assert_eq!(m.impact, 0.5, "one account: impact = useful / available");
    assert_eq!(m.useful_gpu_hours, 16.0 * 500.0 / 3600.0);
    assert_eq!(m.assigned_gpu_hours, m.useful_gpu_hours);
    assert_eq!(m.completed_workloads, 1);
    assert!(close(m.throughput_per_day, 86.4), "1 workload in 1000 s");
    assert_eq!(m.jct_s.map(|s| s.p50), Some(500));
    assert_eq!(m.budget_attainment, None, "no budgets");
    assert_eq!((m.preemptions, m.preemption_overhead_fraction), (0, 0.0));
}

#[test]
fn a_node_down_half_the_horizon_lowers_availability_and_occupancy_is_over_available() {
    let mut run = Run::new(two_nodes().build(), 1000);
    run.out.capacity.push(CapacityStep { t: 500, gpus: 8, ngpus_milli: 8000 });
    let w = run.submit(Wl::new("w").account("org/a").gpus(8).work(1000));
    run.start(w, &["a-0"], 0);
    run.finish(w, 1000, reason(Rule::Completed));
    let m = run.report().metrics;
    assert_eq!(m.availability, 0.75);
    assert_eq!(m.available_gpu_hours, 12_000.0 / 3600.0);
    assert!(close(m.occupancy, 8000.0 / 12_000.0));
}

/// A: 8 GPUs, checkpoints every 100 s, signalled at 250 with 50 s grace:
/// held 300 s, kept 200 s. B: 8 GPUs, no checkpoints, its node fails at 400.
fn preempted_and_failed() -> Run {
    let mut run = Run::new(two_nodes().build(), 1100);
    let a = run.submit(Wl::new("a1").account("org/a").gpus(8).work(1000).checkpoint(100));
    let b = run.submit(Wl::new("b1").account("org/b").gpus(8).work(600));
    run.start(a, &["a-0"], 0);
    run.start(b, &["a-1"], 0);
    run.preempt(a, 250, 50);
    run.fail(b, 400);
    run.start(a, &["a-0"], 300);
    run.start(b, &["a-1"], 400);
    run.finish(b, 1000, reason(Rule::Completed));
    run.finish(a, 1100, Reason::new(Rule::Completed, "work done, \"ok\""));
    run.submit(Wl::new("p1").account("org/a").class(allot_core::Class::Interactive).submit(1050));
    run
}

#[test]
fn preemption_overhead_is_grace_plus_lost_progress() {
    let run = preempted_and_failed();
    let m = run.report().metrics;
    let (gpus, grace, lost_progress) = (8.0, 50.0, 250.0 - 200.0);
    let overhead = gpus * grace + gpus * lost_progress;
    assert_eq!(run.state.runs[0].lost_gpu_s as f64, overhead);
    assert_eq!(m.preemptions, 1);
    assert!(close(m.preemption_overhead_gpu_hours, overhead / 3600.0));
    let assigned = 8.0 * (300.0 + 800.0 + 400.0 + 600.0);
    assert!(close(m.assigned_gpu_hours, assigned / 3600.0));
    assert!(close(m.preemption_overhead_fraction, overhead / assigned));
    assert_eq!(m.failures, 1);
    assert!(close(m.lost_gpu_hours_failures, 8.0 * 400.0 / 3600.0), "no checkpoint: all 400 s lost");
    assert!(close(m.useful_gpu_hours, 8.0 * (1000.0 + 600.0) / 3600.0), "kept progress = the work");
    assert_eq!((m.completed_workloads, m.unfinished_workloads, m.rejected_workloads), (2, 1, 0));
    assert_eq!(m.queue_time_s.map(|s| s.p99), Some(0), "a requeue keeps the first start");
    assert_eq!(m.time_to_gpu_s, None, "the interactive workload never started");
}

/// The loss of every preemption by the rule that caused it, and what it
/// bought. On a-0, `v` and `p` (8 GPUs each, checkpoints every 100 s)
/// trade the node: FS-1 signals `v` for `p` at 250 (grace 50: 400 GPU-s
/// of grace, 50 s × 8 of progress since the checkpoint at 200), `p`
/// starts at 300; FS-1 signals `p` for `v` at 1000 (grace 50; its
/// checkpoint at 700 is 1000 − 300, so only the grace is lost), `v`
/// starts at 1050 and finishes its last 1,800 s. On a-1 a drain (MNT-1, no preemptor) signals `d`, which
/// never checkpoints, at 2000 with 100 s of grace: all 2,100 s × 8 lost.
#[test]
fn preemption_loss_by_cause_splits_grace_from_progress_and_says_what_it_bought() {
    let mut run = Run::new(two_nodes().build(), 3000);
    let v = run.submit(Wl::new("v").account("org/a").gpus(8).work(2000).checkpoint(100));
    let p = run.submit(Wl::new("p").account("org/b").gpus(8).work(2000).checkpoint(100));
    let d = run.submit(Wl::new("d").account("org/a").gpus(8).work(5000));
    run.start(v, &["a-0"], 0);
    run.start(d, &["a-1"], 0);
    run.preempt_by(v, 250, 50, Rule::FairShare, Some(p));
    run.start(p, &["a-0"], 300);
    run.preempt_by(p, 1000, 50, Rule::FairShare, Some(v));
    run.start(v, &["a-0"], 1050);
    run.preempt_by(d, 2000, 100, Rule::Drain, None);
    run.finish(v, 1050 + 1800, reason(Rule::Completed));
    let r = run.report();
    let h = |gpu_s: f64| gpu_s / 3600.0;
    let fs = &r.preemption_causes["FS-1"];
    assert_eq!((fs.preemptions, fs.with_preemptor, fs.preemptor_started, fs.returned), (2, 2, 2, 1));
    assert!(close(fs.grace_gpu_hours, h(400.0 + 400.0)), "{fs:?}");
    assert!(close(fs.progress_lost_gpu_hours, h(400.0)), "{fs:?}");
    assert!(close(fs.overhead_gpu_hours, h(1200.0)), "{fs:?}");
    let drain = &r.preemption_causes["MNT-1"];
    assert_eq!((drain.preemptions, drain.with_preemptor, drain.preemptor_started, drain.returned), (1, 0, 0, 0));
    assert!(close(drain.grace_gpu_hours, h(800.0)) && close(drain.progress_lost_gpu_hours, h(16_000.0)));
    // The causes add up to the run's overhead.
    let sum: f64 = r.preemption_causes.values().map(|c| c.overhead_gpu_hours).sum();
    assert!(
        close(sum, r.metrics.preemption_overhead_gpu_hours),
        "{sum} vs {}",
        r.metrics.preemption_overhead_gpu_hours
    );
    assert_eq!(r.preemption_causes.values().map(|c| c.preemptions).sum::<u64>(), r.metrics.preemptions);
    // In the tables: the costliest cause first, shares where defined.
    let md = markdown_table(&[&r]);
    let (drain_at, fs_at) = (md.find("**MNT-1: a drain").expect("MNT-1 section"), md.find("**FS-1: ").expect("FS-1"));
    assert!(drain_at < fs_at, "{md}");
    assert!(md.contains("preemption loss by cause"), "{md}");
    assert!(md.contains("| preemptor started within 5 min (share) ↑ | - |"), "{md}");
    assert!(md.contains("| victim later preempted its preemptor (share) ↓ | 0.500 |"), "{md}");
    assert!(md.contains("| preemptor then idle-reclaimed (share) ↓ | - |"), "{md}");
    assert_eq!(fs.preemptor_idle_reclaimed, 0);
    // A run without preemptions has no such table.
    let quiet = Run::new(two_nodes().build(), 10).report();
    assert!(quiet.preemption_causes.is_empty() && !markdown_table(&[&quiet]).contains("by cause"));
}

/// INT-1 signals batch `b` for the interactive session `i`, which starts
/// when `b` stops and is then ended by an idle reclaim (CON-9): the
/// preemption bought GPUs that stayed idle.
#[test]
fn a_preemptor_that_then_idles_is_counted() {
    let mut run = Run::new(two_nodes().build(), 1000);
    let b = run.submit(Wl::new("b").account("org/a").gpus(8).work(5000).checkpoint(100));
    let i = run.submit(Wl::new("i").account("org/b").gpus(8).work(3600).class(allot_core::Class::Interactive));
    run.start(b, &["a-0"], 0);
    run.preempt_by(b, 100, 10, Rule::Interactive, Some(i));
    run.start(i, &["a-0"], 110);
    // The reclaim as the simulator records it: the attempt ends, reclaimed.
    run.record(i, 700, 0, AttemptEnd::IdleReclaimed);
    let c = run.report().preemption_causes["INT-1"].clone();
    assert_eq!((c.preemptions, c.with_preemptor, c.preemptor_started, c.preemptor_idle_reclaimed), (1, 1, 1, 1));
    let r = run.report();
    assert!(markdown_table(&[&r]).contains("| preemptor then idle-reclaimed (share) ↓ | 1.000 |"));
}

/// Pools: one H100 node (weight 1) and one B200 node (weight 2); budget
/// period 1 h. `org/a` (4 NGH) holds 8 H100 GPUs from 0 to the horizon;
/// `org/b` (16 NGH) waits from 0 and holds 8 B200 GPUs from 1800 s on.
fn budgets(horizon: Time, org_budget: Option<f64>) -> Run {
    let state = StateBuilder::new()
        .gpu_weight("H100", 1.0)
        .gpu_weight("B200", 2.0)
        .pool("h", "H100", 1, 8)
        .pool("b", "B200", 1, 8)
        .account_with("org", |s| s.budget_gpu_hours = org_budget)
        .account_with("org/a", |s| s.budget_gpu_hours = Some(4.0))
        .account_with("org/b", |s| s.budget_gpu_hours = Some(16.0))
        .contract(|c| c.budget_period = 3600)
        .build();
    let mut run = Run::new(state, horizon);
    let a = run.submit(Wl::new("a").account("org/a").gpus(8).work(horizon));
    let b = run.submit(Wl::new("b").account("org/b").gpus(8).work(horizon - 1800));
    run.start(a, &["h-0"], 0);
    run.start(b, &["b-0"], 1800);
    run.finish(a, horizon, reason(Rule::Completed));
    run.finish(b, horizon, reason(Rule::Completed));
    run
}

#[test]
fn budget_attainment_caps_use_and_demand_at_the_budget_per_period() {
    let cases = [
        // a: min(used, 4) = min(demand, 4) = 4 per period. b: used 8 then 16
        // NGH, demand 16 and 16: (4+4+8+16) / (4+4+16+16).
        ("two full periods", 7200, None, 32.0 / 40.0),
        // Last period is half long, budgets halved: a 4+2 / 4+2; b used 8 + 8,
        // demand 16 + 8 against budgets 16 and 8.
        ("partial last period", 5400, None, (6.0 + 16.0) / (6.0 + 24.0)),
        // org (10 NGH) is over budget in both periods: use and demand capped.
        ("parent budget", 7200, Some(10.0), (32.0 + 20.0) / (40.0 + 20.0)),
    ];
    for (name, horizon, org, want) in cases {
        let r = budgets(horizon, org).report();
        let got = r.metrics.budget_attainment.expect("budgets");
        assert!(close(got, want), "{name}: {got} != {want}");
    }
}

#[test]
fn account_use_is_normalised_and_shares_conserve_assigned_time() {
    let r = budgets(7200, None).report();
    let (a, b, org) = (&r.accounts["org/a"], &r.accounts["org/b"], &r.accounts["org"]);
    assert_eq!((a.gpu_hours, a.used_gpu_hours), (16.0, 16.0));
    assert_eq!((b.gpu_hours, b.used_gpu_hours), (12.0, 24.0), "B200 weighs 2");
    assert_eq!((org.gpu_hours, org.used_gpu_hours), (28.0, 40.0));
    assert_eq!((a.budget_gpu_hours, org.budget_gpu_hours), (Some(4.0), None));
    assert!(close(a.delivered_share + b.delivered_share, 1.0));
    assert_eq!(org.delivered_share, 1.0);
    assert!(close(a.entitled_share, 0.2), "default share follows the budget (FS-0)");
    assert_eq!((a.queue_time_p50_s, b.queue_time_p50_s, org.queue_time_p50_s), (Some(0), Some(1800), Some(0)));
    assert_eq!(r.metrics.assigned_gpu_hours, 28.0);
}

/// `org/a` and `org/b` (entitled 1/2 each) each submit 8 GPUs of work at
/// `submit` and hold one node of two from `start` to `end`.
fn jain(a: [Time; 3], b: [Time; 3]) -> Report {
    let mut run = Run::new(two_nodes().build(), 1000);
    for (id, node, [submit, start, end]) in [("org/a", "a-0", a), ("org/b", "a-1", b)] {
        let w = run.submit(Wl::new(id).account(id).gpus(8).submit(submit).work(end - start));
        run.start(w, &[node], start);
        run.finish(w, end, reason(Rule::Completed));
    }
    run.report()
}

#[test]
fn jain_index_is_one_for_entitled_delivery_and_lower_otherwise() {
    let exact = jain([0, 0, 1000], [0, 0, 1000]);
    assert_eq!(exact.metrics.jain_index, Some(1.0));
    assert_eq!(exact.accounts["org/a"].delivered_share, exact.accounts["org/a"].entitled_share);
    // b waits from 0 to 500 (its demand still saturates its half): delivered
    // 2/3 and 1/3, x = 4/3 and 2/3, J = 2² / (2 · (16/9 + 4/9)) = 0.9.
    let skewed = jain([0, 0, 1000], [0, 500, 1000]);
    assert!(close(skewed.metrics.jain_index.unwrap(), 0.9));
    assert!(close(skewed.accounts["org/b"].delivered_share, 1.0 / 3.0));
    // b only arrives at 500: its demand (8 × 500) is below its entitlement
    // (8 × 1000), so only a counts and the index is trivially 1.
    let late = jain([0, 0, 1000], [500, 500, 1000]);
    assert_eq!(late.metrics.jain_index, Some(1.0));
    // Demand of 8 GPUs × 100 s each is far below half the cluster: no saturation.
    let light = jain([900, 900, 1000], [900, 900, 1000]);
    assert_eq!(light.metrics.jain_index, None);
}

#[test]
fn queue_times_by_nearest_rank_overall_and_per_class() {
    let mut run = Run::new(two_nodes().build(), 1000);
    for (i, start) in [15, 20, 35, 40, 50].into_iter().enumerate() {
        let w = run.submit(Wl::new(format!("b{i}")).account("org/a").gpus(1).work(100));
        run.start(w, &["a-0"], start);
    }
    let r = run.report();
    let batch = r.metrics.queue_time_by_class.batch.unwrap();
    assert_eq!((batch.p50, batch.p95, batch.p99, batch.mean), (35, 50, 50, 32.0));
    assert_eq!(r.metrics.queue_time_s, Some(batch));
    assert_eq!(r.metrics.queue_time_by_class.interactive, None);
    let i = run.submit(Wl::new("i").account("org/b").gpus(1).class(allot_core::Class::Interactive).submit(3));
    run.start(i, &["a-1"], 10);
    let m = run.report().metrics;
    let all = m.queue_time_s.unwrap();
    assert_eq!((all.p50, all.p95, all.p99), (20, 50, 50), "[7, 15, 20, 35, 40, 50]");
    assert_eq!(m.time_to_gpu_s.map(|s| (s.p50, s.p99, s.mean)), Some((7, 7, 7.0)));
    assert_eq!(m.time_to_gpu_s, m.queue_time_by_class.interactive);
    assert_eq!(m.queue_time_by_class.service, None);
}

#[test]
fn report_json_has_every_design_key() {
    let report = preempted_and_failed().report();
    let json = serde_json::to_string(&report).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let stats = ["p50", "p95", "p99", "mean"];
    for key in ["policy", "horizon_s", "workloads", "metrics", "accounts"] {
        assert!(v.get(key).is_some(), "{key}");
    }
    let m = &v["metrics"];
    for key in [
        "availability",
        "occupancy",
        "utilization",
        "impact",
        "budget_attainment",
        "jain_index",
        "completed_workloads",
        "throughput_per_day",
        "useful_gpu_hours",
        "preemptions",
        "preemption_overhead_gpu_hours",
        "preemption_overhead_fraction",
    ] {
        assert!(m.get(key).is_some(), "metrics.{key}");
    }
    for s in stats {
        assert!(m["queue_time_s"][s].is_number(), "queue_time_s.{s}");
        assert!(m["queue_time_by_class"]["batch"][s].is_number(), "batch.{s}");
    }
    assert!(m["queue_time_by_class"]["interactive"].is_null());
    assert!(m["queue_time_by_class"]["service"].is_null());
    assert!(m["budget_attainment"].is_null());
    assert!(m["occupancy"].is_f64());
    let accounts = v["accounts"].as_object().unwrap();
    assert_eq!(accounts.keys().collect::<Vec<_>>(), ["org", "org/a", "org/b"]);
    for key in
        ["entitled_share", "delivered_share", "gpu_hours", "budget_gpu_hours", "used_gpu_hours", "queue_time_p50_s"]
    {
        assert!(accounts["org/a"].get(key).is_some(), "accounts.org/a.{key}");
    }
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
}

#[test]
fn workloads_csv_header_and_rows() {
    let run = preempted_and_failed();
    let mut buf = Vec::new();
    write_workloads_csv(&mut buf, &run.state, run.out.horizon_end).unwrap();
    let text = String::from_utf8(buf).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "id,account,class,gpus,submit_s,first_start_s,end_s,queue_s,jct_s,preemptions,lost_gpu_s,status,last_reason"
    );
    assert_eq!(lines[1], r#"a1,org/a,batch,8,0,0,1100,0,1100,1,800,finished,"ENG-1: work done, ""ok""""#);
    assert_eq!(lines[3], "p1,org/a,interactive,1,1050,,,,,0,0,pending,");
    assert_eq!(lines.len(), 4);
}

#[test]
fn tables_have_one_column_per_policy() {
    let one = preempted_and_failed().report();
    let mut other = one.clone();
    other.policy = "other".into();
    other.accounts.get_mut("org/a").unwrap().delivered_share = 0.25;

    let single = summary_table(&[&one]);
    for needle in ["capacity", "queue time", "work", "preemption", "fairness", "accounts", "entitled", "used NGH"] {
        assert!(single.contains(needle), "{needle} in\n{single}");
    }
    assert!(single.lines().next().unwrap().ends_with("hand"));

    let both = summary_table(&[&one, &other]);
    let header = both.lines().next().unwrap();
    assert!(header.contains("hand") && header.ends_with("other"), "{header}");
    assert!(both.contains("delivered share by account"));
    let row = both.lines().find(|l| l.starts_with("org/a ")).unwrap();
    assert!(row.trim_end().ends_with("0.250"), "{row}");

    let md = markdown_table(&[&one, &other]);
    for line in md.lines().filter(|l| l.starts_with('|')) {
        assert!(line.ends_with('|'), "{line}");
    }
    let metric_rows = md.lines().take_while(|l| !l.is_empty()).collect::<Vec<_>>();
    assert!(metric_rows.iter().all(|l| l.matches(" | ").count() == 2 || l.starts_with("|:")), "{md}");
    assert!(md.contains("| **fairness** |"));
}
