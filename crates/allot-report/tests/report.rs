//! The comparison report on simulated runs: the series add up to the
//! measures, the page holds every chart and nothing from outside, and the
//! seed summary keeps the report's shape.

use allot_core::{Class, PolicyKind, Priority, State, WorkloadSpec};
use allot_report::series::Series;
use allot_report::{Page, PolicyRun, Setup, render, seeds_tables, summarise};
use allot_sim::report::{Tables, measures_tables};
use allot_sim::{SimOptions, simulate};
use allot_testkit::{StateBuilder, Wl};

const DAY: u64 = 86_400;

/// Two teams with budgets sharing 32 GPUs, a 1-day budget period.
fn state() -> State {
    StateBuilder::new()
        .pool("a", "H100", 2, 8)
        .pool("b", "B200", 2, 8)
        .gpu_weight("B200", 2.0)
        .account_with("lab/x", |a| a.budget_gpu_hours = Some(300.0))
        .account_with("lab/y", |a| a.budget_gpu_hours = Some(100.0))
        .account("lab/x/p")
        .legacy("lab/x", &["a"])
        .legacy("lab/y", &["b"])
        .contract(|c| {
            c.budget_period = DAY;
            c.min_slice.batch = 3600;
        })
        .build()
}

/// A deterministic mix over three days: batch gangs from both teams,
/// interactive sessions, a service; checkpoints so preemption loses work.
fn workloads(s: &State) -> Vec<WorkloadSpec> {
    let mut v = Vec::new();
    let mut x: u64 = 7;
    let mut next = |m: u64| {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) % m
    };
    for i in 0..160 {
        let account = if i % 3 == 0 { "lab/y" } else { "lab/x/p" };
        let (class, gpus, work) = match i % 10 {
            0..=5 => (Class::Batch, [1, 2, 4, 8][next(4) as usize], 1800 + next(6 * 3600)),
            6..=8 => (Class::Interactive, 1 + next(2) as u32, 600 + next(3600)),
            _ => (Class::Service, 1, 4 * 3600),
        };
        let w = Wl::new(format!("w{i}"))
            .account(account)
            .class(class)
            .gpus(gpus)
            .submit(next(3 * DAY))
            .work(work)
            .checkpoint(900)
            .util(0.5)
            .priority(if i % 4 == 0 { Priority::High } else { Priority::Normal });
        v.push(if i % 4 == 1 { w.preemptible() } else { w }.build(s));
    }
    v
}

fn run(kind: PolicyKind) -> (State, PolicyRun) {
    let s = state();
    let specs = workloads(&s);
    let (state, out) = simulate(s, specs, Vec::new(), kind.build().as_mut(), &SimOptions::default());
    let run = PolicyRun::of(&state, &out);
    (state, run)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn series_add_up_to_the_report() {
    for kind in [PolicyKind::Priority, PolicyKind::FifoBackfill, PolicyKind::Allot] {
        let (state, run) = run(kind);
        let (r, s) = (&run.report, &run.series);
        let name = kind.as_str();
        assert_eq!(s.preemptions.iter().sum::<u64>(), r.metrics.preemptions, "{name}: preemptions");
        let lost: f64 = s.lost_gpu_hours.iter().sum();
        assert!(close(lost, r.metrics.preemption_overhead_gpu_hours), "{name}: lost {lost}");
        // Occupancy and utilisation weighted by available GPU-time give the totals.
        let starts: Vec<u64> = s.bucket_starts().collect();
        let len = |i: usize| (starts[i] + s.bucket_s).min(s.horizon_s) - starts[i];
        let avail: Vec<f64> = (0..starts.len()).map(|i| 32.0 * len(i) as f64 / 3600.0).collect();
        assert!(close(avail.iter().sum(), r.metrics.available_gpu_hours), "{name}");
        let assigned: f64 = s.occupancy.iter().zip(&avail).map(|(o, a)| o * a).sum();
        assert!(close(assigned, r.metrics.assigned_gpu_hours), "{name}: {assigned}");
        assert!(s.occupancy.iter().chain(&s.utilization).all(|v| (0.0..=1.0 + 1e-9).contains(v)), "{name}");
        assert!(s.occupancy.len() as u64 <= allot_report::series::MAX_BUCKETS);
        // Budget periods: the use over the periods is the account's NGH used,
        // and the attainment over them is the report's.
        let b = s.budget.as_ref().expect("budgeted accounts");
        assert!(b.periods.len() >= 3, "three days of 1-day periods: {:?}", b.periods);
        for a in &b.accounts {
            let used: f64 = a.used.iter().sum();
            let want = r.accounts[&a.account].used_gpu_hours;
            assert!(close(used, want), "{name} {}: {used} vs used {want}", a.account);
            assert!(a.budget.iter().all(|x| *x <= r.accounts[&a.account].budget_gpu_hours.unwrap() + 1e-9));
        }
        assert_eq!(b.attainment(), r.metrics.budget_attainment, "{name}");
        let paths: Vec<&str> = b.accounts.iter().map(|a| a.account.as_str()).collect();
        assert_eq!(paths, ["lab/x", "lab/y"]);
        queue_cdfs_match_the_percentiles(&state, &run);
    }
}

fn queue_cdfs_match_the_percentiles(state: &State, run: &PolicyRun) {
    let by_class = &run.report.metrics.queue_time_by_class;
    for (class, stats) in [(Class::Batch, by_class.batch), (Class::Interactive, by_class.interactive)] {
        let cdf = &run.series.queue_cdf[&class];
        let submitted = state.specs.iter().filter(|w| w.class == class).count() as u64;
        let rejected = state
            .specs
            .iter()
            .zip(&state.runs)
            .filter(|(w, r)| w.class == class && r.phase == allot_core::Phase::Rejected)
            .count() as u64;
        assert_eq!(cdf.workloads, submitted - rejected);
        assert!(cdf.points.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1), "ascending");
        let last = cdf.points.last().unwrap();
        assert!(close(last.1, cdf.started as f64 / cdf.workloads as f64));
        // With every workload started, the first point reaching 1/2 is the p50.
        if cdf.started == cdf.workloads {
            let p50 = cdf.points.iter().find(|p| p.1 >= 0.5).unwrap().0;
            assert_eq!(p50, stats.unwrap().p50, "{class:?}");
        }
    }
}

