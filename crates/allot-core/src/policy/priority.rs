//! `priority`: the legacy model (rules PRIO-1 … PRIO-3).
//!
//! * PRIO-1: levels urgent > high > normal > low, strict; FIFO within a
//!   level. A workload that does not fit does not block lower ones (greedy).
//! * PRIO-2: a team's work runs only on its legacy pools (inherited down the
//!   account path) plus pools marked `shared`.
//! * PRIO-3: a waiting workload may preempt running workloads marked
//!   `preemptible` of strictly lower priority in pools it may use. Victims:
//!   lowest priority first, then the most recently started (least progress
//!   lost), then highest id; the set is then pruned to a minimal one.
//!   GPUs being freed by earlier preemptions are claimed before new victims
//!   are chosen, so one waiting workload never triggers two rounds.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::Time;
use crate::account::AccountId;
use crate::cluster::PoolId;
use crate::decision::{Action, Decision};
use crate::placement::{Allocation, FreeMap, find, place};
use crate::rule::{Reason, Rule};
use crate::state::State;
use crate::workload::{Phase, Priority, WorkloadId, WorkloadSpec};

use super::{FailCache, Policy};

/// The legacy policy.
#[derive(Clone, Debug, Default)]
pub struct PriorityPolicy;

/// Whether an account may use a pool under PRIO-2.
pub(crate) fn pool_allowed(state: &State, account: AccountId, pool: PoolId) -> bool {
    state.cluster.pool(pool).shared
        || state.accounts.account(account).legacy_pools.as_ref().is_some_and(|p| p.contains(&pool))
}

/// Interns accounts' legacy-pool lists within a pass: workloads whose
/// accounts resolve to the same list share fail-cache entries.
#[derive(Default)]
struct Scopes<'a> {
    seen: Vec<&'a Option<Vec<PoolId>>>,
}

impl<'a> Scopes<'a> {
    fn of(&mut self, state: &'a State, account: AccountId) -> u64 {
        let pools = &state.accounts.account(account).legacy_pools;
        let i = self.seen.iter().position(|p| *p == pools).unwrap_or_else(|| {
            self.seen.push(pools);
            self.seen.len() - 1
        });
        i as u64
    }
}

/// Takes out of `free` the GPUs of `alloc` that are free there (a claim on
/// GPUs some of which are still being released).
pub(crate) fn reserve(cluster: &crate::cluster::Cluster, free: &mut FreeMap, alloc: &Allocation) {
    let parts = alloc.parts.iter().map(|&(n, m)| (n, m & free.free[n.0 as usize])).filter(|(_, m)| *m != 0).collect();
    free.take(cluster, &Allocation { parts });
}

/// A running workload that PRIO-3 (or SLURM-5) allows to be preempted.
pub(crate) struct Cand {
    pub w: WorkloadId,
    pub priority: Priority,
    pub started: Time,
    /// A workload never spans pools (PLACE-2).
    pub pool: PoolId,
    pub taken: bool,
}

impl PriorityPolicy {
    /// Chooses victims for `w` (PRIO-3, SLURM-5) among `cands` (preemptible
    /// running workloads in victim order, not yet taken) of strictly lower
    /// priority in pools `allowed`, returning them and the placement they
    /// make possible in `hyp`.
    pub(crate) fn victims(
        state: &State,
        hyp: &FreeMap,
        w: WorkloadId,
        cands: &[Cand],
        allowed: &dyn Fn(PoolId) -> bool,
    ) -> Option<(Vec<WorkloadId>, Allocation)> {
        let spec = state.spec(w);
        let pool_ok = |p: PoolId| allowed(p) && state.cluster.pool(p).may_serve(spec.gpu_type, spec.clusters);
        let mut trial = hyp.clone();
        let mut chosen = Vec::new();
        let mut found = None;
        let room = |t: &FreeMap| -> u32 {
            t.pool_free.iter().enumerate().filter(|(i, _)| pool_ok(PoolId(*i as u32))).map(|(_, f)| *f).sum()
        };
        let usable: Vec<WorkloadId> =
            cands.iter().filter(|c| !c.taken && c.priority < spec.priority && pool_ok(c.pool)).map(|c| c.w).collect();
        let reachable: u32 = usable.iter().map(|v| state.spec(*v).gpus).sum();
        if room(hyp) + reachable < spec.gpus {
            return None;
        }
        for v in usable {
            trial.give(&state.cluster, state.run(v).alloc.as_ref().expect("running"));
            chosen.push(v);
            if room(&trial) < spec.gpus {
                continue;
            }
            if let Some(a) = find(&state.cluster, &trial, spec, &allowed) {
                found = Some(a);
                break;
            }
        }
        found?;
        // Prune: drop victims (latest chosen first) not needed for a fit.
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let mut t = trial.clone();
            t.take(&state.cluster, state.run(chosen[i]).alloc.as_ref().expect("running"));
            if find(&state.cluster, &t, spec, &allowed).is_some() {
                trial = t;
                chosen.remove(i);
            }
        }
        let alloc = find(&state.cluster, &trial, spec, &allowed)?;
        Some((chosen, alloc))
    }
}

