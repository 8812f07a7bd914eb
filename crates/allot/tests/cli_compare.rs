//! `allot compare` through the real binary: the three outputs on the shipped
//! example, repeated runs over generator seeds, and clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn allot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_allot")).args(args).current_dir(repo()).output().expect("run allot")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("allot-compare-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The charts every report must hold (ids of their `<svg>`s).
const CHARTS: [&str; 10] = [
    "chart-occupancy",
    "chart-utilization",
    "chart-queue-cdf-batch",
    "chart-queue-cdf-interactive",
    "chart-time-to-gpu",
    "chart-share",
    "chart-budget-attainment",
    "chart-preemptions",
    "chart-lost-gpu-hours",
    "chart-queue-cdf-service",
];

/// The measures of summary.md's table (one row each), with the direction
/// that is better.
const MEASURES: [&str; 16] = [
    "availability —",
    "occupancy ↑",
    "utilization ↑",
    "impact ↑",
    "all p50 ↓",
    "interactive p99 ↓",
    "completed workloads ↑",
    "useful GPU-h ↑",
    "preemptions ↓",
    "overhead GPU-h ↓",
    "overhead fraction ↓",
    "node failures —",
    "attempts killed by failures ↓",
    "budget attainment ↑",
    "Jain index ↑",
    "JCT p50 ↓",
];

fn check_html(html: &str, policies: &[&str]) {
    for id in CHARTS {
        assert!(html.contains(&format!("<svg id=\"{id}\"")), "report.html has no <svg id={id:?}>");
    }
    assert!(html.contains("id=\"table-measures\""));
    assert!(!html.contains("http://") && !html.contains("https://"), "report.html must be self-contained");
    assert!(!html.contains("<script") && !html.contains("<link") && !html.contains("<img"));
    // The headline and the budget attainment per account are tables of their own.
    assert!(html.contains("id=\"table-headline\"") && html.contains("id=\"table-budget-attainment\""));
    // Assumptions are printed; legends name the policies.
    for s in ["Assumptions", "budget period", "scheduling interval", "[cluster]"] {
        assert!(html.contains(s), "report.html does not print {s:?}");
    }
    for p in policies {
        assert!(html.contains(&format!(">{p}</text>")), "no legend entry for {p}");
    }
}