fn page_of(state: &State, runs: &[PolicyRun], measures: &Tables, trace: &[WorkloadSpec]) -> String {
    render(&Page {
        title: "test <comparison>".into(),
        setup: Setup {
            cluster: &state.cluster,
            accounts: &state.accounts,
            contract: &state.contract,
            config_text: "[cluster]\nname = \"t & t\"\n",
            source: vec![("trace".into(), "generated".into())],
            trace,
        },
        runs,
        measures,
        notes: vec!["a note".into()],
        warnings: vec!["priority rejected <all>".into()],
        headline: vec!["Compared <the policies>.".into(), "Against priority, allot gained.".into()],
        assumed: allot_report::html::assumptions_of(
            &["checkpoints: every one of the 3 batch jobs checkpoints every 1h".into()],
            &[("priority".into(), false), ("allot".into(), true)],
            Some(2.5),
        ),
    })
}

#[test]
fn the_page_is_self_contained_and_holds_every_chart() {
    let runs: Vec<PolicyRun> = [PolicyKind::Priority, PolicyKind::Allot].into_iter().map(|k| run(k).1).collect();
    let s = state();
    let trace = workloads(&s);
    let reports: Vec<_> = runs.iter().map(|r| &r.report).collect();
    let html = page_of(&s, &runs, &measures_tables(&reports), &trace);
    for id in [
        "chart-occupancy",
        "chart-utilization",
        "chart-queue-cdf-batch",
        "chart-queue-cdf-interactive",
        "chart-queue-cdf-service",
        "chart-time-to-gpu",
        "chart-share",
        "chart-budget-attainment",
        "chart-preemptions",
        "chart-lost-gpu-hours",
        "table-headline",
        "table-budget-attainment",
        "table-measures",
        "warnings",
    ] {
        assert_eq!(html.matches(&format!("id=\"{id}\"")).count(), 1, "{id}");
    }
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
    assert_eq!(html.matches("<svg").count(), 10);
    // Reading order: the headline in words, the assumptions behind the
    // results, warnings, headline table, charts, every measure, the inputs
    // (collapsed).
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("{needle}"));
    assert!(at("</h1>") < at("<p class=\"headline\">Compared &lt;the policies&gt;.</p>"));
    assert!(at("<p class=\"headline\">") < at("id=\"assumed\""));
    assert!(at("id=\"assumed\"") < at("<li>checkpoints: every one of the 3 batch jobs checkpoints every 1h</li>"));
    assert!(at("idle reclaim (CON-9): on for allot; off for priority") < at("id=\"warnings\""));
    assert!(at("load: the trace asks for 2.50× the GPU-time") < at("id=\"warnings\""));
    assert!(at("id=\"warnings\"") < at("id=\"table-headline\""));
    assert!(at("id=\"table-headline\"") < at("<svg"));
    assert!(at("id=\"chart-lost-gpu-hours\"") < at("id=\"table-measures\""));
    assert!(at("id=\"table-measures\"") < at("<section id=\"assumptions\""));
    assert!(at("<section id=\"assumptions\"") < at("<details>"));
    assert!(html.contains("priority rejected &lt;all&gt;"));
    for banned in ["http://", "https://", "<script", "<link", "@import", "url(http"] {
        assert!(!html.contains(banned), "{banned}");
    }
    // Text is escaped; the legends name the policies.
    assert!(html.contains("test &lt;comparison&gt;") && html.contains("t &amp; t"));
    assert!(html.contains(">priority</text>") && html.contains(">allot</text>"));
    // A row per measure of the table, with the direction that is better.
    assert!(html.contains("<td>occupancy<span class=\"dir\" title=\"higher is better\">↑</span></td>"));
    assert!(html.contains("<td>all p95<span class=\"dir\" title=\"lower is better\">↓</span></td>"));
    assert!(html.contains("<td>Jain index<span class=\"dir\""));
    // The best value of a row is marked: the lower preemption count of the two.
    let preempt = |r: &PolicyRun| r.report.metrics.preemptions;
    assert_ne!(preempt(&runs[0]), preempt(&runs[1]), "the two policies must differ for this check");
    let best = preempt(&runs[0]).min(preempt(&runs[1]));
    let row = html.lines().find(|l| l.starts_with("<tr><td>preemptions<span")).expect("a preemptions row");
    assert!(row.contains(&format!("<td class=\"best\">{best}</td>")), "{row}");
    assert_eq!(row.matches("class=\"best\"").count(), 1, "{row}");
    // Accounts in the charts have a legend.
    assert!(html.contains("<h3>Accounts in the charts</h3>") && html.contains("<td>lab/x</td>"));
}

