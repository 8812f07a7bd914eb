//! The `slurm` policy: the [`Policy`] of rules SLURM-1 … SLURM-5.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::Time;
use crate::decision::Decision;
use crate::placement::place;
use crate::rule::{Reason, Rule};
use crate::state::State;
use crate::words::{count, span};
use crate::workload::{Phase, WorkloadId, WorkloadSpec};

use super::super::Policy;
use super::controllers::{Controllers, Part};
use super::fairtree::FairTree;
use super::multifactor::{JobPriority, Multifactor};
use super::pass::{Pass, QueueKey, Waiting, gpus_of, queue};

/// Slurm's multifactor priority, main scheduler and backfill.
///
/// State kept between passes: when backfill last ran (`bf_interval`), the
/// Fair Tree and the priorities of the last `PriorityCalcPeriod` (SLURM-1,
/// SLURM-2), and what the last pass found for each waiting workload (for
/// `explain`).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SlurmPolicy {
    last_backfill: Option<Time>,
    /// The start of the `PriorityCalcPeriod` the tree and priorities are of.
    calc: Option<Time>,
    tree: FairTree,
    /// Each waiting workload's priority as of the last recalculation, or
    /// as of the pass that first saw it queued.
    prio: BTreeMap<WorkloadId, JobPriority>,
    /// The workloads of `prio` in the order the passes walk them
    /// (SLURM-3), kept in step with `prio` so that a pass walks only the
    /// head of the queue instead of sorting all of it.
    order: BTreeSet<QueueKey>,
    /// Per workload id: whether `prio` holds it.
    known: Vec<bool>,
    /// How much of `State::queue_changes` the last pass had read: a pass
    /// looks only at the workloads queued or taken out since.
    seen: usize,
    /// Per waiting workload: what the last main scheduler found.
    blocked: BTreeMap<WorkloadId, Waiting>,
    /// Where the last main scheduler stopped because every partition was
    /// blocked: the key of the first workload it did not look at and which
    /// workload blocked each partition. Every workload after it waits for
    /// the workload that blocked its first partition (SLURM-3).
    /// `None` when it walked the whole queue.
    cut: Option<(QueueKey, BTreeMap<Part, WorkloadId>)>,
    /// Per waiting workload: what the last backfill pass found.
    planned: BTreeMap<WorkloadId, Waiting>,
    /// One controller for the whole cluster, or one per cluster of a
    /// fleet ([`SlurmPolicy::per_cluster`]). Last, so that a snapshot
    /// written before it existed fails to decode (and recovery rebuilds
    /// from the rows) rather than decoding shifted.
    ctl: Controllers,
}

impl SlurmPolicy {
    /// One `slurmctld` for the whole cluster: on a fleet, its clusters'
    /// pools are partitions of that one controller (by GPU type) and one
    /// Fair Tree ranks every user.
    pub fn new() -> SlurmPolicy {
        SlurmPolicy::default()
    }

    /// One `slurmctld` per cluster of a fleet, as a site with several
    /// clusters runs Slurm (`slurm-split` in `allot compare`): each cluster
    /// has its own partitions (its GPU types) that block only its own
    /// queue (SLURM-3), its own Fair Tree over the child of the root named
    /// after it (SLURM-2, the split tree of `allot_sim::split`), its own
    /// job-size, TRES and partition denominators (SLURM-1) and its own
    /// `bf_max_job_test` (SLURM-4). Meant for workloads pinned to one
    /// cluster each; on a single cluster it equals [`SlurmPolicy::new`].
    pub fn per_cluster() -> SlurmPolicy {
        SlurmPolicy { ctl: Controllers { per_cluster: true }, ..SlurmPolicy::default() }
    }

    /// SLURM-4: when the last backfill pass planned `w` to start, if it
    /// reserved GPUs for it.
    pub fn reservation(&self, w: WorkloadId) -> Option<Time> {
        match self.planned.get(&w) {
            Some(Waiting::Reserved { at }) => Some(*at),
            _ => None,
        }
    }

