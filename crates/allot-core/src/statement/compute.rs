//! The statement of budget periods from recorded usage (docs/budgets.md,
//! "Statements").
//!
//! * **Budget** of account `a` in period `k`: the budget in force at the
//!   period's end (the last change before it, or before the statement's
//!   instant for the current period): a change mid-period applies to the
//!   whole period (BUD-4).
//! * **Carried** (BUD-5), as [`crate::Ledger::carry_ngs`] computes it:
//!   `min(f · B, max(0, B − used(a, k−1)))` with `B` that budget, nothing
//!   into the period of the first recorded use (of any account).
//! * **Used**: NGH of the intervals of `a`'s subtree within the period
//!   (BUD-3: GPUs × the GPU type's weight × seconds / 3600).
//! * **Over budget**: `max(0, used − budget − carried)`, 0 without a budget.
//! * **Attainment**: `min(used, B) / min(demand, B)` as in docs/measures.md
//!   (`demand`: GPUs × weight × the time the subtree's workloads were
//!   submitted and not ended, within the period), per account and period,
//!   with `B` the budget in force, not prorated (the current period's use
//!   and demand both stop at the statement's instant); `None` without a
//!   budget or when the denominator is 0.
//! * **Queue times**: first start − submit of the subtree's workloads whose
//!   first start falls in the period (nearest-rank median and p95);
//!   workloads submitted in the period that had not started by the
//!   statement's instant are counted apart (`never_started`), not as a
//!   queue time.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::account::{AccountId, AccountTree};
use crate::calendar::{Calendar, Periods};
use crate::cluster::{GpuType, GpuTypeId};

/// Seconds per hour, for GPU-hours.
const HOUR: f64 = 3600.0;

/// GPUs of one type held by a workload of `account` over `[start, end)`
/// (an attempt; one still running ends at the statement's instant).
#[derive(Clone, Debug, PartialEq)]
pub struct UsageInterval {
    pub account: AccountId,
    pub start: Time,
    pub end: Time,
    pub gpus: u32,
    pub gpu: GpuTypeId,
}

/// What queue times and demand need of a workload.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadTimes {
    pub account: AccountId,
    pub submit: Time,
    /// Its first attempt's start, if it started.
    pub first_start: Option<Time>,
    /// When it ended (finished, failed, rejected, cancelled), if it did.
    pub end: Option<Time>,
    pub gpus: u32,
    /// Normalisation weight for its demand: the GPU type of its latest
    /// attempt, else of its constraint, else 1 (docs/measures.md).
    pub weight: f64,
}

/// The budget of `account` set at `t` (`None`: no budget), in force from
/// `t` on until the next change.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetChange {
    pub t: Time,
    pub account: AccountId,
    pub budget_gpu_hours: Option<f64>,
}

/// Everything a statement is computed from.
#[derive(Clone, Debug)]
pub struct StatementInput<'a> {
    /// The tree; its budgets are those in force before any change.
    pub tree: &'a AccountTree,
    pub periods: Periods,
    /// BUD-5: the fraction of a budget that unused budget may add.
    pub carry_over: f64,
    /// The GPU types (index = [`GpuTypeId`]) with their weights.
    pub gpu_types: &'a [GpuType],
    /// Budget changes, any order (stably sorted by time).
    pub budget_changes: &'a [BudgetChange],
    pub usage: &'a [UsageInterval],
    pub workloads: &'a [WorkloadTimes],
    /// The statement's instant: nothing after it is counted.
    pub now: Time,
}

/// The statement of one or more consecutive budget periods.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Statement {
    /// The statement's instant (Unix seconds): the current period's figures
    /// stop there.
    pub as_of: i64,
    /// The GPU types, in the config's order (the columns of `raw_gpu_hours`).
    pub gpu_types: Vec<String>,
    pub periods: Vec<PeriodStatement>,
}

/// One budget period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PeriodStatement {
    /// `[start, end)` in Unix seconds (`end` is absent for the single
    /// period of a calendar without periods).
    pub start: i64,
    pub end: Option<i64>,
    /// Every account of the tree, in path order.
    pub accounts: Vec<AccountLine>,
}