/// The working state of one pass.
struct PrioPass<'a> {
    state: &'a State,
    free: FreeMap,
    /// Free GPUs plus those of stopping workloads not yet claimed.
    hyp: FreeMap,
    /// PRIO-3 candidates, put in victim order when first needed.
    cands: Vec<Cand>,
    sorted: bool,
    /// The lowest priority among them.
    lowest: Option<Priority>,
    fails: FailCache,
    scopes: Scopes<'a>,
    out: Vec<Decision>,
}

impl<'a> PrioPass<'a> {
    fn new(state: &'a State) -> PrioPass<'a> {
        let cluster = &state.cluster;
        let free = state.free.clone();
        let mut hyp = state.free.clone();
        let mut cands = Vec::new();
        for h in state.holding() {
            if h.phase == Phase::Stopping {
                hyp.give(cluster, state.run(h.w).alloc.as_ref().expect("stopping holds GPUs"));
            } else if h.preemptible {
                // A PRIO-3 candidate.
                cands.push(Cand { w: h.w, priority: h.priority, started: h.started, pool: h.pool, taken: false });
            }
        }
        PrioPass {
            state,
            free,
            hyp,
            lowest: cands.iter().map(|c| c.priority).min(),
            cands,
            sorted: false,
            fails: FailCache::default(),
            scopes: Scopes::default(),
            out: Vec::new(),
        }
    }

    /// Serves one level (PRIO-1) in FIFO order; `false` once nothing at
    /// this level or below can start or preempt.
    ///
    /// The level's waiting work comes from the pending index as groups of
    /// one account and shape, merged by `(submit, id)`. A workload whose
    /// shape (in its scope) is known to fail on the free GPUs and to be
    /// hopeless at this level does nothing; both caches only grow during
    /// the level, so every later workload of its group would do nothing
    /// too, and the group leaves the merge at once. The early exit below is
    /// checked before every workload taken, as before every workload of the
    /// level: the ones left out change nothing, and the exit condition only
    /// gets easier at lower levels, so it fires at the same point or, with
    /// nothing decided in between, later or at the end.
    fn level(&mut self, level: Priority) -> bool {
        let state = self.state;
        // Shapes that found no room even with GPUs being freed, and no
        // victims, at this level: larger ones of the same scope cannot either.
        let mut hopeless = FailCache::default();
        let may_preempt = self.lowest.is_some_and(|p| p < level);
        let mut groups = Vec::new();
        let mut heads = BinaryHeap::new();
        for ((_, account, _), set) in state.pending_index().level(level) {
            let sc = self.scopes.of(state, *account);
            let mut it = set.iter();
            if let Some(&e) = it.next() {
                heads.push(Reverse((e, groups.len())));
                groups.push((sc, it));
            }
        }
        while let Some(Reverse(((_, w), g))) = heads.pop() {
            let sc = groups[g].0;
            let spec = state.spec(w);
            // Nothing free, nothing being freed, no victims: nobody at
            // this level or below can start or preempt.
            if !may_preempt && self.free.pool_free.iter().all(|f| *f == 0) && self.hyp.pool_free.iter().all(|f| *f == 0)
            {
                return false;
            }
            if self.fails.known_to_fail(spec, sc) && hopeless.known_to_fail(spec, sc) {
                continue;
            }
            self.consider(w, sc, level, may_preempt, &mut hopeless);
            if let Some(&e) = groups[g].1.next() {
                heads.push(Reverse((e, g)));
            }
        }
        true
    }

    /// Puts the PRIO-3 candidates in victim order (keys are distinct: they
    /// end with the id).
    fn sort(&mut self) {
        if !self.sorted {
            self.cands.sort_unstable_by_key(|c| (c.priority, Reverse(c.started), Reverse(c.w)));
            self.sorted = true;
        }
    }

    /// Starts, claims for or preempts for one waiting workload (PRIO-1,
    /// PRIO-3).
    fn consider(&mut self, w: WorkloadId, sc: u64, level: Priority, may_preempt: bool, hopeless: &mut FailCache) {
        let state = self.state;
        let cluster = &state.cluster;
        let spec = state.spec(w);
        let allowed = |p: PoolId| pool_allowed(state, spec.account, p);
        if !self.fails.known_to_fail(spec, sc) {
            match find(cluster, &self.free, spec, &allowed) {
                Some(alloc) => {
                    self.free.take(cluster, &alloc);
                    reserve(cluster, &mut self.hyp, &alloc);
                    let reason = Reason::new(
                        Rule::PrioOrder,
                        format!("{} priority, next in its level and fits", level.as_str()),
                    );
                    self.out.push(Decision { action: Action::Start { workload: w, alloc }, reason });
                    return;
                }
                None => self.fails.record(spec, sc),
            }
        }
        if hopeless.known_to_fail(spec, sc) {
            return;
        }
        // Already being freed for it (or for anyone): claim and wait.
        if let Some(alloc) = find(cluster, &self.hyp, spec, &allowed) {
            self.hyp.take(cluster, &alloc);
            reserve(cluster, &mut self.free, &alloc);
            return;
        }
        let found = if may_preempt {
            self.sort();
            PriorityPolicy::victims(state, &self.hyp, w, &self.cands, &allowed)
        } else {
            None
        };
        let Some((vs, alloc)) = found else {
            hopeless.record(spec, sc);
            return;
        };
        for &v in &vs {
            self.hyp.give(cluster, state.run(v).alloc.as_ref().expect("running"));
            let reason = Reason::new(
                Rule::PrioPreempt,
                format!("preempted by {} ({} > {})", spec.id, level.as_str(), state.spec(v).priority.as_str()),
            );
            self.out.push(Decision { action: Action::Preempt { workload: v, by: Some(w) }, reason });
        }
        for c in self.cands.iter_mut().filter(|c| vs.contains(&c.w)) {
            c.taken = true;
        }
        self.hyp.take(cluster, &alloc);
        reserve(cluster, &mut self.free, &alloc);
    }
}

impl Policy for PriorityPolicy {
    fn name(&self) -> &'static str {
        "priority"
    }

