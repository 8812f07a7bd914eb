//! Choosing victims for a waiting workload (rules BUD-2, CON-1, CON-4,
//! CON-5, CON-12, IMP-2, INT-1, SVC-1; see `docs/contract.md`, `docs/impact.md`).
//!
//! Candidates are built once per pass: running (not stopping) workloads that
//! are not services (SVC-1) and that some waiting workload may ever preempt
//! in this pass, i.e. over budget or past their slice, each with its key in
//! CON-5 order: over budget first, then the slots furthest above their
//! fair share (highest FS-1 value), then the lowest impact (IMP-2), then
//! the least work lost (GPU-seconds
//! since the last checkpoint), then the fewest GPUs, then id. For one
//! preemptor the candidates are walked in that order, eligible victims are
//! added until the preemptor can be placed, and the set is pruned to a
//! minimal one (latest added first), which frees as few GPUs beyond the need
//! as the order allows. [`Victims::search`] computes that walk's result
//! without visiting the candidates it could never choose
//! ([`super::bound`]).
//!
//! Eligibility of victim V for preemptor W:
//! * BUD-2: W in budget, V over budget: at once, no slice.
//! * Otherwise both must be in the same budget tier and V past its slice
//!   (CON-1), then
//!   * INT-1: W is in the interactive lane and V is batch: at once;
//!   * an interactive V is not preempted for fair share: lane work is short
//!     by definition (≤ `interactive_max_duration`), and preempting it for
//!     the batch work it displaced would undo the lane;
//!   * CON-4: W ranks strictly better than V after the swap: at the level
//!     where their slots diverge, or between their users in one slot; a
//!     user's own workloads never preempt each other.
//!
//! CON-12: with `checkpoint_wait` on, a preemption whose chosen set has a
//! CON-4 victim with a checkpoint due ([`super::contract::checkpoint_due`])
//! waits for that checkpoint: its victims are held for it in this pass,
//! none is signalled, and the first periodic pass after the checkpoint
//! decides afresh.

use std::cmp::Reverse;

use crate::Time;
use crate::cluster::GpuTypeId;
use crate::placement::{Allocation, FreeMap, find};
use crate::rule::Rule;
use crate::state::{Holding, State};
use crate::workload::{Class, Phase, WorkloadId, WorkloadSpec};

use super::bound::Bounds;
use super::budget::Budgets;
use super::contract::checkpoint_due;
use super::fairshare::{FairShare, Removed, Share, Side, Slot, Users, better_after_swap, ngpus};
use super::rank::Tier;
pub(crate) use super::victim::{Cand, Preemptor};

/// CON-5 order: in budget last, highest FS-1 value first, lowest impact
/// among equal standing (IMP-2), least work lost, fewest GPUs, id.
type VictimKey = (bool, Reverse<Share>, Share, u64, u32, WorkloadId);

/// Victims chosen for one preemptor and the placement they make possible.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    /// Indices into the candidates, with the rule that allows each.
    pub(crate) victims: Vec<(usize, Rule)>,
    pub(crate) alloc: Allocation,
}

/// Buffers of [`Victims`] reused from one pass to the next (emptied before
/// use; nothing in them outlives a pass).
#[derive(Clone, Debug, Default)]
pub(crate) struct Buffers {
    bounds: Bounds,
    room: Option<FreeMap>,
    order: Vec<usize>,
    pos: Vec<u32>,
    keys: Vec<VictimKey>,
    cands: Vec<Cand>,
    taken: Vec<bool>,
    left_by_type: Vec<usize>,
}

/// The candidates of one pass.
#[derive(Clone, Debug)]
pub(crate) struct Victims {
    pub(crate) cands: Vec<Cand>,
    /// CON-5 keys of `cands` (distinct: they end with the id).
    keys: Vec<VictimKey>,
    taken: Vec<bool>,
    left: usize,
    /// Candidates left per GPU type.
    left_by_type: Vec<usize>,
    /// Necessary conditions for a search to succeed, built on first use.
    bounds: Bounds,
    /// Scratch free map and order of searches.
    room: FreeMap,
    order: Vec<usize>,
    /// Per candidate: its place in CON-5 order (filled on first use).
    pos: Vec<u32>,
}