#[test]
fn seed_summaries_keep_the_report_shape() {
    let a = run(PolicyKind::FifoBackfill).1.report;
    let mut b = a.clone();
    b.metrics.occupancy = a.metrics.occupancy + 0.1;
    b.metrics.jain_index = None;
    let v = summarise(&[a.clone(), b.clone()]);
    assert_eq!(v["policy"], "fifo-backfill");
    assert_eq!(v["seeds"], 2);
    assert!(close(v["metrics"]["occupancy"].as_f64().unwrap(), a.metrics.occupancy + 0.05));
    // Half-width: t(0.975, 1) · s / √2 with s = 0.1 / √2.
    assert!(close(v["ci95"]["metrics"]["occupancy"].as_f64().unwrap(), 12.706 * 0.05));
    assert_eq!(v["ci95"]["metrics"]["utilization"], 0.0);
    assert_eq!(v["metrics"]["jain_index"].as_f64(), a.metrics.jain_index, "mean over defined values");
    for key in ["horizon_s", "workloads", "metrics", "accounts"] {
        assert!(v.get(key).is_some(), "{key}");
    }
    let md = seeds_tables(&[("fifo-backfill".into(), vec![a.clone(), b.clone()])]).markdown();
    assert!(md.contains("| seeds | 2 |"));
    let occ = md.lines().find(|l| l.starts_with("| occupancy ↑ |")).unwrap();
    assert!(occ.contains(" ± "), "{occ}");
    assert!(md.contains("95% confidence interval over 2 seeds"));

    // Two columns: the better mean is bold; an interval wider than its mean
    // is marked and explained.
    let mut c = a.clone();
    c.metrics.occupancy = a.metrics.occupancy + 0.3;
    c.metrics.preemptions = 0;
    let mut d = a.clone();
    d.metrics.occupancy = a.metrics.occupancy + 0.3;
    d.metrics.preemptions = 40;
    let md = seeds_tables(&[("x".into(), vec![a, b]), ("y".into(), vec![c, d])]).markdown();
    let occ = md.lines().find(|l| l.starts_with("| occupancy ↑ |")).unwrap();
    assert!(occ.ends_with(" ± 0.000** |") && occ.contains("| **"), "{occ}");
    let pre = md.lines().find(|l| l.starts_with("| preemptions ↓ |")).unwrap();
    assert!(pre.contains("20 ± 254 †"), "0 and 40: {pre}");
    assert!(md.contains("† the 95% interval is wider than the mean"), "{md}");
}

