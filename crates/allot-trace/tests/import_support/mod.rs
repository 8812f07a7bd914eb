//! Helpers shared by the importer and generator tests.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use allot_trace::write::{ConfigOut, TraceRow, write_config_toml, write_trace_csv};

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import").join(name)
}

pub fn trace_text(rows: &[TraceRow]) -> String {
    let mut out = Vec::new();
    write_trace_csv(&mut out, rows).unwrap();
    String::from_utf8(out).unwrap()
}

pub fn config_text(cfg: &ConfigOut) -> String {
    let mut out = Vec::new();
    write_config_toml(&mut out, cfg).unwrap();
    String::from_utf8(out).unwrap()
}

/// Checks the written config against the rows: it parses as TOML, declares
/// every account path the trace uses, and every workload fits one of the
/// legacy pools of its team (so it fits the cluster under both models).
pub fn check_config(cfg: &ConfigOut, rows: &[TraceRow]) {
    let text = config_text(cfg);
    let v: toml::Value = toml::from_str(&text).expect("config parses as TOML");
    let accounts = v["accounts"].as_array().expect("accounts array");
    let declared: BTreeSet<&str> = accounts.iter().map(|a| a["path"].as_str().unwrap()).collect();
    let pools = v["cluster"]["pools"].as_array().expect("pools array");
    assert_eq!(pools.len(), cfg.pools.len());
    for r in rows {
        assert!(declared.contains(r.account.as_str()), "account {} of {} is declared", r.account, r.id);
        let team = r.account.rsplit_once('/').unwrap().0;
        let team_pools: Vec<&str> = accounts
            .iter()
            .find(|a| a["path"].as_str() == Some(team))
            .and_then(|a| a.get("legacy_pools"))
            .and_then(|p| p.as_array())
            .map(|p| p.iter().map(|n| n.as_str().unwrap()).collect())
            .unwrap_or_default();
        let fits = cfg
            .pools
            .iter()
            .filter(|p| p.shared || team_pools.contains(&p.name.as_str()))
            .any(|p| p.fits(r.gpus, r.nodes, &r.gpu_type));
        assert!(
            fits,
            "workload {} ({} GPUs, {} nodes, type {:?}) fits a pool of {team}",
            r.id, r.gpus, r.nodes, r.gpu_type
        );
    }
    let parsed = allot_trace::config::parse_config(&text, "written.toml").expect("the config parser accepts it");
    let trace = allot_trace::trace::parse_trace_csv(trace_text(rows).as_bytes(), "written.csv", &parsed)
        .expect("the trace parser accepts the trace with this config");
    assert_eq!(trace.len(), rows.len());
}
