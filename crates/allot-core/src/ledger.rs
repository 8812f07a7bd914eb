//! The usage ledger (rule BUD-3): every second a workload holds GPUs is
//! charged to its account and every ancestor, raw and normalised by GPU type.
//!
//! Values are kept per account as of `last` and advanced in closed form, so
//! reading them never mutates and charging costs O(depth) per start or stop:
//! * `charged_gpu_s`: raw GPU-seconds ever charged (integer, exact);
//! * `period_ngs`: normalised GPU-seconds in the current budget period;
//! * `decayed_ngs`: usage with exponential decay of half-life `h`:
//!   `U(t+Δ) = U(t)·d + A·(h/ln 2)·(1 − d)`, `d = 2^(−Δ/h)`, where `A` is the
//!   normalised allocation held over the interval.
//!
//! The same decayed usage is kept per member (a user of a leaf account) for
//! FS-2, which ranks the users of a project by it.

use crate::Time;
use crate::account::{AccountId, AccountTree};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// Raw GPUs held now.
    pub alloc_gpus: u64,
    /// Normalised GPUs held now.
    pub alloc_ngpus: f64,
    pub charged_gpu_s: u64,
    pub period_ngs: f64,
    pub decayed_ngs: f64,
    pub last: Time,
}

/// Decayed usage of one member (a user of an account), for FS-2.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberUsage {
    /// Raw GPUs held now.
    pub alloc_gpus: u64,
    /// Normalised GPUs held now.
    pub alloc_ngpus: f64,
    pub decayed_ngs: f64,
    pub last: Time,
}

/// Per-account usage, and per-member decayed usage.
#[derive(Clone, Debug, PartialEq)]
pub struct Ledger {
    pub usage: Vec<Usage>,
    /// Indexed by the state's member ids.
    pub members: Vec<MemberUsage>,
    pub budget_period: Time,
    pub half_life: Time,
}

/// `U(now)` from `U(last)` while holding `alloc` normalised GPUs.
fn decay(decayed: f64, alloc: f64, last: Time, now: Time, half_life: Time) -> f64 {
    if now <= last {
        return decayed;
    }
    if half_life == 0 {
        return 0.0;
    }
    let h = half_life as f64;
    let d = (-((now - last) as f64) / h).exp2();
    decayed * d + alloc * (h / std::f64::consts::LN_2) * (1.0 - d)
}

impl Ledger {
    pub fn new(accounts: &AccountTree, budget_period: Time, half_life: Time) -> Ledger {
        Ledger { usage: vec![Usage::default(); accounts.len()], members: Vec::new(), budget_period, half_life }
    }

    /// The decayed usage of member `m` as of `now` (0 for a member never
    /// charged).
    pub fn member_decayed_ngs_at(&self, m: usize, now: Time) -> f64 {
        self.members.get(m).map_or(0.0, |u| decay(u.decayed_ngs, u.alloc_ngpus, u.last, now, self.half_life))
    }

    /// Changes the allocation of member `m` by `gpus` raw GPUs of weight
    /// `weight` (negative to release).
    pub fn change_member(&mut self, m: usize, now: Time, gpus: i64, weight: f64) {
        if self.members.len() <= m {
            self.members.resize(m + 1, MemberUsage::default());
        }
        let decayed = self.member_decayed_ngs_at(m, now);
        let u = &mut self.members[m];
        u.decayed_ngs = decayed;
        u.last = u.last.max(now);
        u.alloc_gpus = u.alloc_gpus.checked_add_signed(gpus).expect("member allocation went negative");
        u.alloc_ngpus += gpus as f64 * weight;
        if u.alloc_gpus == 0 {
            u.alloc_ngpus = 0.0;
        }
    }

    fn period_of(&self, t: Time) -> Time {
        t.checked_div(self.budget_period).unwrap_or(0)
    }

    /// Start of the budget period containing `t`.
    pub fn period_start(&self, t: Time) -> Time {
        self.period_of(t) * self.budget_period
    }

    /// The usage of `a`'s subtree as of `now` (now ≥ last update).
    pub fn at(&self, a: AccountId, now: Time) -> Usage {
        let u = &self.usage[a.0 as usize];
        let mut v = u.clone();
        if now <= u.last {
            return v;
        }
        v.charged_gpu_s += u.alloc_gpus * (now - u.last);
        v.period_ngs = self.period_ngs_at(a, now);
        v.decayed_ngs = self.decayed_ngs_at(a, now);
        v.last = now;
        v
    }

    /// `at(a, now).period_ngs`, without the rest.
    pub fn period_ngs_at(&self, a: AccountId, now: Time) -> f64 {
        let u = &self.usage[a.0 as usize];
        if now <= u.last {
            return u.period_ngs;
        }
        if self.period_of(now) != self.period_of(u.last) {
            u.alloc_ngpus * (now - self.period_start(now)) as f64
        } else {
            u.period_ngs + u.alloc_ngpus * (now - u.last) as f64
        }
    }

    /// `at(a, now).decayed_ngs`, without the rest.
    pub fn decayed_ngs_at(&self, a: AccountId, now: Time) -> f64 {
        let u = &self.usage[a.0 as usize];
        decay(u.decayed_ngs, u.alloc_ngpus, u.last, now, self.half_life)
    }

    /// Changes the allocation of `a` and its ancestors by `gpus` raw GPUs of
    /// normalisation weight `weight` (negative to release).
    pub fn change(&mut self, tree: &AccountTree, a: AccountId, now: Time, gpus: i64, weight: f64) {
        for x in tree.ancestry(a) {
            let mut v = self.at(x, now);
            v.alloc_gpus = v.alloc_gpus.checked_add_signed(gpus).expect("ledger allocation went negative");
            v.alloc_ngpus += gpus as f64 * weight;
            if v.alloc_gpus == 0 {
                v.alloc_ngpus = 0.0; // no float residue when nothing is held
            }
            self.usage[x.0 as usize] = v;
        }
    }
}
