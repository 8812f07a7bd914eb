//! Budget attainment (docs/design.md §3): how much of the demand an account's
//! budget entitled it to was met, per budget period.
//!
//! Periods are the contract's budget periods (BUD-4) intersected with
//! `[0, H]`. For every account `a` with its own budget `B_a` (prorated for a
//! partial first or last period; carry-over is not counted) and period `k`:
//! `used` = NGH of the attempts of `a`'s subtree in the period, `demand` =
//! NGH its workloads wanted in the period, and
//! `attainment = Σ min(used, B) / Σ min(demand, B)`.

use allot_core::calendar::Periods;
use allot_core::{AccountId, State, Time};
use serde::Serialize;

use crate::measures::capacity::overlap;
use crate::measures::work::Want;
use crate::record::SimOutput;

/// The budget periods intersected with `[0, h]`, with each one's full
/// length (0 for the single period of length 0).
fn periods(p: Periods, h: Time) -> Vec<(Time, Time, Time)> {
    let (k0, k1) = (p.index(0), p.index(h.saturating_sub(1)));
    if h == 0 || k0 == k1 {
        return vec![(0, h, p.length_of(k0))];
    }
    (k0..=k1).map(|k| (p.start(k), p.start(k + 1).min(h), p.length_of(k))).collect()
}

/// Adds `rate × |[from, to) ∩ period_k|` to `row[k]` for every period the
/// interval touches.
fn spread(row: &mut [f64], periods: &[(Time, Time, Time)], p: Periods, from: Time, to: Time, rate: f64) {
    if to <= from {
        return;
    }
    let k0 = p.index(0);
    let first = (p.index(from) - k0) as usize;
    let last = ((p.index(to - 1) - k0) as usize).min(periods.len() - 1);
    for (k, &(ps, pe, _)) in periods.iter().enumerate().take(last + 1).skip(first) {
        row[k] += rate * overlap(from, to, ps, pe) as f64;
    }
}

/// Every budgeted account's budget, use and demand per budget period of a
/// run, in NGH: what budget attainment is computed from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetPeriods {
    /// The budget periods intersected with `[0, H]`: (start, end).
    pub periods: Vec<(Time, Time)>,
    /// Every account with its own budget, in path order.
    pub accounts: Vec<AccountBudget>,
}

/// One budgeted account's subtree, per period of [`BudgetPeriods`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccountBudget {
    pub account: String,
    /// The budget, prorated for a partial period.
    pub budget: Vec<f64>,
    pub used: Vec<f64>,
    pub demand: Vec<f64>,
}

impl BudgetPeriods {
    /// Σ min(used, B) / Σ min(demand, B) over the accounts `accounts` picks
    /// and the periods `periods` picks; `None` when the denominator is 0.
    fn ratio(&self, accounts: impl Fn(usize) -> bool, periods: impl Fn(usize) -> bool) -> Option<f64> {
        let (mut num, mut den) = (0.0, 0.0);
        for (_, a) in self.accounts.iter().enumerate().filter(|(i, _)| accounts(*i)) {
            for k in (0..self.periods.len()).filter(|k| periods(*k)) {
                num += a.used[k].min(a.budget[k]);
                den += a.demand[k].min(a.budget[k]);
            }
        }
        (den > 0.0).then(|| num / den)
    }

    /// Budget attainment over every account and period.
    pub fn attainment(&self) -> Option<f64> {
        self.ratio(|_| true, |_| true)
    }

    /// Budget attainment within period `k`, over every account.
    pub fn period_attainment(&self, k: usize) -> Option<f64> {
        self.ratio(|_| true, |j| j == k)
    }

    /// Budget attainment of account `i` (of `accounts`), over every period.
    pub fn account_attainment(&self, i: usize) -> Option<f64> {
        self.ratio(|j| j == i, |_| true)
    }
}

/// The [`BudgetPeriods`] of a run; `None` when no account has a budget.
pub fn budget_periods(state: &State, out: &SimOutput) -> Option<BudgetPeriods> {
    periods_of(state, out, &crate::measures::work::wants(state, out))
}