/// Whether a workload holding GPUs is a candidate victim at `now`, and if
/// so whether it is over budget and past its slice: running (not stopping),
/// not a service (SVC-1), and over budget or past its slice; in-budget
/// interactive work is never preempted for fair share (INT-1).
pub(crate) fn candidate(state: &State, now: Time, budgets: &Budgets, h: &Holding) -> Option<(bool, bool)> {
    if h.phase != Phase::Running || h.class == Class::Service {
        return None;
    }
    let over = budgets.over_work(h.account, h.member);
    let slice_ok = now.saturating_sub(h.started) >= state.contract.min_slice.get(h.class);
    (over || (slice_ok && h.class != Class::Interactive)).then_some((over, slice_ok))
}

impl Victims {
    /// Candidates at `now`, with their CON-5 keys.
    pub(crate) fn new(
        state: &State,
        now: Time,
        fs: &FairShare,
        users: &Users,
        budgets: &Budgets,
        buffers: Buffers,
    ) -> Victims {
        let Buffers { mut bounds, room, order, mut pos, mut keys, mut cands, mut taken, mut left_by_type } = buffers;
        keys.clear();
        cands.clear();
        // FS-1 values of the slots seen (no allocation changes here).
        let mut values: Vec<(Slot, f64)> = Vec::new();
        for h in state.holding() {
            let Some((over, slice_ok)) = candidate(state, now, budgets, h) else { continue };
            let slot = fs.slot(h.account);
            let side = Side { slot, user: users.of_member(h.member), ng: ngpus(h.gpus, h.weight) };
            let lost = h.unsaved_progress(now) * u64::from(h.gpus);
            let value = match values.iter().find(|(s, _)| *s == slot) {
                Some(&(_, v)) => v,
                None => {
                    values.push((slot, fs.value(slot)));
                    fs.value(slot)
                }
            };
            keys.push((!over, Reverse(Share(value)), Share(fs.impact(slot)), lost, h.gpus, h.w));
            let cluster = state.cluster.pool(h.pool).cluster;
            cands.push(Cand {
                w: h.w,
                side,
                over,
                class: h.class,
                slice_ok,
                checkpoint_due: checkpoint_due(state, now, h),
                gpu: Some(h.gpu),
                cluster,
                weight: h.weight,
            });
        }
        let left = cands.len();
        left_by_type.clear();
        left_by_type.resize(state.cluster.gpu_types.len(), 0);
        for c in &cands {
            if let Some(g) = c.gpu {
                left_by_type[g.0 as usize] += 1;
            }
        }
        bounds.clear();
        pos.clear();
        taken.clear();
        taken.resize(left, false);
        let room = room.unwrap_or_else(|| state.free.clone());
        Victims { taken, cands, keys, left, left_by_type, bounds, room, order, pos }
    }

    /// The buffers, for the next pass.
    pub(crate) fn into_buffers(self) -> Buffers {
        Buffers {
            bounds: self.bounds,
            room: Some(self.room),
            order: self.order,
            pos: self.pos,
            keys: self.keys,
            cands: self.cands,
            taken: self.taken,
            left_by_type: self.left_by_type,
        }
    }

    /// Candidates not yet taken by an earlier preemptor of this pass.
    pub(crate) fn left(&self) -> usize {
        self.left
    }

    /// Fair-share allocations changed (see [`Bounds::allocations_changed`]).
    pub(crate) fn allocations_changed(&mut self) {
        self.bounds.allocations_changed();
    }

    /// Takes candidate `i`.
    pub(crate) fn take(&mut self, i: usize) {
        self.bounds.forget();
        if !self.taken[i] {
            self.taken[i] = true;
            self.left -= 1;
            if let Some(g) = self.cands[i].gpu {
                self.left_by_type[g.0 as usize] -= 1;
            }
        }
    }

    /// The rule under which `p` may preempt candidate `c`, given the victims
    /// already chosen for `p` (`removed`).
    pub(crate) fn eligible(fs: &FairShare, users: &Users, p: &Preemptor, c: &Cand, removed: &Removed) -> Option<Rule> {
        match Self::before_swap(p, c)? {
            Some(rule) => Some(rule),
            None => {
                let w = Side { ng: ngpus(p.spec.gpus, c.weight), ..p.side };
                let over = p.tier == Tier::OverBudget;
                better_after_swap(fs, users, w, c.side, removed, over).then_some(Rule::NoPingPong)
            }
        }
    }

