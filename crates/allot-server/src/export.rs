//! `allot trace export`: the server's recorded history as a trace in the
//! simulator's format (docs/design.md §4), so an operator can replay the
//! cluster's own past under another policy or budget with `allot compare`.
//!
//! * `submit_s` counts from the first submission or node event.
//! * `work_s` is the work the workload really did where that is known:
//!   finished → the progress kept over all attempts (the last one in full);
//!   failed or cancelled after running → the progress made until it ended;
//!   still pending or running, or rejected → the expected duration given at
//!   submission. Cancelled workloads that never ran are left out (they asked
//!   for nothing a replay could give).
//! * `util` is the workload's measured GPU utilization where GPU telemetry
//!   measured some attempt of it: the attempts' means weighted by GPUs ×
//!   measured seconds (`WorkloadRow::measured_util`); the declared `util`
//!   of the submission otherwise.
//! * `util` is the measured mean where GPU telemetry measured it (see
//!   docs/server.md), the declared value otherwise; `checkpoint_s` is the
//!   interval the workload really checkpointed at where it reported
//!   checkpoints (CON-7: the progress its last reports saved over the
//!   reports made), the declared one otherwise; `checkpoint_on_signal` as
//!   submitted (CON-8).
//! * `clusters` is the clusters the workload was allowed (FLEET-1), as
//!   submitted; empty (any) for the rest. The column is written only when
//!   some workload names clusters.
//! * Operator node actions (drain, undrain, fail, repair) go to a sibling
//!   events file, `<out stem>.events.csv`, when there are any.
//! * Every attempt of an exported workload goes to a sibling attempts file,
//!   `<out stem>.attempts.csv`, when there are any: `workload,attempt,
//!   cluster,nodes,start_s,end_s,outcome` (times on the trace's clock;
//!   `nodes` separated by spaces; `end_s` and `outcome` empty while it
//!   runs). `cluster` is the cluster it ran on as recorded at its start
//!   (empty in a fleet of one): the trace keeps what each workload was
//!   allowed, the attempts file where each attempt ran.
//! * The changes of the live account tree (the audit log's `account.*`
//!   entries: budgets, shares, impacts and users' shares set, accounts
//!   created, imported, closed, reopened, renamed) go to a sibling account
//!   changes file, `<out stem>.accounts.csv`, when there are any:
//!   `t_s,account,field,value` on the trace's clock (a change before the
//!   first submission at 0), `value` empty where the change went back to
//!   the config's value — the format `allot sim` / `allot compare
//!   --account-changes` read (`allot_trace::changes`), so a replay on the
//!   config the store was seeded from has the tree that was in force, when
//!   it was. The trace names each workload's account by its path now.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use allot_core::{Class, Phase, Priority};
use allot_trace::write::{TraceRow, write_trace_csv};

use crate::store::{AttemptRow, Store, StoreError, WorkloadRow};
use crate::views::NodeGpusView;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// What was exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportSummary {
    pub workloads: usize,
    pub events: usize,
    /// The events file, when node events were recorded.
    pub events_path: Option<PathBuf>,
    /// Attempts written to the attempts file.
    pub attempts: usize,
    /// The attempts file, when the exported workloads have attempts.
    pub attempts_path: Option<PathBuf>,
    /// Account changes written to the account changes file.
    pub account_changes: usize,
    /// The account changes file, when budgets or shares were changed.
    pub account_changes_path: Option<PathBuf>,
    /// Unix time of `submit_s = 0`.
    pub t0: i64,
}

/// The events file written next to `out`.
pub fn events_path_for(out: &Path) -> PathBuf {
    sibling(out, "events")
}

/// The account changes file written next to `out`.
pub fn account_changes_path_for(out: &Path) -> PathBuf {
    sibling(out, "accounts")
}

/// The attempts file written next to `out`.
pub fn attempts_path_for(out: &Path) -> PathBuf {
    sibling(out, "attempts")
}

/// `<out stem>.<what>.csv` next to `out`.
fn sibling(out: &Path, what: &str) -> PathBuf {
    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into());
    out.with_file_name(format!("{stem}.{what}.csv"))
}

/// Reads the store at `db_url` and writes the trace CSV to `out`.
pub async fn export_trace(db_url: &str, out: &Path) -> Result<ExportSummary, ExportError> {
    let store = Store::open(db_url).await?;
    let summary = export_store(&store, out).await;
    store.close().await;
    summary
}

