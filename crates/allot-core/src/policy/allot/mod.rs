//! `allot`: budgets, hierarchical fair share and the time-slicing contract
//! (docs/design.md §2; the formulas and their rule ids are in `docs/budgets.md`,
//! `docs/fairshare.md` and `docs/contract.md`).
//!
//! * [`budget`]: BUD-1 status per account (in-budget work ranks first).
//! * [`fairshare`]: FS-1 entitlements and level values, FS-2 users, the
//!   after-swap comparison of CON-4.
//! * [`rank`]: the rank value type and the tiers (lane, in-budget, over-budget).
//! * [`waiting`]: the waiting work of a pass by tier, from the pending index.
//! * [`queue`]: serving a tier in fair-share order as allocations change.
//! * [`preempt`]: victim eligibility and choice (BUD-2, CON-1, CON-4, CON-5,
//!   INT-1, SVC-1).
//! * [`bound`]: cheap necessary conditions for a victim search to succeed.
//! * [`pass`]: one scheduling pass (start, claim GPUs being released, preempt).
//! * [`contract`]: admission (INT-2, SVC-2) and time-based wake-ups.
//! * [`explain`]: reasons with rule ids and numbers.

mod bound;
mod budget;
mod contract;
mod explain;
mod fairshare;
mod pass;
mod preempt;
mod queue;
mod rank;
mod waiting;

use std::sync::{Arc, Mutex};

use crate::Time;
use crate::decision::{Decision, Reason};
use crate::state::State;
use crate::workload::{WorkloadId, WorkloadSpec};

use super::Policy;

/// The `allot` policy. Every pass is a function of the state and `now`;
/// the only thing kept between calls is a cache of explanations for the
/// last instant and state asked about (and a reusable buffer).
#[derive(Default)]
pub struct AllotPolicy {
    explained: Mutex<Option<(u64, Arc<explain::Explainer>)>>,
    /// Buffers reused from pass to pass (no data survives a pass).
    scratch: pass::Scratch,
}

impl Clone for AllotPolicy {
    fn clone(&self) -> Self {
        AllotPolicy::new()
    }
}

impl std::fmt::Debug for AllotPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AllotPolicy")
    }
}

impl AllotPolicy {
    pub fn new() -> AllotPolicy {
        AllotPolicy::default()
    }

    fn explainer(&self, state: &State, now: Time) -> Arc<explain::Explainer> {
        let key = explain::fingerprint(state, now);
        let mut cache = self.explained.lock().unwrap_or_else(|e| e.into_inner());
        match cache.as_ref() {
            Some((k, e)) if *k == key => Arc::clone(e),
            _ => {
                let e = Arc::new(explain::Explainer::new(state, now));
                *cache = Some((key, Arc::clone(&e)));
                e
            }
        }
    }

    /// Pending workloads in rank order at `now` (BUD-1, INT-1, FS-1, FS-2,
    /// FIFO), as a pass would first see them. Workloads to be rejected
    /// (INT-2) are left out.
    pub fn ranking(&self, state: &State, now: Time) -> Vec<WorkloadId> {
        let fs = fairshare::FairShare::new(state, now);
        let users = fairshare::Users::new(state, &fs);
        let budgets = budget::Budgets::new(state, now);
        rank::ranks(state, &fs, &users, &budgets).into_iter().map(|r| r.w).collect()
    }

    /// FS-1 usage/entitlement of an account at `now` (1.0 = at its fair
    /// share), or `None` for an unknown path.
    pub fn fair_share_value(&self, state: &State, path: &str, now: Time) -> Option<f64> {
        let a = state.accounts.get(path)?;
        let fs = fairshare::FairShare::new(state, now);
        Some(fs.value(a.0))
    }

    /// FS-1 entitled fraction of the cluster of an account at `now`: its
    /// share of its parent's entitlement among siblings with demand (0 when
    /// it has no demand).
    pub fn entitlement(&self, state: &State, path: &str, now: Time) -> Option<f64> {
        let a = state.accounts.get(path)?;
        Some(fairshare::FairShare::new(state, now).entitlement(a.0))
    }

    /// Whether an account is over budget at `now` (BUD-1).
    pub fn over_budget(&self, state: &State, path: &str, now: Time) -> Option<bool> {
        let a = state.accounts.get(path)?;
        Some(budget::Budgets::new(state, now).over(a))
    }
}

impl Policy for AllotPolicy {
    fn name(&self) -> &'static str {
        "allot"
    }

    fn admit(&self, state: &State, spec: &WorkloadSpec) -> Result<(), Reason> {
        contract::admit(state, spec)
    }

    fn schedule(&mut self, state: &State, now: Time) -> Vec<Decision> {
        let scratch = std::mem::take(&mut self.scratch);
        let mut pass = pass::Pass::with_scratch(state, now, pass::Probe::None, scratch);
        pass.run();
        let (out, scratch) = pass.finish();
        self.scratch = scratch;
        out
    }

    fn explain(&self, state: &State, w: WorkloadId, now: Time) -> Reason {
        self.explainer(state, now).explain(state, w, now)
    }

    fn next_wakeup(&self, state: &State, now: Time) -> Option<Time> {
        contract::next_wakeup(state, now)
    }

    fn periodic(&self) -> bool {
        true
    }
}
