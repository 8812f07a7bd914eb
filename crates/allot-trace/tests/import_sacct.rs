//! `sacct` and `swf` importers and the Slurm shape and account tree, on
//! hand-made fixtures in Slurm 22.05's exact output formats
//! (`tests/fixtures/sacct/`), one case per pitfall of docs/importers.md.

mod import_support;

use std::path::PathBuf;

use allot_trace::import::{Adjustment, Format, ImportError, ImportOptions, ProjectBy, SkipReason, import};
use import_support::{check_config, trace_text};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sacct").join(name)
}

const HEADER: &str = "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible,\
                      time_limit_s,array,array_index,array_limit,billing\n";

#[test]
fn epoch_pull_every_state_and_pitfall() {
    let got = import(Format::Sacct, &fixture("epoch.txt"), &ImportOptions::default()).unwrap();
    let want = String::from(HEADER)
        // The last column is AllocTRES's billing=8 (8 CPUs) of every job.
        // Typed TRES: h100 is dropped, since the written pools (from demand) are of model GPU.
        + "100,0,slurm/physics/jobs,alice,batch,2,1,,3600,3600,0.5,normal,false,7200,,,,8\n"
        // CANCELLED by 1002 after 600 s: it ran 600 s.
        + "104,40,slurm/physics/jobs,bob,batch,1,1,,600,3600,0.5,normal,false,3600,,,,8\n"
        // TIMEOUT: work is the limit hit (or the elapsed time past it).
        + "105,50,slurm/bio/jobs,carol,batch,8,1,,3605,3600,0.5,normal,false,3600,,,,8\n"
        // Requeued: submitted at the first record, work of the final attempt.
        + "106,200,slurm/bio/jobs,carol,batch,8,1,,2000,3600,0.5,normal,false,7200,,,,8\n"
        // Preempted, then completed.
        + "107,250,slurm/chem/jobs,dave,batch,4,1,,1000,3600,0.5,normal,false,7200,,,,8\n"
        + "110_1,300,slurm/physics/jobs,alice,batch,1,1,,600,3600,0.5,normal,false,1800,110,1,,8\n"
        + "110_2,300,slurm/physics/jobs,alice,batch,1,1,,60,3600,0.5,normal,false,1800,110,2,,8\n"
        // NODE_FAIL: the time it held its nodes; Partition_Limit: no limit.
        + "120,400,slurm/chem/jobs,dave,batch,16,2,,500,3600,0.5,normal,false,,,,,8\n"
        + "121,420,slurm/chem/jobs,dave,batch,2,1,,50,3600,0.5,normal,false,,,,,8\n"
        // Submitted at Eligible (a dependency held it 490 s after Submit).
        + "140,500,slurm/physics/jobs,alice,batch,2,1,,100,3600,0.5,normal,false,,,,,8\n";
    assert_eq!(trace_text(&got.rows), want);
    let s = &got.summary;
    assert_eq!((s.rows_read, s.imported, s.skipped_total()), (23, 10, 11));
    let skips = [
        (SkipReason::ZeroGpus, 1),
        (SkipReason::JobStep, 1),
        (SkipReason::CancelledBeforeStart, 2),
        (SkipReason::ArrayNeverStarted, 1),
        (SkipReason::NoEndTime, 1),
        (SkipReason::NeverStarted, 1),
        (SkipReason::Heterogeneous, 2),
        (SkipReason::BadDate, 1),
        (SkipReason::Malformed, 1),
    ];
    for (reason, n) in skips {
        assert_eq!(s.skips(reason), n, "{reason:?}");
    }
    assert_eq!(s.adjustments(Adjustment::AttemptsMerged), 2);
    assert_eq!(s.adjustments(Adjustment::GpuTypeDropped), 1);
    let states: Vec<(&str, u64)> = s.statuses.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        states,
        [("CANCELLED", 1), ("COMPLETED", 5), ("FAILED", 1), ("NODE_FAIL", 1), ("OUT_OF_MEMORY", 1), ("TIMEOUT", 1)]
    );
    // 106: 8 GPUs x 1000 s, 107: 4 GPUs x 200 s before the requeue.
    assert!(
        s.notes
            .iter()
            .any(|n| n.starts_with("2 requeued or preempted jobs: 2 earlier attempts") && n.contains("2.4 GPU-hours")),
        "{:?}",
        s.notes
    );
    check_config(&got.config, &got.rows);
}