#[test]
fn compare_writes_summaries_and_a_self_contained_report() {
    let out = tmpdir("example");
    let policies = ["priority", "fifo-backfill", "allot"];
    let r = allot(&[
        "compare",
        "--config",
        "examples/cluster.toml",
        "--trace",
        "examples/trace.csv",
        "--events",
        "examples/events.csv",
        "--policies",
        &policies.join(","),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    // Not a terminal: no progress bar on stderr, only the closing lines.
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!err.contains('\r'), "{err}");

    let json: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    let reports = json.as_array().expect("an array of reports");
    assert_eq!(reports.len(), policies.len());
    for (r, p) in reports.iter().zip(policies) {
        assert_eq!(r["policy"], p);
        assert!(r["horizon_s"].as_u64().unwrap() > 0 && r["workloads"] == 1513);
        let m = &r["metrics"];
        for key in [
            "availability",
            "occupancy",
            "utilization",
            "impact",
            "budget_attainment",
            "jain_index",
            "queue_time_s",
            "queue_time_by_class",
            "completed_workloads",
            "throughput_per_day",
            "useful_gpu_hours",
            "preemptions",
            "preemption_overhead_gpu_hours",
            "preemption_overhead_fraction",
        ] {
            assert!(m.get(key).is_some(), "{p}: metrics.{key}");
        }
        for key in ["p50", "p95", "p99", "mean"] {
            assert!(m["queue_time_s"].get(key).is_some());
        }
        for class in ["batch", "interactive", "service"] {
            assert!(m["queue_time_by_class"].get(class).is_some());
        }
        let llm = &r["accounts"]["org/llm"];
        for key in ["entitled_share", "delivered_share", "gpu_hours", "budget_gpu_hours", "used_gpu_hours"] {
            assert!(llm.get(key).is_some(), "{p}: accounts.org/llm.{key}");
        }
    }

    // Every workload has exactly one outcome.
    for r in reports {
        let m = &r["metrics"];
        let outcomes = ["completed", "failed", "cancelled", "idle_reclaimed", "rejected", "unfinished"];
        let sum: u64 = outcomes.iter().map(|o| m[format!("{o}_workloads")].as_u64().expect("an outcome count")).sum();
        assert_eq!(sum, 1513, "{}: outcomes add up to the workloads", r["policy"]);
        // The preemption loss by cause adds up to the preemptions and
        // their overhead.
        let causes = r["preemption_causes"].as_object().cloned().unwrap_or_default();
        let n: u64 = causes.values().map(|c| c["preemptions"].as_u64().unwrap()).sum();
        assert_eq!(n, m["preemptions"].as_u64().unwrap(), "{}: {causes:?}", r["policy"]);
        let lost: f64 = causes.values().map(|c| c["overhead_gpu_hours"].as_f64().unwrap()).sum();
        let overhead = m["preemption_overhead_gpu_hours"].as_f64().unwrap();
        assert!((lost - overhead).abs() < 1e-6 * overhead.max(1.0), "{}: {lost} vs {overhead}", r["policy"]);
        for (id, c) in &causes {
            assert!(id == "unknown" || allot_core::Rule::ALL.iter().any(|x| x.id() == id), "cause {id}");
            let split = c["grace_gpu_hours"].as_f64().unwrap() + c["progress_lost_gpu_hours"].as_f64().unwrap();
            assert!((split - c["overhead_gpu_hours"].as_f64().unwrap()).abs() < 1e-6, "{id}: {c}");
        }
        if r["policy"] == "allot" {
            assert!(!causes.is_empty(), "allot preempts on the example: {r}");
        }
    }

    let md = read(&out.join("summary.md"));
    assert!(md.contains("preemption loss by cause"), "{md}");
    // The headline comes first, right under the title, then the
    // assumptions; the figures follow.
    let after_title = md.split_once("\n\n").expect("a title").1;
    assert!(
        after_title.starts_with("Compared priority, fifo-backfill, allot on trace examples/trace.csv (1513 workloads)"),
        "{md}"
    );
    assert!(md.contains("\nAgainst priority, allot ") && md.contains("\nAgainst fifo-backfill, allot "), "{md}");
    let at = |needle: &str| md.find(needle).unwrap_or_else(|| panic!("no {needle:?} in {md}"));
    assert!(at("Against priority") < at("**Assumptions behind the results**"));
    assert!(at("* idle reclaim (CON-9): on for allot; off for priority, fifo-backfill") < at("| measure |"));
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(stdout.starts_with("Compared priority, fifo-backfill, allot on trace"), "{stdout}");
    let header = md.lines().find(|l| l.starts_with("| measure |")).expect("a header row");
    assert_eq!(header, format!("| measure | {} |", policies.join(" | ")));
    for m in MEASURES {
        let row = md.lines().find(|l| l.starts_with(&format!("| {m} |"))).unwrap_or_else(|| panic!("no row {m}"));
        assert_eq!(row.matches(" | ").count(), policies.len(), "{row}");
    }

    // The best value of a row is bold: the fewest preemptions.
    let preemptions: Vec<u64> = reports.iter().map(|r| r["metrics"]["preemptions"].as_u64().unwrap()).collect();
    let fewest = *preemptions.iter().min().unwrap();
    assert!(preemptions.iter().any(|p| *p != fewest), "the policies must differ: {preemptions:?}");
    let row = md.lines().find(|l| l.starts_with("| preemptions ↓ |")).unwrap();
    let cells: Vec<&str> = row.trim_matches('|').split(" | ").skip(1).map(str::trim).collect();
    for (cell, p) in cells.iter().zip(&preemptions) {
        let want = if *p == fewest { format!("**{p}**") } else { p.to_string() };
        assert_eq!(*cell, want, "{row}");
    }
    // Failures are counted apart from the attempts they killed.
    let m = &reports[0]["metrics"];
    assert_eq!(m["node_failures"], 1, "examples/events.csv fails one node once");
    let row = md.lines().find(|l| l.starts_with("| node failures — |")).unwrap();
    assert!(row.starts_with("| node failures — | 1 | 1 | 1 |"), "{row}");
    assert!(md.contains("↑ higher is better, ↓ lower is better"), "{md}");
    assert!(!md.contains("Warnings"), "nothing to warn about: {md}");

    // Not a terminal: a line when each run starts and when it ends, then
    // where the files went.
    for p in policies {
        assert!(err.contains(&format!("{p}: started, horizon ≥ ")), "{err}");
        assert!(err.lines().any(|l| l.starts_with(&format!("{p}: done in "))), "{err}");
    }
    assert!(err.contains(&format!("wrote {}/summary.json", out.display())), "{err}");

    let html = read(&out.join("report.html"));
    check_html(&html, &policies);
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("no {needle:?} in report.html"));
    assert!(at("</h1>\n<p class=\"headline\">Compared priority, fifo-backfill, allot") < at("id=\"assumed\""));
    assert!(at("id=\"assumed\"") < at("id=\"table-headline\""));
    let _ = std::fs::remove_dir_all(&out);
}

