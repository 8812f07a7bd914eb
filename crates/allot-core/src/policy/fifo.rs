//! `fifo` and `fifo-backfill`: one shared queue in submit order, all pools,
//! no preemption (rules FIFO-1, FIFO-2).

use std::collections::{BTreeMap, BTreeSet};

use crate::Time;
use crate::decision::{Action, Decision};
use crate::placement::{find, place};
use crate::rule::{Reason, Rule};
use crate::state::State;
use crate::words::count;
use crate::workload::{WorkloadId, WorkloadSpec};

use super::{FailCache, Policy};

/// FIFO, strict (head-of-line blocking) or with first-fit backfill.
#[derive(Clone, Debug)]
pub struct Fifo {
    backfill: bool,
}

impl Fifo {
    /// FIFO-1: stop at the first workload that does not fit.
    pub fn strict() -> Fifo {
        Fifo { backfill: false }
    }

    /// FIFO-2: later workloads start when they fit.
    pub fn backfill() -> Fifo {
        Fifo { backfill: true }
    }

    /// Why `w` waits, `ahead` workloads before it in submit order (strict
    /// FIFO).
    fn explain_with(&self, state: &State, w: WorkloadId, ahead: usize) -> Reason {
        if ahead > 0 {
            return Reason::new(
                Rule::FifoOrder,
                format!("{} ahead in submit order; the head blocks the queue", count(ahead as u64, "workload")),
            );
        }
        match place(&state.cluster, &state.free, state.spec(w), &|_| true) {
            Ok(_) => Reason::new(self.rule(), "fits now; starts at the next scheduling pass"),
            Err(f) => Reason::new(f.rule, f.to_string()),
        }
    }

    fn rule(&self) -> Rule {
        if self.backfill { Rule::FifoBackfill } else { Rule::FifoOrder }
    }
}

impl Policy for Fifo {
    fn name(&self) -> &'static str {
        if self.backfill { "fifo-backfill" } else { "fifo" }
    }

    fn admit(&self, _state: &State, _spec: &WorkloadSpec) -> Result<(), Reason> {
        Ok(())
    }

    fn schedule(&mut self, state: &State, _now: Time) -> Vec<Decision> {
        let mut free = state.free.clone();
        let mut left: u32 = free.pool_free.iter().sum();
        let mut fails = FailCache::default();
        let mut out = Vec::new();
        for &(_, w) in &state.pending {
            if left == 0 {
                break;
            }
            let spec = state.spec(w);
            if spec.gpus > left || fails.known_to_fail(spec, 0) {
                if self.backfill {
                    continue;
                }
                break;
            }
            match find(&state.cluster, &free, spec, &|_| true) {
                Some(alloc) => {
                    free.take(&state.cluster, &alloc);
                    left -= spec.gpus;
                    let detail =
                        if self.backfill { "fits now (first-fit backfill)" } else { "next in submit order and fits" };
                    out.push(Decision {
                        action: Action::Start { workload: w, alloc },
                        reason: Reason::new(self.rule(), detail),
                    });
                }
                None if self.backfill => fails.record(spec, 0),
                None => break,
            }
        }
        out
    }

    fn explain(&self, state: &State, w: WorkloadId, _now: Time) -> Reason {
        let ahead = if self.backfill { 0 } else { state.pending.range(..(state.spec(w).submit, w)).count() };
        self.explain_with(state, w, ahead)
    }

    fn explain_all(&self, state: &State, ws: &[WorkloadId], now: Time) -> Vec<Reason> {
        // Positions in submit order, found in one walk.
        let mut ahead: BTreeMap<WorkloadId, usize> = BTreeMap::new();
        if !self.backfill {
            let wanted: BTreeSet<WorkloadId> = ws.iter().copied().collect();
            for (i, (_, w)) in state.pending.iter().enumerate() {
                if wanted.contains(w) {
                    ahead.insert(*w, i);
                }
            }
        }
        ws.iter()
            .map(|&w| match ahead.get(&w) {
                Some(&n) => self.explain_with(state, w, n),
                None => self.explain(state, w, now),
            })
            .collect()
    }
}
