//! The `sacct` importer and the Slurm shape and tree on the real outputs of
//! a known trace (`tests/fixtures/slurm-real/`, made by
//! `.ci/slurm-roundtrip.sh` on Slurm 22.05 with slurmdbd): every job the
//! script submitted is accounted for, imported or skipped for its reason.

mod import_support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use allot_trace::import::{Format, ImportOptions, SkipReason, import};
use import_support::check_config;

fn real(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm-real").join(name)
}

/// `submitted.tsv`: job name → Slurm job id.
fn submitted() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(real("submitted.tsv")).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| l.split('\t').next().zip(l.split('\t').nth(1)))
        .map(|(n, id)| (n.into(), id.into()))
        .collect()
}

fn options() -> ImportOptions {
    let mut o = ImportOptions { slurm_assoc: Some(real("sacctmgr-assoc-tree.txt")), ..ImportOptions::default() };
    o.sizing.slurm_nodes = Some(real("scontrol-show-nodes.txt"));
    o
}

#[test]
fn a_real_pull_imports_every_job_on_the_real_shape_and_tree() {
    let got = import(Format::Sacct, &real("sacct-epoch.txt"), &options()).unwrap();
    check_config(&got.config, &got.rows);
    let ids: BTreeMap<&str, &allot_trace::write::TraceRow> = got.rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let jobs = submitted();
    // Every plain job that ran is imported under its Slurm id, with its limit.
    for (name, id) in &jobs {
        if name.starts_with("rt-") && name[3..].chars().all(|c| c.is_ascii_digit()) {
            let r = ids.get(id.as_str()).unwrap_or_else(|| panic!("{name} (job {id}) imported"));
            assert!(r.time_limit_s.is_some_and(|l| l >= 60), "{name}: a time limit in seconds: {r:?}");
            assert!(r.account.starts_with("slurm/"), "{r:?}");
        }
    }
    // The requeued job is one workload; the timed-out one runs to its limit.
    let requeue = ids[jobs["rt-requeue"].as_str()];
    assert_eq!(got.rows.iter().filter(|r| r.id == requeue.id).count(), 1);
    let timeout = ids[jobs["rt-timeout"].as_str()];
    assert!(timeout.work_s >= timeout.time_limit_s.unwrap(), "{timeout:?}");
    // The array's elements are grouped under its id.
    let elements: Vec<_> = got.rows.iter().filter(|r| r.array == jobs["rt-array"]).collect();
    assert_eq!(elements.len(), 6, "the array's 6 elements");
    // The real shape: node1's 4 h100 and node2's 4 a100.
    let mut types: Vec<(&str, u64)> = got.config.pools.iter().map(|p| (p.gpu.as_str(), p.gpus())).collect();
    types.sort();
    assert_eq!(types, [("a100", 4), ("h100", 4)]);
    // The tree and its shares: teamA 3, teamB 1 (sacctmgr lower-cases names).
    let share = |p: &str| got.config.accounts.iter().find(|a| a.path == p).and_then(|a| a.share);
    assert_eq!((share("slurm/org/teama"), share("slurm/org/teamb")), (Some(3.0), Some(1.0)));
    // Nothing is lost: the job cancelled before it started is counted.
    let s = &got.summary;
    assert_eq!(s.imported as usize, got.rows.len());
    assert!(s.skips(SkipReason::CancelledBeforeStart) + s.skips(SkipReason::NeverStarted) <= 1, "{s}");
}

#[test]
fn iso_local_times_in_a_zone_give_the_same_rows_as_epoch_seconds() {
    let epoch = import(Format::Sacct, &real("sacct-epoch.txt"), &options()).unwrap();
    let o = ImportOptions { time_zone: Some("Europe/Berlin".into()), ..options() };
    let iso = import(Format::Sacct, &real("sacct-iso-berlin.txt"), &o).unwrap();
    assert_eq!(iso.rows, epoch.rows);
}

#[test]
fn the_real_qos_table_labels_every_job_and_gives_the_qos_factor() {
    let o = ImportOptions {
        slurm_qos: Some(real("sacctmgr-qos.txt")),
        slurm_config: Some(real("scontrol-show-config.txt")),
        ..options()
    };
    let got = import(Format::Sacct, &real("sacct-epoch.txt"), &o).unwrap();
    // sacct's QOS column: high → high; normal and low (both priority 0) → normal.
    let text = std::fs::read_to_string(real("sacct-epoch.txt")).unwrap();
    let qos: BTreeMap<&str, &str> =
        text.lines().skip(1).map(|l| (l.split('|').nth(1).unwrap(), l.split('|').nth(7).unwrap())).collect();
    for r in &got.rows {
        let want = if qos[r.id.as_str()] == "high" { allot_core::Priority::High } else { allot_core::Priority::Normal };
        assert_eq!(r.priority, want, "{}", r.id);
    }
    // The written config gives the policy Slurm's QOS factor: 100 / 100 for high.
    let p = allot_trace::config::config_from(&got.config, "mem").unwrap().contract.slurm;
    assert_eq!((p.qos_priority, p.qos_priority_max, p.weight_qos), ([0, 0, 100, 0], Some(100), 5000));
    let s = got.summary.to_string();
    assert!(s.contains("QOS as priority labels: normal = 0 (low, normal); high = 100 (high)"), "{s}");
    assert!(s.contains("UsageFactor not modelled") && s.contains("low 0.5"), "{s}");
    // Billed by CPU (no TRESBillingWeights): every job but the 1-GPU ones on one node.
    let one_gpu = got.rows.iter().filter(|r| r.gpus == 1).count();
    let note = format!("{} of 47 jobs were billed other than by their GPUs", 47 - one_gpu);
    assert!(s.contains(&note), "{note}: {s}");
    // The trace carries the billing (SLURM-2): one CPU per node Slurm
    // allocated (NNodes; job 26 was repacked onto one node by the import).
    let nnodes: BTreeMap<&str, u64> = text
        .lines()
        .skip(1)
        .map(|l| (l.split('|').nth(1).unwrap(), l.split('|').nth(22).unwrap().parse().unwrap()))
        .collect();
    for r in &got.rows {
        assert_eq!(r.billing, Some(nnodes[r.id.as_str()]), "{}", r.id);
    }
    // A QOS the table does not list keeps the default label, counted.
    let dir = std::env::temp_dir().join(format!("allot-real-qos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let only_high = dir.join("qos.txt");
    std::fs::write(&only_high, "Name|Priority\nhigh|100\n").unwrap();
    let got =
        import(Format::Sacct, &real("sacct-epoch.txt"), &ImportOptions { slurm_qos: Some(only_high), ..o }).unwrap();
    let s = got.summary.to_string();
    assert!(s.contains("jobs with a QOS not in the QOS file kept the default label: low 5, normal"), "{s}");
    std::fs::remove_dir_all(&dir).unwrap();
}
