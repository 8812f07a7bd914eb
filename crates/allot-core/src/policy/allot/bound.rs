//! Cheap necessary conditions for a victim search to succeed (rules BUD-2,
//! INT-1, CON-4), so that most searches that find nothing cost a few
//! comparisons instead of a walk over the candidates in CON-5 order.
//!
//! Both are exact as refusals: when one says no, the walk of
//! [`super::preempt::Victims::search`] would have found nothing either.
//! * [`Bounds::may_find`]: the walk's first victim must be eligible with no
//!   victim chosen yet. Candidates are grouped by user (hence slot and
//!   budget status) and GPU type; within a group only the smallest can
//!   decide (below).
//! * [`Bounds::possible`]: every victim the walk can choose is in this set,
//!   whatever the order and whatever it chose before; if the preemptor does
//!   not fit with all of them gone, it does not fit with the walk's victims
//!   gone (placement only gets easier with more free GPUs). The walk then
//!   visits only these candidates.
//!
//! Monotonicity used by both: in the CON-4 comparison ([`swap`]) the
//! preemptor's side after the swap only rises with what it gains and falls
//! with what is removed on its side, and the victim's side only falls with
//! the victim's GPUs and with what is removed on its side. Every step
//! (subtraction, addition, `max(0)`, division by a positive constant) is
//! monotone in IEEE arithmetic, so the bounds hold for the computed values,
//! not only for the real numbers.
//!
//! Both run once per waiting user and shape in most passes, so they do not
//! walk every group: for slots that diverge at `a` (on the preemptor's path)
//! and its sibling `b`, the comparison is the same for every candidate below
//! `b` of one kind (budget status, GPU type) but for the candidate's GPUs, so
//! the candidates below each slot are kept per kind, smallest first
//! ([`Bounds::runs`]), and one bisection per sibling decides them all. The
//! comparisons are the same floating-point expressions on the same operands
//! as [`better_after_swap`] and [`may_rank_better`], so the answers are
//! exactly theirs.

use crate::cluster::GpuTypeId;
use crate::workload::Class;

use super::fairshare::{FairShare, ROOT, Removed, Side, Slot, Users, better_after_swap, impact_decides, ngpus};
use super::rank::Tier;
use super::victim::{Cand, Preemptor};

/// What the candidates left offer at best, built on first use in a pass.
/// A candidate taken later stays counted, which only makes the bounds
/// looser (they still never refuse a search that would succeed); it is
/// only left out of [`Bounds::possible`], whose GPUs are given back.
#[derive(Clone, Debug, Default)]
pub(crate) struct Bounds {
    built: bool,
    /// (Over budget, GPU type) of the candidates left.
    kinds: Vec<(bool, Option<GpuTypeId>)>,
    /// Candidates left that only CON-4 can make eligible (batch work past
    /// its slice), grouped by user (hence slot and budget status) and GPU
    /// type.
    groups: Vec<Group>,
    /// Per slot: its groups, chained through `group_next`.
    group_first: Vec<u32>,
    group_next: Vec<u32>,
    /// The CON-4 candidates below each slot (all but the root), per kind:
    /// runs of `below_kind` ordered by the slot's parent, the slot and the
    /// kind; each run's candidates by normalised GPUs, smallest first.
    runs: Vec<Run>,
    below_kind: Vec<(f64, usize)>,
    /// Per slot: the first of the runs of its children (`runs_end` ends
    /// them), `NONE` without any.
    runs_at: Vec<u32>,
    runs_end: Vec<u32>,
    /// (Group, normalised GPUs, candidate) of the members of all groups,
    /// by group and then size; group `g`'s are at `starts[g]..starts[g + 1]`.
    members: Vec<(u32, f64, usize)>,
    starts: Vec<usize>,
    /// Candidates left under BUD-2 or INT-1: over budget, in budget.
    by_status: [Vec<(usize, Option<GpuTypeId>)>; 2],
    /// Candidates left when built.
    count: usize,
    /// Refusals of [`Bounds::may_find`] since allocations last changed:
    /// (user, tier, GPU type) and the smallest gang refused. The answer
    /// does not depend on the preemptor's node count or class, and a larger
    /// gang only ranks worse after the swap, so it is refused too.
    refused: Vec<(RefusalKey, u32)>,
    /// (Key, normalised GPUs, candidate, weight) per member and ancestor:
    /// this pass's, the last pass that built the runs', and sorted; and the
    /// number of slots then.
    runs_input: Vec<(RunKey, f64, usize, f64)>,
    runs_last: Vec<(RunKey, f64, usize, f64)>,
    sort: Vec<(RunKey, f64, usize, f64)>,
    runs_slots: usize,
    /// Buffers of [`Bounds::build`] and [`Bounds::possible`].
    first: Vec<u32>,
    next: Vec<u32>,
    path: Vec<Slot>,
    on_path: Vec<f64>,
    held_on_path: Vec<f64>,
}

