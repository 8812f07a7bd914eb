//! The rank of waiting work: a value type with a total order (rules BUD-1,
//! INT-1, FS-1, FS-2, IMP-1; see `docs/fairshare.md`, `docs/impact.md`).
//!
//! `Rank = (tier, fair-share path, user key, (submit, id))`, compared
//! lexicographically:
//! * tier (BUD-1, INT-1): in-budget interactive work within the lane, then
//!   other in-budget work, then over-budget work;
//! * path (FS-1): `(key, slot)` of every slot from the top level down to
//!   the workload's leaf slot, so accounts compare at the level where their
//!   paths diverge (Fair Tree's depth-first order); the key is the FS-1
//!   value, and in the over-budget tier impact, highest first, then the
//!   value (IMP-1, [`slot_key`]);
//! * user key (FS-2): normalised GPUs the user holds in the slot, then the
//!   user's oldest waiting workload of the tier;
//! * FIFO: `(submit, id)`.
//!
//! A pass serves this order dynamically (the queue re-keys after every
//! start); [`ranks`] is the static order at one instant, used to explain
//! waits and to show the queue.

use std::collections::BTreeMap;

use crate::Time;
use crate::contract::Contract;
use crate::state::State;
use crate::workload::{Class, WorkloadId, WorkloadSpec};

use super::budget::Budgets;
use super::fairshare::{FairShare, Share, Slot, Users};

/// Rank tiers, best first.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Tier {
    /// In-budget interactive work within the lane limits (INT-1).
    Lane,
    /// Other in-budget work (BUD-1).
    InBudget,
    /// Work of an account over budget somewhere on its path (BUD-1, BUD-2),
    /// or of a user over their own budget in the account (BUD-6).
    OverBudget,
}

impl Tier {
    pub(crate) const ALL: [Tier; 3] = [Tier::Lane, Tier::InBudget, Tier::OverBudget];
}

/// Whether an interactive workload is within the lane limits (INT-1/INT-2).
pub(crate) fn in_lane(contract: &Contract, spec: &WorkloadSpec) -> bool {
    spec.gpus <= contract.interactive_max_gpus && spec.work_s <= contract.interactive_max_duration
}

/// The tier of waiting workload `w`; `None` for interactive work over the
/// lane limits, which is rejected (INT-2). Its user's own budget counts as
/// its account's (BUD-6).
pub(crate) fn tier_of(state: &State, budgets: &Budgets, w: WorkloadId) -> Option<Tier> {
    let spec = state.spec(w);
    let lane = spec.class == Class::Interactive;
    if lane && !in_lane(&state.contract, spec) {
        return None;
    }
    Some(if budgets.over_work(spec.account, state.member(w)) {
        Tier::OverBudget
    } else if lane {
        Tier::Lane
    } else {
        Tier::InBudget
    })
}

/// The key of a slot among its siblings in a tier: `(-impact, FS-1 value)`
/// in the over-budget tier (IMP-1: idle capacity goes to the higher impact
/// first, then by fair share), `(0, FS-1 value)` in the others.
pub(crate) type SlotKey = (Share, Share);

/// [`SlotKey`] of slot `s` in `tier` now.
pub(crate) fn slot_key(fs: &FairShare, s: Slot, tier: Tier) -> SlotKey {
    let impact = if tier == Tier::OverBudget { -fs.impact(s) } else { 0.0 };
    (Share(impact), Share(fs.value(s)))
}

/// The rank of one waiting workload.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Rank {
    pub(crate) tier: Tier,
    pub(crate) path: Vec<(SlotKey, Slot)>,
    pub(crate) user: (Share, (Time, WorkloadId), u32),
    pub(crate) fifo: (Time, WorkloadId),
}

/// A waiting workload with its rank.
#[derive(Clone, Debug)]
pub(crate) struct Ranked {
    pub(crate) rank: Rank,
    pub(crate) w: WorkloadId,
    pub(crate) slot: Slot,
    pub(crate) user: u32,
}

/// Every waiting workload (except those to be rejected) in rank order at
/// the instant `fs`, `users` and `budgets` describe.
pub(crate) fn ranks(state: &State, fs: &FairShare, users: &Users, budgets: &Budgets) -> Vec<Ranked> {
    let mut heads: BTreeMap<(Tier, u32), (Time, WorkloadId)> = BTreeMap::new();
    let mut paths: BTreeMap<(Tier, Slot), Vec<(SlotKey, Slot)>> = BTreeMap::new();
    let mut out = Vec::with_capacity(state.pending.len());
    for &(submit, w) in &state.pending {
        let spec = state.spec(w);
        let Some(tier) = tier_of(state, budgets, w) else { continue };
        let slot = fs.slot(spec.account);
        let user = users.of(state, w);
        let head = *heads.entry((tier, user)).or_insert((submit, w));
        let path = paths
            .entry((tier, slot))
            .or_insert_with(|| fs.path(slot).into_iter().map(|s| (slot_key(fs, s, tier), s)).collect());
        let rank = Rank { tier, path: path.clone(), user: (Share(users.value(user)), head, user), fifo: (submit, w) };
        out.push(Ranked { rank, w, slot, user });
    }
    out.sort_by(|a, b| a.rank.cmp(&b.rank));
    out
}
