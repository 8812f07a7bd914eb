//! One pass of the `slurm` policy: the main scheduler (SLURM-3) with QOS
//! preemption (SLURM-5), then, when due, backfill (SLURM-4).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::Time;
use crate::cluster::{GpuTypeId, PoolId};
use crate::decision::{Action, Decision};
use crate::placement::{Allocation, FreeMap, find};
use crate::rule::{Reason, Rule};
use crate::state::State;
use crate::words::{gpus, span};
use crate::workload::{Phase, WorkloadId, WorkloadSpec};

use super::super::PriorityPolicy;
use super::super::priority::{Cand, reserve};
use super::multifactor::{JobPriority, Multifactor};
use crate::slurm_params::{SlurmParams, SlurmPreempt};

/// "Never" in the time map: the end of a workload without a time limit.
pub(crate) const NEVER: Time = Time::MAX;

/// The pending queue in priority order: (priority, workload), highest
/// first, then earlier submission, then lower id; each workload's priority
/// from `prio`, else computed by `mf` at `now`.
pub(crate) fn queue(
    state: &State,
    prio: &BTreeMap<WorkloadId, JobPriority>,
    mf: &Multifactor,
    now: Time,
) -> Vec<(JobPriority, WorkloadId)> {
    let mut q: Vec<(JobPriority, WorkloadId)> = state
        .pending
        .iter()
        .map(|&(_, w)| (prio.get(&w).copied().unwrap_or_else(|| mf.of(state, w, now)), w))
        .collect();
    q.sort_by_key(|(p, w)| (Reverse(p.priority), state.spec(*w).submit, *w));
    q
}

/// The time limit the policy assumes for `spec` (`None`: unlimited).
pub(crate) fn limit(params: &SlurmParams, spec: &WorkloadSpec) -> Option<Time> {
    spec.time_limit_s.or(params.default_time_limit)
}

/// `start + limit`, unlimited as [`NEVER`].
fn end_of(start: Time, limit: Option<Time>) -> Time {
    limit.map_or(NEVER, |l| start.saturating_add(l))
}

/// The GPU types (partitions) of the pools that may serve `spec`.
fn partitions(state: &State, spec: &WorkloadSpec) -> BTreeSet<GpuTypeId> {
    state.cluster.pools.iter().filter(|p| p.may_serve(spec.gpu_type, spec.clusters)).map(|p| p.gpu).collect()
}

/// GPUs held over `[from, to)`: a running workload (from the past) or a
/// backfill reservation.
#[derive(Clone, Debug)]
struct Block {
    alloc: Allocation,
    from: Time,
    to: Time,
}

/// What a pass found for one workload that did not start.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Waiting {
    /// SLURM-3: the main scheduler stopped at `by`, a higher-priority
    /// workload that did not fit in the same partition.
    Blocked { by: WorkloadId },
    /// SLURM-4: backfill reserved GPUs for it from this time.
    Reserved { at: Time },
    /// SLURM-4: no start within `bf_window`.
    Beyond,
    /// SLURM-5: it preempted these workloads and waits for their GPUs.
    Preempting,
}

/// The working state of one pass.
pub(crate) struct Pass<'a> {
    state: &'a State,
    params: SlurmParams,
    now: Time,
    pub free: FreeMap,
    /// Free GPUs plus those of stopping workloads not yet claimed (SLURM-5).
    hyp: FreeMap,
    cands: Vec<Cand>,
    /// Running workloads and this pass's starts, with their ends.
    held: Vec<Block>,
    pub out: Vec<Decision>,
    pub waiting: BTreeMap<WorkloadId, Waiting>,
    started: BTreeSet<WorkloadId>,
}

