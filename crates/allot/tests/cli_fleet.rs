//! `allot compare` on a fleet through the real binary: the `ai2-fleet`
//! scenario under the legacy baseline, Slurm with one controller per
//! cluster, split budgets and the fleet-wide ledger, with per-cluster
//! measures in every output.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

mod cli_support;
use cli_support::tmpdir;

fn allot(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_allot")).args(args).current_dir(dir).output().expect("run allot")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn compare_runs_the_fleet_under_priority_slurm_split_allot_split_and_fleet_wide_allot() {
    let dir = tmpdir("compare");
    let out = dir.join("out");
    let o = allot(
        &[
            "compare",
            "--scenario",
            "ai2-fleet",
            "--gpus",
            "440",
            "--days",
            "2",
            "--until",
            "3d",
            "--policies",
            "priority,slurm-split,allot-split,allot",
            "--out",
            out.to_str().unwrap(),
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json: Value = serde_json::from_str(&read(&out.join("summary.json"))).expect("summary.json");
    let reports = json.as_array().expect("one report per policy");
    let policies: Vec<&str> = reports.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, ["priority", "slurm-split", "allot-split", "allot"]);
    for r in reports {
        // Every workload has exactly one outcome.
        let m = &r["metrics"];
        let outcomes: u64 = ["completed", "failed", "cancelled", "idle_reclaimed", "rejected", "unfinished"]
            .iter()
            .map(|o| m[format!("{o}_workloads")].as_u64().unwrap_or_else(|| panic!("{o}: {m}")))
            .sum();
        assert_eq!(outcomes, r["workloads"].as_u64().unwrap(), "{}", r["policy"]);
        let clusters = r["clusters"].as_object().expect("per-cluster measures");
        assert_eq!(clusters.len(), 5, "{}", r["policy"]);
        let assigned: f64 = clusters.values().map(|c| c["assigned_gpu_hours"].as_f64().unwrap()).sum();
        let fleet = r["metrics"]["assigned_gpu_hours"].as_f64().unwrap();
        assert!((assigned - fleet).abs() < 1e-6 * fleet.max(1.0), "{}: {assigned} vs {fleet}", r["policy"]);
        // The split run is reported under the original accounts.
        let accounts: Vec<&String> = r["accounts"].as_object().unwrap().keys().collect();
        assert!(accounts.iter().all(|a| a.starts_with("ai2")), "{}: {accounts:?}", r["policy"]);
    }
    // One Slurm per cluster: no preemption, no idle reclaim (a baseline's
    // by default), work on every cluster.
    let slurm = &reports[1];
    assert_eq!(slurm["metrics"]["preemptions"].as_u64(), Some(0), "{slurm}");
    assert_eq!(slurm["metrics"]["idle_reclaimed_workloads"].as_u64(), Some(0));
    for (name, c) in slurm["clusters"].as_object().unwrap() {
        assert!(c["assigned_gpu_hours"].as_f64().unwrap() > 0.0, "slurm-split ran nothing on {name}");
    }
    let split = &reports[2]["accounts"];
    let entitled: f64 = ["olmo", "molmo", "tulu", "prior", "agents", "s2", "climate", "playground"]
        .iter()
        .map(|t| split[format!("ai2/{t}")]["entitled_share"].as_f64().unwrap())
        .sum();
    assert!((entitled - 1.0).abs() < 1e-9, "teams' entitled shares sum to {entitled}");
    let md = read(&out.join("summary.md"));
    assert!(md.contains("cluster jupiter (") && md.contains("cluster ceres (88 GPUs)"), "{md}");
    let html = read(&out.join("report.html"));
    assert!(html.contains("cluster ceres (88 GPUs)"));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("allot-split") && stdout.contains("slurm-split"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unknown_variant_lists_the_split_forms() {
    let dir = tmpdir("unknown");
    let o = allot(&["compare", "--scenario", "ai2-fleet", "--policies", "allot,split", "--out", "x"], &dir);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown policy \"split\"") && err.contains("allot-split, slurm-split"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fleet with a Kubernetes member replays like any fleet: the
/// simulator reads the same config `allot serve` runs (executors matter
/// only to the server), and the Kubernetes cluster has its own measures.
#[test]
fn sim_replays_a_fleet_with_a_kubernetes_cluster() {
    let dir = tmpdir("kubernetes");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let json = dir.join("report.json");
    let o = allot(
        &[
            "sim",
            "--config",
            repo.join("examples/fleet-kubernetes.toml").to_str().unwrap(),
            "--trace",
            repo.join("examples/trace.csv").to_str().unwrap(),
            "--policy",
            "allot",
            "--json",
            json.to_str().unwrap(),
        ],
        &dir,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_str(&read(&json)).expect("report");
    let k8s = &r["clusters"]["k8s"];
    assert!(k8s["assigned_gpu_hours"].as_f64().unwrap() > 0.0, "the Kubernetes cluster runs work: {k8s}");
    assert!(r["clusters"]["slurm"]["assigned_gpu_hours"].as_f64().unwrap() > 0.0);
}
