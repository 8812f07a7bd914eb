//! The waiting work of one pass by tier (rules INT-2, BUD-1, INT-1), read
//! from the groups of the pending index ([`crate::pending`]) instead of a
//! walk over every waiting workload.
//!
//! Per user, the tier of a workload depends only on its account's budget
//! status, its user's own (BUD-6) and on whether it is interactive (see
//! [`super::rank::tier_of`]): an account or a user over budget puts all its
//! work in the over-budget tier;
//! otherwise interactive work goes to the lane and the rest in budget.
//! Interactive work over the lane limits is rejected (INT-2); whether there
//! is any is known from the largest gang and duration waiting, so the
//! interactive groups are only filtered in the rare pass that rejects.

use std::borrow::Cow;
use std::collections::BTreeSet;

use crate::pending::Entry;
use crate::state::State;
use crate::workload::{Class, WorkloadId};

use super::budget::Budgets;
use super::fairshare::Users;
use super::queue::{Group, Work};
use super::rank::{Tier, in_lane};

/// What a pass has to serve.
pub(crate) struct Waiting<'a> {
    /// Interactive workloads over the lane limits (INT-2), FIFO.
    pub(crate) rejected: Vec<WorkloadId>,
    /// Per tier, each user's work.
    pub(crate) tiers: [Vec<Work<'a>>; 3],
}

impl<'a> Waiting<'a> {
    pub(crate) fn new(state: &'a State, budgets: &Budgets, users: &Users) -> Waiting<'a> {
        let idx = state.pending_index();
        let c = &state.contract;
        let rejecting = idx.max_interactive_gpus().is_some_and(|g| g > c.interactive_max_gpus)
            || idx.max_interactive_work().is_some_and(|t| t > c.interactive_max_duration);
        let mut rejected: Vec<Entry> = Vec::new();
        let mut tiers: [Vec<Work<'a>>; 3] = Default::default();
        for (m, q) in idx.members() {
            let (account, _) = state.member_info(m);
            let over = budgets.over_work(account, m);
            let mut groups: [Vec<Group<'a>>; 3] = Default::default();
            for (&(class, shape), set) in &q.by_shape {
                let tier = match (over, class) {
                    (true, _) => Tier::OverBudget,
                    (false, Class::Interactive) => Tier::Lane,
                    (false, _) => Tier::InBudget,
                };
                let set = if rejecting && class == Class::Interactive {
                    // The rare pass that rejects interactive work (INT-2).
                    let (kept, out): (BTreeSet<Entry>, BTreeSet<Entry>) =
                        set.iter().partition(|e| in_lane(c, state.spec(e.1)));
                    rejected.extend(out);
                    if kept.is_empty() {
                        continue;
                    }
                    Cow::Owned(kept)
                } else {
                    Cow::Borrowed(set)
                };
                groups[tier as usize].push(Group { class, shape, set });
            }
            let user = users.of_member(m);
            for (t, groups) in groups.into_iter().enumerate() {
                if !groups.is_empty() {
                    tiers[t].push(Work { user, account, groups });
                }
            }
        }
        rejected.sort_unstable();
        Waiting { rejected: rejected.into_iter().map(|e| e.1).collect(), tiers }
    }
}
