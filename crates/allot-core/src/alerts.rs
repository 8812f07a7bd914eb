//! Budget threshold events: an account with a budget has used a configured
//! fraction (by default 80 % and 100 %) of its period's budget, carry-over
//! included (see `docs/budgets.md`). Each fires once per account, period and
//! threshold; the simulator logs them, the server stores them and posts
//! them to its webhook, both through [`Alerts::check`].

use std::collections::BTreeSet;

use crate::Time;
use crate::account::{AccountId, AccountTree};
use crate::ledger::Ledger;

/// Most thresholds a config may list.
pub const MAX_THRESHOLDS: usize = 8;

/// The thresholds, as fractions of the period's budget (ascending, distinct).
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq)]
pub struct Thresholds {
    levels: [f64; MAX_THRESHOLDS],
    len: u8,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds::new(&[0.8, 1.0]).expect("the defaults are valid")
    }
}

impl Thresholds {
    /// Sorted and deduplicated; each must be finite and > 0, at most
    /// [`MAX_THRESHOLDS`] of them.
    pub fn new(levels: &[f64]) -> Result<Thresholds, String> {
        let mut v: Vec<f64> = levels.to_vec();
        if let Some(bad) = v.iter().find(|x| !(x.is_finite() && **x > 0.0 && **x <= 10.0)) {
            return Err(format!("each threshold must be a fraction of the budget above 0 and at most 10, got {bad}"));
        }
        v.sort_by(f64::total_cmp);
        v.dedup();
        if v.len() > MAX_THRESHOLDS {
            return Err(format!("at most {MAX_THRESHOLDS} thresholds, got {}", v.len()));
        }
        let mut levels = [0.0; MAX_THRESHOLDS];
        levels[..v.len()].copy_from_slice(&v);
        Ok(Thresholds { levels, len: v.len() as u8 })
    }

    pub fn as_slice(&self) -> &[f64] {
        &self.levels[..self.len as usize]
    }
}

/// One threshold reached.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetEvent {
    /// When it was reached: exact while the account's allocation was
    /// constant since its last change (always so in the simulator, which
    /// checks at every instant).
    pub t: Time,
    pub account: AccountId,
    pub period_start: Time,
    pub threshold: f64,
    /// NGH used at `t`, and the period's budget with carry-over.
    pub used_ngh: f64,
    pub budget_ngh: f64,
}

/// "BUD-1: account org/a reached 80% of its budget this period (8/10 NGH)".
pub fn describe(e: &BudgetEvent, tree: &AccountTree) -> String {
    format!(
        "{}: account {} reached {}% of its budget this period ({}/{} NGH)",
        crate::Rule::BudgetFirst.id(),
        tree.account(e.account).path,
        crate::ledger::format_ngh(e.threshold * 100.0),
        crate::ledger::format_ngh(e.used_ngh),
        crate::ledger::format_ngh(e.budget_ngh)
    )
}

/// The events already fired, so each fires once.
#[derive(Clone, Debug, Default)]
pub struct Alerts {
    seen: BTreeSet<(AccountId, Time, u64)>,
    last: Option<Time>,
}

impl Alerts {
    /// Records an event fired before (a restarted server's store).
    pub fn mark_seen(&mut self, account: AccountId, period_start: Time, threshold: f64) {
        self.seen.insert((account, period_start, threshold.to_bits()));
    }

    /// The thresholds reached by `now` not fired yet, in time order. Call it
    /// before the ledger changes at `now` (the allocations held since the
    /// last change are then those of the whole interval). When `now` is in
    /// a later period than the last check, the last second of each period
    /// in between is checked first, so a threshold reached before a renewal
    /// is not lost.
    pub fn check(
        &mut self,
        ledger: &Ledger,
        tree: &AccountTree,
        thresholds: &Thresholds,
        now: Time,
    ) -> Vec<BudgetEvent> {
        let mut out = Vec::new();
        if let Some(last) = self.last {
            // The last second of every period since the last check's.
            let mut end = ledger.period_end(last);
            while end <= now && end != Time::MAX && end > 0 {
                self.at(ledger, tree, thresholds, end - 1, &mut out);
                end = ledger.period_end(end);
            }
        }
        self.at(ledger, tree, thresholds, now, &mut out);
        self.last = Some(now);
        out.sort_by_key(|e| (e.t, e.account));
        out
    }

