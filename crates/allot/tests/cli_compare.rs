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
    "chart-budget-burn-0",
    "chart-preemptions",
    "chart-lost-gpu-hours",
    "chart-queue-cdf-service",
];

/// The measures of summary.md's table (one row each).
const MEASURES: [&str; 14] = [
    "availability",
    "occupancy",
    "utilization",
    "impact",
    "all p50",
    "interactive p99",
    "completed workloads",
    "useful GPU-h",
    "preemptions",
    "overhead GPU-h",
    "overhead fraction",
    "budget attainment",
    "Jain index",
    "JCT p50",
];

fn check_html(html: &str, policies: &[&str]) {
    for id in CHARTS {
        assert!(html.contains(&format!("<svg id=\"{id}\"")), "report.html has no <svg id={id:?}>");
    }
    assert!(html.contains("id=\"table-measures\""));
    assert!(!html.contains("http://") && !html.contains("https://"), "report.html must be self-contained");
    assert!(!html.contains("<script") && !html.contains("<link") && !html.contains("<img"));
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

    let md = read(&out.join("summary.md"));
    let header = md.lines().find(|l| l.starts_with("| measure |")).expect("a header row");
    assert_eq!(header, format!("| measure | {} |", policies.join(" | ")));
    for m in MEASURES {
        let row = md.lines().find(|l| l.starts_with(&format!("| {m} |"))).unwrap_or_else(|| panic!("no row {m}"));
        assert_eq!(row.matches(" | ").count(), policies.len(), "{row}");
    }

    check_html(&read(&out.join("report.html")), &policies);
    let _ = std::fs::remove_dir_all(&out);
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
    let occ = md.lines().find(|l| l.starts_with("| occupancy |")).unwrap();
    assert_eq!(occ.matches(" ± ").count(), 2, "{occ}");
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
