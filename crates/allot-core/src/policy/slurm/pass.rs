//! One pass of the `slurm` policy: the main scheduler (SLURM-3) with QOS
//! preemption (SLURM-5), then, when due, backfill (SLURM-4).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::Time;
use crate::cluster::PoolId;
use crate::decision::{Action, Decision};
use crate::pending::Shape;
use crate::placement::{Allocation, FreeMap, find};
use crate::rule::{Reason, Rule};
use crate::state::State;
use crate::words::{gpus, span};
use crate::workload::{Phase, WorkloadId, WorkloadSpec};

use super::super::PriorityPolicy;
use super::super::priority::{Cand, reserve};
use super::controllers::{Controllers, Part};
use super::multifactor::{JobPriority, Multifactor};
use crate::slurm_params::{SlurmParams, SlurmPreempt};

/// A waiting workload's place in the queue: highest priority first, then
/// earlier submission, then lower id (SLURM-3).
pub(crate) type QueueKey = (Reverse<u32>, Time, WorkloadId);

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
    q.sort_by_key(|(p, w)| -> QueueKey { (Reverse(p.priority), state.spec(*w).submit, *w) });
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

/// GPUs held over `[from, to)`: a running workload (from the past) or a
/// backfill reservation.
#[derive(Clone, Debug)]
struct Block {
    alloc: Allocation,
    from: Time,
    to: Time,
}