const NONE: u32 = u32::MAX;

/// Parent, slot, budget status and GPU type of a [`Run`].
type RunKey = (Slot, Slot, bool, Option<GpuTypeId>);

/// User, tier and GPU type of a refused search.
type RefusalKey = (u32, Tier, Option<GpuTypeId>);

/// The CON-4 candidates of one kind below one slot (see [`Bounds::runs`]).
#[derive(Clone, Debug)]
struct Run {
    parent: Slot,
    slot: Slot,
    over: bool,
    gpu: Option<GpuTypeId>,
    weight: f64,
    /// Their place in `below_kind`.
    from: usize,
    to: usize,
}

#[derive(Clone, Debug)]
struct Group {
    over: bool,
    /// Slot and user, with the fewest normalised GPUs of a member.
    side: Side,
    gpu: Option<GpuTypeId>,
    weight: f64,
}

impl Bounds {
    /// Notes that a candidate was taken (the refusals no longer hold).
    pub(crate) fn forget(&mut self) {
        self.refused.clear();
    }

    /// Notes that fair-share allocations changed (a start, claim or
    /// preemption): earlier refusals no longer hold.
    pub(crate) fn allocations_changed(&mut self) {
        self.refused.clear();
    }

    /// Empties the bounds for a new pass, keeping the buffers.
    pub(crate) fn clear(&mut self) {
        self.built = false;
        self.kinds.clear();
        self.groups.clear();
        self.members.clear();
        self.by_status.iter_mut().for_each(Vec::clear);
        self.count = 0;
        self.refused.clear();
    }

    fn build(&mut self, fs: &FairShare, cands: &[Cand], taken: &[bool], users: usize) {
        if self.built {
            return;
        }
        self.built = true;
        // Per user: its groups (one per GPU type), chained.
        let (first, next) = (&mut self.first, &mut self.next);
        first.clear();
        first.resize(users, NONE);
        next.clear();
        for (i, c) in cands.iter().enumerate().filter(|(i, _)| !taken[*i]) {
            if !self.kinds.contains(&(c.over, c.gpu)) {
                self.kinds.push((c.over, c.gpu));
            }
            self.by_status[usize::from(!c.over)].push((i, c.gpu));
            self.count += 1;
            if !c.slice_ok || c.class != Class::Batch {
                continue;
            }
            let mut g = first[c.side.user as usize];
            while g != NONE && self.groups[g as usize].gpu != c.gpu {
                g = next[g as usize];
            }
            if g == NONE {
                g = self.groups.len() as u32;
                self.groups.push(Group { over: c.over, side: c.side, gpu: c.gpu, weight: c.weight });
                next.push(first[c.side.user as usize]);
                first[c.side.user as usize] = g;
            }
            let group = &mut self.groups[g as usize];
            debug_assert_eq!((group.over, group.side.slot, group.weight), (c.over, c.side.slot, c.weight));
            if c.side.ng < group.side.ng {
                group.side.ng = c.side.ng;
            }
            self.members.push((g, c.side.ng, i));
        }
        self.members.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        self.starts.clear();
        self.starts.push(0);
        for g in 0..self.groups.len() as u32 {
            let at = self.starts.last().copied().unwrap_or(0);
            self.starts.push(at + self.members[at..].iter().take_while(|m| m.0 == g).count());
        }
        self.chain_by_slot(fs.slots());
        self.build_runs(fs);
    }

    /// Chains the groups per slot.
    fn chain_by_slot(&mut self, slots: usize) {
        self.group_first.clear();
        self.group_first.resize(slots, NONE);
        self.group_next.clear();
        for (g, group) in self.groups.iter().enumerate() {
            let s = group.side.slot as usize;
            self.group_next.push(self.group_first[s]);
            self.group_first[s] = g as u32;
        }
    }

