//! A simulation's budget statement (docs/budgets.md, "Statements"): the
//! record's attempts and the final state's workloads through the same core
//! function the server uses ([`allot_core::statement`]), so a replay of the
//! server's history states what the server states.

use std::collections::BTreeMap;

use allot_core::statement::{BudgetChange, Statement, StatementInput, UsageInterval, WorkloadTimes, statement};
use allot_core::{AccountTree, State, Time, WorkloadId};

use crate::SimOutput;

/// The statement of every period from the first submission to the
/// horizon. `tree` is the tree the run started with (its budgets before
/// any change); `trees` the trees put in force later, with their times
/// (`simulate_with_accounts`), whose budgets become budget changes.
pub fn budget_statement(
    state: &State,
    out: &SimOutput,
    tree: &AccountTree,
    trees: &[(Time, AccountTree)],
) -> Statement {
    let periods = state.contract.periods();
    let usage: Vec<UsageInterval> = out
        .attempts
        .iter()
        .map(|a| UsageInterval { account: a.account, start: a.start, end: a.end, gpus: a.gpus, gpu: a.gpu })
        .collect();
    let mut last_weight: BTreeMap<WorkloadId, f64> = BTreeMap::new();
    for a in &out.attempts {
        let latest = last_weight.entry(a.workload).or_insert(a.weight);
        *latest = a.weight; // attempts are recorded in time order per workload
    }
    let workloads: Vec<WorkloadTimes> = state
        .specs
        .iter()
        .zip(&state.runs)
        .enumerate()
        .map(|(i, (spec, run))| WorkloadTimes {
            account: spec.account,
            submit: spec.submit,
            first_start: run.first_start,
            end: run.end,
            gpus: spec.gpus,
            weight: last_weight
                .get(&WorkloadId(i as u32))
                .copied()
                .or_else(|| spec.gpu_type.map(|g| state.cluster.weight(g)))
                .unwrap_or(1.0),
        })
        .collect();
    let budget_changes: Vec<BudgetChange> = trees
        .iter()
        .flat_map(|(t, later)| {
            tree.ids().map(move |id| BudgetChange {
                t: *t,
                account: id,
                budget_gpu_hours: later.get(&tree.account(id).path).and_then(|x| later.account(x).budget_gpu_hours),
            })
        })
        .collect();
    let now = out.horizon_end;
    let first = state.specs.iter().map(|s| s.submit).min().unwrap_or(0);
    let ks = periods.index(first)..=periods.index(now.saturating_sub(1).max(first));
    let input = StatementInput {
        tree,
        periods,
        carry_over: state.contract.budget_carry_over,
        gpu_types: &state.cluster.gpu_types,
        budget_changes: &budget_changes,
        usage: &usage,
        workloads: &workloads,
        now,
    };
    statement(&input, ks)
}