/// One account's figures for one period (NGH: normalised GPU-hours).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AccountLine {
    pub account: String,
    /// The budget in force at the period's end, if any (BUD-4).
    pub budget_gpu_hours: Option<f64>,
    /// Carried over from the period before (BUD-5); 0 without a budget.
    pub carried_gpu_hours: f64,
    /// NGH the subtree used in the period.
    pub used_gpu_hours: f64,
    /// NGH used beyond budget + carried (0 without a budget).
    pub over_budget_gpu_hours: f64,
    /// NGH the subtree's workloads asked for in the period.
    pub demand_gpu_hours: f64,
    /// `min(used, budget) / min(demand, budget)`; `None` without a budget
    /// or demand.
    pub attainment: Option<f64>,
    /// Raw GPU-hours by GPU type name (every type, 0 included).
    pub raw_gpu_hours: BTreeMap<String, f64>,
    /// Workloads whose first start falls in the period.
    pub started: u64,
    /// Median and 95th percentile (nearest rank) of their queue times, s.
    pub queue_p50_s: Option<u64>,
    pub queue_p95_s: Option<u64>,
    /// Workloads submitted in the period not started by the statement's
    /// instant (no queue time yet).
    pub never_started: u64,
}

/// Per account and period (offset from the first period computed).
#[derive(Clone, Default)]
struct Acc {
    ngs: f64,
    raw_s: Vec<u64>,
    demand_ngs: f64,
    queue: Vec<u64>,
    never_started: u64,
}

/// Whether there is one period for all time (`budget_period = 0`).
fn single(p: &Periods) -> bool {
    matches!(p.calendar, Calendar::Fixed { .. }) && p.length == 0
}

/// `[start, end)` of period `k`; `Time::MAX` ends the single period.
fn span(p: &Periods, k: i64) -> (Time, Time) {
    if single(p) { (0, Time::MAX) } else { (p.start(k), p.start(k + 1)) }
}

/// Calls `f(k, seconds)` for every period `k` in `ks` that `[start, end)`
/// overlaps (a bounded walk over `ks`, not over all time).
fn split(p: &Periods, ks: &RangeInclusive<i64>, start: Time, end: Time, mut f: impl FnMut(i64, Time)) {
    if end <= start {
        return;
    }
    let (first, last) = (p.index(start).max(*ks.start()), p.index(end - 1).min(*ks.end()));
    for k in first..=last {
        let (a, b) = span(p, k);
        let s = end.min(b).saturating_sub(start.max(a));
        if s > 0 {
            f(k, s);
        }
    }
}

/// The value of nearest rank `⌈pct/100 · n⌉` (at least 1) in `sorted`.
fn nearest_rank(sorted: &[u64], pct: u64) -> Option<u64> {
    let n = sorted.len() as u64;
    let rank = (pct * n).div_ceil(100).max(1);
    (n > 0).then(|| sorted[(rank - 1) as usize])
}

/// The budget of each account in force in each period of `ks` (BUD-4: the
/// last value set before the period's end and not after `now`).
fn budgets(input: &StatementInput, ks: &RangeInclusive<i64>) -> Vec<Vec<Option<f64>>> {
    let mut changes: Vec<&BudgetChange> = input.budget_changes.iter().filter(|c| c.t <= input.now).collect();
    changes.sort_by_key(|c| c.t);
    let mut current: Vec<Option<f64>> = input.tree.accounts.iter().map(|a| a.budget_gpu_hours).collect();
    let mut next = changes.into_iter().peekable();
    ks.clone()
        .map(|k| {
            let end = span(&input.periods, k).1;
            while let Some(c) = next.next_if(|c| c.t < end) {
                if let Some(b) = current.get_mut(c.account.0 as usize) {
                    *b = c.budget_gpu_hours;
                }
            }
            current.clone()
        })
        .collect()
}

