//! `helios` (cluster_log.csv) importer on a small fixture with bad rows.

mod import_support;

use allot_trace::import::{Adjustment, Format, ImportOptions, SkipReason, import};
use import_support::{check_config, fixture, trace_text};

#[test]
fn imports_exact_rows_and_counts_skips() {
    let got = import(Format::Helios, &fixture("helios_cluster_log.csv"), &ImportOptions::default()).unwrap();
    assert_eq!(
        trace_text(&got.rows),
        "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible\n\
         j1,0,helios/vcA/jobs,u1,batch,8,1,,3600,3600,0.5,normal,false\n\
         j5,351,helios/vcB/jobs,u4,batch,4,1,,600,3600,0.5,normal,false\n\
         j8,531,helios/vcC/jobs,u5,batch,3,1,,1,3600,0.5,normal,false\n\
         j2,591,helios/vcA/jobs,u2,batch,16,2,,600,3600,0.5,normal,false\n\
         j9,1191,helios/vcC/jobs,u5,batch,12,0,,100,3600,0.5,normal,false\n"
    );
    let s = &got.summary;
    assert_eq!((s.rows_read, s.imported, s.skipped_total()), (10, 5, 5));
    for reason in [
        SkipReason::MissingTeam,
        SkipReason::ZeroGpus,
        SkipReason::BadDate,
        SkipReason::NegativeDuration,
        SkipReason::NeverStarted,
    ] {
        assert_eq!(s.skips(reason), 1, "{reason:?}");
    }
    assert_eq!(s.adjustments(Adjustment::ZeroWorkRaised), 1);
    // j9: 12 GPUs on 2 nodes in the source; 12 is not a multiple of 8, so any packing.
    assert_eq!(s.adjustments(Adjustment::NodesRepacked), 1);
    check_config(&got.config, &got.rows);
    let nodes: Vec<u32> = got.config.pools.iter().map(|p| p.nodes).collect();
    // Peaks: vcA 8 + 16 overlapping = 24 GPUs, vcB 4, vcC 12.
    assert_eq!(nodes, vec![3, 1, 2]);
}

#[test]
fn legacy_sizes_file_sets_team_pools() {
    let mut opts = ImportOptions::default();
    opts.sizing.legacy_sizes = Some(fixture("helios_vc_gpus.csv"));
    let got = import(Format::Helios, &fixture("helios_cluster_log.csv"), &opts).unwrap();
    check_config(&got.config, &got.rows);
    let pools: Vec<(&str, u32)> = got.config.pools.iter().map(|p| (p.name.as_str(), p.nodes)).collect();
    // The day with the largest total has vcA 40 and vcB 8; vcC is not listed
    // and keeps its peak (12 GPUs -> 2 nodes).
    assert_eq!(pools, vec![("vcA_gpu", 5), ("vcB_gpu", 1), ("vcC_gpu", 2)]);
    assert!(got.summary.notes.iter().any(|n| n.contains("vcC")), "{:?}", got.summary.notes);
}

#[test]
fn legacy_sizes_file_in_long_form() {
    let dir = std::env::temp_dir().join(format!("allot-import-sizes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sizes.csv");
    std::fs::write(&path, "vc,gpus\nvcA,17\nvcB,0\nvcC,64\n").unwrap();
    let mut opts = ImportOptions::default();
    opts.sizing.legacy_sizes = Some(path);
    let got = import(Format::Helios, &fixture("helios_cluster_log.csv"), &opts).unwrap();
    let pools: Vec<(&str, u32)> = got.config.pools.iter().map(|p| (p.name.as_str(), p.nodes)).collect();
    // 17 GPUs round up to 3 nodes; 0 still gets the node its 4-GPU job needs.
    assert_eq!(pools, vec![("vcA_gpu", 3), ("vcB_gpu", 1), ("vcC_gpu", 8)]);
    check_config(&got.config, &got.rows);
    std::fs::remove_dir_all(&dir).unwrap();
}