    /// SLURM-1, SLURM-2: at the first pass of a `PriorityCalcPeriod`
    /// (periods counted from t = 0), the Fair Tree and every waiting
    /// workload's priority are recomputed; a workload queued since gets its
    /// priority at the first pass that sees it, with the period's tree.
    fn recalc(&mut self, state: &State, now: Time) {
        let period = state.contract.slurm.calc_period.max(1);
        let start = now - now % period;
        self.known.resize(state.specs.len(), false);
        let changed = state.queue_changes.get(self.seen..).unwrap_or_default();
        self.seen = state.queue_changes.len();
        if self.calc.is_none_or(|c| c < start) {
            self.tree = FairTree::compute_in(state, now, self.ctl.per_cluster);
            self.calc = Some(start);
            for w in self.prio.keys() {
                self.known[w.0 as usize] = false;
            }
            self.prio.clear();
            self.order.clear();
            let mf = Multifactor::with_tree_in(state, self.tree.clone(), self.ctl);
            for &(_, w) in state.pending.iter() {
                self.add(state, &mf, w, now);
            }
            return;
        }
        // A priority is kept while its workload stays pending at every
        // pass; one that left the queue since the last pass is in
        // `changed`, as is every workload queued since.
        for &w in changed {
            if self.known[w.0 as usize] && state.run(w).phase != Phase::Pending {
                let p = self.prio.remove(&w).expect("known");
                self.order.remove(&(Reverse(p.priority), state.spec(w).submit, w));
                self.known[w.0 as usize] = false;
            }
        }
        let mut mf = None;
        for &w in changed {
            if !self.known[w.0 as usize] && state.pending.contains(&(state.spec(w).submit, w)) {
                let mf = mf.get_or_insert_with(|| Multifactor::with_tree_in(state, self.tree.clone(), self.ctl));
                self.add(state, mf, w, now);
            }
        }
    }

    /// Gives queued `w` its priority at `now`.
    fn add(&mut self, state: &State, mf: &Multifactor, w: WorkloadId, now: Time) {
        let p = mf.of(state, w, now);
        self.prio.insert(w, p);
        self.order.insert((Reverse(p.priority), state.spec(w).submit, w));
        self.known[w.0 as usize] = true;
    }

    /// The queue the passes walk: the waiting workloads that are queued
    /// (not parked), highest priority first, with their priorities.
    fn queued<'s>(&'s self, state: &'s State) -> impl Iterator<Item = (QueueKey, &'s JobPriority)> + 's {
        // A workload that ended while parked is not among the queue's
        // changes; its priority stays until the next recalculation, unused.
        let queued = |w: WorkloadId| state.run(w).phase == Phase::Pending && !state.parked.contains(&w);
        self.order.iter().filter(move |k| queued(k.2)).map(|&k| (k, &self.prio[&k.2]))
    }

    /// What the last main scheduler found for `w`, also when it stopped
    /// before reaching it because every partition was blocked.
    fn main_found(&self, state: &State, w: WorkloadId) -> Option<Waiting> {
        if let Some(x) = self.blocked.get(&w) {
            return Some(x.clone());
        }
        let (cut, by_part) = self.cut.as_ref()?;
        let p = self.prio.get(&w)?;
        let spec = state.spec(w);
        if (Reverse(p.priority), spec.submit, w) < *cut {
            return None;
        }
        self.ctl.partitions(state, spec).iter().find_map(|g| by_part.get(g)).map(|&by| Waiting::Blocked { by })
    }

    /// Whether backfill runs at a pass at `now` (SLURM-4: every `bf_interval`).
    fn backfill_due(&self, state: &State, now: Time) -> bool {
        self.last_backfill.is_none_or(|t| now >= t.saturating_add(state.contract.slurm.bf_interval))
    }

    /// Why `w` waits, `ahead` workloads of higher priority waiting.
    fn explain_with(&self, state: &State, w: WorkloadId, prio: &JobPriority, ahead: usize, now: Time) -> Reason {
        let spec = state.spec(w);
        let head = format!("{}; {prio}", waits_for(ahead));
        if let Some(Waiting::Reserved { at }) = self.planned.get(&w) {
            return Reason::new(
                Rule::SlurmBackfill,
                format!(
                    "{head}; backfill reserved {} for it to start by t={at} (in {})",
                    gpus_of(spec),
                    span(at.saturating_sub(now))
                ),
            );
        }
        let found = self.main_found(state, w);
        if let Some(Waiting::Blocked { by }) = found {
            return Reason::new(
                Rule::SlurmMain,
                format!(
                    "{head}; the main scheduler stops its partition at higher-priority {}, which does not fit",
                    state.spec(by).id
                ),
            );
        }
        if found == Some(Waiting::Preempting) {
            return Reason::new(Rule::SlurmPreempt, format!("{head}; waits for the GPUs of workloads it preempted"));
        }
        match place(&state.cluster, &state.free, spec, &|_| true) {
            Ok(_) => Reason::new(Rule::SlurmMain, format!("{head}; fits now, starts at the next scheduling pass")),
            Err(f) => {
                let beyond = if self.planned.get(&w) == Some(&Waiting::Beyond) {
                    format!("; no start found within bf_window ({}s)", state.contract.slurm.bf_window)
                } else {
                    String::new()
                };
                Reason::new(f.rule, format!("{head}; {f}{beyond}"))
            }
        }
    }
}

