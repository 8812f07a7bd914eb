//! `allot compare --vary` through the real binary: what-if sweeps over
//! budgets and the contract, one run per value beside the config as given,
//! and clear errors before anything runs.

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
    let d = std::env::temp_dir().join(format!("allot-vary-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn summary(dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    serde_json::from_str::<Value>(&text).unwrap().as_array().unwrap().clone()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The example with org/llm's budget as configured and 50% higher: the
/// varied run sees the new budget, the base run is exactly a plain run,
/// and the budget changes decisions.
#[test]
fn a_budget_sweep_runs_beside_the_config_as_given() {
    let (plain, varied) = (tmpdir("plain"), tmpdir("budget"));
    let base = ["compare", "--config", "examples/cluster.toml", "--trace", "examples/trace.csv", "--until", "4d"];
    let run = |out: &Path, extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(["--policies", "allot", "--out", out.to_str().unwrap()]);
        args.extend(extra);
        allot(&args)
    };
    ok(&run(&plain, &[]));
    let o = run(&varied, &["--vary", "budget:org/llm=+50%,12000"]);
    ok(&o);
    let runs = summary(&varied);
    let names: Vec<&str> = runs.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(names, ["allot [base]", "allot [budget:org/llm=+50%]", "allot [budget:org/llm=12000]"]);
    let budget = |r: &Value| r["accounts"]["org/llm"]["budget_gpu_hours"].as_f64();
    assert_eq!(runs.iter().map(budget).collect::<Vec<_>>(), [Some(24000.0), Some(36000.0), Some(12000.0)]);
    let mut alone = summary(&plain).remove(0);
    let mut first = runs[0].clone();
    alone["policy"] = Value::Null;
    first["policy"] = Value::Null;
    assert_eq!(alone, first, "the base column is the config as given");
    assert_ne!(runs[0]["metrics"], runs[2]["metrics"], "a third of the budget changes what happens");
    let md = std::fs::read_to_string(varied.join("summary.md")).unwrap();
    assert!(md.contains("variations: base; budget:org/llm=+50%; budget:org/llm=12000"), "{md}");
    let _ = std::fs::remove_dir_all(&plain);
    let _ = std::fs::remove_dir_all(&varied);
}

/// A contract sweep over seeds: every combination per policy, each with
/// the mean over the seeds.
#[test]
fn a_contract_sweep_over_seeds() {
    let out = tmpdir("contract");
    let o = allot(&[
        "compare",
        "--scenario",
        "ai2",
        "--gpus",
        "88",
        "--days",
        "2",
        "--seeds",
        "2",
        "--policies",
        "allot",
        "--vary",
        "contract.min_slice.batch=30m,4h",
        "--vary",
        "contract.usage_half_life=1d",
        "--out",
        out.to_str().unwrap(),
    ]);
    ok(&o);
    let runs = summary(&out);
    let names: Vec<&str> = runs.iter().map(|r| r["policy"].as_str().unwrap_or_default()).collect();
    assert_eq!(
        names,
        [
            "allot [base]",
            "allot [contract.min_slice.batch=30m, contract.usage_half_life=1d]",
            "allot [contract.min_slice.batch=4h, contract.usage_half_life=1d]",
        ],
        "{runs:?}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_sweeps_are_refused_before_anything_runs() {
    let out = tmpdir("bad");
    let cases: [(&str, &str); 5] = [
        ("budget:org/nope=+10%", "declared: org, org/llm, org/llm/pretrain"),
        ("budget:org=+10%", "no budget_gpu_hours of its own"),
        ("quota:org/llm=1", "unknown key"),
        ("contract.min_slice.lunch=1h", "lunch"),
        ("budget:org/llm=-100%", "the varied config is not valid"),
    ];
    for (vary, expect) in cases {
        let o = allot(&[
            "compare",
            "--config",
            "examples/cluster.toml",
            "--trace",
            "examples/trace.csv",
            "--vary",
            vary,
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{vary}: accepted");
        assert!(err.contains(expect) && err.contains(vary.split('=').next().unwrap()), "{vary}: {err}");
        assert!(!out.exists(), "{vary}: nothing is written");
    }
}

/// Budgets changed during the replay (`--account-changes`, the file
/// `allot trace export` writes): in force from their time; a relative sweep
/// scales them, an absolute one holds for the whole run.
#[test]
fn account_changes_replay_and_sweeps_adjust_them() {
    let dir = tmpdir("changes");
    std::fs::create_dir_all(&dir).unwrap();
    let changes = dir.join("trace.accounts.csv");
    std::fs::write(&changes, "t_s,account,field,value\n86400,org/llm,budget_gpu_hours,1000\n").unwrap();
    let out = dir.join("out");
    let o = allot(&[
        "compare",
        "--config",
        "examples/cluster.toml",
        "--trace",
        "examples/trace.csv",
        "--until",
        "4d",
        "--policies",
        "allot",
        "--account-changes",
        changes.to_str().unwrap(),
        "--vary",
        "budget:org/llm=+50%,12000",
        "--out",
        out.to_str().unwrap(),
    ]);
    ok(&o);
    let runs = summary(&out);
    let budget = |r: &Value| r["accounts"]["org/llm"]["budget_gpu_hours"].as_f64();
    assert_eq!(runs.iter().map(budget).collect::<Vec<_>>(), [Some(1000.0), Some(1500.0), Some(12000.0)]);
    let plain = dir.join("plain");
    let p = allot(&[
        "compare",
        "--config",
        "examples/cluster.toml",
        "--trace",
        "examples/trace.csv",
        "--until",
        "4d",
        "--policies",
        "allot",
        "--out",
        plain.to_str().unwrap(),
    ]);
    ok(&p);
    assert_ne!(summary(&plain)[0]["metrics"], runs[0]["metrics"], "a budget cut after a day changes what happens");
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("account changes: ") && md.contains("(1 changes)"), "{md}");

    std::fs::write(&changes, "t_s,account,field,value\n10,org/llm,budget_gpu_hours,lots\n").unwrap();
    let o = allot(&[
        "sim",
        "--config",
        "examples/cluster.toml",
        "--trace",
        "examples/trace.csv",
        "--account-changes",
        changes.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("trace.accounts.csv:2") && err.contains("value"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
