//! Budget statements from the store's history (docs/budgets.md,
//! "Statements"): attempts (who held which GPUs when), workloads (submit,
//! end) and the audit log's budget changes, through the core's
//! [`allot_core::statement`] — the function the simulator's
//! `--budget-report` uses — so a statement is exact after a restart and
//! equal to a replay's.
//!
//! * An attempt's GPU type is that of its first node in the config (a gang
//!   holds one type); an attempt whose nodes the config no longer has falls
//!   back to the type of its recorded weight (the first type of that
//!   weight), else the workload's constraint. A running attempt counts up
//!   to the statement's instant.
//! * A budget change is an `account.budget`, `account.create` or
//!   `account.import` audit entry (ACC-1): the budget in force after it is
//!   `after.budget_gpu_hours` (the value set, the config's when it went
//!   back to it, none when absent). An entry names the account as it was
//!   then; later renames (`account.rename`) lead to its line now.
//! * Workloads and changes of accounts the tree does not have are left out
//!   (they have no line to go to).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use allot_core::statement::{BudgetChange, Statement, StatementInput, UsageInterval, WorkloadTimes, statement};
use allot_core::{GpuTypeId, State, Time};

use crate::store::{AttemptRow, AuditRow, Store, StoreError, WorkloadRow};
use crate::views::NodeGpusView;

/// What a statement is computed from, as read from the store.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub workloads: Vec<WorkloadRow>,
    pub attempts: Vec<AttemptRow>,
    pub audit: Vec<AuditRow>,
}

impl History {
    /// Reads the history from `store`.
    pub async fn load(store: &Store) -> Result<History, StoreError> {
        Ok(History {
            workloads: store.all_workloads().await?,
            attempts: store.all_attempts().await?,
            audit: store.audit(i64::MAX).await?,
        })
    }
}

/// The GPU type an attempt held (see the module docs).
fn attempt_gpu(template: &State, a: &AttemptRow, w: &WorkloadRow) -> GpuTypeId {
    let cluster = &template.cluster;
    let by_node = serde_json::from_str::<Vec<NodeGpusView>>(&a.alloc)
        .ok()
        .and_then(|parts| parts.first().and_then(|p| cluster.node_by_name(&p.node)))
        .map(|n| cluster.node(n).gpu);
    let by_weight = || cluster.gpu_types.iter().position(|g| g.weight == a.weight).map(|i| GpuTypeId(i as u16));
    let by_constraint = || w.gpu_type.as_deref().and_then(|t| cluster.gpu_type_by_name(t));
    by_node.or_else(by_weight).or_else(by_constraint).unwrap_or(GpuTypeId(0))
}

/// The budget changes of the audit log, oldest first.
fn budget_changes(template: &State, audit: &[AuditRow]) -> Vec<BudgetChange> {
    let mut entries: Vec<&AuditRow> = audit.iter().collect();
    entries.sort_by_key(|a| a.seq);
    let after = |a: &AuditRow| -> Option<serde_json::Value> { serde_json::from_str(a.after.as_deref()?).ok() };
    // (seq, from, to) of every rename, oldest first.
    let renames: Vec<(i64, String, String)> = entries
        .iter()
        .filter(|a| a.action == "account.rename")
        .filter_map(|a| Some((a.seq, a.target.clone(), after(a)?["path"].as_str()?.to_string())))
        .collect();
    let path_now = |seq: i64, path: &str| {
        let mut p = path.to_string();
        for (_, from, to) in renames.iter().filter(|(s, _, _)| *s > seq) {
            if p == *from || p.starts_with(&format!("{from}/")) {
                p = format!("{to}{}", &p[from.len()..]);
            }
        }
        p
    };
    entries
        .iter()
        .filter(|a| matches!(a.action.as_str(), "account.budget" | "account.create" | "account.import"))
        .filter_map(|a| {
            let account = template.accounts.get(&path_now(a.seq, &a.target)).filter(|id| id.0 != 0)?;
            let budget_gpu_hours = after(a)?.get("budget_gpu_hours").and_then(serde_json::Value::as_f64);
            Some(BudgetChange { t: a.t.max(0) as Time, account, budget_gpu_hours })
        })
        .collect()
}

/// The statement of periods `ks` as of `now`, for the config in
/// `template` (its tree with the config's budgets, its contract and GPU
/// types).
pub fn statement_of(template: &State, history: &History, now: Time, ks: RangeInclusive<i64>) -> Statement {
    let by_seq: BTreeMap<i64, &WorkloadRow> = history.workloads.iter().map(|w| (w.seq, w)).collect();
    let mut usage = Vec::new();
    let mut firsts: BTreeMap<i64, (Time, f64)> = BTreeMap::new();
    for a in &history.attempts {
        let Some(w) = by_seq.get(&a.workload) else { continue };
        let Some(account) = template.accounts.get(&w.account) else { continue };
        let start = a.start_t.max(0) as Time;
        let end = a.end_t.map_or(now, |e| e.max(0) as Time);
        let gpu = attempt_gpu(template, a, w);
        usage.push(UsageInterval { account, start, end, gpus: a.gpus.max(0) as u32, gpu });
        // Attempts come in attempt order: the first start stays, the
        // weight becomes the latest attempt's.
        let e = firsts.entry(a.workload).or_insert((start, a.weight));
        e.1 = a.weight;
    }
    let cluster = &template.cluster;
    let workloads: Vec<WorkloadTimes> = history
        .workloads
        .iter()
        .filter_map(|w| {
            let account = template.accounts.get(&w.account)?;
            let first = firsts.get(&w.seq);
            let constraint = w.gpu_type.as_deref().and_then(|t| cluster.gpu_type_by_name(t)).map(|g| cluster.weight(g));
            Some(WorkloadTimes {
                account,
                submit: w.submit_t.max(0) as Time,
                first_start: first.map(|f| f.0),
                end: w.end_t.map(|e| e.max(0) as Time),
                gpus: w.gpus.max(0) as u32,
                weight: first.map(|f| f.1).or(constraint).unwrap_or(1.0),
            })
        })
        .collect();
    let changes = budget_changes(template, &history.audit);
    let input = StatementInput {
        tree: &template.accounts,
        periods: template.contract.periods(),
        carry_over: template.contract.budget_carry_over,
        gpu_types: &cluster.gpu_types,
        budget_changes: &changes,
        usage: &usage,
        workloads: &workloads,
        now,
    };
    statement(&input, ks)
}