impl<'a> Pass<'a> {
    pub(crate) fn new(state: &'a State, now: Time) -> Pass<'a> {
        let params = state.contract.slurm;
        let mut hyp = state.free.clone();
        let mut cands = Vec::new();
        let mut held = Vec::new();
        for h in state.holding() {
            let alloc = state.run(h.w).alloc.clone().expect("holding workload holds GPUs");
            let to = if h.phase == Phase::Stopping {
                hyp.give(&state.cluster, &alloc);
                h.stop_at.unwrap_or(NEVER)
            } else {
                if h.preemptible {
                    cands.push(Cand { w: h.w, priority: h.priority, started: h.started, pool: h.pool, taken: false });
                }
                end_of(h.started, limit(&params, state.spec(h.w)))
            };
            // One past its limit is assumed to end in the next second.
            held.push(Block { alloc, from: h.started, to: to.max(now + 1) });
        }
        cands.sort_unstable_by_key(|c| (c.priority, Reverse(c.started), Reverse(c.w)));
        Pass {
            state,
            params,
            now,
            free: state.free.clone(),
            hyp,
            cands,
            held,
            out: Vec::new(),
            waiting: BTreeMap::new(),
            started: BTreeSet::new(),
        }
    }

    fn start(&mut self, w: WorkloadId, alloc: Allocation, reason: Reason) {
        let cluster = &self.state.cluster;
        self.free.take(cluster, &alloc);
        reserve(cluster, &mut self.hyp, &alloc);
        let to = end_of(self.now, limit(&self.params, self.state.spec(w))).max(self.now + 1);
        self.held.push(Block { alloc: alloc.clone(), from: self.now, to });
        self.started.insert(w);
        self.out.push(Decision { action: Action::Start { workload: w, alloc }, reason });
    }

    /// SLURM-3: starts workloads in priority order; one that does not fit
    /// blocks its partitions (GPU types) for every lower one.
    pub(crate) fn main(&mut self, queue: &[(JobPriority, WorkloadId)]) {
        let state = self.state;
        let mut blocked: BTreeMap<GpuTypeId, WorkloadId> = BTreeMap::new();
        for (prio, w) in queue {
            let (w, spec) = (*w, state.spec(*w));
            let open = |p: PoolId| !blocked.contains_key(&state.cluster.pool(p).gpu);
            let parts = partitions(state, spec);
            let any_open = state
                .cluster
                .pools
                .iter()
                .any(|p| p.may_serve(spec.gpu_type, spec.clusters) && !blocked.contains_key(&p.gpu));
            if !any_open {
                if let Some(by) = parts.iter().find_map(|g| blocked.get(g)) {
                    self.waiting.insert(w, Waiting::Blocked { by: *by });
                }
                continue;
            }
            if let Some(alloc) = find(&state.cluster, &self.free, spec, &open) {
                let why = format!("highest priority of its partition that fits, {prio}");
                self.start(w, alloc, Reason::new(Rule::SlurmMain, why));
                continue;
            }
            if self.params.preempt == SlurmPreempt::Qos && self.preempt(w, &open) {
                self.waiting.insert(w, Waiting::Preempting);
            }
            for g in parts {
                blocked.entry(g).or_insert(w);
            }
        }
    }

    /// SLURM-5: claims GPUs being freed, or preempts preemptible running
    /// workloads of a strictly lower label, for `w`; whether it did.
    fn preempt(&mut self, w: WorkloadId, open: &dyn Fn(PoolId) -> bool) -> bool {
        let state = self.state;
        let cluster = &state.cluster;
        if let Some(alloc) = find(cluster, &self.hyp, state.spec(w), open) {
            self.hyp.take(cluster, &alloc);
            reserve(cluster, &mut self.free, &alloc);
            return true;
        }
        let Some((vs, alloc)) = PriorityPolicy::victims(state, &self.hyp, w, &self.cands, open) else {
            return false;
        };
        let spec = state.spec(w);
        for &v in &vs {
            self.hyp.give(cluster, state.run(v).alloc.as_ref().expect("running"));
            let why = format!(
                "preempted and requeued by {} (QOS {} > {}; PreemptType=preempt/qos)",
                spec.id,
                spec.priority.as_str(),
                state.spec(v).priority.as_str()
            );
            self.out.push(Decision {
                action: Action::Preempt { workload: v, by: Some(w) },
                reason: Reason::new(Rule::SlurmPreempt, why),
            });
        }
        for c in self.cands.iter_mut().filter(|c| vs.contains(&c.w)) {
            c.taken = true;
        }
        self.hyp.take(cluster, &alloc);
        reserve(cluster, &mut self.free, &alloc);
        true
    }

    /// SLURM-4: walks up to `bf_max_job_test` workloads in priority order;
    /// each starts now if it fits without delaying any reservation made
    /// before it, else gets a reservation at its earliest start within
    /// `bf_window`.
    pub(crate) fn backfill(&mut self, queue: &[(JobPriority, WorkloadId)]) {
        let state = self.state;
        let mut reservations: Vec<Block> = Vec::new();
        let horizon = self.now.saturating_add(self.params.bf_window);
        let mut tested = 0u32;
        for (prio, w) in queue {
            let w = *w;
            if self.started.contains(&w) || self.waiting.get(&w) == Some(&Waiting::Preempting) {
                continue;
            }
            if tested >= self.params.bf_max_job_test {
                break;
            }
            tested += 1;
            let spec = state.spec(w);
            let len = limit(&self.params, spec);
            let Some((at, alloc)) = self.earliest(spec, len, &reservations, horizon) else {
                self.waiting.insert(w, Waiting::Beyond);
                continue;
            };
            if at == self.now {
                let why = match len {
                    Some(l) => {
                        format!("backfilled: fits now and its time limit of {} delays no reservation, {prio}", span(l))
                    }
                    None => format!("backfilled: fits now on GPUs no reservation needs, {prio}"),
                };
                self.start(w, alloc, Reason::new(Rule::SlurmBackfill, why));
                self.waiting.remove(&w);
            } else {
                reservations.push(Block { alloc, from: at, to: end_of(at, len) });
                self.waiting.insert(w, Waiting::Reserved { at });
            }
        }
    }

    /// The earliest time within the horizon at which `spec`, running for
    /// `len`, finds GPUs free for its whole run, and where.
    fn earliest(
        &self,
        spec: &WorkloadSpec,
        len: Option<Time>,
        res: &[Block],
        horizon: Time,
    ) -> Option<(Time, Allocation)> {
        let cluster = &self.state.cluster;
        let mut times: Vec<Time> = self.held.iter().map(|b| b.to).chain(res.iter().map(|b| b.to)).collect();
        times.retain(|&t| t > self.now && t <= horizon);
        times.push(self.now);
        times.sort_unstable();
        times.dedup();
        let mut ends: Vec<&Block> = self.held.iter().filter(|b| b.to > self.now).collect();
        ends.sort_by_key(|b| b.to);
        let mut base = self.free.clone();
        let mut next = 0;
        let serving = |f: &FreeMap| -> u32 {
            cluster
                .pools
                .iter()
                .zip(&f.pool_free)
                .filter(|(p, _)| p.may_serve(spec.gpu_type, spec.clusters))
                .map(|(_, n)| *n)
                .sum()
        };
        for t in times {
            while next < ends.len() && ends[next].to <= t {
                base.give(cluster, &ends[next].alloc);
                next += 1;
            }
            if serving(&base) < spec.gpus {
                continue;
            }
            let stop = end_of(t, len);
            let mut f = base.clone();
            for r in res.iter().filter(|r| r.from < stop && r.to > t) {
                reserve(cluster, &mut f, &r.alloc);
            }
            if let Some(a) = find(cluster, &f, spec, &|_| true) {
                return Some((t, a));
            }
        }
        None
    }
}

/// `n GPUs` for reasons.
pub(crate) fn gpus_of(spec: &WorkloadSpec) -> String {
    gpus(u64::from(spec.gpus))
}
