//! Fairness (docs/design.md §3): per-account entitled vs delivered share, and
//! Jain's index over the leaf accounts whose demand saturates their
//! entitlement.

use std::collections::BTreeMap;

use allot_core::{State, Time};

use crate::measures::capacity::ratio;
use crate::measures::queue::{Times, nearest_rank};
use crate::measures::work::{Want, Work};
use crate::report::AccountReport;

/// One [`AccountReport`] per account except the virtual root, by path;
/// demand counts the workloads submitted before the horizon `h`.
pub(crate) fn accounts(state: &State, work: &Work, times: &Times, h: Time) -> BTreeMap<String, AccountReport> {
    let tree = &state.accounts;
    let (mut demand, mut total_demand) = (vec![0u64; tree.len()], 0u64);
    for spec in state.specs.iter().filter(|s| s.submit < h) {
        let asked = u64::from(spec.gpus) * spec.work_s;
        total_demand += asked;
        for x in tree.ancestry(spec.account) {
            demand[x.0 as usize] += asked;
        }
    }
    let mut queue: Vec<Vec<u64>> = vec![Vec::new(); tree.len()];
    for &(i, _, q) in &times.queue {
        for x in tree.ancestry(state.specs[i].account) {
            queue[x.0 as usize].push(q);
        }
    }
    let total = work.assigned_gpu_s as f64;
    tree.ids()
        .map(|a| {
            let i = a.0 as usize;
            let q = &mut queue[i];
            q.sort_unstable();
            let report = AccountReport {
                entitled_share: tree.static_share(a),
                delivered_share: ratio(work.by_account_gpu_s[i] as f64, total),
                demand_share: ratio(demand[i] as f64, total_demand as f64),
                gpu_hours: work.by_account_gpu_s[i] as f64 / 3600.0,
                budget_gpu_hours: tree.account(a).budget_gpu_hours,
                used_gpu_hours: work.by_account_ngs[i] / 3600.0,
                queue_time_p50_s: (!q.is_empty()).then(|| nearest_rank(q, 50)),
            };
            (tree.account(a).path.clone(), report)
        })
        .collect()
}

/// Jain's index `(Σx)² / (n Σx²)` with `x_a = delivered_a / entitled_a` over
/// the leaf accounts whose raw demand over the horizon is at least
/// `entitled_a × available`. `None` when no account qualifies (or every
/// qualifying account got nothing).
pub(crate) fn jain_index(
    state: &State,
    wants: &[Want],
    available_gpu_s: u64,
    accounts: &BTreeMap<String, AccountReport>,
) -> Option<f64> {
    let tree = &state.accounts;
    let mut demand = vec![0u64; tree.len()];
    for w in wants {
        for x in tree.ancestry(w.account) {
            demand[x.0 as usize] += w.gpu_s();
        }
    }
    let xs: Vec<f64> = tree
        .ids()
        .filter(|a| tree.account(*a).children.is_empty())
        .filter_map(|a| {
            let r = &accounts[&tree.account(a).path];
            let saturated = demand[a.0 as usize] as f64 >= r.entitled_share * available_gpu_s as f64;
            (saturated && r.entitled_share > 0.0).then(|| r.delivered_share / r.entitled_share)
        })
        .collect();
    let sum: f64 = xs.iter().sum();
    let sum_sq: f64 = xs.iter().map(|x| x * x).sum();
    (sum_sq > 0.0).then(|| sum * sum / (xs.len() as f64 * sum_sq))
}
