//! `philly-pollux` importer on a small fixture with bad rows.

mod import_support;

use allot_trace::import::{Adjustment, Format, ImportOptions, SkipReason, import};
use import_support::{check_config, fixture, trace_text};

#[test]
fn imports_exact_rows_and_counts_skips() {
    let got = import(Format::PhillyPollux, &fixture("philly_pollux.csv"), &ImportOptions::default()).unwrap();
    assert_eq!(
        trace_text(&got.rows),
        "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible\n\
         pollux-2,0,philly/vcB/jobs,vcB,batch,4,1,,2951,3600,0.5,normal,false\n\
         pollux-1,2932,philly/vcA/jobs,vcA,batch,1,1,,66,3600,0.5,normal,false\n\
         pollux-6,8217,philly/vcB/jobs,vcB,batch,16,2,,1,3600,0.5,normal,false\n\
         pollux-9,11217,philly/vc_C/jobs,vc C,batch,12,0,,12,3600,0.5,normal,false\n"
    );
    let s = &got.summary;
    assert_eq!((s.rows_read, s.imported, s.skipped_total()), (10, 4, 6));
    let skips = [
        (SkipReason::Malformed, 1),
        (SkipReason::MissingTeam, 1),
        (SkipReason::ZeroGpus, 1),
        (SkipReason::BadDate, 1),
        (SkipReason::BadDuration, 1),
        (SkipReason::NegativeDuration, 1),
    ];
    for (reason, n) in skips {
        assert_eq!(s.skips(reason), n, "{reason:?}");
    }
    assert_eq!(s.adjustments(Adjustment::ZeroWorkRaised), 1);
    assert_eq!(s.adjustments(Adjustment::NameSanitized), 1);
    let text = s.to_string();
    assert!(text.contains("10 rows read, 4 imported, 6 skipped"), "{text}");
    assert!(text.contains("zero GPUs"), "{text}");
}

#[test]
fn config_has_a_pool_per_team_sized_from_peak_demand() {
    let got = import(Format::PhillyPollux, &fixture("philly_pollux.csv"), &ImportOptions::default()).unwrap();
    check_config(&got.config, &got.rows);
    let pools: Vec<(&str, u32)> = got.config.pools.iter().map(|p| (p.name.as_str(), p.nodes)).collect();
    // vcA peaks at 1 GPU, vcB at 16 (its 2-node job), vc_C at 12 (2 nodes of 8).
    assert_eq!(pools, vec![("vcA_gpu", 1), ("vcB_gpu", 2), ("vc_C_gpu", 2)]);
    let paths: Vec<&str> = got.config.accounts.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(
        paths,
        vec!["philly/vcA", "philly/vcA/jobs", "philly/vcB", "philly/vcB/jobs", "philly/vc_C", "philly/vc_C/jobs"]
    );
    // Budgets: GPU-hour shares of 40 GPUs x 168 h.
    let budgets: f64 = got.config.accounts.iter().filter_map(|a| a.budget_gpu_hours).sum();
    assert!((budgets - 40.0 * 168.0).abs() < 0.5, "budgets sum to capacity, got {budgets}");
    let vcb = got.config.accounts.iter().find(|a| a.path == "philly/vcB").unwrap();
    let want = 40.0 * 168.0 * (4.0 * 2951.0 + 16.0) / (4.0 * 2951.0 + 16.0 + 66.0 + 12.0 * 12.0);
    assert!((vcb.budget_gpu_hours.unwrap() - want).abs() < 0.1);
}

#[test]
fn gpus_option_splits_a_fixed_cluster_with_a_shared_part() {
    let mut opts = ImportOptions::default();
    opts.sizing.gpus = Some(80);
    opts.sizing.shared_fraction = 0.2;
    let got = import(Format::PhillyPollux, &fixture("philly_pollux.csv"), &opts).unwrap();
    check_config(&got.config, &got.rows);
    assert_eq!(got.config.total_gpus(), 80);
    let shared: u64 = got.config.pools.iter().filter(|p| p.shared).map(|p| p.gpus()).sum();
    assert_eq!(shared, 16);
    let nodes = |name: &str| got.config.pools.iter().find(|p| p.name == name).map_or(0, |p| p.nodes);
    // vcB has almost all GPU-hours; the others keep the node their largest job needs.
    assert_eq!((nodes("vcA_gpu"), nodes("vc_C_gpu"), nodes("vcB_gpu")), (1, 2, 5));
}

#[test]
fn defaults_are_parameters() {
    let mut opts = ImportOptions::default();
    opts.defaults.util = 0.9;
    opts.defaults.checkpoint_s = 600;
    opts.defaults.priority = allot_core::Priority::High;
    opts.defaults.preemptible = true;
    opts.root = Some("msr/philly".into());
    let got = import(Format::PhillyPollux, &fixture("philly_pollux.csv"), &opts).unwrap();
    let r = &got.rows[0];
    assert_eq!((r.util, r.checkpoint_s, r.priority, r.preemptible), (0.9, 600, allot_core::Priority::High, true));
    assert_eq!(r.account, "msr/philly/vcB/jobs");
    check_config(&got.config, &got.rows);
}

#[test]
fn bad_files_and_options_are_errors() {
    let missing = import(Format::PhillyPollux, &fixture("helios_cluster_log.csv"), &ImportOptions::default());
    let e = missing.unwrap_err().to_string();
    assert!(e.contains("missing column \"timestamp\""), "{e}");
    let mut opts = ImportOptions::default();
    opts.sizing.gpus = Some(12);
    let e = import(Format::PhillyPollux, &fixture("philly_pollux.csv"), &opts).unwrap_err().to_string();
    assert!(e.contains("multiple of --gpus-per-node"), "{e}");
    let e = import(Format::PhillyPollux, &fixture("nope.csv"), &ImportOptions::default()).unwrap_err().to_string();
    assert!(e.contains("cannot read"), "{e}");
}