    /// The rules that do not depend on fair share: `None` if `p` may never
    /// preempt `c`, `Some(Some(rule))` if it may at once, `Some(None)` if
    /// CON-4 decides.
    pub(crate) fn before_swap(p: &Preemptor, c: &Cand) -> Option<Option<Rule>> {
        if p.spec.gpu_type.is_some_and(|g| Some(g) != c.gpu) || !p.spec.clusters.contains(c.cluster) {
            return None;
        }
        let w_over = p.tier == Tier::OverBudget;
        if !w_over && c.over {
            return Some(Some(Rule::BudgetOver));
        }
        if w_over != c.over || !c.slice_ok {
            return None;
        }
        if p.tier == Tier::Lane && c.class == Class::Batch {
            return Some(Some(Rule::Interactive));
        }
        if c.class == Class::Interactive {
            return None;
        }
        Some(None)
    }

    /// The walk of [`Victims::search`] over candidates `order` (in CON-5
    /// order): every eligible one not taken, with its rule, as if it never
    /// stopped.
    fn walk(&self, fs: &FairShare, users: &Users, p: &Preemptor, order: &[usize]) -> Vec<(usize, Rule)> {
        let mut removed = Removed::default();
        let mut chosen = Vec::new();
        for &i in order {
            let c = &self.cands[i];
            if self.taken[i] {
                continue;
            }
            let Some(rule) = Self::eligible(fs, users, p, c, &removed) else { continue };
            removed.add(fs, c.side.slot, c.side.user, c.side.ng);
            chosen.push((i, rule));
        }
        chosen
    }

    /// Fills `pos` with every candidate's place in CON-5 order (once per
    /// pass: the keys are distinct and do not change within a pass).
    fn rank_all(&mut self) {
        if self.pos.len() == self.cands.len() {
            return;
        }
        let mut all: Vec<usize> = (0..self.cands.len()).collect();
        all.sort_unstable_by_key(|&i| self.keys[i]);
        self.pos.resize(self.cands.len(), 0);
        for (place, &i) in all.iter().enumerate() {
            self.pos[i] = place as u32;
        }
    }

    /// `hyp` with the GPUs of the chosen candidates given back.
    fn freed(&self, state: &State, hyp: &FreeMap, chosen: &[(usize, Rule)]) -> FreeMap {
        let mut t = hyp.clone();
        for &(i, _) in chosen {
            t.give(&state.cluster, state.run(self.cands[i].w).alloc.as_ref().expect("running workload holds GPUs"));
        }
        t
    }

