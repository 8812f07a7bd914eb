//! Budget attainment (docs/design.md §3): how much of the demand an account's
//! budget entitled it to was met, per budget period.
//!
//! Periods are `[kP, (k+1)P) ∩ [0, H]`. For every account `a` with its own
//! budget `B_a` (prorated for a partial last period) and period `k`:
//! `used` = NGH of the attempts of `a`'s subtree in the period, `demand` =
//! NGH its workloads wanted in the period, and
//! `attainment = Σ min(used, B) / Σ min(demand, B)`.

use allot_core::{AccountId, State, Time};

use crate::measures::capacity::overlap;
use crate::measures::work::Want;
use crate::record::SimOutput;

/// The budget periods intersected with `[0, h]`; one period when the budget
/// period is 0 (no rollover).
fn periods(period: Time, h: Time) -> Vec<(Time, Time)> {
    if period == 0 || h == 0 {
        return vec![(0, h)];
    }
    (0..h.div_ceil(period)).map(|k| (k * period, ((k + 1) * period).min(h))).collect()
}

/// Adds `rate × |[from, to) ∩ period_k|` to `row[k]` for every period the
/// interval touches.
fn spread(row: &mut [f64], periods: &[(Time, Time)], period: Time, from: Time, to: Time, rate: f64) {
    if to <= from {
        return;
    }
    // Period 0 (no rollover) has a single period.
    let first = from.checked_div(period).unwrap_or(0) as usize;
    let last = ((to - 1).checked_div(period).unwrap_or(0) as usize).min(periods.len() - 1);
    for (k, &(ps, pe)) in periods.iter().enumerate().take(last + 1).skip(first) {
        row[k] += rate * overlap(from, to, ps, pe) as f64;
    }
}

/// Σ min(used, B) / Σ min(demand, B) over budgeted accounts and periods;
/// `None` when no account has a budget or the denominator is 0.
pub(crate) fn attainment(state: &State, out: &SimOutput, wants: &[Want]) -> Option<f64> {
    let tree = &state.accounts;
    let budgeted: Vec<(AccountId, f64)> =
        tree.ids().filter_map(|a| tree.account(a).budget_gpu_hours.map(|b| (a, b))).collect();
    if budgeted.is_empty() {
        return None;
    }
    let h = out.horizon_end;
    let p = state.contract.budget_period;
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
    let (mut num, mut den) = (0.0, 0.0);
    for (i, (_, budget)) in budgeted.iter().enumerate() {
        for (k, &(ps, pe)) in periods.iter().enumerate() {
            let b = if p == 0 { *budget } else { budget * (pe - ps) as f64 / p as f64 };
            num += (used[i][k] / 3600.0).min(b);
            den += (demand[i][k] / 3600.0).min(b);
        }
    }
    (den > 0.0).then(|| num / den)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_cover_the_horizon() {
        assert_eq!(periods(100, 250), vec![(0, 100), (100, 200), (200, 250)]);
        assert_eq!(periods(100, 200), vec![(0, 100), (100, 200)]);
        assert_eq!(periods(0, 250), vec![(0, 250)]);
        assert_eq!(periods(100, 0), vec![(0, 0)]);
    }

    #[test]
    fn spread_splits_an_interval_over_periods() {
        let ps = periods(100, 250);
        let mut row = vec![0.0; ps.len()];
        spread(&mut row, &ps, 100, 50, 250, 2.0);
        assert_eq!(row, vec![100.0, 200.0, 100.0]);
        spread(&mut row, &ps, 100, 120, 120, 2.0);
        assert_eq!(row, vec![100.0, 200.0, 100.0]);
        let one = periods(0, 250);
        let mut row = vec![0.0];
        spread(&mut row, &one, 0, 10, 20, 1.0);
        assert_eq!(row, vec![10.0]);
    }
}
