//! Budget status of every account (rules BUD-1 and BUD-2; see `docs/budgets.md`).
//!
//! BUD-1: an account is *in budget* when every account on its path that has
//! a budget has used, in the current budget period, strictly less than that
//! budget (normalised GPU-hours, the subtree's use as charged by the ledger
//! under BUD-3). An account with no budget anywhere on its path is in budget.
//! The status is read once per pass: no time passes within a pass.
//!
//! The budget of a period is the account's `budget_gpu_hours` plus what the
//! period before left unused, up to the carry-over fraction (BUD-5); periods
//! renew at the calendar's boundaries (BUD-4). Both come from the ledger.

use crate::Time;
use crate::account::AccountId;
use crate::state::State;

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
            let own = acc
                .budget_gpu_hours
                .is_some_and(|b| state.ledger.period_ngs_at(a, now) >= state.ledger.available_ngs(a, b, now));
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

/// "org/a over budget 1,204/1,000 NGH this period" for an account with a
/// budget; "1,204/1,000+100 carried NGH" when budget was carried over (BUD-5).
pub(crate) fn describe(state: &State, a: AccountId, now: Time) -> String {
    let acc = state.accounts.account(a);
    let p = state.ledger.projection(&state.accounts, a, now);
    let budget = p.budget_ngh.unwrap_or(0.0);
    let carried = if p.carried_ngh > 0.0 { format!("+{} carried", ngh(p.carried_ngh)) } else { String::new() };
    format!("account {} over budget {}/{}{carried} NGH this period", acc.path, ngh(p.used_ngh), ngh(budget))
}

/// For in-budget work of an account whose budget runs out at its current
/// burn before the period ends: "org/a runs out of budget at
/// 2026-01-07T14:00:00Z at this rate (…/… NGH used)", the nearest such
/// account on the path. `None` when no budget on the path runs out this
/// period.
pub(crate) fn near_exhaustion(state: &State, a: AccountId, now: Time) -> Option<String> {
    let tree = &state.accounts;
    tree.ancestry(a).find_map(|x| {
        let p = state.ledger.projection(tree, x, now);
        let t = p.exhaustion.filter(|t| *t < p.period_end)?;
        Some(format!(
            "account {} runs out of budget at {} at this period's rate ({}/{} NGH used)",
            tree.account(x).path,
            crate::calendar::format_instant(t),
            ngh(p.used_ngh),
            ngh(p.budget_ngh.unwrap_or(0.0) + p.carried_ngh)
        ))
    })
}

pub(crate) use crate::ledger::format_ngh as ngh;

/// The next instant after `now` at which some account's budget status can
/// change on its own: a period boundary (BUD-4), or an in-budget account
/// with a budget reaching it (with carry-over, BUD-5) at its current
/// allocation.
pub(crate) fn next_change(state: &State, now: Time) -> Option<Time> {
    let tree = &state.accounts;
    let mut next: Option<Time> = None;
    let mut any = false;
    for a in tree.ids() {
        let Some(b) = tree.account(a).budget_gpu_hours else { continue };
        any = true;
        let left = state.ledger.available_ngs(a, b, now) - state.ledger.period_ngs_at(a, now);
        let alloc = state.ledger.usage[a.0 as usize].alloc_ngpus;
        if left > 0.0 && alloc > 0.0 {
            let t = now + ((left / alloc).ceil() as Time).max(1);
            next = Some(next.map_or(t, |x| x.min(t)));
        }
    }
    let end = state.ledger.period_end(now);
    if any && end != Time::MAX {
        next = Some(next.map_or(end, |x| x.min(end)));
    }
    next
}
