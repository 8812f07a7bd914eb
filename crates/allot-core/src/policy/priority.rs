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

use crate::Time;
use crate::account::AccountId;
use crate::cluster::PoolId;
use crate::decision::{Action, Decision, Reason, Rule};
use crate::placement::{Allocation, FreeMap, find, place};
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
fn reserve(cluster: &crate::cluster::Cluster, free: &mut FreeMap, alloc: &Allocation) {
    let parts = alloc.parts.iter().map(|&(n, m)| (n, m & free.free[n.0 as usize])).filter(|(_, m)| *m != 0).collect();
    free.take(cluster, &Allocation { parts });
}

/// A running workload that PRIO-3 allows to be preempted.
struct Cand {
    w: WorkloadId,
    priority: Priority,
    /// A workload never spans pools (PLACE-2).
    pool: PoolId,
    taken: bool,
}

impl PriorityPolicy {
    /// Chooses victims for `w` (PRIO-3) among `cands` (preemptible running
    /// workloads in victim order, not yet taken), returning them and the
    /// placement they make possible in `hyp`.
    fn victims(state: &State, hyp: &FreeMap, w: WorkloadId, cands: &[Cand]) -> Option<(Vec<WorkloadId>, Allocation)> {
        let spec = state.spec(w);
        let allowed = |p: PoolId| pool_allowed(state, spec.account, p);
        let pool_ok = |p: PoolId| allowed(p) && spec.gpu_type.is_none_or(|g| g == state.cluster.pool(p).gpu);
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

impl Policy for PriorityPolicy {
    fn name(&self) -> &'static str {
        "priority"
    }

    fn admit(&self, state: &State, spec: &WorkloadSpec) -> Result<(), Reason> {
        let fits = state.cluster.pools.iter().enumerate().any(|(i, p)| {
            pool_allowed(state, spec.account, PoolId(i as u32))
                && spec.gpu_type.is_none_or(|g| g == p.gpu)
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
        let cluster = &state.cluster;
        let mut free = state.free.clone();
        // `hyp`: free GPUs plus those of stopping workloads not yet claimed.
        let mut hyp = state.free.clone();
        for &w in &state.running {
            if state.run(w).phase == Phase::Stopping {
                hyp.give(cluster, state.run(w).alloc.as_ref().expect("stopping holds GPUs"));
            }
        }
        // PRIO-3 candidates, in victim order, once per pass.
        let mut cands: Vec<Cand> = state
            .running
            .iter()
            .copied()
            .filter(|&v| state.run(v).phase == Phase::Running && state.spec(v).preemptible)
            .map(|v| {
                let first = state.run(v).alloc.as_ref().and_then(|a| a.parts.first()).expect("running holds GPUs").0;
                Cand { w: v, priority: state.spec(v).priority, pool: state.cluster.node(first).pool, taken: false }
            })
            .collect();
        cands.sort_by_key(|c| (c.priority, std::cmp::Reverse(state.run(c.w).started), std::cmp::Reverse(c.w)));
        let mut fails = FailCache::default();
        let mut scopes = Scopes::default();
        let mut out = Vec::new();
        // Pending workloads by level, each in FIFO order.
        let mut levels: [Vec<WorkloadId>; 4] = Default::default();
        for &(_, w) in &state.pending {
            levels[state.spec(w).priority as usize].push(w);
        }
        for level in Priority::ALL.into_iter().rev() {
            // Shapes that found no room even with GPUs being freed, and no
            // victims, at this level: larger ones of the same scope cannot either.
            let mut hopeless = FailCache::default();
            let may_preempt = cands.first().is_some_and(|c| c.priority < level);
            for &w in &levels[level as usize] {
                // Nothing free, nothing being freed, no victims: nobody at
                // this level or below can start or preempt.
                if !may_preempt && free.pool_free.iter().all(|f| *f == 0) && hyp.pool_free.iter().all(|f| *f == 0) {
                    return out;
                }
                let spec = state.spec(w);
                let sc = scopes.of(state, spec.account);
                let allowed = |p: PoolId| pool_allowed(state, spec.account, p);
                if !fails.known_to_fail(spec, sc) {
                    match find(cluster, &free, spec, &allowed) {
                        Some(alloc) => {
                            free.take(cluster, &alloc);
                            reserve(cluster, &mut hyp, &alloc);
                            let reason = Reason::new(
                                Rule::PrioOrder,
                                format!("{} priority, next in its level and fits", level.as_str()),
                            );
                            out.push(Decision { action: Action::Start { workload: w, alloc }, reason });
                            continue;
                        }
                        None => fails.record(spec, sc),
                    }
                }
                if hopeless.known_to_fail(spec, sc) {
                    continue;
                }
                // Already being freed for it (or for anyone): claim and wait.
                if let Some(alloc) = find(cluster, &hyp, spec, &allowed) {
                    hyp.take(cluster, &alloc);
                    reserve(cluster, &mut free, &alloc);
                    continue;
                }
                let found = if may_preempt { Self::victims(state, &hyp, w, &cands) } else { None };
                if let Some((vs, alloc)) = found {
                    for &v in &vs {
                        hyp.give(cluster, state.run(v).alloc.as_ref().expect("running"));
                        let reason = Reason::new(
                            Rule::PrioPreempt,
                            format!(
                                "preempted by {} ({} > {})",
                                spec.id,
                                level.as_str(),
                                state.spec(v).priority.as_str()
                            ),
                        );
                        out.push(Decision { action: Action::Preempt { workload: v, by: Some(w) }, reason });
                    }
                    for c in cands.iter_mut().filter(|c| vs.contains(&c.w)) {
                        c.taken = true;
                    }
                    hyp.take(cluster, &alloc);
                    reserve(cluster, &mut free, &alloc);
                } else {
                    hopeless.record(spec, sc);
                }
            }
        }
        out
    }

    fn explain(&self, state: &State, w: WorkloadId, _now: Time) -> Reason {
        let spec = state.spec(w);
        let allowed = |p: PoolId| pool_allowed(state, spec.account, p);
        let higher = state.pending.iter().filter(|(_, x)| state.spec(*x).priority > spec.priority).count();
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
}
