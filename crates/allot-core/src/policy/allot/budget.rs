//! Budget status of every account (rules BUD-1 and BUD-2; see `docs/budgets.md`).
//!
//! BUD-1: an account is *in budget* when every account on its path that has
//! a budget has used, in the current budget period, strictly less than that
//! budget (normalised GPU-hours, the subtree's use as charged by the ledger
//! under BUD-3). An account with no budget anywhere on its path is in budget.
//! The status is read once per pass: no time passes within a pass.

use crate::Time;
use crate::account::AccountId;
use crate::state::State;

/// Seconds per hour, for GPU-hours.
const HOUR: f64 = 3600.0;

/// Budget status of every account at one instant.
#[derive(Clone, Debug)]
pub(crate) struct Budgets {
    /// Per account: the nearest account on its path (itself first) that is
    /// over budget, if any.
    culprit: Vec<Option<AccountId>>,
}

impl Budgets {
    /// BUD-1 status of every account as of `now`.
    pub(crate) fn new(state: &State, now: Time) -> Budgets {
        let tree = &state.accounts;
        let mut culprit = vec![None; tree.len()];
        // Ids are in path order: a parent's status is known before its children's.
        for a in tree.ids() {
            let acc = tree.account(a);
            let own = acc.budget_gpu_hours.is_some_and(|b| state.ledger.period_ngs_at(a, now) >= b * HOUR);
            let inherited = acc.parent.and_then(|p| culprit[p.0 as usize]);
            culprit[a.0 as usize] = if own { Some(a) } else { inherited };
        }
        Budgets { culprit }
    }

    /// Whether work charged to `a` is over budget (BUD-1).
    pub(crate) fn over(&self, a: AccountId) -> bool {
        self.culprit[a.0 as usize].is_some()
    }

    /// The account on `a`'s path whose budget is exhausted (nearest first).
    pub(crate) fn culprit(&self, a: AccountId) -> Option<AccountId> {
        self.culprit[a.0 as usize]
    }
}

/// "org/a over budget 1,204/1,000 NGH" for an account with a budget.
pub(crate) fn describe(state: &State, a: AccountId, now: Time) -> String {
    let acc = state.accounts.account(a);
    let used = state.ledger.at(a, now).period_ngs / HOUR;
    let budget = acc.budget_gpu_hours.unwrap_or(0.0);
    format!("account {} over budget {}/{} NGH this period", acc.path, ngh(used), ngh(budget))
}

/// A whole number of normalised GPU-hours with thousands separators.
pub(crate) fn ngh(x: f64) -> String {
    let v = x.max(0.0).round() as u64;
    let digits = v.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The next instant after `now` at which some account's budget status can
/// change on its own: a period boundary, or an in-budget account with a
/// budget reaching it at its current allocation.
pub(crate) fn next_change(state: &State, now: Time) -> Option<Time> {
    let tree = &state.accounts;
    let mut next: Option<Time> = None;
    let mut any = false;
    for a in tree.ids() {
        let Some(b) = tree.account(a).budget_gpu_hours else { continue };
        any = true;
        let left = b * HOUR - state.ledger.period_ngs_at(a, now);
        let alloc = state.ledger.usage[a.0 as usize].alloc_ngpus;
        if left > 0.0 && alloc > 0.0 {
            let t = now + ((left / alloc).ceil() as Time).max(1);
            next = Some(next.map_or(t, |x| x.min(t)));
        }
    }
    if any && state.ledger.budget_period > 0 {
        let t = state.ledger.period_start(now) + state.ledger.budget_period;
        next = Some(next.map_or(t, |x| x.min(t)));
    }
    next
}

#[cfg(test)]
mod tests {
    use super::ngh;

    #[test]
    fn thousands_separators() {
        for (x, s) in [(0.0, "0"), (999.4, "999"), (1000.0, "1,000"), (1204.0, "1,204"), (1_234_567.0, "1,234,567")] {
            assert_eq!(ngh(x), s);
        }
    }
}
