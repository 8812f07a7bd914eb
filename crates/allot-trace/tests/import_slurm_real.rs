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
