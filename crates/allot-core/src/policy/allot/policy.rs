//! The `allot` policy: the pass, explanations and what the server shows.

use std::sync::{Arc, Mutex};

use crate::Time;
use crate::decision::Decision;
use crate::rule::Reason;
use crate::state::State;
use crate::workload::{WorkloadId, WorkloadSpec};

use crate::policy::Policy;

/// The `allot` policy. Every pass is a function of the state and `now`;
/// the only thing kept between calls is a cache of explanations for the
/// last instant and state asked about (and a reusable buffer).
#[derive(Default)]
pub struct AllotPolicy {
    explained: Mutex<Option<(u64, Arc<super::explain::Explainer>)>>,
    /// Buffers reused from pass to pass (no data survives a pass).
    scratch: super::pass::Scratch,
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

    fn explainer(&self, state: &State, now: Time) -> Arc<super::explain::Explainer> {
        let key = super::explain::fingerprint(state, now);
        let mut cache = self.explained.lock().unwrap_or_else(|e| e.into_inner());
        match cache.as_ref() {
            Some((k, e)) if *k == key => Arc::clone(e),
            _ => {
                let e = Arc::new(super::explain::Explainer::new(state, now));
                *cache = Some((key, Arc::clone(&e)));
                e
            }
        }
    }

    /// Pending workloads in rank order at `now` (BUD-1, INT-1, FS-1, FS-2,
    /// FIFO), as a pass would first see them. Workloads to be rejected
    /// (INT-2) are left out.
    pub fn ranking(&self, state: &State, now: Time) -> Vec<WorkloadId> {
        let fs = super::fairshare::FairShare::new(state, now);
        let users = super::fairshare::Users::new(state, &fs);
        let budgets = super::budget::Budgets::new(state, now);
        super::rank::ranks(state, &fs, &users, &budgets).into_iter().map(|r| r.w).collect()
    }

    /// FS-1 usage/entitlement of an account at `now` (1.0 = at its fair
    /// share), or `None` for an unknown path.
    pub fn fair_share_value(&self, state: &State, path: &str, now: Time) -> Option<f64> {
        let a = state.accounts.get(path)?;
        let fs = super::fairshare::FairShare::new(state, now);
        Some(fs.value(a.0))
    }

    /// FS-1 entitled fraction of the cluster of an account at `now`: its
    /// share of its parent's entitlement among siblings with demand (0 when
    /// it has no demand).
    pub fn entitlement(&self, state: &State, path: &str, now: Time) -> Option<f64> {
        let a = state.accounts.get(path)?;
        Some(super::fairshare::FairShare::new(state, now).entitlement(a.0))
    }

    /// [`AllotPolicy::fair_share_value`], [`AllotPolicy::entitlement`] and
    /// [`AllotPolicy::over_budget`] of every account at `now`, by account
    /// id: the fair-share tree and the budgets built once for all of them
    /// (a view of the whole tree).
    pub fn standings(&self, state: &State, now: Time) -> Vec<Standing> {
        let fs = super::fairshare::FairShare::new(state, now);
        let budgets = super::budget::Budgets::new(state, now);
        (0..state.accounts.len())
            .map(|i| Standing {
                value: fs.value(i as u32),
                entitled: fs.entitlement(i as u32),
                over_budget: budgets.over(crate::account::AccountId(i as u32)),
            })
            .collect()
    }

    /// Whether an account is over budget at `now` (BUD-1).
    pub fn over_budget(&self, state: &State, path: &str, now: Time) -> Option<bool> {
        let a = state.accounts.get(path)?;
        Some(super::budget::Budgets::new(state, now).over(a))
    }
}

/// An account's FS-1 standing at one instant.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Standing {
    /// Usage over entitlement (1 = at its fair share; infinite without an
    /// entitlement, that is without work).
    pub value: f64,
    /// Its entitled fraction of the cluster now: its share of its parent's
    /// among siblings with work (0 without work).
    pub entitled: f64,
    /// Over budget (BUD-1).
    pub over_budget: bool,
}

impl Standing {
    /// The fraction of the GPUs its use stands for in `value`: recent use
    /// and GPUs held, as FS-1 counts them.
    pub fn using(&self) -> f64 {
        if self.value.is_finite() { self.value * self.entitled } else { 0.0 }
    }
}

impl Policy for AllotPolicy {
    fn name(&self) -> &'static str {
        "allot"
    }

    fn admit(&self, state: &State, spec: &WorkloadSpec) -> Result<(), Reason> {
        super::contract::admit(state, spec)
    }

    fn schedule(&mut self, state: &State, now: Time) -> Vec<Decision> {
        let scratch = std::mem::take(&mut self.scratch);
        let mut pass = super::pass::Pass::with_scratch(state, now, super::pass::Probe::None, scratch);
        pass.run();
        let (out, scratch) = pass.finish();
        self.scratch = scratch;
        out
    }

    fn explain(&self, state: &State, w: WorkloadId, now: Time) -> Reason {
        self.explainer(state, now).explain(state, w, now)
    }

    fn explain_all(&self, state: &State, ws: &[WorkloadId], now: Time) -> Vec<Reason> {
        let e = self.explainer(state, now);
        ws.iter().map(|&w| e.explain(state, w, now)).collect()
    }

    fn next_wakeup(&self, state: &State, now: Time) -> Option<Time> {
        super::contract::next_wakeup(state, now)
    }

    fn periodic(&self) -> bool {
        true
    }
}
