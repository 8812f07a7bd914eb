//! The reason text of a CON-4 preemption: how preemptor and victim rank
//! before and after the swap.

use crate::Time;
use crate::state::State;

use super::fairshare::{FairShare, Removed, Side, SwapLevel, Users, impact_decides, swap};
use super::rank::Tier;
use super::victim::{Cand, Preemptor};

/// CON-4 detail of a preemption: the values on both sides before and after
/// the swap (`removed` holds every victim of the preemptor).
pub(crate) fn swap_detail(
    (state, fs, users): (&State, &FairShare, &Users),
    p: &Preemptor,
    c: &Cand,
    w_ng: f64,
    removed: &Removed,
    ran: Time,
    slice: Time,
) -> String {
    let tail = format!("; {} ran {ran} s >= slice {slice} s", state.spec(c.w).id);
    if p.tier == Tier::OverBudget
        && let Some((a, b)) = fs.diverge(p.side.slot, c.side.slot)
        && impact_decides(fs, p.side.slot, c.side.slot, true).is_some()
    {
        return format!(
            "{} ranks strictly better among over-budget work, by impact first (IMP-1): {} impact {} vs {} impact {}{tail}",
            p.spec.id,
            fs.name(state, a),
            fs.impact(a),
            fs.name(state, b),
            fs.impact(b)
        );
    }
    let m = state.contract.swap_margin;
    let tail = if m > 0.0 {
        format!("; CON-11: below {:.2} x the victim's side (swap margin {m}){tail}", 1.0 - m)
    } else {
        tail
    };
    let s = swap(fs, users, Side { ng: w_ng, ..p.side }, Side { ng: 0.0, ..c.side }, removed);
    match s.level {
        SwapLevel::Slots(a, b) => format!(
            "{} ranks strictly better after the swap: usage/entitlement {} {:.2} -> {:.2} vs {} {:.2} -> {:.2}{tail}",
            p.spec.id,
            fs.name(state, a),
            s.w_before,
            s.w_after,
            fs.name(state, b),
            s.v_before,
            s.v_after
        ),
        SwapLevel::Users(a, b) => format!(
            "{} ranks strictly better after the swap: in {} user {} usage+held {:.1} -> {:.1} GPUs vs user {} {:.1} -> {:.1}{tail}",
            p.spec.id,
            fs.name(state, p.side.slot),
            users.name(state, a),
            s.w_before,
            s.w_after,
            users.name(state, b),
            s.v_before,
            s.v_after
        ),
        SwapLevel::Fifo => format!("{} is work of the same user{tail}", p.spec.id),
    }
}