    /// Fills [`Bounds::runs`]: every member once under each of its slot's
    /// ancestors but the root.
    /// The runs depend only on this input, so a pass whose input is the
    /// last pass's (no candidate started, stopped or changed status: most
    /// passes of a busy cluster) keeps them without sorting again.
    fn build_runs(&mut self, fs: &FairShare) {
        let input = &mut self.runs_input;
        input.clear();
        for &(g, ng, i) in &self.members {
            let group = &self.groups[g as usize];
            let mut x = group.side.slot;
            while x != ROOT {
                input.push(((fs.parent(x), x, group.over, group.gpu), ng, i, group.weight));
                x = fs.parent(x);
            }
        }
        if self.runs_slots == fs.slots() && *input == self.runs_last {
            return;
        }
        self.runs_slots = fs.slots();
        self.runs_last.clone_from(input);
        let sort = &mut self.sort;
        sort.clone_from(input);
        sort.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        self.runs.clear();
        self.below_kind.clear();
        self.below_kind.extend(sort.iter().map(|e| (e.1, e.2)));
        for (at, &((parent, slot, over, gpu), _, _, weight)) in sort.iter().enumerate() {
            match self.runs.last_mut() {
                Some(r) if (r.parent, r.slot, r.over, r.gpu) == (parent, slot, over, gpu) => r.to = at + 1,
                _ => self.runs.push(Run { parent, slot, over, gpu, weight, from: at, to: at + 1 }),
            }
        }
        self.runs_at.clear();
        self.runs_at.resize(fs.slots(), NONE);
        self.runs_end.clear();
        self.runs_end.resize(fs.slots(), NONE);
        for (k, r) in self.runs.iter().enumerate() {
            let p = r.parent as usize;
            if self.runs_at[p] == NONE {
                self.runs_at[p] = k as u32;
            }
            self.runs_end[p] = k as u32 + 1;
        }
    }