#[test]
fn iso_local_times_in_a_zone_with_columns_in_another_order() {
    let mut opts = ImportOptions { time_zone: Some("America/Denver".into()), ..Default::default() };
    let got = import(Format::Sacct, &fixture("iso_denver.txt"), &opts).unwrap();
    // Eligible=None (201): submitted at Submit; UNLIMITED: no limit.
    // Billing: AllocTRES's billing=4.
    let want = "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible,\
                time_limit_s,billing\n\
                200,0,slurm/physics/jobs,alice,batch,1,1,,3600,3600,0.5,normal,false,5400,4\n\
                201,1800,slurm/physics/jobs,bob,batch,4,1,,600,3600,0.5,normal,false,,4\n";
    assert_eq!(trace_text(&got.rows), want);
    assert_eq!(got.summary.skips(SkipReason::NeverStarted), 1, "202 failed before it started (Start=Unknown)");
    assert!(got.summary.notes.iter().any(|n| n == "times without an offset read in America/Denver"));
    opts.time_zone = Some("Mars/Olympus".into());
    let err = import(Format::Sacct, &fixture("iso_denver.txt"), &opts).unwrap_err();
    assert!(matches!(err, ImportError::BadOption(_)), "{err}");
    assert!(err.to_string().contains("Mars/Olympus"), "{err}");
}