/// [`export_trace`] from an open store (the dashboard's download reads
/// the serving store's pool).
pub async fn export_store(store: &Store, out: &Path) -> Result<ExportSummary, ExportError> {
    let workloads = store.all_workloads().await?;
    let mut attempts: BTreeMap<i64, Vec<AttemptRow>> = BTreeMap::new();
    for a in store.all_attempts().await? {
        attempts.entry(a.workload).or_default().push(a);
    }
    let events = store.node_events().await?;
    let mut audit = store.audit(i64::MAX).await?;
    audit.reverse();
    let kept: Vec<(&WorkloadRow, u64)> = workloads
        .iter()
        .filter_map(|w| work_done(w, attempts.get(&w.seq).map_or(&[], Vec::as_slice)).map(|s| (w, s)))
        .collect();
    let t0 = kept.iter().map(|(w, _)| w.submit_t).chain(events.iter().map(|e| e.t)).min().unwrap_or(0);
    let ids: std::collections::BTreeSet<i64> = kept.iter().map(|(w, _)| w.seq).collect();
    let rows: Vec<TraceRow> = kept
        .iter()
        .map(|(w, work)| {
            let mut r = row(w, *work, t0);
            r.after = exported_dependencies(w.conditions.depends_on.as_deref(), &ids);
            let tried = attempts.get(&w.seq).map_or(&[][..], Vec::as_slice);
            r.checkpoint_s = reported_interval(tried).unwrap_or(r.checkpoint_s);
            r
        })
        .collect();
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExportError::Write { path, source }
    };
    let f = std::fs::File::create(out).map_err(write_err(out))?;
    write_trace_csv(std::io::BufWriter::new(f), &rows).map_err(write_err(out))?;
    let events_path = if events.is_empty() {
        None
    } else {
        let p = events_path_for(out);
        let mut text = String::from("t_s,node,event\n");
        for e in &events {
            text.push_str(&format!("{},{},{}\n", e.t - t0, e.node, e.kind));
        }
        std::fs::File::create(&p).and_then(|mut f| f.write_all(text.as_bytes())).map_err(write_err(&p))?;
        Some(p)
    };
    let tried: Vec<&AttemptRow> =
        kept.iter().flat_map(|(w, _)| attempts.get(&w.seq).map_or(&[][..], Vec::as_slice)).collect();
    let attempts_path = if tried.is_empty() {
        None
    } else {
        let p = attempts_path_for(out);
        let f = std::fs::File::create(&p).map_err(write_err(&p))?;
        write_attempts(std::io::BufWriter::new(f), &tried, t0).map_err(write_err(&p))?;
        Some(p)
    };
    let changes: Vec<String> = audit.iter().flat_map(|a| account_change(a, t0)).collect();
    let account_changes_path = if changes.is_empty() {
        None
    } else {
        let p = account_changes_path_for(out);
        let text = format!("t_s,account,field,value\n{}", changes.concat());
        std::fs::File::create(&p).and_then(|mut f| f.write_all(text.as_bytes())).map_err(write_err(&p))?;
        Some(p)
    };
    Ok(ExportSummary {
        account_changes: changes.len(),
        account_changes_path,
        workloads: rows.len(),
        events: events.len(),
        events_path,
        attempts: tried.len(),
        attempts_path,
        t0,
    })
}

/// The lines of the account changes file for an audit entry that changed
/// the account tree (`account.*`, ACC-1): a value set (`set`; entries
/// written before it was recorded: the value in force after the change), a
/// user's share, a creation or import (the declaration after it, as JSON),
/// a close, reopen or rename. Paths need no CSV quoting (letters, digits,
/// `-`, `_`, `.`, `/`); a declaration is quoted.
fn account_change(a: &crate::store::AuditRow, t0: i64) -> Vec<String> {
    let Some(what) = a.action.strip_prefix("account.") else { return Vec::new() };
    let after: serde_json::Value = a.after.as_deref().and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
    let t = (a.t - t0).max(0);
    let line = |field: &str, value: &str| format!("{t},{},{field},{value}\n", a.target);
    let decl = || {
        let mut d = after.clone();
        if let Some(o) = d.as_object_mut() {
            o.remove("set");
        }
        format!("\"{}\"", d.to_string().replace('"', "\"\""))
    };
    let num = |v: &serde_json::Value| v.as_f64().map_or_else(String::new, |v| v.to_string());
    match what {
        "create" => vec![line("create", &decl())],
        "import" => vec![line("replace", &decl())],
        "close" | "reopen" => vec![line(what, "")],
        "rename" => after["path"].as_str().map(|to| line("rename", to)).into_iter().collect(),
        "user_share" | "user_budget" => {
            let table = if what == "user_share" { "users" } else { "user_budgets" };
            after["set"]
                .as_object()
                .map(|m| m.iter().map(|(u, v)| line(&format!("{table}.{u}"), &num(v))).collect())
                .unwrap_or_default()
        }
        f => {
            let field = if f == "budget" { "budget_gpu_hours" } else { f };
            if !allot_trace::changes::FIELDS.contains(&field) {
                return Vec::new();
            }
            vec![line(field, &num(after.get("set").unwrap_or(&after[field])))]
        }
    }
}