    /// Victims that let `p` start once their grace ends, on top of the GPUs
    /// in `hyp` (free plus those being released); `None` if there are none.
    ///
    /// The rule: walk the candidates in CON-5 order, adding every eligible
    /// one until the preemptor fits, then prune the set to a minimal one.
    /// It is computed without a placement per added victim:
    /// * the checks of [`Bounds`] turn down most searches that would find
    ///   nothing; the candidates they leave possible are a superset of those
    ///   the walk can choose, so the walk visits only them (in CON-5 order);
    /// * the walk's choices up to the point where it stops do not depend on
    ///   what comes after, so the eligible candidates are collected as if it
    ///   never stopped; placement only gets easier with more free GPUs, so
    ///   if the preemptor does not fit with all of them gone no prefix
    ///   helps, and otherwise the walk stops at the shortest prefix that
    ///   fits, found by bisection.
    pub(crate) fn search(
        &mut self,
        state: &State,
        fs: &FairShare,
        users: &Users,
        hyp: &FreeMap,
        p: &Preemptor,
    ) -> Option<Found> {
        let may = self.bounds.may_find(&self.cands, &self.taken, fs, users, p);
        // The candidates the walk could choose, then in CON-5 order.
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        if may {
            self.bounds.possible(fs, users, p, &self.cands, &self.taken, &mut order);
        }
        self.room.copy_from(hyp);
        for &i in &order {
            self.room.give(&state.cluster, state.run(self.cands[i].w).alloc.as_ref().expect("running"));
        }
        let refused = !may || find(&state.cluster, &self.room, p.spec, &|_| true).is_none();
        if !refused {
            self.rank_all();
            order.sort_unstable_by_key(|&i| self.pos[i]);
        }
        // Debug builds check both refusals, and the walk over the possible
        // candidates only, against the walk over all of them.
        if cfg!(debug_assertions) {
            let mut all: Vec<usize> = (0..self.cands.len()).collect();
            all.sort_unstable_by_key(|&i| self.keys[i]);
            let walk = self.walk(fs, users, p, &all);
            debug_assert!(may || walk.is_empty(), "a victim is eligible though none may be");
            debug_assert!(walk.iter().all(|(i, _)| order.contains(i)), "a victim is chosen that is not possible");
            debug_assert!(refused || walk == self.walk(fs, users, p, &order), "walks over all and possible differ");
        }
        let chosen = if refused { None } else { Some(self.walk(fs, users, p, &order)) };
        self.order = order;
        let mut chosen = chosen?;
        let cluster = &state.cluster;
        let spec = p.spec;
        let fits = |t: &FreeMap| find(cluster, t, spec, &|_| true).is_some();
        let mut trial = self.freed(state, hyp, &chosen);
        if chosen.is_empty() || !fits(&trial) {
            return None;
        }
        // The shortest prefix (of at least one victim) that fits.
        let (mut lo, mut hi) = (1, chosen.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if fits(&self.freed(state, hyp, &chosen[..mid])) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if hi < chosen.len() {
            chosen.truncate(hi);
            trial = self.freed(state, hyp, &chosen);
        }
        // Prune: drop victims (latest chosen first) not needed for a fit.
        // Fewer victims only make the CON-4 comparisons of the others easier.
        let mut j = chosen.len();
        while j > 0 {
            j -= 1;
            let mut t = trial.clone();
            t.take(cluster, state.run(self.cands[chosen[j].0].w).alloc.as_ref().expect("running"));
            if find(cluster, &t, spec, &|_| true).is_some() {
                trial = t;
                chosen.remove(j);
            }
        }
        let alloc = find(cluster, &trial, spec, &|_| true)?;
        Some(Found { victims: chosen, alloc })
    }
}

/// Whether a pending workload's shape can be served by victims at all in
/// this pass: some candidate left on a GPU type it may use.
pub(crate) fn any_for(v: &Victims, spec: &WorkloadSpec) -> bool {
    any_of_type(v, spec.gpu_type)
}

/// [`any_for`] for a gang of this GPU type constraint.
pub(crate) fn any_of_type(v: &Victims, gpu_type: Option<GpuTypeId>) -> bool {
    match gpu_type {
        None => v.left > 0,
        Some(g) => v.left_by_type.get(g.0 as usize).is_some_and(|n| *n > 0),
    }
}

/// Key of the per-pass cache of failed victim searches: a later preemptor
/// with the same key and at least as many GPUs fails too, because within a
/// pass the preemptor's side only gains allocation and candidates only go.
/// The full key is (slot, user, tier, GPU type, clusters, nodes, class);
/// the user fixes the slot, so failures are kept per user under the rest.
pub(crate) type SearchKey = (Tier, Option<GpuTypeId>, crate::cluster::ClusterSet, u32, Class);

/// Failed victim searches of one pass (smallest failing gang per key).
#[derive(Clone, Debug, Default)]
pub(crate) struct SearchFails {
    by_user: Vec<Vec<(SearchKey, u32)>>,
}

impl SearchFails {
    pub(crate) fn key(p: &Preemptor) -> SearchKey {
        (p.tier, p.spec.gpu_type, p.spec.clusters, p.spec.nodes, p.spec.class)
    }

    pub(crate) fn known(&self, p: &Preemptor) -> bool {
        self.known_for(p.side.user, Self::key(p), p.spec.gpus)
    }

    /// Whether a search of user `user` with this key and `gpus` GPUs is
    /// known to fail.
    pub(crate) fn known_for(&self, user: u32, k: SearchKey, gpus: u32) -> bool {
        self.by_user.get(user as usize).is_some_and(|v| v.iter().any(|(x, g)| *x == k && gpus >= *g))
    }

    pub(crate) fn record(&mut self, p: &Preemptor) {
        let (k, u) = (Self::key(p), p.side.user as usize);
        if self.by_user.len() <= u {
            self.by_user.resize_with(u + 1, Vec::new);
        }
        match self.by_user[u].iter_mut().find(|(x, _)| *x == k) {
            Some((_, g)) => *g = (*g).min(p.spec.gpus),
            None => self.by_user[u].push((k, p.spec.gpus)),
        }
    }

    /// Forgets every failure (after a preemption left spare GPUs behind).
    pub(crate) fn clear(&mut self) {
        self.by_user.iter_mut().for_each(Vec::clear);
    }
}