/// The statement of periods `ks` (indices of [`Periods::index`]), and the
/// period before the first for its carry-over.
pub fn statement(input: &StatementInput, ks: RangeInclusive<i64>) -> Statement {
    let p = &input.periods;
    let with_prev = (*ks.start() - 1)..=*ks.end();
    let n_types = input.gpu_types.len();
    let blank = Acc { raw_s: vec![0; n_types], ..Acc::default() };
    let width = (with_prev.end() - with_prev.start() + 1).max(0) as usize;
    let mut acc = vec![vec![blank; width]; input.tree.len()];
    let slot = |k: i64| (k - with_prev.start()) as usize;
    let tree = input.tree;
    for u in input.usage {
        let weight = input.gpu_types.get(u.gpu.0 as usize).map_or(1.0, |g| g.weight);
        split(p, &with_prev, u.start, u.end.min(input.now), |k, s| {
            for x in tree.ancestry(u.account) {
                let a = &mut acc[x.0 as usize][slot(k)];
                a.ngs += f64::from(u.gpus) * weight * s as f64;
                if let Some(r) = a.raw_s.get_mut(u.gpu.0 as usize) {
                    *r += u64::from(u.gpus) * s;
                }
            }
        });
    }
    for w in input.workloads {
        let end = w.end.unwrap_or(input.now).min(input.now);
        split(p, &with_prev, w.submit, end, |k, s| {
            for x in tree.ancestry(w.account) {
                acc[x.0 as usize][slot(k)].demand_ngs += f64::from(w.gpus) * w.weight * s as f64;
            }
        });
        let started = w.first_start.filter(|&t| t <= input.now);
        let (at, queued) = match started {
            Some(t) => (t, Some(t.saturating_sub(w.submit))),
            None if w.submit <= input.now => (w.submit, None),
            None => continue,
        };
        let k = p.index(at);
        if !with_prev.contains(&k) {
            continue;
        }
        for x in tree.ancestry(w.account) {
            let a = &mut acc[x.0 as usize][slot(k)];
            match queued {
                Some(q) => a.queue.push(q),
                None => a.never_started += 1,
            }
        }
    }
    let origin = input.usage.iter().map(|u| u.start).min();
    let budget = budgets(input, &ks);
    let periods = ks
        .clone()
        .enumerate()
        .map(|(i, k)| {
            let (start, end) = span(p, k);
            // Path order, parents first, as `GET /v1/accounts` lists them
            // (ids follow creation once the tree is live, ACC-1).
            let accounts = tree
                .ids_by_path()
                .map(|x| {
                    let row = &acc[x.0 as usize];
                    let first = origin.is_none_or(|o| p.index(o) >= k);
                    line(input, x, &row[slot(k)], &row[slot(k - 1)], budget[i][x.0 as usize], first)
                })
                .collect();
            PeriodStatement { start: start as i64, end: (end != Time::MAX).then_some(end as i64), accounts }
        })
        .collect();
    Statement { as_of: input.now as i64, gpu_types: input.gpu_types.iter().map(|g| g.name.clone()).collect(), periods }
}

/// One account's line from its accumulated period and the period before;
/// `first`: the period of the first recorded use or earlier (nothing is
/// carried into it, BUD-5).
fn line(input: &StatementInput, x: AccountId, a: &Acc, prev: &Acc, budget: Option<f64>, first: bool) -> AccountLine {
    let carried_ngs = match budget {
        Some(b) if input.carry_over > 0.0 && !first => {
            let b = b * HOUR;
            (b - prev.ngs).clamp(0.0, input.carry_over * b)
        }
        _ => 0.0,
    };
    let used = a.ngs / HOUR;
    let carried = carried_ngs / HOUR;
    let demand = a.demand_ngs / HOUR;
    let attainment = budget.and_then(|b| {
        let d = demand.min(b);
        (d > 0.0).then(|| used.min(b) / d)
    });
    let mut queue = a.queue.clone();
    queue.sort_unstable();
    AccountLine {
        account: input.tree.account(x).path.clone(),
        budget_gpu_hours: budget,
        carried_gpu_hours: carried,
        used_gpu_hours: used,
        over_budget_gpu_hours: budget.map_or(0.0, |b| (used - b - carried).max(0.0)),
        demand_gpu_hours: demand,
        attainment,
        raw_gpu_hours: input.gpu_types.iter().zip(&a.raw_s).map(|(g, s)| (g.name.clone(), *s as f64 / HOUR)).collect(),
        started: queue.len() as u64,
        queue_p50_s: nearest_rank(&queue, 50),
        queue_p95_s: nearest_rank(&queue, 95),
        never_started: a.never_started,
    }
}

/// The period index a report asks for: `current` (the period containing
/// `now`), `previous`, or a period's start date `YYYY-MM-DD` (a day in the
/// calendar's local time for months; the first period starting that day).
pub fn period_index(periods: &Periods, now: Time, which: &str) -> Result<i64, String> {
    match which {
        "current" => Ok(periods.index(now)),
        _ if single(periods) => Err(format!(
            "invalid period {which:?}: without budget periods (budget_period = 0) there is only \"current\""
        )),
        "previous" => Ok(periods.index(now) - 1),
        date => {
            let bad = || {
                format!(
                    "invalid period {which:?}: expected \"current\", \"previous\" or a start date such as 2026-11-01"
                )
            };
            let day = crate::calendar::parse_instant(&format!("{date}T00:00:00Z")).map_err(|_| bad())? as i64;
            let offset = match periods.calendar {
                Calendar::Months { utc_offset } => i64::from(utc_offset),
                Calendar::Fixed { .. } => 0,
            };
            let d0 = (day - offset).max(0) as Time;
            let mut k = periods.index(d0);
            if span(periods, k).0 < d0 {
                k += 1;
            }
            let s = span(periods, k).0;
            if s < d0 + 86_400 {
                Ok(k)
            } else {
                let (containing, _) = span(periods, periods.index(d0));
                Err(format!(
                    "no budget period starts on {date}: the period containing it starts at {}",
                    crate::calendar::format_instant(containing)
                ))
            }
        }
    }
}

#[cfg(test)]
#[path = "compute_tests.rs"]
mod tests;