/// The attempts file (see the module docs). Its cells are ids, numbers,
/// outcomes and node names (letters, digits, `_`, `.`, `-`, `/`): nothing a
/// CSV cell would need quoted, as in the events file.
fn write_attempts(mut w: impl Write, attempts: &[&AttemptRow], t0: i64) -> std::io::Result<()> {
    writeln!(w, "workload,attempt,cluster,nodes,start_s,end_s,outcome")?;
    for a in attempts {
        let nodes: Vec<String> = serde_json::from_str::<Vec<NodeGpusView>>(&a.alloc)
            .unwrap_or_default()
            .into_iter()
            .map(|n| n.node)
            .collect();
        let cluster = a.cluster.as_deref().unwrap_or("");
        let end = a.end_t.map(|e| (e - t0).max(0).to_string()).unwrap_or_default();
        let start = (a.start_t - t0).max(0);
        let outcome = a.outcome.as_deref().unwrap_or("");
        writeln!(w, "{},{},{cluster},{},{start},{end},{outcome}", a.workload, a.attempt, nodes.join(" "))?;
    }
    w.flush()
}

/// The work a replay should ask for, or `None` to leave the workload out.
fn work_done(w: &WorkloadRow, attempts: &[AttemptRow]) -> Option<u64> {
    let kept_before: i64 = attempts.iter().rev().skip(1).filter_map(|a| a.kept_s).sum();
    let last_run = attempts.last().and_then(|a| a.end_t.map(|e| e - a.start_t));
    let expected = w.work_s.max(1) as u64;
    match (w.phase(), last_run) {
        (Some(Phase::Finished), Some(run)) => Some((kept_before + run).max(1) as u64),
        (Some(Phase::Failed | Phase::Cancelled), Some(run)) => Some((kept_before + run).max(1) as u64),
        (Some(Phase::Cancelled), None) => None,
        _ => Some(expected),
    }
}

/// CON-7: the interval a workload really checkpointed at, where it
/// reported checkpoints: the progress its attempts' last reports saved
/// over the reports they made (each attempt's reports spread over the
/// progress they saved). `None`: it reported none.
fn reported_interval(attempts: &[AttemptRow]) -> Option<u64> {
    let reported = attempts.iter().filter(|a| a.checkpoints > 0);
    let (saved, n) =
        reported.fold((0i64, 0i64), |(s, n), a| (s + a.checkpoint_saved_s.unwrap_or(0), n + a.checkpoints));
    (n > 0).then(|| (saved / n).max(1) as u64)
}

fn row(w: &WorkloadRow, work_s: u64, t0: i64) -> TraceRow {
    TraceRow {
        id: w.seq.to_string(),
        submit_s: (w.submit_t - t0).max(0) as u64,
        account: w.account.clone(),
        user: w.submitter.clone(),
        class: Class::parse(&w.class).unwrap_or(Class::Batch),
        gpus: w.gpus as u32,
        nodes: w.nodes as u32,
        gpu_type: w.gpu_type.clone().unwrap_or_default(),
        work_s,
        checkpoint_s: w.checkpoint_s.max(0) as u64,
        util: w.measured_util.map_or(w.util, |m| m.clamp(0.0, 1.0)),
        priority: Priority::parse(&w.priority).unwrap_or(Priority::Normal),
        preemptible: w.preemptible,
        clusters: w.clusters.clone().unwrap_or_default(),
        time_limit_s: w.time_limit_s.map(|l| l.max(1) as u64),
        checkpoint_on_signal: w.checkpoint_on_signal,
        after: String::new(),
        array: w.conditions.array_id.map(|a| a.to_string()).unwrap_or_default(),
        array_index: w.conditions.array_index.map(|i| i.max(0) as u32),
        array_limit: w.conditions.array_limit.map(|l| l.max(1) as u32),
        billing: None,
    }
}

/// DEP-1: a workload's dependencies on workloads the trace has (the
/// others never ran, so they are not in it).
fn exported_dependencies(depends_on: Option<&str>, ids: &std::collections::BTreeSet<i64>) -> String {
    let Some(text) = depends_on else { return String::new() };
    let deps = allot_trace::conditions::parse_dependencies(text).unwrap_or_default();
    let kept = deps.iter().filter(|(_, id)| id.parse::<i64>().is_ok_and(|s| ids.contains(&s)));
    allot_trace::conditions::format_dependencies(kept.map(|(k, id)| (*k, id.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(checkpoints: i64, saved: Option<i64>) -> AttemptRow {
        AttemptRow { checkpoints, checkpoint_saved_s: saved, ..AttemptRow::default() }
    }

    #[test]
    fn the_exported_interval_is_the_reported_one() {
        // 3 reports saving 900 s, then 1 saving 250 s: 1150 s over 4.
        let tried = [attempt(3, Some(900)), attempt(0, None), attempt(1, Some(250))];
        assert_eq!(reported_interval(&tried), Some(287));
        assert_eq!(reported_interval(&[attempt(0, None)]), None, "none reported: the declared interval");
        assert_eq!(reported_interval(&[]), None);
    }
}