    /// The runs of the siblings of `a` (at the level where a slot below
    /// one of them diverges from `a`'s subtree), of budget status `over`
    /// and a GPU type the preemptor may use.
    fn sibling_runs<'s>(
        &'s self,
        fs: &FairShare,
        a: Slot,
        over: bool,
        typed: impl Fn(Option<GpuTypeId>) -> bool + 's,
    ) -> impl Iterator<Item = &'s Run> + 's {
        let p = fs.parent(a) as usize;
        let range = match self.runs_at[p] {
            NONE => 0..0,
            at => at as usize..self.runs_end[p] as usize,
        };
        self.runs[range].iter().filter(move |r| r.slot != a && r.over == over && typed(r.gpu))
    }

    /// Whether some candidate left is eligible for `p` while no victim is
    /// chosen yet. BUD-2 and INT-1 need only a candidate of the right
    /// budget status and GPU type. For CON-4, within a group (same budget
    /// status, slot, user and GPU type, hence weight) the preemptor's side
    /// of the swap is the same for every candidate and the victim's side
    /// only falls as the victim's GPUs grow, so the group's smallest
    /// candidate decides.
    pub(crate) fn may_find(
        &mut self,
        cands: &[Cand],
        taken: &[bool],
        fs: &FairShare,
        users: &Users,
        p: &Preemptor,
    ) -> bool {
        self.build(fs, cands, taken, users.len());
        let key = (p.side.user, p.tier, p.spec.gpu_type);
        if self.refused.iter().any(|(k, g)| *k == key && p.spec.gpus >= *g) {
            return false;
        }
        let found = self.may_find_now(fs, users, p);
        if !found {
            match self.refused.iter_mut().find(|(k, _)| *k == key) {
                Some((_, g)) => *g = (*g).min(p.spec.gpus),
                None => self.refused.push((key, p.spec.gpus)),
            }
        }
        found
    }

    fn may_find_now(&self, fs: &FairShare, users: &Users, p: &Preemptor) -> bool {
        let typed = |g: Option<GpuTypeId>| p.may_use(g);
        let w_over = p.over();
        // BUD-2: an in-budget preemptor may preempt any over-budget candidate.
        if !w_over && self.kinds.iter().any(|&(over, g)| over && typed(g)) {
            return true;
        }
        // INT-1: every in-budget candidate is batch work past its slice.
        if p.tier == Tier::Lane && self.kinds.iter().any(|&(over, g)| !over && typed(g)) {
            return true;
        }
        let none = Removed::default();
        let kind = |g: &Group| g.over == w_over && typed(g.gpu);
        let better = |g: &Group| {
            let w = Side { ng: ngpus(p.spec.gpus, g.weight), ..p.side };
            better_after_swap(fs, users, w, g.side, &none, w_over)
        };
        // A candidate in another slot is compared at the level where the
        // two slots diverge, whatever its user, so per sibling and kind the
        // smallest decides. In p's own slot users are compared.
        let mut a = p.side.slot;
        while a != ROOT {
            let found = self.sibling_runs(fs, a, w_over, typed).any(|r| match level_decides(fs, a, r.slot, w_over) {
                Some(decided) => decided,
                None => {
                    let (b, v_ng) = (r.slot, self.below_kind[r.from].0);
                    // `better_after_swap` with nothing removed (`x - 0.0` is `x`).
                    let w_after = fs.value_with(a, fs.alloc(a) + ngpus(p.spec.gpus, r.weight));
                    w_after < fs.value_with(b, fs.alloc(b) - v_ng) * fs.keep()
                }
            });
            if found {
                return true;
            }
            a = fs.parent(a);
        }
        self.groups_in(p.side.slot).filter(|g| kind(g)).any(better)
    }

    /// The groups of one slot.
    fn groups_in(&self, s: Slot) -> impl Iterator<Item = &Group> {
        self.group_ids_in(s).map(|g| &self.groups[g])
    }

    /// The indices of the groups of one slot.
    fn group_ids_in(&self, s: Slot) -> impl Iterator<Item = usize> + '_ {
        let live = |g: &u32| *g != NONE;
        std::iter::successors(Some(self.group_first[s as usize]).filter(live), move |&g| {
            Some(self.group_next[g as usize]).filter(live)
        })
        .map(|g| g as usize)
    }

    /// The candidates left that the walk for `p` could ever choose (after
    /// [`Bounds::may_find`]).
    ///
    /// A chosen victim is eligible when reached, given the victims chosen
    /// before it. Those only ever take allocation away: on the victim's
    /// side, which makes it harder, and on the preemptor's side, where it
    /// makes it easier. So the set is the least one closed under "eligible
    /// with nothing removed on its side and, on the preemptor's side, what
    /// the set's own candidates hold there": by induction along the walk,
    /// every victim it chooses is eligible with at most that removed, so
    /// it is in the set. Per sibling subtree and kind the check holds up to
    /// some size.
    ///
    /// The preemptor's own workloads are never chosen (same account, so the
    /// same budget status, and CON-4 never swaps a user's own work) except
    /// under INT-1, and a lane preemptor may take any candidate of its GPU
    /// type anyway.
    ///
    /// They are appended to `out`.
    pub(crate) fn possible(
        &mut self,
        fs: &FairShare,
        users: &Users,
        p: &Preemptor,
        cands: &[Cand],
        taken: &[bool],
        out: &mut Vec<usize>,
    ) {
        let typed = |g: Option<GpuTypeId>| p.may_use(g);
        let lane = p.tier == Tier::Lane;
        let w_over = p.over();
        let left = |i: &usize| !taken[*i];
        let status = |s: usize| self.by_status[s].iter().filter(|(i, g)| typed(*g) && left(i)).map(|(i, _)| *i);
        if !w_over {
            // BUD-2, and INT-1 for lane work.
            out.extend(status(0));
            if lane {
                out.extend(status(1));
                return;
            }
        }
        let path = &mut self.path;
        path.clear();
        let mut x = p.side.slot;
        while x != ROOT {
            path.push(x);
            x = fs.parent(x);
        }
        path.reverse();
        // What the walk can remove on p's side at each slot of its path is
        // at most what the candidates it can choose hold below that slot:
        // start from nothing, take every candidate eligible with that much
        // removed, and repeat with what those hold until nothing more is
        // taken (see above). A float sum of a subset (the walk's) is within
        // 2n·ε of the computed sum of the set; widen by more than that. The
        // amounts only grow, so the set only grows and the loop ends.
        let margin = 8.0 * (self.count as f64 + 2.0) * f64::EPSILON;
        let mut on_path = std::mem::take(&mut self.on_path);
        let mut held = std::mem::take(&mut self.held_on_path);
        on_path.clear();
        on_path.resize(self.path.len(), 0.0);
        let start = out.len();
        loop {
            out.truncate(start);
            self.con4_possible(fs, users, p, taken, &on_path, out);
            held.clear();
            held.resize(self.path.len(), 0.0);
            for &i in out.iter() {
                let c = &cands[i];
                let mut x = c.side.slot;
                while x != ROOT {
                    let d = fs.depth(x) as usize - 1;
                    if self.path.get(d) == Some(&x) {
                        held[d] += c.side.ng;
                    }
                    x = fs.parent(x);
                }
            }
            let mut grew = false;
            for (removable, h) in on_path.iter_mut().zip(&held) {
                let widened = h + h * margin;
                if widened > *removable {
                    *removable = widened;
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
        self.on_path = on_path;
        self.held_on_path = held;
    }

    /// The CON-4 part of [`Bounds::possible`]: every candidate left that
    /// `p` may rank better than with `on_path[d]` removed from its path's
    /// slot at depth `d + 1` and nothing from the candidate's side.
    fn con4_possible(
        &self,
        fs: &FairShare,
        users: &Users,
        p: &Preemptor,
        taken: &[bool],
        on_path: &[f64],
        out: &mut Vec<usize>,
    ) {
        let (w_over, left) = (p.over(), |i: &usize| !taken[*i]);
        let removed_at = |s: Slot| on_path[fs.depth(s) as usize - 1];
        // The check is monotone in the candidate's size: per sibling of a
        // slot on p's path and kind it holds for the smallest candidates
        // below the sibling up to some size, found by bisection.
        for &a in &self.path {
            for r in self.sibling_runs(fs, a, w_over, |g| p.may_use(g)) {
                let below = &self.below_kind[r.from..r.to];
                let n = match level_decides(fs, a, r.slot, w_over) {
                    Some(decided) => usize::from(decided) * below.len(),
                    None => {
                        let wa = fs.alloc(a) - removed_at(a);
                        let w_after = fs.value_with(a, wa + ngpus(p.spec.gpus, r.weight));
                        let b = r.slot;
                        below.partition_point(|m| w_after < fs.value_with(b, fs.alloc(b) - m.0) * fs.keep())
                    }
                };
                out.extend(below[..n].iter().map(|m| m.1).filter(left));
            }
        }
        // Per group of p's own slot (users compared), likewise.
        for g in self.group_ids_in(p.side.slot) {
            let group = &self.groups[g];
            if group.over != w_over || !p.may_use(group.gpu) {
                continue;
            }
            let side = Side { ng: ngpus(p.spec.gpus, group.weight), ..p.side };
            let members = &self.members[self.starts[g]..self.starts[g + 1]];
            let n = members.partition_point(|m| {
                may_rank_better(fs, users, side, Side { ng: m.1, ..group.side }, &removed_at, w_over)
            });
            out.extend(members[..n].iter().map(|m| m.2).filter(left));
        }
    }
}

/// [`impact_decides`] for slots known to diverge at `a` (on the
/// preemptor's side) and its sibling `b`.
fn level_decides(fs: &FairShare, a: Slot, b: Slot, over: bool) -> Option<bool> {
    let (ia, ib) = (fs.impact(a), fs.impact(b));
    (over && ia != ib).then_some(ia > ib)
}

/// Whether `w` could rank strictly better than `v` after a swap (CON-4)
/// in which at most `removed_at(a)` is removed from the slot `a` on `w`'s
/// side and nothing from `w`'s user or on `v`'s side; between over-budget
/// workloads (`over`) a difference in impact decides first (IMP-1), as in
/// [`better_after_swap`].
fn may_rank_better(
    fs: &FairShare,
    users: &Users,
    w: Side,
    v: Side,
    removed_at: &dyn Fn(Slot) -> f64,
    over: bool,
) -> bool {
    if let Some(better) = impact_decides(fs, w.slot, v.slot, over) {
        return better;
    }
    if let Some((a, b)) = fs.diverge(w.slot, v.slot) {
        let wa = fs.alloc(a) - removed_at(a);
        return fs.value_with(a, wa + w.ng) < fs.value_with(b, fs.alloc(b) - v.ng) * fs.keep();
    }
    if w.user != v.user {
        let wa = users.alloc[w.user as usize];
        let v_after = users.value_with(v.user, users.alloc[v.user as usize] - v.ng);
        return users.value_with(w.user, wa + w.ng) < v_after * fs.keep();
    }
    false
}