/// "waits for 3 higher-priority workloads" (or none).
fn waits_for(ahead: usize) -> String {
    if ahead == 0 {
        "first in priority order".to_string()
    } else {
        format!("waits for {} of higher priority", count(ahead as u64, "workload"))
    }
}

impl Policy for SlurmPolicy {
    fn name(&self) -> &'static str {
        "slurm"
    }

    /// Slurm refuses at submission a job no partition can ever hold.
    fn admit(&self, state: &State, spec: &WorkloadSpec) -> Result<(), Reason> {
        if state.cluster.fits_anywhere(spec.gpus, spec.nodes, spec.gpu_type, spec.clusters) {
            return Ok(());
        }
        Err(Reason::new(Rule::SlurmMain, format!("{} never fit any partition", gpus_of(spec))))
    }

    fn schedule(&mut self, state: &State, now: Time) -> Vec<Decision> {
        self.recalc(state, now);
        let mut pass = Pass::new(state, self.ctl, now);
        self.cut = pass.main(self.queued(state));
        self.blocked = pass.waiting.clone();
        if !state.pending.is_empty() && self.backfill_due(state, now) {
            pass.backfill(self.queued(state));
            self.last_backfill = Some(now);
            self.planned = pass
                .waiting
                .into_iter()
                .filter(|(_, x)| matches!(x, Waiting::Reserved { .. } | Waiting::Beyond))
                .collect();
        }
        pass.out
    }

    fn explain(&self, state: &State, w: WorkloadId, now: Time) -> Reason {
        self.explain_all(state, &[w], now).pop().expect("one reason")
    }

    fn explain_all(&self, state: &State, ws: &[WorkloadId], now: Time) -> Vec<Reason> {
        let mf = match self.calc {
            Some(_) => self.tree.clone(),
            None => FairTree::compute_in(state, now, self.ctl.per_cluster),
        };
        let mf = Multifactor::with_tree_in(state, mf, self.ctl);
        let q = queue(state, &self.prio, &mf, now);
        // Per waiting workload: its index in `q` and how many of its own
        // controller's queue are ahead of it.
        let ctl = |w: WorkloadId| usize::from(self.ctl.of(state, state.spec(w)));
        let mut ahead = vec![0usize; self.ctl.count(state)];
        let at: BTreeMap<WorkloadId, (usize, usize)> = q
            .iter()
            .enumerate()
            .map(|(i, (_, w))| {
                let n = &mut ahead[ctl(*w)];
                *n += 1;
                (*w, (i, *n - 1))
            })
            .collect();
        ws.iter()
            .map(|&w| match at.get(&w) {
                Some(&(i, k)) => self.explain_with(state, w, &q[i].0, k, now),
                None => {
                    let p = self.prio.get(&w).copied().unwrap_or_else(|| mf.of(state, w, now));
                    let c = ctl(w);
                    let k = q.iter().filter(|(x, v)| x.priority > p.priority && ctl(*v) == c).count();
                    self.explain_with(state, w, &p, k, now)
                }
            })
            .collect()
    }

    /// SLURM-4: the next backfill pass while work waits, or the next
    /// `PriorityCalcPeriod` if sooner (SLURM-1).
    fn next_wakeup(&self, state: &State, now: Time) -> Option<Time> {
        if state.pending.is_empty() {
            return None;
        }
        let p = &state.contract.slurm;
        let next = self.last_backfill.map_or(now, |t| t.saturating_add(p.bf_interval));
        let period = p.calc_period.max(1);
        let calc = (now - now % period).saturating_add(period);
        Some(next.min(calc).max(now + 1))
    }

    /// The age factor drifts with time (SLURM-1).
    fn periodic(&self) -> bool {
        true
    }

    fn memory(&self) -> Option<crate::policy::Memory> {
        Some(crate::policy::Memory::Slurm(Box::new(self.clone())))
    }

    fn remember(&mut self, memory: crate::policy::Memory) {
        let crate::policy::Memory::Slurm(p) = memory;
        *self = *p;
    }
}
