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
//!
//! BUD-6: a user with a budget of their own in an account (`user_budgets`)
//! who has used it this period is over budget for that account's work, as
//! if the account were: the same tier (BUD-1), the same victim standing
//! (BUD-2), even while the account is within its budget. A user without a
//! budget of their own is governed by the account's only, and a user budget
//! never lifts work past the account's (BUD-1 still applies).

use crate::Time;
use crate::account::AccountId;
use crate::pending::MemberId;
use crate::state::State;

/// Budget status of every account and every member at one instant.
#[derive(Clone, Debug)]
pub(crate) struct Budgets {
    /// Per account: the nearest account on its path (itself first) that is
    /// over budget, if any.
    culprit: Vec<Option<AccountId>>,
    /// Per member: whether the user has used their own budget (BUD-6).
    user_over: Vec<bool>,
}

/// Whose budget puts work over budget: an account on its path (BUD-1) or
/// its user's own budget in the account (BUD-6).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Culprit {
    Account(AccountId),
    User(MemberId),
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
        let mut user_over = Vec::new();
        if tree.accounts.iter().any(|a| !a.user_budgets.is_empty()) {
            user_over = (0..state.member_count())
                .map(|m| {
                    let (a, user) = state.member_info(MemberId(m as u32));
                    tree.account(a).user_budget(user).is_some_and(|b| {
                        state.ledger.member_period_ngs_at(m, now) >= state.ledger.member_available_ngs(m, b, now)
                    })
                })
                .collect();
        }
        Budgets { culprit, user_over }
    }

    /// Whether account `a` is over budget (BUD-1), whatever its users.
    pub(crate) fn over(&self, a: AccountId) -> bool {
        self.culprit[a.0 as usize].is_some()
    }

    /// Whether work of member `m` charged to `a` is over budget: an account
    /// on the path is (BUD-1) or the user has used their own budget (BUD-6).
    pub(crate) fn over_work(&self, a: AccountId, m: MemberId) -> bool {
        self.over(a) || self.user_over(m)
    }

    /// Whether member `m` has used their own budget this period (BUD-6).
    fn user_over(&self, m: MemberId) -> bool {
        self.user_over.get(m.0 as usize).copied().unwrap_or(false)
    }

    /// Why work of member `m` charged to `a` is over budget: the nearest
    /// exhausted account on the path first (BUD-1 binds whatever the user's
    /// budget), else the user's own budget (BUD-6).
    pub(crate) fn culprit(&self, a: AccountId, m: MemberId) -> Option<Culprit> {
        match self.culprit[a.0 as usize] {
            Some(x) => Some(Culprit::Account(x)),
            None => self.user_over(m).then_some(Culprit::User(m)),
        }
    }
}

/// "org/a over budget 1,204/1,000 NGH this period" for an account with a
/// budget; "1,204/1,000+100 carried NGH" when budget was carried over (BUD-5).
pub(crate) fn describe(state: &State, a: AccountId, now: Time) -> String {
    let acc = state.accounts.account(a);
    let p = state.ledger.projection(&state.accounts, a, now);
    format!("account {} over budget {} NGH this period", acc.path, used_of(&p))
}

/// "user alice over their budget 60/50 NGH in account org/a this period
/// (BUD-6)" for a member with a budget of their own.
pub(crate) fn describe_user(state: &State, m: MemberId, now: Time) -> String {
    let (a, user) = state.member_info(m);
    let acc = state.accounts.account(a);
    let p = state.ledger.member_projection(m.0 as usize, acc.user_budget(user), now);
    let id = crate::Rule::BudgetUser.id();
    format!("user {user} over their budget {} NGH in account {} this period ({id})", used_of(&p), acc.path)
}

/// [`describe`] or [`describe_user`], whichever culprit `c` names; account
/// `a` itself (the work's) without one.
pub(crate) fn describe_over(state: &State, c: Option<Culprit>, a: AccountId, now: Time) -> String {
    match c.unwrap_or(Culprit::Account(a)) {
        Culprit::Account(a) => describe(state, a, now),
        Culprit::User(m) => describe_user(state, m, now),
    }
}

/// "1,204/1,000" or "1,204/1,000+100 carried" (BUD-5) of a projection.
fn used_of(p: &crate::ledger::Projection) -> String {
    let budget = p.budget_ngh.unwrap_or(0.0);
    let carried = if p.carried_ngh > 0.0 { format!("+{} carried", ngh(p.carried_ngh)) } else { String::new() };
    format!("{}/{}{carried}", ngh(p.used_ngh), ngh(budget))
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
/// allocation; the same for a user with a budget of their own (BUD-6).
pub(crate) fn next_change(state: &State, now: Time) -> Option<Time> {
    let tree = &state.accounts;
    let mut next: Option<Time> = None;
    let mut any = false;
    let mut reach = |left: f64, alloc: f64| {
        if left > 0.0 && alloc > 0.0 {
            let t = now + ((left / alloc).ceil() as Time).max(1);
            next = Some(next.map_or(t, |x: Time| x.min(t)));
        }
    };
    for a in tree.ids() {
        let Some(b) = tree.account(a).budget_gpu_hours else { continue };
        any = true;
        let left = state.ledger.available_ngs(a, b, now) - state.ledger.period_ngs_at(a, now);
        reach(left, state.ledger.usage[a.0 as usize].alloc_ngpus);
    }
    if tree.accounts.iter().any(|a| !a.user_budgets.is_empty()) {
        for m in 0..state.member_count() {
            let (a, user) = state.member_info(MemberId(m as u32));
            let Some(b) = tree.account(a).user_budget(user) else { continue };
            any = true;
            let left = state.ledger.member_available_ngs(m, b, now) - state.ledger.member_period_ngs_at(m, now);
            reach(left, state.ledger.members.get(m).map_or(0.0, |u| u.alloc_ngpus));
        }
    }
    let end = state.ledger.period_end(now);
    if any && end != Time::MAX {
        next = Some(next.map_or(end, |x| x.min(end)));
    }
    next
}
