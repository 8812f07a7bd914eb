//! `alibaba-openb` importer on a small pod list + node list with bad rows.

mod import_support;

use allot_core::Class;
use allot_trace::import::{Adjustment, Format, ImportOptions, SkipReason, import};
use import_support::{check_config, fixture, trace_text};

fn opts() -> ImportOptions {
    let mut o = ImportOptions::default();
    o.sizing.node_list = Some(fixture("alibaba_nodes.csv"));
    o
}

#[test]
fn imports_exact_rows_and_counts_skips() {
    let got = import(Format::AlibabaOpenb, &fixture("alibaba_pods.csv"), &opts()).unwrap();
    assert_eq!(
        trace_text(&got.rows),
        "id,submit_s,account,user,class,gpus,nodes,gpu_type,work_s,checkpoint_s,util,priority,preemptible\n\
         p0,0,alibaba/ls/jobs,ls,service,1,1,,1000,0,0.5,high,false\n\
         p1,100,alibaba/ls/jobs,ls,service,1,1,,590,0,0.46,high,false\n\
         p3,300,alibaba/burstable/jobs,burstable,batch,8,1,,1000,3600,0.5,normal,false\n\
         p5,500,alibaba/be/jobs,be,batch,1,1,V100M16,280,3600,0.25,low,true\n\
         p6,600,alibaba/be/jobs,be,batch,2,1,,290,3600,0.5,low,true\n\
         p7,700,alibaba/be/jobs,be,batch,1,1,,190,3600,0.5,low,true\n"
    );
    let s = &got.summary;
    assert_eq!((s.rows_read, s.imported, s.skipped_total()), (11, 6, 5));
    for reason in [
        SkipReason::MissingTeam,
        SkipReason::ZeroGpus,
        SkipReason::NegativeDuration,
        SkipReason::NeverStarted,
        SkipReason::TooLarge,
    ] {
        assert_eq!(s.skips(reason), 1, "{reason:?}");
    }
    // p1 (460) and p5 (250) ask for a fraction of a GPU.
    assert_eq!(s.adjustments(Adjustment::FractionalGpuRoundedUp), 2);
    // p6 lists alternatives, p7 a model no node has.
    assert_eq!(s.adjustments(Adjustment::GpuTypeDropped), 2);
    assert!(s.to_string().contains("2  fractional GPU rounded up to whole GPUs"), "{s}");
}

#[test]
fn config_uses_the_node_list_and_fits_every_pod() {
    let got = import(Format::AlibabaOpenb, &fixture("alibaba_pods.csv"), &opts()).unwrap();
    check_config(&got.config, &got.rows);
    assert_eq!(got.config.total_gpus(), 19);
    let types: Vec<&str> = got.config.gpu_types.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(types, vec!["G2", "T4", "V100M16"]);
    // The BE team needs a V100M16 node for p5.
    let be = got.config.accounts.iter().find(|a| a.path == "alibaba/be").unwrap();
    assert!(be.legacy_pools.as_ref().unwrap().iter().any(|p| p == "be_v100m16"), "{be:?}");
}

#[test]
fn ls_pods_can_be_interactive() {
    let mut o = opts();
    o.qos.ls.class = Class::Interactive;
    let got = import(Format::AlibabaOpenb, &fixture("alibaba_pods.csv"), &o).unwrap();
    assert_eq!(got.rows[0].class, Class::Interactive);
    assert_eq!(got.rows[0].checkpoint_s, 0);
}

#[test]
fn without_a_node_list_pools_follow_peak_demand() {
    let got = import(Format::AlibabaOpenb, &fixture("alibaba_pods.csv"), &ImportOptions::default()).unwrap();
    // Without the node list nothing is too large (p9 needs 16 GPUs on one node
    // of 8: still skipped), and model constraints are dropped.
    assert_eq!(got.summary.skips(SkipReason::TooLarge), 1);
    assert!(got.rows.iter().all(|r| r.gpu_type.is_empty()));
    assert_eq!(got.summary.adjustments(Adjustment::GpuTypeDropped), 3);
    check_config(&got.config, &got.rows);
}
