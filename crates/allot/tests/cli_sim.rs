//! `allot sim` through the real binary: outputs on the shipped example and
//! a clear error with a non-zero exit for every kind of bad input.

use std::path::Path;
use std::process::{Command, Output};

mod cli_support;
use cli_support::{repo, tmpdir};

fn allot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_allot")).args(args).current_dir(repo()).output().expect("run allot")
}

const CONFIG: &str = r#"
[cluster]
[[cluster.pools]]
name = "a"
gpu = "H100"
nodes = 2
gpus_per_node = 8
[[accounts]]
path = "org/x"
"#;

const HEADER: &str =
    "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible\n";

#[test]
fn bad_input_is_a_clear_error_with_a_non_zero_exit() {
    let dir = tmpdir("bad");
    let cfg = dir.join("c.toml");
    std::fs::write(&cfg, CONFIG).unwrap();
    // (name, trace body after the header, what the error must mention)
    let cases = [
        (
            "unknown account",
            "w1,0,org/nope,u,batch,1,0,,10,0,1,normal,false\n",
            vec!["t.csv:2", "account", "unknown account"],
        ),
        ("negative gpus", "w1,0,org/x,u,batch,-3,0,,10,0,1,normal,false\n", vec!["t.csv:2", "gpus"]),
        ("non-numeric work", "w1,0,org/x,u,batch,1,0,,soon,0,1,normal,false\n", vec!["t.csv:2", "work_s"]),
        (
            "larger than any pool",
            "w1,0,org/x,u,batch,32,0,,10,0,1,normal,false\n",
            vec!["t.csv:2", "gpus", "larger than any pool"],
        ),
        ("unknown gpu type", "w1,0,org/x,u,batch,1,0,Z100,10,0,1,normal,false\n", vec!["t.csv:2", "gpu_type"]),
        (
            "duplicate id",
            "w1,0,org/x,u,batch,1,0,,10,0,1,normal,false\nw1,5,org/x,u,batch,1,0,,10,0,1,normal,false\n",
            vec!["t.csv:3", "id", "line 2"],
        ),
    ];
    for (name, body, want) in cases {
        let trace = dir.join("t.csv");
        std::fs::write(&trace, format!("{HEADER}{body}")).unwrap();
        let out =
            allot(&["sim", "--config", cfg.to_str().unwrap(), "--trace", trace.to_str().unwrap(), "--policy", "fifo"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: must fail");
        assert!(out.stdout.is_empty(), "{name}: no report on bad input");
        for w in want {
            assert!(err.contains(w), "{name}: error {err:?} does not mention {w:?}");
        }
    }
    // A malformed config key names the key.
    std::fs::write(&cfg, format!("{CONFIG}\n[contract]\ngrace = \"10m\"\ngrase = \"1m\"\n")).unwrap();
    let trace = dir.join("t.csv");
    std::fs::write(&trace, format!("{HEADER}w1,0,org/x,u,batch,1,0,,10,0,1,normal,false\n")).unwrap();
    let out = allot(&["sim", "--config", cfg.to_str().unwrap(), "--trace", trace.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("c.toml") && err.contains("grase"), "{err}");
    // An unknown policy is named.
    std::fs::write(&cfg, CONFIG).unwrap();
    let out =
        allot(&["sim", "--config", cfg.to_str().unwrap(), "--trace", trace.to_str().unwrap(), "--policy", "lottery"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("lottery"));
}

/// `allot sim` on the shipped example: its config, trace and node events.
const EXAMPLE: [&str; 7] =
    ["sim", "--config", "examples/cluster.toml", "--trace", "examples/trace.csv", "--events", "examples/events.csv"];

#[test]
fn checking_invariants_changes_nothing() {
    let run = |extra: &[&str]| {
        let mut args = EXAMPLE.to_vec();
        args.extend(["--policy", "priority,allot", "--until", "2d"]);
        args.extend(extra);
        let out = allot(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    assert_eq!(run(&["--check-invariants"]), run(&[]), "the same report with every invariant checked");
}

#[test]
fn example_run_writes_every_output() {
    let dir = tmpdir("example");
    let (json, csv, log) = (dir.join("r.json"), dir.join("w.csv"), dir.join("e.jsonl"));
    let out = allot(&[
        "sim",
        "--config",
        "examples/cluster.toml",
        "--trace",
        "examples/trace.csv",
        "--events",
        "examples/events.csv",
        "--policy",
        "priority",
        "--json",
        json.to_str().unwrap(),
        "--workloads",
        csv.to_str().unwrap(),
        "--log",
        log.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("occupancy") && table.contains("Jain"), "{table}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["policy"], "priority");
    let n_workloads = report["workloads"].as_u64().unwrap();
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(
        rows.starts_with(
            "id,account,class,gpus,submit_s,first_start_s,end_s,queue_s,jct_s,preemptions,lost_gpu_s,status"
        )
    );
    assert_eq!(rows.lines().count() as u64, n_workloads + 1, "one row per workload");
    let trace_rows = std::fs::read_to_string(repo().join("examples/trace.csv")).unwrap().lines().count() as u64 - 1;
    assert_eq!(n_workloads, trace_rows, "nothing accepted is lost");
    let mut starts = 0;
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        for k in ["t", "event", "workload", "nodes", "gpus", "reason"] {
            assert!(e.get(k).is_some(), "log line without {k}: {line}");
        }
        starts += u64::from(e["event"] == "start");
    }
    assert!(starts >= n_workloads, "every workload started at least once");
    // Same inputs, byte-identical outputs.
    let json2 = dir.join("r2.json");
    let log2 = dir.join("e2.jsonl");
    let out = allot(&[
        "sim",
        "--config",
        "examples/cluster.toml",
        "--trace",
        "examples/trace.csv",
        "--events",
        "examples/events.csv",
        "--policy",
        "priority",
        "--json",
        json2.to_str().unwrap(),
        "--log",
        log2.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert_eq!(std::fs::read(&json).unwrap(), std::fs::read(&json2).unwrap());
    assert_eq!(std::fs::read(&log).unwrap(), std::fs::read(&log2).unwrap());
}

/// `--budget-report` in its three formats: the statement's raw GPU-hours
/// over every period and top-level account add up to the report's
/// assigned GPU-hours (conservation, BUD-3); CSV has a row per period and
/// account; an unknown extension is refused, naming the formats.
#[test]
fn budget_report_states_every_period() {
    let dir = tmpdir("budget-report");
    let run = |report: &Path, json: &Path| {
        let mut args = EXAMPLE.to_vec();
        args.extend(["--json", json.to_str().unwrap(), "--budget-report", report.to_str().unwrap()]);
        allot(&args)
    };
    let (json, csv, md, stats) = (dir.join("b.json"), dir.join("b.csv"), dir.join("b.md"), dir.join("r.json"));
    for f in [&json, &csv, &md] {
        let out = run(f, &stats);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let periods = s["periods"].as_array().unwrap();
    assert!(periods.len() >= 2, "the example spans several 7-day periods: {}", periods.len());
    let raw: f64 = periods
        .iter()
        .flat_map(|p| p["accounts"].as_array().unwrap().iter())
        .filter(|a| !a["account"].as_str().unwrap().contains('/'))
        .flat_map(|a| a["raw_gpu_hours"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).collect::<Vec<_>>())
        .sum();
    let assigned = r["metrics"]["assigned_gpu_hours"].as_f64().unwrap();
    assert!((raw - assigned).abs() < 1e-6 * assigned.max(1.0), "stated {raw} vs assigned {assigned}");
    let accounts = periods[0]["accounts"].as_array().unwrap().len();
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(rows.starts_with("period_start,period_end,account,budget_gpu_hours,"), "{rows}");
    assert_eq!(rows.lines().count(), periods.len() * accounts + 1);
    let text = std::fs::read_to_string(&md).unwrap();
    assert_eq!(text.matches("\n## ").count(), periods.len(), "a table per period");
    let out = run(&dir.join("b.txt"), &stats);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--budget-report") && err.contains(".csv"), "{err}");
}

/// A directory `name` holding [`CONFIG`] and a trace of `body` (rows after
/// the header): the directory (removed when dropped) and the two files'
/// paths.
fn inputs(name: &str, body: &str) -> (cli_support::TestDir, String, String) {
    let dir = tmpdir(name);
    let (cfg, trace) = (dir.join("c.toml"), dir.join("t.csv"));
    std::fs::write(&cfg, CONFIG).unwrap();
    std::fs::write(&trace, format!("{HEADER}{body}")).unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_string();
    (dir, path(&cfg), path(&trace))
}

/// Priority on a config without legacy pools refuses every workload
/// (PRIO-2): the run says so on stderr, naming the policy, the share and
/// the first reason with its rule id, besides its progress lines; the table
/// says which direction of each measure is better.
#[test]
fn a_policy_that_rejects_the_trace_is_warned_about() {
    let body = "w1,0,org/x,u,batch,4,0,,3600,0,1,normal,false\nw2,10,org/x,u,batch,8,0,,3600,0,1,normal,false\n";
    let (_dir, c, t) = inputs("warn", body);
    let (c, t) = (c.as_str(), t.as_str());
    let out = allot(&["sim", "--config", c, "--trace", t, "--policy", "priority,fifo"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    let warning = err.lines().find(|l| l.starts_with("warning: priority ")).unwrap_or_else(|| panic!("{err}"));
    assert!(warning.contains("rejected 2 of 2 workloads (100%)"), "{warning}");
    assert!(warning.contains("the first, w1: PRIO-2: 4 GPUs never fit the legacy pools of org/x"), "{warning}");
    assert!(!err.contains("warning: fifo"), "fifo ran both: {err}");
    // Not a terminal: plain progress lines, one when each run starts and ends.
    for p in ["priority", "fifo"] {
        assert!(err.contains(&format!("{p}: started, horizon ≥ 1h")), "{err}");
        assert!(err.lines().any(|l| l.starts_with(&format!("{p}: done in "))), "{err}");
    }
    assert!(!err.contains('\r'), "no bar drawn into a pipe: {err:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    for row in ["occupancy ↑", "all p95 ↓", "horizon —", "node failures —", "attempts killed by failures ↓"] {
        assert!(table.lines().any(|l| l.trim_start().starts_with(row)), "no row {row:?} in\n{table}");
    }
    assert!(table.contains("↑ higher is better, ↓ lower is better"), "{table}");
    let rejected = table.lines().find(|l| l.trim_start().starts_with("rejected workloads ↓")).unwrap();
    assert!(rejected.split_whitespace().rev().take(2).eq(["0", "2"]), "priority 2, fifo 0: {rejected}");
}

/// `node failures` counts the failures (a `fail` event on a node not
/// already down), `attempts killed by failures` the attempts they ended.
#[test]
fn failures_and_the_attempts_they_killed_are_counted_apart() {
    // Two 8-GPU workloads fill both nodes; a-0 fails twice (the second time
    // while down: no new failure) and a-1 once: two failures, and each kills
    // what runs on the node then.
    let body = "w1,0,org/x,u,batch,8,0,,7200,0,1,normal,false\nw2,0,org/x,u,batch,8,0,,600,0,1,normal,false\n";
    let (dir, c, t) = inputs("failures", body);
    let events = dir.join("e.csv");
    std::fs::write(&events, "t_s,node,event\n100,a-0,fail\n200,a-0,fail\n900,a-1,fail\n1000,a-0,repair\n").unwrap();
    let json = dir.join("r.json");
    let (e, j) = (events.to_str().unwrap(), json.to_str().unwrap());
    let out = allot(&["sim", "--config", &c, "--trace", &t, "--events", e, "--policy", "fifo", "--json", j]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["metrics"]["node_failures"], 2, "{}", r["metrics"]);
    let killed = r["metrics"]["failures"].as_u64().unwrap();
    assert!(killed >= 1, "the workload on a-0 was killed: {}", r["metrics"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let row = |label: &str| {
        let l = table.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_else(|| panic!("{label}"));
        l.split_whitespace().last().unwrap().to_string()
    };
    assert_eq!(row("node failures —"), "2");
    assert_eq!(row("attempts killed by failures ↓"), killed.to_string());
}

/// `allot sim --help` and `allot compare --help` name every policy there is.
#[test]
fn help_names_every_policy() {
    for cmd in ["sim", "compare"] {
        let o = allot(&[cmd, "--help"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let help = String::from_utf8_lossy(&o.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
        // The option's own text: from its name to the next option.
        let from = help.find("--polic").expect("a policy option");
        let rest = &help[from + 2..];
        let text = &rest[..rest.find(" --").unwrap_or(rest.len())];
        let words: Vec<&str> = text.split([' ', ',', '.', ':']).collect();
        for kind in allot_core::PolicyKind::ALL {
            let name = kind.as_str();
            let listed = words.contains(&name);
            assert!(listed, "allot {cmd} --help does not name the policy {name}: {text}");
        }
    }
}