    fn at(
        &mut self,
        ledger: &Ledger,
        tree: &AccountTree,
        thresholds: &Thresholds,
        now: Time,
        out: &mut Vec<BudgetEvent>,
    ) {
        for a in tree.ids() {
            let Some(b) = tree.account(a).budget_gpu_hours else { continue };
            if now < ledger.usage[a.0 as usize].last {
                continue;
            }
            let available = ledger.available_ngs(a, b, now);
            let used = ledger.period_ngs_at(a, now);
            let period_start = ledger.period_start(now);
            let alloc = ledger.usage[a.0 as usize].alloc_ngpus;
            for &thr in thresholds.as_slice() {
                let target = thr * available;
                if used < target || !self.seen.insert((a, period_start, thr.to_bits())) {
                    continue;
                }
                // Reached `(used − target) / alloc` seconds ago at the
                // allocation held since the last change.
                let since = ledger.usage[a.0 as usize].last.max(period_start);
                let back = if alloc > 0.0 { ((used - target) / alloc).floor() as Time } else { 0 };
                let t = now.saturating_sub(back).max(since);
                out.push(BudgetEvent {
                    t,
                    account: a,
                    period_start,
                    threshold: thr,
                    used_ngh: target.max(0.0) / 3600.0,
                    budget_ngh: available / 3600.0,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AccountSpec;
    use crate::calendar::{Calendar, Periods};

    #[test]
    fn thresholds_are_checked_sorted_and_deduplicated() {
        assert_eq!(Thresholds::new(&[1.0, 0.5, 1.0]).unwrap().as_slice(), [0.5, 1.0]);
        assert_eq!(Thresholds::default().as_slice(), [0.8, 1.0]);
        for bad in [&[0.0][..], &[-1.0], &[f64::NAN], &[11.0], &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]] {
            assert!(Thresholds::new(bad).is_err(), "{bad:?}");
        }
    }

    /// Once per account, period and threshold: again after a renewal, never
    /// twice in one period, never for what a restarted server already sent.
    #[test]
    fn each_fires_once_per_period() {
        let t = AccountTree::build(&[AccountSpec {
            path: "org/a".into(),
            budget_gpu_hours: Some(1.0),
            ..Default::default()
        }])
        .unwrap();
        let a = t.get("org/a").unwrap();
        let periods = Periods { length: 7200, calendar: Calendar::Fixed { anchor: 0 } };
        let mut l = Ledger::new(&t, periods, 0.0, 3600);
        l.change(&t, a, 0, 1, 1.0);
        let th = Thresholds::default();
        let mut al = Alerts::default();
        let fired = |v: Vec<BudgetEvent>| v.into_iter().map(|e| (e.t, e.threshold)).collect::<Vec<_>>();
        assert_eq!(fired(al.check(&l, &t, &th, 1000)), []);
        assert_eq!(fired(al.check(&l, &t, &th, 4000)), [(2880, 0.8), (3600, 1.0)]);
        assert_eq!(fired(al.check(&l, &t, &th, 5000)), []);
        assert_eq!(fired(al.check(&l, &t, &th, 7200 + 3000)), [(7200 + 2880, 0.8)]);
        let mut restarted = Alerts::default();
        restarted.mark_seen(a, 7200, 0.8);
        assert_eq!(fired(restarted.check(&l, &t, &th, 7200 + 3700)), [(7200 + 3600, 1.0)]);
    }
}
