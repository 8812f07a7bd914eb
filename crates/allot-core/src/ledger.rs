//! The usage ledger (rule BUD-3): every second a workload holds GPUs is
//! charged to its account and every ancestor, raw and normalised by GPU type.
//!
//! Values are kept per account as of `last` and advanced in closed form, so
//! reading them never mutates and charging costs O(depth) per start or stop:
//! * `charged_gpu_s`: raw GPU-seconds ever charged (integer, exact);
//! * `period_ngs`: normalised GPU-seconds in the current budget period (the
//!   periods are a [`Periods`] calendar, BUD-4);
//! * `prev_period_ngs`: the same in the period before, from which unused
//!   budget is carried over (BUD-5);
//! * `decayed_ngs`: usage with exponential decay of half-life `h`:
//!   `U(t+Δ) = U(t)·d + A·(h/ln 2)·(1 − d)`, `d = 2^(−Δ/h)`, where `A` is the
//!   normalised allocation held over the interval.
//!
//! The same decayed usage is kept per member (a user of an account) for
//! FS-2, which ranks the users of a project by it, and the same period usage
//! (same calendar, BUD-4; same carry-over, BUD-5) for the members' own
//! budgets (BUD-6).
//!
//! A second decayed usage, `priority_decayed_ngs`, is the `slurm` policy's
//! (SLURM-2): it accrues at `priority_rate`, the billing of the workloads
//! held (a workload's `billing` per second when it has one, else its
//! normalised GPUs), decayed by `priority_half_life`. Nothing else reads it.

use crate::Time;
use crate::account::{AccountId, AccountTree};
use crate::calendar::Periods;

/// Seconds per hour, for GPU-hours.
const HOUR: f64 = 3600.0;

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// Raw GPUs held now.
    pub alloc_gpus: u64,
    /// Normalised GPUs held now.
    pub alloc_ngpus: f64,
    pub charged_gpu_s: u64,
    pub period_ngs: f64,
    /// Normalised GPU-seconds used in the period before the one containing `last`.
    pub prev_period_ngs: f64,
    pub decayed_ngs: f64,
    /// Billed usage decayed by [`Ledger::priority_half_life`] (SLURM-2).
    pub priority_decayed_ngs: f64,
    /// Billing held now: what `priority_decayed_ngs` accrues per second.
    pub priority_rate: f64,
    pub last: Time,
}

/// Usage of one member (a user of an account's own work): decayed for
/// FS-2, per period for the user's budget (BUD-6).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemberUsage {
    /// Raw GPUs held now.
    pub alloc_gpus: u64,
    /// Normalised GPUs held now.
    pub alloc_ngpus: f64,
    pub decayed_ngs: f64,
    /// Billed usage decayed by [`Ledger::priority_half_life`] (SLURM-2).
    pub priority_decayed_ngs: f64,
    /// Billing held now: what `priority_decayed_ngs` accrues per second.
    pub priority_rate: f64,
    /// Normalised GPU-seconds in the current budget period (BUD-4).
    pub period_ngs: f64,
    /// The same in the period before the one containing `last` (BUD-5).
    pub prev_period_ngs: f64,
    pub last: Time,
}

/// The period fields of an account's or a member's usage as of `last`,
/// advanced in closed form by the same calendar (BUD-4).
#[derive(Clone, Copy, Debug)]
struct PeriodUse {
    period_ngs: f64,
    prev_period_ngs: f64,
    alloc_ngpus: f64,
    last: Time,
}

/// The [`PeriodUse`] of an account's [`Usage`] or a [`MemberUsage`].
macro_rules! period_use {
    ($u:expr) => {{
        let u = $u;
        PeriodUse {
            period_ngs: u.period_ngs,
            prev_period_ngs: u.prev_period_ngs,
            alloc_ngpus: u.alloc_ngpus,
            last: u.last,
        }
    }};
}