/// An import writes what it assumed; the comparison lists it before its
/// results, saying whom it favours.
#[test]
fn compare_lists_what_the_import_assumed() {
    let dir = tmpdir("assumed");
    std::fs::create_dir_all(&dir).unwrap();
    let (trace, config, out) = (dir.join("philly.csv"), dir.join("philly.toml"), dir.join("cmp"));
    let r = allot(&[
        "trace",
        "import",
        "--format",
        "philly",
        "crates/allot-trace/tests/fixtures/import/philly_cluster_job_log.json",
        "--checkpoint-s",
        "3600",
        "--out",
        trace.to_str().unwrap(),
        "--config-out",
        config.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(read(&config).contains("[provenance]\nassumed = [\n"), "{}", read(&config));
    let (c, t, o) = (config.to_str().unwrap(), trace.to_str().unwrap(), out.to_str().unwrap());
    let r = allot(&["compare", "--config", c, "--trace", t, "--policies", "fifo-backfill,allot", "--out", o]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let md = read(&out.join("summary.md"));
    let hourly = "* checkpoints: every one of the 3 batch jobs checkpoints every 1h (--checkpoint-s 3600";
    assert!(md.contains(hourly) && md.contains("favours policies that preempt: allot, priority"), "{md}");
    assert!(md.contains("* budgets: from the same trace"), "{md}");
    assert!(md.find(hourly) < md.find("| measure |"), "assumptions before the results: {md}");
    let html = read(&out.join("report.html"));
    assert!(html.contains("<li>checkpoints: every one of the 3 batch jobs checkpoints every 1h"), "report.html");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Priority on a config without legacy pools refuses every workload: the
/// run is warned about on stderr, in summary.md and in report.html, with the
/// share and the first reason (its rule id); without `--out` the files go
/// to `compare-<trace stem>` in the current directory.
#[test]
fn a_policy_that_rejects_the_trace_is_warned_about_everywhere() {
    let dir = tmpdir("warn");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("c.toml");
    std::fs::write(&cfg, "[cluster]\n[[cluster.pools]]\nname = \"a\"\ngpu = \"H100\"\nnodes = 2\ngpus_per_node = 8\n[[accounts]]\npath = \"org/x\"\n").unwrap();
    let trace = dir.join("month.csv");
    let mut rows = String::from(
        "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible\n",
    );
    for i in 0..10 {
        rows.push_str(&format!("w{i},{},org/x,u,batch,4,0,,3600,0,1,normal,false\n", i * 60));
    }
    std::fs::write(&trace, rows).unwrap();
    let (c, t) = (cfg.to_str().unwrap(), trace.to_str().unwrap());
    let r = Command::new(env!("CARGO_BIN_EXE_allot"))
        .args(["compare", "--config", c, "--trace", t, "--policies", "priority,fifo"])
        .current_dir(&dir)
        .output()
        .expect("run allot");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let err = String::from_utf8_lossy(&r.stderr);
    let want = "priority rejected 10 of 10 workloads (100%); the first, w0: PRIO-2: 4 GPUs never fit the legacy pools";
    assert!(err.lines().any(|l| l.starts_with("warning: ") && l.contains(want)), "{err}");
    assert!(!err.contains("warning: fifo"), "{err}");
    let out = dir.join("compare-month");
    assert!(err.contains("wrote compare-month/summary.json"), "{err}");
    let md = read(&out.join("summary.md"));
    let warnings = md.find("**Warnings**").expect("a warnings block");
    assert!(warnings < md.find("| measure |").unwrap(), "warnings come before the table: {md}");
    assert!(md.contains(&format!("* {want}")), "{md}");
    let html = read(&out.join("report.html"));
    let at = html.find("id=\"warnings\"").expect("a warnings box");
    assert!(at < html.find("<svg").unwrap(), "the warning comes before the charts");
    assert!(html.contains(want), "the page carries the warning");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn seeds_give_means_and_confidence_intervals() {
    let out = tmpdir("seeds");
    let r = allot(&[
        "compare",
        "--scenario",
        "ai2",
        "--gpus",
        "64",
        "--days",
        "2",
        "--seeds",
        "3",
        "--seed",
        "5",
        "--policies",
        "priority,fifo-backfill",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let json: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    let summaries = json.as_array().unwrap();
    assert_eq!(summaries.len(), 2);
    for s in summaries {
        assert_eq!(s["seeds"], 3);
        assert!(s["metrics"]["occupancy"].is_f64());
        assert!(s["ci95"]["metrics"]["occupancy"].as_f64().unwrap() >= 0.0);
        assert!(s["accounts"].is_object());
    }
    let md = read(&out.join("summary.md"));
    assert!(md.contains("| seeds | 3 | 3 |"), "{md}");
    let occ = md.lines().find(|l| l.starts_with("| occupancy ↑ |")).unwrap();
    assert_eq!(occ.matches(" ± ").count(), 2, "{occ}");
    // Every seed's progress is told apart.
    let err = String::from_utf8_lossy(&r.stderr);
    for seed in 5..8 {
        assert!(err.lines().any(|l| l.starts_with(&format!("priority (seed {seed}): done in "))), "{err}");
    }
    let html = read(&out.join("report.html"));
    check_html(&html, &["priority", "fifo-backfill"]);
    assert!(html.contains("seed 5") && html.contains("ai2"), "the page names the seeds and scenario");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_arguments_are_clear_errors() {
    let out = tmpdir("bad");
    let o = out.to_str().unwrap();
    let cases: [(&str, Vec<&str>, &str); 4] = [
        (
            "unknown policy",
            vec!["--config", "examples/cluster.toml", "--trace", "examples/trace.csv", "--policies", "lottery"],
            "unknown policy",
        ),
        ("no inputs", vec![], "--config"),
        ("scenario and files", vec!["--scenario", "ai2", "--config", "examples/cluster.toml"], "cannot be used"),
        ("unknown scenario", vec!["--scenario", "mars"], "unknown scenario"),
    ];
    for (name, args, want) in cases {
        let mut all = vec!["compare", "--out", o];
        all.extend(args);
        let r = allot(&all);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{name}: must fail");
        assert!(err.contains(want), "{name}: {err:?} does not mention {want:?}");
    }
    assert!(!out.join("report.html").exists(), "nothing is written on bad input");
}