#[test]
fn series_are_deterministic() {
    let a = serde_json::to_string(&run(PolicyKind::Allot).1.series).unwrap();
    let b = serde_json::to_string(&run(PolicyKind::Allot).1.series).unwrap();
    assert_eq!(a, b);
    let _: &Series = &run(PolicyKind::Fifo).1.series;
}

/// A headline of a single run of two policies, with `allot`'s preemptions
/// set to `preemptions`.
fn headline_with(preemptions: u64) -> Vec<String> {
    let base = run(PolicyKind::FifoBackfill).1.report;
    let mut allot = run(PolicyKind::Allot).1.report;
    allot.metrics.preemptions = preemptions;
    let subject = allot_report::Subject {
        trace: "trace t.csv (160 workloads)".into(),
        clusters: 1,
        gpus: 32,
        days: 3.0,
        load: Some(2.5),
    };
    allot_report::headline(&subject, &[("fifo-backfill".into(), vec![base]), ("allot".into(), vec![allot])], "allot")
}

#[test]
fn the_headline_is_written_from_the_figures() {
    let h = headline_with(7);
    assert!(
        h[0].starts_with("Compared fifo-backfill, allot on trace t.csv (160 workloads): 1 cluster, 32 GPUs, 3.0 days"),
        "{h:?}"
    );
    assert!(h[0].contains("2.50× capacity") && h[0].contains("any policy that shares idle GPUs"), "{h:?}");
    assert_eq!(h.len(), 2, "one sentence per baseline: {h:?}");
    assert!(h[1].starts_with("Against fifo-backfill, allot "), "{h:?}");
    // fifo-backfill never preempts: allot's preemptions are a cost, named
    // with both figures; change the figure and the sentence follows.
    assert!(h[1].contains("raised the preemptions from 0 to 7"), "{h:?}");
    let again = headline_with(19);
    assert!(again[1].contains("raised the preemptions from 0 to 19"), "{again:?}");
    assert_ne!(h, again);
    let none = headline_with(0);
    assert!(!none[1].contains("preemptions from"), "no cost when allot does not preempt either: {none:?}");
}

#[test]
fn several_seeds_give_intervals_and_sim_names_worse_tails() {
    let base = run(PolicyKind::FifoBackfill).1.report;
    let allot = run(PolicyKind::Allot).1.report;
    let (mut a1, mut a2) = (allot.clone(), allot.clone());
    a1.metrics.preemptions = 10;
    a2.metrics.preemptions = 20;
    let subject =
        allot_report::Subject { trace: "scenario s".into(), clusters: 2, gpus: 64, days: 1.0, load: Some(0.8) };
    let runs = [("fifo-backfill".to_string(), vec![base.clone(), base.clone()]), ("allot".to_string(), vec![a1, a2])];
    let h = allot_report::headline(&subject, &runs, "allot");
    assert!(h[0].contains("2 clusters") && h[0].contains("0.80× capacity") && !h[0].contains("shares idle"));
    assert!(h[0].contains("means over 2 seeds"), "{h:?}");
    // Mean 15, half-width t(0.975, 1) · 5 = 63.5, wider than the mean (†).
    assert!(h[1].contains("raised the preemptions from 0.00 ± 0.00 to 15 ± 64 †"), "{h:?}");
    // `allot sim`: a worse tail or more preemptions get a sentence.
    let mut worse = allot.clone();
    worse.metrics.preemptions = base.metrics.preemptions + 30;
    let tails = allot_report::worse_tails(&[&base, &worse], "allot");
    assert_eq!(tails.len(), 1, "{tails:?}");
    assert!(tails[0].starts_with("Worse under allot than under fifo-backfill: it raised "), "{tails:?}");
    assert!(tails[0].contains("raised the preemptions from 0 to 30"), "{tails:?}");
    let mut better = worse.clone();
    better.metrics.preemptions = 0;
    let classes = [&mut better.metrics.queue_time_by_class.batch, &mut better.metrics.queue_time_by_class.interactive];
    for s in classes.into_iter().flatten() {
        s.p99 = 0;
    }
    better.metrics.queue_time_by_class.service = base.metrics.queue_time_by_class.service;
    better.metrics.queue_time_s = base.metrics.queue_time_s.map(|s| allot_sim::report::Stats { p99: 0, ..s });
    assert!(allot_report::worse_tails(&[&base, &better], "allot").is_empty());
}