/// Per-account usage, and per-member usage (decayed and per period).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Ledger {
    pub usage: Vec<Usage>,
    /// Indexed by the state's member ids.
    pub members: Vec<MemberUsage>,
    pub periods: Periods,
    /// BUD-5: the fraction (0..=1) of a period's budget that unused budget of
    /// the period before may add to it.
    pub carry_over: f64,
    /// The first instant anything was charged: no budget is carried into
    /// the period containing it (the ledger knows nothing before).
    pub origin: Option<Time>,
    pub half_life: Time,
    /// The half-life of a second decayed usage, kept beside the first for
    /// the `slurm` policy's fair share (`[slurm] decay_half_life`, SLURM-2).
    pub priority_half_life: Time,
}

/// An account's budget standing and where it is heading (one place for the
/// API, the CLI, the metrics and the reasons; see `docs/budgets.md`).
#[derive(Clone, Debug, PartialEq)]
pub struct Projection {
    /// `[start, end)` of the current budget period.
    pub period_start: Time,
    pub period_end: Time,
    /// NGH the subtree used this period.
    pub used_ngh: f64,
    /// Own budget (NGH per period), if any.
    pub budget_ngh: Option<f64>,
    /// NGH carried over from the period before (BUD-5); 0 without a budget.
    pub carried_ngh: f64,
    /// `budget + carried − used` (negative once over), if there is a budget.
    pub remaining_ngh: Option<f64>,
    /// Burn rate: the period's average so far, NGH per hour (0 at the
    /// period's first instant).
    pub burn_ngh_per_hour: f64,
    /// When the remaining budget runs out at that rate: `None` without a
    /// budget, when already exhausted, or at a zero rate.
    pub exhaustion: Option<Time>,
}

impl Projection {
    /// The fraction of the period's budget (with carry-over) used, if there
    /// is a budget.
    pub fn used_fraction(&self) -> Option<f64> {
        self.budget_ngh.map(|b| self.used_ngh / (b + self.carried_ngh))
    }
}

