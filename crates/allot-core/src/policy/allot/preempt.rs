//! Choosing victims for a waiting workload (rules BUD-2, CON-1, CON-4,
//! CON-5, INT-1, SVC-1; see `docs/contract.md`).
//!
//! Candidates are built once per pass: running (not stopping) workloads that
//! are not services (SVC-1) and that some waiting workload may ever preempt
//! in this pass, i.e. over budget or past their slice. They are sorted once
//! in CON-5 order: over budget first, then the slots furthest above their
//! fair share (highest FS-1 value), then the least work lost (GPU-seconds
//! since the last checkpoint), then the fewest GPUs, then id. For one
//! preemptor the sorted list is walked, eligible victims are added until the
//! preemptor can be placed, and the set is pruned to a minimal one (latest
//! added first), which frees as few GPUs beyond the need as the order allows.
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

use std::cmp::Reverse;
use std::collections::BTreeMap;

use crate::Time;
use crate::cluster::GpuTypeId;
use crate::decision::Rule;
use crate::placement::{Allocation, FreeMap, find};
use crate::state::State;
use crate::workload::{Class, Phase, WorkloadId, WorkloadSpec};

use super::budget::Budgets;
use super::fairshare::{FairShare, Removed, Share, Side, Slot, Users, held_weight, ngpus, swap};
use super::rank::Tier;

/// A running workload that may be preempted in this pass.
#[derive(Clone, Debug)]
pub(crate) struct Cand {
    pub(crate) w: WorkloadId,
    pub(crate) side: Side,
    pub(crate) over: bool,
    pub(crate) class: Class,
    pub(crate) slice_ok: bool,
    pub(crate) gpu: Option<GpuTypeId>,
    /// Normalisation weight of the GPUs it holds (where the preemptor lands).
    pub(crate) weight: f64,
}

/// CON-5 order: in budget last, highest FS-1 value first, least work
/// lost, fewest GPUs, id.
type VictimKey = (bool, Reverse<Share>, u64, u32, WorkloadId);

/// The preemptor's view: who it is and how it ranks.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Preemptor<'s> {
    pub(crate) w: WorkloadId,
    pub(crate) spec: &'s WorkloadSpec,
    pub(crate) side: Side,
    pub(crate) tier: Tier,
}

/// Victims chosen for one preemptor and the placement they make possible.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    /// Indices into the candidates, with the rule that allows each.
    pub(crate) victims: Vec<(usize, Rule)>,
    pub(crate) alloc: Allocation,
}

/// The candidates of one pass.
#[derive(Clone, Debug, Default)]
pub(crate) struct Victims {
    pub(crate) cands: Vec<Cand>,
    taken: Vec<bool>,
    left: usize,
    /// Candidates left per GPU type.
    left_by_type: Vec<usize>,
}

impl Victims {
    /// Candidates at `now`, in CON-5 order.
    pub(crate) fn new(state: &State, now: Time, fs: &FairShare, users: &Users, budgets: &Budgets) -> Victims {
        let mut keyed: Vec<(VictimKey, Cand)> = Vec::new();
        for &w in &state.running {
            let (spec, run) = (state.spec(w), state.run(w));
            if run.phase != Phase::Running || spec.class == Class::Service {
                continue;
            }
            let over = budgets.over(spec.account);
            let slice_ok = now.saturating_sub(run.started.unwrap_or(now)) >= state.contract.min_slice.get(spec.class);
            // In-budget interactive work is never preempted for fair share (INT-1).
            if !over && (!slice_ok || spec.class == Class::Interactive) {
                continue;
            }
            let slot = fs.slot(spec.account);
            let weight = held_weight(state, w);
            let side = Side { slot, user: users.of(fs, spec), ng: ngpus(spec.gpus, weight) };
            let gpu = run.alloc.as_ref().and_then(|a| a.parts.first()).map(|(n, _)| state.cluster.node(*n).gpu);
            let lost = run.unsaved_progress(spec, now) * u64::from(spec.gpus);
            let key = (!over, Reverse(Share(fs.value(slot))), lost, spec.gpus, w);
            let cand = Cand { w, side, over, class: spec.class, slice_ok, gpu, weight };
            keyed.push((key, cand));
        }
        keyed.sort_by_key(|a| a.0);
        let cands: Vec<Cand> = keyed.into_iter().map(|(_, c)| c).collect();
        let left = cands.len();
        let mut left_by_type = vec![0; state.cluster.gpu_types.len()];
        for c in &cands {
            if let Some(g) = c.gpu {
                left_by_type[g.0 as usize] += 1;
            }
        }
        Victims { taken: vec![false; left], cands, left, left_by_type }
    }

