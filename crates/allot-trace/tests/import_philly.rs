//! `philly` (cluster_job_log JSON) importer on a small fixture with bad jobs.

mod import_support;

use allot_trace::import::{Adjustment, Format, ImportOptions, ProjectBy, SkipReason, import};
use import_support::{check_config, fixture, trace_text};

#[test]
fn imports_exact_rows_and_counts_skips() {
    let got = import(Format::Philly, &fixture("philly_cluster_job_log.json"), &ImportOptions::default()).unwrap();
    // application_2: 16 GPUs on 2 machines, two attempts of 600 s and 1200 s.
    assert_eq!(
        trace_text(&got.rows),
        "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible\n\
         application_3,0,philly/vc2/jobs,carol,batch,2,1,,60,3600,0.5,normal,false\n\
         application_1,3600,philly/vc1/jobs,alice,batch,2,1,,3600,3600,0.5,normal,false\n\
         application_2,5400,philly/vc1/jobs,bob,batch,16,2,,1800,3600,0.5,normal,false\n"
    );
    let s = &got.summary;
    assert_eq!((s.rows_read, s.imported), (9, 3));
    let skips = [
        (SkipReason::MissingTeam, 1),
        (SkipReason::ZeroGpus, 1),
        (SkipReason::BadDate, 1),
        (SkipReason::NegativeDuration, 1),
        (SkipReason::NeverStarted, 1),
        (SkipReason::NoEndTime, 1),
    ];
    for (reason, n) in skips {
        assert_eq!(s.skips(reason), n, "{reason:?}");
    }
    assert_eq!(s.skipped_total(), 6);
    // application_3 used one GPU on each of two machines; written as one node.
    assert_eq!(s.adjustments(Adjustment::NodesRepacked), 1);
    let states: Vec<(&str, u64)> = s.statuses.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(states, vec![("Failed", 1), ("Killed", 1), ("Pass", 1)]);
    check_config(&got.config, &got.rows);
}

#[test]
fn users_can_be_projects() {
    let opts = ImportOptions { project_by: ProjectBy::User, ..ImportOptions::default() };
    let got = import(Format::Philly, &fixture("philly_cluster_job_log.json"), &opts).unwrap();
    let accounts: Vec<&str> = got.rows.iter().map(|r| r.account.as_str()).collect();
    assert_eq!(accounts, vec!["philly/vc2/carol", "philly/vc1/alice", "philly/vc1/bob"]);
    check_config(&got.config, &got.rows);
    let paths: Vec<&str> = got.config.accounts.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(paths, vec!["philly/vc1", "philly/vc1/alice", "philly/vc1/bob", "philly/vc2", "philly/vc2/carol"]);
}

#[test]
fn invalid_json_names_the_line() {
    let dir = std::env::temp_dir().join(format!("allot-import-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.json");
    std::fs::write(&path, "[\n {\"vc\": \"a\",\n  \"attempts\": 3}\n]\n").unwrap();
    let e = import(Format::Philly, &path, &ImportOptions::default()).unwrap_err();
    assert!(e.to_string().contains("bad.json:3:"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_written_config_lists_what_the_import_assumed() {
    let to_config = |checkpoint_s| {
        let mut opts = ImportOptions::default();
        opts.defaults.checkpoint_s = checkpoint_s;
        let got = import(Format::Philly, &fixture("philly_cluster_job_log.json"), &opts).unwrap();
        let mut toml = Vec::new();
        allot_trace::write::write_config_toml(&mut toml, &got.config).unwrap();
        allot_trace::config::parse_config(&String::from_utf8(toml).unwrap(), "philly.toml").unwrap().assumed
    };
    let hourly = to_config(3600);
    assert!(
        hourly.iter().any(|a| a.starts_with("checkpoints: every one of the 3 batch jobs checkpoints every 1h")
            && a.contains("favours policies that preempt")),
        "{hourly:#?}"
    );
    assert!(hourly.iter().any(|a| a.starts_with("budgets: from the same trace")), "{hourly:#?}");
    assert!(hourly.iter().any(|a| a.starts_with("utilisation: every job keeps its GPUs 50% busy")), "{hourly:#?}");
    let never = to_config(0);
    assert!(
        never.iter().any(|a| a.starts_with("checkpoints: none of the 3 batch jobs") && a.contains("do not preempt")),
        "{never:#?}"
    );
}