    fn admit(&self, state: &State, spec: &WorkloadSpec) -> Result<(), Reason> {
        let fits = state.cluster.pools.iter().enumerate().any(|(i, p)| {
            pool_allowed(state, spec.account, PoolId(i as u32))
                && p.may_serve(spec.gpu_type, spec.clusters)
                && if spec.nodes == 0 {
                    spec.gpus <= p.nodes * p.gpus_per_node
                } else {
                    spec.nodes <= p.nodes && spec.gpus / spec.nodes <= p.gpus_per_node
                }
        });
        if fits {
            Ok(())
        } else {
            Err(Reason::new(
                Rule::PrioPools,
                format!(
                    "{} GPUs never fit the legacy pools of {} plus the shared pools",
                    spec.gpus,
                    state.accounts.account(spec.account).path
                ),
            ))
        }
    }

    fn schedule(&mut self, state: &State, _now: Time) -> Vec<Decision> {
        let mut pass = PrioPass::new(state);
        for level in Priority::ALL.into_iter().rev() {
            if !pass.level(level) {
                break;
            }
        }
        pass.out
    }

    fn explain(&self, state: &State, w: WorkloadId, _now: Time) -> Reason {
        let spec = state.spec(w);
        let higher = state.pending.iter().filter(|(_, x)| state.spec(*x).priority > spec.priority).count();
        explain_with(state, w, higher)
    }

    fn explain_all(&self, state: &State, ws: &[WorkloadId], _now: Time) -> Vec<Reason> {
        // Waiting workloads per level, counted once.
        let mut at = [0usize; Priority::ALL.len()];
        for (_, x) in &state.pending {
            at[state.spec(*x).priority as usize] += 1;
        }
        ws.iter()
            .map(|&w| {
                let higher: usize = at[state.spec(w).priority as usize + 1..].iter().sum();
                explain_with(state, w, higher)
            })
            .collect()
    }
}

/// Why pending `w` waits, `higher` workloads of higher priority waiting.
fn explain_with(state: &State, w: WorkloadId, higher: usize) -> Reason {
    let spec = state.spec(w);
    let allowed = |p: PoolId| pool_allowed(state, spec.account, p);
    match place(&state.cluster, &state.free, spec, &allowed) {
        Ok(_) => Reason::new(Rule::PrioOrder, "fits now; starts at the next scheduling pass"),
        Err(f) => Reason::new(
            Rule::PrioPools,
            format!(
                "{f} (legacy pools of {} plus shared); {higher} higher-priority workloads waiting",
                state.accounts.account(spec.account).path
            ),
        ),
    }
}