/// Normalised GPU-hours as people read them (reasons, `allot accounts`):
/// whole numbers with thousands separators from 100 up, three significant
/// digits below (0.005 stays 0.005, not 0).
pub fn format_ngh(x: f64) -> String {
    let x = x.max(0.0);
    if x > 0.0 && x < 99.95 {
        let decimals = (2 - x.log10().floor() as i32).max(0) as usize;
        let s = format!("{x:.decimals$}");
        return if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    }
    let v = x.round() as u64;
    let digits = v.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
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
    pub fn new(accounts: &AccountTree, periods: Periods, carry_over: f64, half_life: Time) -> Ledger {
        Ledger {
            usage: vec![Usage::default(); accounts.len()],
            members: Vec::new(),
            periods,
            carry_over,
            origin: None,
            half_life,
            priority_half_life: half_life,
        }
    }

    /// The decayed usage of member `m` as of `now` (0 for a member never
    /// charged).
    /// Room for the accounts of a tree that grew (ACC-1: new accounts get
    /// the next ids and start with nothing used).
    pub fn grow(&mut self, accounts: usize) {
        if self.usage.len() < accounts {
            self.usage.resize(accounts, Usage::default());
        }
    }

    pub fn member_decayed_ngs_at(&self, m: usize, now: Time) -> f64 {
        self.members.get(m).map_or(0.0, |u| decay(u.decayed_ngs, u.alloc_ngpus, u.last, now, self.half_life))
    }

    /// The usage of member `m` as of `now` decayed by the priority
    /// half-life (SLURM-2; 0 for a member never charged).
    pub fn member_priority_decayed_ngs_at(&self, m: usize, now: Time) -> f64 {
        self.members
            .get(m)
            .map_or(0.0, |u| decay(u.priority_decayed_ngs, u.priority_rate, u.last, now, self.priority_half_life))
    }

    /// Changes the allocation of member `m` by `gpus` raw GPUs of weight
    /// `weight` (negative to release), billed by its normalised GPUs.
    pub fn change_member(&mut self, m: usize, now: Time, gpus: i64, weight: f64) {
        self.change_member_billed(m, now, gpus, weight, gpus as f64 * weight);
    }

    /// [`Ledger::change_member`] with the billing held changed by `billing`
    /// (SLURM-2; negative to release).
    pub fn change_member_billed(&mut self, m: usize, now: Time, gpus: i64, weight: f64, billing: f64) {
        if self.members.len() <= m {
            self.members.resize(m + 1, MemberUsage::default());
        }
        let decayed = self.member_decayed_ngs_at(m, now);
        let priority_decayed = self.member_priority_decayed_ngs_at(m, now);
        let before = period_use!(&self.members[m]);
        let (period, prev) = (self.use_period_ngs(before, now), self.use_prev_period_ngs(before, now));
        let u = &mut self.members[m];
        u.decayed_ngs = decayed;
        u.priority_decayed_ngs = priority_decayed;
        if now > u.last {
            (u.period_ngs, u.prev_period_ngs) = (period, prev);
        }
        u.last = u.last.max(now);
        u.alloc_gpus = u.alloc_gpus.checked_add_signed(gpus).expect("member allocation went negative");
        u.alloc_ngpus += gpus as f64 * weight;
        u.priority_rate += billing;
        if u.alloc_gpus == 0 {
            (u.alloc_ngpus, u.priority_rate) = (0.0, 0.0);
        }
    }

    /// Start of the budget period containing `t`.
    pub fn period_start(&self, t: Time) -> Time {
        self.periods.bounds(t).0
    }

    /// End (the next boundary) of the budget period containing `t`.
    pub fn period_end(&self, t: Time) -> Time {
        self.periods.bounds(t).1
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
        v.prev_period_ngs = self.prev_period_ngs_at(a, now);
        v.decayed_ngs = self.decayed_ngs_at(a, now);
        v.priority_decayed_ngs = self.priority_decayed_ngs_at(a, now);
        v.last = now;
        v
    }

    /// `at(a, now).period_ngs`, without the rest.
    pub fn period_ngs_at(&self, a: AccountId, now: Time) -> f64 {
        self.use_period_ngs(period_use!(&self.usage[a.0 as usize]), now)
    }

    /// Normalised GPU-seconds `a`'s subtree used in the period before the
    /// one containing `now`.
    pub fn prev_period_ngs_at(&self, a: AccountId, now: Time) -> f64 {
        self.use_prev_period_ngs(period_use!(&self.usage[a.0 as usize]), now)
    }

    /// Normalised GPU-seconds member `m` used in the current budget period
    /// as of `now` (0 for a member never charged; BUD-6).
    pub fn member_period_ngs_at(&self, m: usize, now: Time) -> f64 {
        self.members.get(m).map_or(0.0, |u| self.use_period_ngs(period_use!(u), now))
    }

    /// Normalised GPU-seconds member `m` used in the period before the one
    /// containing `now`.
    pub fn member_prev_period_ngs_at(&self, m: usize, now: Time) -> f64 {
        self.members.get(m).map_or(0.0, |u| self.use_prev_period_ngs(period_use!(u), now))
    }

    /// Period usage as of `now` from `u` (BUD-4: restarts at a boundary).
    fn use_period_ngs(&self, u: PeriodUse, now: Time) -> f64 {
        if now <= u.last {
            return u.period_ngs;
        }
        if self.periods.index(now) != self.periods.index(u.last) {
            u.alloc_ngpus * (now - self.period_start(now)) as f64
        } else {
            u.period_ngs + u.alloc_ngpus * (now - u.last) as f64
        }
    }

    /// Usage in the period before the one containing `now`, from `u`.
    fn use_prev_period_ngs(&self, u: PeriodUse, now: Time) -> f64 {
        let (k, kl) = (self.periods.index(now), self.periods.index(u.last.min(now)));
        if k == kl {
            u.prev_period_ngs
        } else if k == kl + 1 {
            u.period_ngs + u.alloc_ngpus * (self.periods.start(k) - u.last) as f64
        } else {
            u.alloc_ngpus * (self.periods.start(k) - self.periods.start(k - 1)) as f64
        }
    }

    /// BUD-5: normalised GPU-seconds carried into the period containing
    /// `now` for a budget of `budget_ngs`: what the period before left
    /// unused of that budget, at most `carry_over` times it. The budget in
    /// force now is used for both periods (a budget changed mid-period
    /// applies to the whole period, no pro rata), so the amount depends only
    /// on the recorded use and the current budget. Nothing is carried into
    /// the period of the ledger's first charge.
    pub fn carry_ngs(&self, a: AccountId, budget_ngs: f64, now: Time) -> f64 {
        self.carry_from(|| self.prev_period_ngs_at(a, now), budget_ngs, now)
    }

    /// BUD-5 for member `m`'s own budget (BUD-6): as [`Ledger::carry_ngs`].
    pub fn member_carry_ngs(&self, m: usize, budget_ngs: f64, now: Time) -> f64 {
        self.carry_from(|| self.member_prev_period_ngs_at(m, now), budget_ngs, now)
    }

    /// What a period before that used `prev_ngs` carries into the period
    /// containing `now` for a budget of `budget_ngs` (BUD-5).
    fn carry_from(&self, prev_ngs: impl FnOnce() -> f64, budget_ngs: f64, now: Time) -> f64 {
        let first = self.origin.is_none_or(|o| self.periods.index(o) >= self.periods.index(now));
        if self.carry_over <= 0.0 || first {
            return 0.0;
        }
        (budget_ngs - prev_ngs()).clamp(0.0, self.carry_over * budget_ngs)
    }

    /// Normalised GPU-seconds `a`'s subtree may use this period before it is
    /// over its own budget of `budget_gpu_hours` (BUD-1 with BUD-5).
    pub fn available_ngs(&self, a: AccountId, budget_gpu_hours: f64, now: Time) -> f64 {
        let b = budget_gpu_hours * HOUR;
        b + self.carry_ngs(a, b, now)
    }

    /// Normalised GPU-seconds member `m` may use this period before it is
    /// over its own budget of `budget_gpu_hours` (BUD-6 with BUD-5).
    pub fn member_available_ngs(&self, m: usize, budget_gpu_hours: f64, now: Time) -> f64 {
        let b = budget_gpu_hours * HOUR;
        b + self.member_carry_ngs(m, b, now)
    }

    /// Used, remaining, burn rate and projected exhaustion of `a`'s own
    /// budget as of `now`. The rate is the period's average so far, so one
    /// short burst does not swing the projection; the policy's own wake-up
    /// (`next_wakeup`) uses the allocation held now, the instant the status
    /// actually changes.
    pub fn projection(&self, tree: &AccountTree, a: AccountId, now: Time) -> Projection {
        let budget = tree.account(a).budget_gpu_hours;
        let carried = budget.map_or(0.0, |b| self.carry_ngs(a, b * HOUR, now));
        self.project(self.period_ngs_at(a, now), budget, carried, now)
    }

    /// The same for member `m` and its own budget `budget` (NGH per period,
    /// BUD-6), if it has one.
    pub fn member_projection(&self, m: usize, budget: Option<f64>, now: Time) -> Projection {
        let carried = budget.map_or(0.0, |b| self.member_carry_ngs(m, b * HOUR, now));
        self.project(self.member_period_ngs_at(m, now), budget, carried, now)
    }

    /// A projection from `used` and `carried` (normalised GPU-seconds) this
    /// period and a budget in NGH.
    fn project(&self, used: f64, budget: Option<f64>, carried: f64, now: Time) -> Projection {
        let (period_start, period_end) = self.periods.bounds(now);
        let remaining = budget.map(|b| b * HOUR + carried - used);
        let elapsed = now.saturating_sub(period_start);
        let rate = if elapsed > 0 { used / elapsed as f64 } else { 0.0 };
        let exhaustion = match remaining {
            Some(r) if r > 0.0 && rate > 0.0 => Some(now.saturating_add((r / rate).ceil() as Time)),
            _ => None,
        };
        Projection {
            period_start,
            period_end,
            used_ngh: used / HOUR,
            budget_ngh: budget,
            carried_ngh: carried / HOUR,
            remaining_ngh: remaining.map(|r| r / HOUR),
            burn_ngh_per_hour: rate,
            exhaustion,
        }
    }

    /// `at(a, now).decayed_ngs`, without the rest.
    pub fn decayed_ngs_at(&self, a: AccountId, now: Time) -> f64 {
        let u = &self.usage[a.0 as usize];
        decay(u.decayed_ngs, u.alloc_ngpus, u.last, now, self.half_life)
    }

    /// `at(a, now).priority_decayed_ngs`, without the rest (SLURM-2).
    pub fn priority_decayed_ngs_at(&self, a: AccountId, now: Time) -> f64 {
        let u = &self.usage[a.0 as usize];
        decay(u.priority_decayed_ngs, u.priority_rate, u.last, now, self.priority_half_life)
    }

    /// CFG-1: new half-lives and carry-over from `now` on. Every decayed
    /// usage is first brought to `now` under the old half-lives, so the
    /// change acts on what is used from now, not on the past.
    pub fn retune(&mut self, now: Time, half_life: Time, priority_half_life: Time, carry_over: f64) {
        for i in 0..self.usage.len() {
            self.usage[i] = self.at(AccountId(i as u32), now);
        }
        for m in 0..self.members.len() {
            self.change_member_billed(m, now, 0, 0.0, 0.0);
        }
        (self.half_life, self.priority_half_life, self.carry_over) = (half_life, priority_half_life, carry_over);
    }

    /// Changes the allocation of `a` and its ancestors by `gpus` raw GPUs of
    /// normalisation weight `weight` (negative to release), billed by its
    /// normalised GPUs.
    pub fn change(&mut self, tree: &AccountTree, a: AccountId, now: Time, gpus: i64, weight: f64) {
        self.change_billed(tree, a, now, gpus, weight, gpus as f64 * weight);
    }

    /// [`Ledger::change`] with the billing held changed by `billing`
    /// (SLURM-2; negative to release).
    pub fn change_billed(&mut self, tree: &AccountTree, a: AccountId, now: Time, gpus: i64, weight: f64, billing: f64) {
        self.origin.get_or_insert(now);
        for x in tree.ancestry(a) {
            let mut v = self.at(x, now);
            v.alloc_gpus = v.alloc_gpus.checked_add_signed(gpus).expect("ledger allocation went negative");
            v.alloc_ngpus += gpus as f64 * weight;
            v.priority_rate += billing;
            if v.alloc_gpus == 0 {
                (v.alloc_ngpus, v.priority_rate) = (0.0, 0.0); // no float residue when nothing is held
            }
            self.usage[x.0 as usize] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::format_ngh as ngh;

    #[test]
    fn significant_digits_and_thousands_separators() {
        for (x, s) in [
            (0.0, "0"),
            (0.005, "0.005"),
            (0.012_34, "0.0123"),
            (1.5, "1.5"),
            (12.0, "12"),
            (12.345, "12.3"),
            (99.96, "100"),
            (999.4, "999"),
            (1000.0, "1,000"),
            (1204.0, "1,204"),
            (1_234_567.0, "1,234,567"),
        ] {
            assert_eq!(ngh(x), s);
        }
    }
}