/// What a pass found for one workload that did not start.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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
    ctl: Controllers,
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
    pub(crate) fn new(state: &'a State, ctl: Controllers, now: Time) -> Pass<'a> {
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
            ctl,
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
    /// blocks its partitions (GPU types, of its cluster's controller when
    /// there is one per cluster) for every lower one. Once every
    /// partition is blocked, nothing lower can start and the walk stops:
    /// the key of the last workload looked at and who blocked each
    /// partition are returned (the first workload not looked at is the
    /// key), so that a reason can say what each workload
    /// after it waits for without a pass visiting all of them.
    pub(crate) fn main<'q>(
        &mut self,
        queue: impl Iterator<Item = (QueueKey, &'q JobPriority)>,
    ) -> Option<(QueueKey, BTreeMap<Part, WorkloadId>)> {
        let (state, ctl) = (self.state, self.ctl);
        let every: BTreeSet<Part> = state.cluster.pools.iter().map(|p| ctl.part(p)).collect();
        let mut blocked: BTreeMap<Part, WorkloadId> = BTreeMap::new();
        for (key, prio) in queue {
            if !blocked.is_empty() && blocked.len() == every.len() {
                return Some((key, blocked));
            }
            let w = key.2;
            let spec = state.spec(w);
            let open = |p: PoolId| !blocked.contains_key(&ctl.part(state.cluster.pool(p)));
            let any_open = state
                .cluster
                .pools
                .iter()
                .any(|p| p.may_serve(spec.gpu_type, spec.clusters) && !blocked.contains_key(&ctl.part(p)));
            if !any_open {
                if let Some(by) = ctl.partitions(state, spec).iter().find_map(|g| blocked.get(g)) {
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
            for g in ctl.partitions(state, spec) {
                blocked.entry(g).or_insert(w);
            }
        }
        None
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

    /// SLURM-4: walks up to `bf_max_job_test` workloads (of each
    /// controller) in priority order;
    /// each starts now if it fits without delaying any reservation made
    /// before it, else gets a reservation at its earliest start within
    /// `bf_window`.
    ///
    /// GPUs only get scarcer as the walk goes on (each start and each
    /// reservation takes some), so a workload of the same shape and time
    /// limit as one before it cannot start earlier than that one could:
    /// its search begins where the earlier one's ended, and ends at once
    /// when that one found no start. Placement sees nothing of a workload
    /// but its shape, so this changes no decision, only the work.
    pub(crate) fn backfill<'q>(&mut self, queue: impl Iterator<Item = (QueueKey, &'q JobPriority)>) {
        let state = self.state;
        let now = self.now;
        let horizon = now.saturating_add(self.params.bf_window);
        let mut plan = Plan {
            reservations: Vec::new(),
            times: self.held.iter().map(|b| b.to).filter(|&t| t > now && t <= horizon).collect(),
            ends: (0..self.held.len()).filter(|&i| self.held[i].to > now).collect(),
        };
        plan.times.insert(now);
        plan.ends.sort_by_key(|&i| self.held[i].to);
        let mut searched: BTreeMap<(Shape, Option<Time>), Option<Time>> = BTreeMap::new();
        // Workloads tested per controller, and how many controllers have
        // tested all they may.
        let mut tested = vec![0u32; self.ctl.count(state)];
        let mut full = if self.params.bf_max_job_test == 0 { tested.len() } else { 0 };
        for ((_, _, w), prio) in queue {
            if self.started.contains(&w) || self.waiting.get(&w) == Some(&Waiting::Preempting) {
                continue;
            }
            if full == tested.len() {
                break;
            }
            let spec = state.spec(w);
            let n = &mut tested[usize::from(self.ctl.of(state, spec))];
            if *n >= self.params.bf_max_job_test {
                continue;
            }
            *n += 1;
            if *n >= self.params.bf_max_job_test {
                full += 1;
            }
            let len = limit(&self.params, spec);
            let from = match searched.get(&(Shape::of(spec), len)) {
                Some(None) => {
                    self.waiting.insert(w, Waiting::Beyond);
                    continue;
                }
                Some(Some(at)) => *at,
                None => now,
            };
            let found = self.earliest(spec, len, &plan, from);
            searched.insert((Shape::of(spec), len), found.as_ref().map(|(at, _)| *at));
            let Some((at, alloc)) = found else {
                self.waiting.insert(w, Waiting::Beyond);
                continue;
            };
            if at == now {
                let why = match len {
                    Some(l) => {
                        format!("backfilled: fits now and its time limit of {} delays no reservation, {prio}", span(l))
                    }
                    None => format!("backfilled: fits now on GPUs no reservation needs, {prio}"),
                };
                self.start(w, alloc, Reason::new(Rule::SlurmBackfill, why));
                let i = self.held.len() - 1;
                let (held, to) = (&self.held, self.held[i].to);
                if to <= horizon {
                    plan.times.insert(to);
                }
                plan.ends.insert(plan.ends.partition_point(|&j| held[j].to <= to), i);
                self.waiting.remove(&w);
            } else {
                let to = end_of(at, len);
                if to <= horizon {
                    plan.times.insert(to);
                }
                plan.reservations.push(Block { alloc, from: at, to });
                self.waiting.insert(w, Waiting::Reserved { at });
            }
        }
    }

    /// The earliest time within the horizon, and not before `from`, at
    /// which `spec`, running for `len`, finds GPUs free for its whole run,
    /// and where.
    fn earliest(&self, spec: &WorkloadSpec, len: Option<Time>, plan: &Plan, from: Time) -> Option<(Time, Allocation)> {
        let cluster = &self.state.cluster;
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
        for &t in &plan.times {
            while next < plan.ends.len() && self.held[plan.ends[next]].to <= t {
                base.give(cluster, &self.held[plan.ends[next]].alloc);
                next += 1;
            }
            if t < from || serving(&base) < spec.gpus {
                continue;
            }
            let stop = end_of(t, len);
            let mut f = base.clone();
            for r in plan.reservations.iter().filter(|r| r.from < stop && r.to > t) {
                reserve(cluster, &mut f, &r.alloc);
            }
            if let Some(a) = find(cluster, &f, spec, &|_| true) {
                return Some((t, a));
            }
        }
        None
    }
}

/// What one backfill pass has planned so far (SLURM-4).
struct Plan {
    /// Its reservations.
    reservations: Vec<Block>,
    /// The times a start is tried at: now, and every end of running work
    /// or of a reservation within the window.
    times: BTreeSet<Time>,
    /// Indexes into `Pass::held` of the work still running after now, by
    /// its end.
    ends: Vec<usize>,
}

/// `n GPUs` for reasons.
pub(crate) fn gpus_of(spec: &WorkloadSpec) -> String {
    gpus(u64::from(spec.gpus))
}