    /// Candidates not yet taken by an earlier preemptor of this pass.
    pub(crate) fn left(&self) -> usize {
        self.left
    }

    pub(crate) fn take(&mut self, i: usize) {
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
        if p.spec.gpu_type.is_some_and(|g| Some(g) != c.gpu) {
            return None;
        }
        let w_over = p.tier == Tier::OverBudget;
        if !w_over && c.over {
            return Some(Rule::BudgetOver);
        }
        if w_over != c.over || !c.slice_ok {
            return None;
        }
        if p.tier == Tier::Lane && c.class == Class::Batch {
            return Some(Rule::Interactive);
        }
        if c.class == Class::Interactive {
            return None;
        }
        let s = swap(fs, users, Side { ng: ngpus(p.spec.gpus, c.weight), ..p.side }, c.side, removed);
        s.strictly_better().then_some(Rule::NoPingPong)
    }

    /// Victims that let `p` start once their grace ends, on top of the GPUs
    /// in `hyp` (free plus those being released); `None` if there are none.
    pub(crate) fn search(
        &self,
        state: &State,
        fs: &FairShare,
        users: &Users,
        hyp: &FreeMap,
        p: &Preemptor,
    ) -> Option<Found> {
        let cluster = &state.cluster;
        let spec = p.spec;
        let pools_free = |m: &FreeMap| -> u32 {
            cluster
                .pools
                .iter()
                .zip(&m.pool_free)
                .filter(|(pool, _)| spec.gpu_type.is_none_or(|g| g == pool.gpu))
                .map(|(_, f)| *f)
                .sum()
        };
        let mut trial = hyp.clone();
        let mut removed = Removed::default();
        let mut chosen: Vec<(usize, Rule)> = Vec::new();
        let mut fits = false;
        for (i, c) in self.cands.iter().enumerate() {
            if self.taken[i] {
                continue;
            }
            let Some(rule) = Self::eligible(fs, users, p, c, &removed) else { continue };
            trial.give(cluster, state.run(c.w).alloc.as_ref().expect("running workload holds GPUs"));
            removed.add(fs, c.side.slot, c.side.user, c.side.ng);
            chosen.push((i, rule));
            if pools_free(&trial) >= spec.gpus && find(cluster, &trial, spec, &|_| true).is_some() {
                fits = true;
                break;
            }
        }
        if !fits {
            return None;
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
    match spec.gpu_type {
        None => v.left > 0,
        Some(g) => v.left_by_type.get(g.0 as usize).is_some_and(|n| *n > 0),
    }
}

/// Key of the per-pass cache of failed victim searches: a later preemptor
/// with the same key and at least as many GPUs fails too, because within a
/// pass the preemptor's side only gains allocation and candidates only go.
pub(crate) type SearchKey = (Slot, u32, Tier, Option<GpuTypeId>, u32, Class);

/// Failed victim searches of one pass (smallest failing gang per key).
#[derive(Clone, Debug, Default)]
pub(crate) struct SearchFails {
    keys: BTreeMap<SearchKey, u32>,
}

impl SearchFails {
    pub(crate) fn key(p: &Preemptor) -> SearchKey {
        (p.side.slot, p.side.user, p.tier, p.spec.gpu_type, p.spec.nodes, p.spec.class)
    }

    pub(crate) fn known(&self, p: &Preemptor) -> bool {
        self.keys.get(&Self::key(p)).is_some_and(|g| p.spec.gpus >= *g)
    }

    pub(crate) fn record(&mut self, p: &Preemptor) {
        let g = self.keys.entry(Self::key(p)).or_insert(p.spec.gpus);
        *g = (*g).min(p.spec.gpus);
    }

    /// Forgets every failure (after a preemption left spare GPUs behind).
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
    }
}