pub(crate) fn periods_of(state: &State, out: &SimOutput, wants: &[Want]) -> Option<BudgetPeriods> {
    let tree = &state.accounts;
    let budgeted: Vec<(AccountId, f64)> =
        tree.ids().filter_map(|a| tree.account(a).budget_gpu_hours.map(|b| (a, b))).collect();
    if budgeted.is_empty() {
        return None;
    }
    let h = out.horizon_end;
    let p = state.contract.periods();
    let periods = periods(p, h);
    let mut slot = vec![None; tree.len()];
    for (i, (a, _)) in budgeted.iter().enumerate() {
        slot[a.0 as usize] = Some(i);
    }
    let mut used = vec![vec![0.0; periods.len()]; budgeted.len()];
    let mut demand = used.clone();
    for a in &out.attempts {
        let rate = f64::from(a.gpus) * a.weight;
        for x in tree.ancestry(a.account).filter_map(|x| slot[x.0 as usize]) {
            spread(&mut used[x], &periods, p, a.start.min(h), a.end.min(h), rate);
        }
    }
    for w in wants {
        let rate = f64::from(w.gpus) * w.weight;
        for x in tree.ancestry(w.account).filter_map(|x| slot[x.0 as usize]) {
            spread(&mut demand[x], &periods, p, w.from, w.to, rate);
        }
    }
    let hours = |v: Vec<f64>| v.into_iter().map(|x| x / 3600.0).collect();
    let accounts = budgeted
        .iter()
        .zip(used.into_iter().zip(demand))
        .map(|(&(a, budget), (used, demand))| AccountBudget {
            account: tree.account(a).path.clone(),
            budget: periods
                .iter()
                .map(|&(ps, pe, len)| if len == 0 { budget } else { budget * (pe - ps) as f64 / len as f64 })
                .collect(),
            used: hours(used),
            demand: hours(demand),
        })
        .collect();
    Some(BudgetPeriods { periods: periods.iter().map(|&(s, e, _)| (s, e)).collect(), accounts })
}

/// Σ min(used, B) / Σ min(demand, B) over budgeted accounts and periods;
/// `None` when no account has a budget or the denominator is 0.
pub(crate) fn attainment(state: &State, out: &SimOutput, wants: &[Want]) -> Option<f64> {
    periods_of(state, out, wants)?.attainment()
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_core::calendar::Calendar;

    #[test]
    fn periods_cover_the_horizon() {
        let every = |length| Periods { length, calendar: Calendar::Fixed { anchor: 0 } };
        assert_eq!(periods(every(100), 250), vec![(0, 100, 100), (100, 200, 100), (200, 250, 100)]);
        assert_eq!(periods(every(100), 200), vec![(0, 100, 100), (100, 200, 100)]);
        assert_eq!(periods(every(0), 250), vec![(0, 250, 0)]);
        assert_eq!(periods(every(100), 0), vec![(0, 0, 100)]);
        // Anchored at 50: a partial first period.
        let anchored = Periods { length: 100, calendar: Calendar::Fixed { anchor: 50 } };
        assert_eq!(periods(anchored, 200), vec![(0, 50, 100), (50, 150, 100), (150, 200, 100)]);
        // Months: January 1970 has 31 days, February 28.
        let months = Periods { length: 0, calendar: Calendar::Months { utc_offset: 0 } };
        let day = 86_400;
        assert_eq!(periods(months, 40 * day), vec![(0, 31 * day, 31 * day), (31 * day, 40 * day, 28 * day)]);
    }

    #[test]
    fn spread_splits_an_interval_over_periods() {
        let every = |length| Periods { length, calendar: Calendar::Fixed { anchor: 0 } };
        let ps = periods(every(100), 250);
        let mut row = vec![0.0; ps.len()];
        spread(&mut row, &ps, every(100), 50, 250, 2.0);
        assert_eq!(row, vec![100.0, 200.0, 100.0]);
        spread(&mut row, &ps, every(100), 120, 120, 2.0);
        assert_eq!(row, vec![100.0, 200.0, 100.0]);
        let one = periods(every(0), 250);
        let mut row = vec![0.0];
        spread(&mut row, &one, every(0), 10, 20, 1.0);
        assert_eq!(row, vec![10.0]);
    }
}
