//! The importers on the real public traces (`traces/`, docs/traces.md).
//! Ignored by default; CI runs them with `--run-ignored` and
//! `ALLOT_TRACES_DIR` set to the directory holding the files.

mod import_support;

use std::path::PathBuf;

use allot_trace::import::{Adjustment, Format, ImportOptions, SkipReason, import};
use import_support::check_config;

fn traces_dir() -> PathBuf {
    let dir = std::env::var_os("ALLOT_TRACES_DIR").unwrap_or_else(|| {
        panic!("set ALLOT_TRACES_DIR to the directory holding philly_pollux.csv and the alibaba_openb_*.csv files")
    });
    let dir = PathBuf::from(dir);
    assert!(dir.is_dir(), "ALLOT_TRACES_DIR={} is not a directory", dir.display());
    dir
}

#[test]
#[ignore = "needs the real traces in ALLOT_TRACES_DIR"]
fn philly_pollux_imports_fully() {
    let got = import(Format::PhillyPollux, &traces_dir().join("philly_pollux.csv"), &ImportOptions::default()).unwrap();
    let s = &got.summary;
    eprint!("{s}");
    assert_eq!(s.rows_read, 82_247);
    assert!(s.imported >= 80_000, "imported {}", s.imported);
    assert_eq!(s.imported + s.skipped_total(), s.rows_read);
    let teams = got.config.accounts.iter().filter(|a| a.legacy_pools.is_some()).count();
    assert_eq!(teams, 15, "one team per Philly virtual cluster");
    assert!(got.rows.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
    assert_eq!(got.rows[0].submit_s, 0);
    let max_gpus = got.rows.iter().map(|r| r.gpus).max().unwrap();
    assert_eq!(max_gpus, 128);
    // Peak-sized pools: more than the largest job, less than all jobs at once.
    let total = got.config.total_gpus();
    assert!((500..20_000).contains(&total), "cluster of {total} GPUs");
    check_config(&got.config, &got.rows);
}

#[test]
#[ignore = "needs the real traces in ALLOT_TRACES_DIR"]
fn alibaba_openb_imports_fully() {
    let dir = traces_dir();
    let mut opts = ImportOptions::default();
    opts.sizing.node_list = Some(dir.join("alibaba_openb_gpu_nodes.csv"));
    let got = import(Format::AlibabaOpenb, &dir.join("alibaba_openb_pods.csv"), &opts).unwrap();
    let s = &got.summary;
    eprint!("{s}");
    assert_eq!(s.rows_read, 8_152);
    assert_eq!(s.skips(SkipReason::ZeroGpus), 1_088, "CPU-only pods");
    let never = s.skips(SkipReason::NeverStarted);
    assert!((500..=1_000).contains(&never), "{never} pods never scheduled (the trace has 897 Pending)");
    assert!(s.imported >= 6_000, "imported {}", s.imported);
    assert_eq!(s.imported + s.skipped_total(), s.rows_read);
    let frac = s.adjustments(Adjustment::FractionalGpuRoundedUp);
    assert!((2_000..=3_078).contains(&frac), "{frac} fractional pods rounded up");
    assert_eq!(got.config.total_gpus(), 6_212, "the node list's GPUs");
    check_config(&got.config, &got.rows);
}