#[test]
fn billing_reaches_the_trace_and_a_bad_one_is_a_counted_skip() {
    // epoch.txt bills 8 CPUs for job 100: the trace's billing column says so.
    let got = import(Format::Sacct, &fixture("epoch.txt"), &ImportOptions::default()).unwrap();
    let billing = |rows: &[allot_trace::write::TraceRow], id: &str| rows.iter().find(|r| r.id == id).unwrap().billing;
    assert_eq!(billing(&got.rows, "100"), Some(8));
    // A billing that is not a whole number: that record is skipped and counted, the rest imported.
    let text = std::fs::read_to_string(fixture("epoch.txt")).unwrap();
    let first = text.lines().nth(1).unwrap();
    assert!(first.starts_with("100|100|") && first.matches("billing=8,").count() == 2, "{first}");
    let bad = text.replacen(first, &first.replace("billing=8,", "billing=8.5,"), 1);
    let dir = std::env::temp_dir().join(format!("allot-sacct-billing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("epoch.txt");
    std::fs::write(&path, bad).unwrap();
    let again = import(Format::Sacct, &path, &ImportOptions::default()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(again.summary.skips(SkipReason::BadBilling), 1);
    assert_eq!(again.summary.imported, got.summary.imported - 1);
    assert!(again.rows.iter().all(|r| r.id != "100"));
    assert!(again.summary.to_string().contains("unparsable billing TRES"), "{}", again.summary);
}

#[test]
fn overlapping_chunks_are_deduplicated() {
    let got = import(Format::Sacct, &fixture("chunks.txt"), &ImportOptions::default()).unwrap();
    let ids: Vec<(&str, u64)> = got.rows.iter().map(|r| (r.id.as_str(), r.work_s)).collect();
    // 122 was running in the first chunk and is complete in the second: the finished record is kept.
    assert_eq!(ids, [("100", 3600), ("122", 1000), ("160", 100)]);
    let s = &got.summary;
    assert_eq!((s.rows_read, s.imported, s.skips(SkipReason::Duplicate), s.skipped_total()), (5, 3, 2, 2));
}

#[test]
fn missing_column_names_file_line_and_column() {
    let path = fixture("missing_column.txt");
    let err = import(Format::Sacct, &path, &ImportOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("{}:1: column \"ElapsedRaw\": missing required column", path.display())), "{msg}");
}

#[test]
fn slurm_nodes_and_associations_shape_the_config() {
    let mut opts = ImportOptions { slurm_assoc: Some(fixture("assoc.txt")), ..Default::default() };
    opts.sizing.slurm_nodes = Some(fixture("nodes.txt"));
    let got = import(Format::Sacct, &fixture("epoch.txt"), &opts).unwrap();
    let pools: Vec<(&str, &str, u32, u32, bool)> = got
        .config
        .pools
        .iter()
        .map(|p| (p.name.as_str(), p.gpu.as_str(), p.nodes, p.gpus_per_node, p.shared))
        .collect();
    assert_eq!(
        pools,
        [("gpu_gpu", "GPU", 1, 4, true), ("gpu_a100", "a100", 1, 4, true), ("gpu.long_h100", "h100", 2, 8, true)]
    );
    // The typed request keeps its type: the cluster has h100 nodes.
    assert_eq!(got.rows[0].gpu_type, "h100");
    let accounts: Vec<(&str, Option<f64>, Option<f64>)> =
        got.config.accounts.iter().map(|a| (a.path.as_str(), a.share, a.budget_gpu_hours)).collect();
    let paths: Vec<&str> = accounts.iter().map(|a| a.0).collect();
    assert_eq!(
        paths,
        [
            "slurm",
            "slurm/chem",
            "slurm/chem/jobs",
            "slurm/ops",
            "slurm/science",
            "slurm/science/bio",
            "slurm/science/bio/jobs",
            "slurm/science/physics",
            "slurm/science/physics/jobs",
        ]
    );
    let share = |p: &str| accounts.iter().find(|a| a.0 == p).unwrap().1;
    assert_eq!(
        [share("slurm/science"), share("slurm/science/physics"), share("slurm/science/bio")],
        [Some(10.0), Some(3.0), Some(1.0)]
    );
    assert_eq!(share("slurm/ops"), None, "Share=parent: the default share");
    // Slurm's root/root association: a user of the root account, ranked
    // beside the top accounts by Fair Tree.
    let top = got.config.accounts.iter().find(|a| a.path == "slurm").unwrap();
    assert_eq!(top.users.iter().map(|(u, s)| (u.as_str(), *s)).collect::<Vec<_>>(), [("root", 1.0)]);
    let jobs = got.config.accounts.iter().find(|a| a.path == "slurm/science/physics/jobs").unwrap();
    assert_eq!(jobs.users.iter().map(|(u, s)| (u.as_str(), *s)).collect::<Vec<_>>(), [("alice", 2.0)]);
    assert!(got.config.accounts.iter().all(|a| a.legacy_pools.is_none()));
    assert!(got.rows.iter().any(|r| r.account == "slurm/science/physics/jobs"));
    assert!(got.summary.notes.iter().any(|n| n.contains("kept under slurm: chem")), "{:?}", got.summary.notes);
    assert!(got.summary.notes.iter().any(|n| n == "1 nodes without GPUs left out"), "{:?}", got.summary.notes);
    assert!(got.summary.notes.iter().any(|n| n == "1 GPU nodes in no partition left out"), "{:?}", got.summary.notes);
    check_config(&got.config, &got.rows);
}

#[test]
fn association_tree_form_and_user_projects() {
    let opts = ImportOptions {
        slurm_assoc: Some(fixture("assoc_tree.txt")),
        project_by: ProjectBy::User,
        ..Default::default()
    };
    let got = import(Format::Sacct, &fixture("epoch.txt"), &opts).unwrap();
    let find = |p: &str| got.config.accounts.iter().find(|a| a.path == p).unwrap_or_else(|| panic!("{p}"));
    assert_eq!(find("slurm/science/physics").share, Some(3.0));
    assert_eq!(find("slurm/science/physics/alice").share, Some(2.0));
    assert_eq!(find("slurm/science/physics/bob").share, None);
    assert_eq!(find("slurm/science/bio/carol").share, None);
    check_config(&got.config, &got.rows);
}

#[test]
fn bad_share_names_file_line_and_column() {
    let path = fixture("assoc_bad_share.txt");
    let opts = ImportOptions { slurm_assoc: Some(path.clone()), ..Default::default() };
    let err = import(Format::Sacct, &fixture("epoch.txt"), &opts).unwrap_err().to_string();
    assert!(err.starts_with(&format!("{}:3: column \"Share\": share must be", path.display())), "{err}");
}

#[test]
fn swf_processors_become_gpus() {
    let opts = ImportOptions { procs_per_gpu: Some(4), ..Default::default() };
    let got = import(Format::Swf, &fixture("small.swf"), &opts).unwrap();
    let want = "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible,time_limit_s\n\
                1,0,swf/g2/jobs,u3,batch,4,1,,3600,3600,0.5,normal,false,7200\n\
                2,60,swf/g2/jobs,u4,batch,2,1,,120,3600,0.5,normal,false,600\n\
                4,130,swf/nogroup/jobs,u5,batch,2,1,,900,3600,0.5,normal,false,3600\n";
    assert_eq!(trace_text(&got.rows), want);
    let s = &got.summary;
    assert_eq!((s.rows_read, s.imported), (7, 3));
    for reason in
        [SkipReason::CancelledBeforeStart, SkipReason::PartialExecution, SkipReason::Malformed, SkipReason::ZeroGpus]
    {
        assert_eq!(s.skips(reason), 1, "{reason:?}");
    }
    assert_eq!(s.adjustments(Adjustment::ProcsRoundedUp), 1);
    check_config(&got.config, &got.rows);
    let bad = ImportOptions { procs_per_gpu: Some(4), ..Default::default() };
    assert!(matches!(import(Format::Sacct, &fixture("epoch.txt"), &bad), Err(ImportError::BadOption(_))));
}
