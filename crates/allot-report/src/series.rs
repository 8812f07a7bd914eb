//! Time series and distributions of one run, for the charts: computed from
//! the run's record ([`SimOutput`]: attempts and capacity) and final
//! [`State`] alone, with the same clipping rules as the measures
//! (`docs/measures.md`), so the series add up to the report's totals.
//!
//! The horizon `[0, H]` is cut into buckets of a round length (a minute up to
//! a week) chosen so that there are at most [`MAX_BUCKETS`]; the last bucket
//! may be partial.

use std::collections::BTreeMap;

use allot_core::{AccountId, AccountTree, Class, Phase, State, Time};
use allot_sim::measures::{BudgetPeriods, budget_periods};
use allot_sim::{AttemptEnd, SimOutput};
use serde::Serialize;

/// Most buckets a series has.
pub const MAX_BUCKETS: u64 = 150;

/// Bucket lengths to choose from, seconds.
const BUCKET_LENGTHS: [Time; 15] =
    [60, 300, 600, 900, 1800, 3600, 7200, 10_800, 14_400, 21_600, 43_200, 86_400, 172_800, 345_600, 604_800];

/// Most points of a queue-time distribution.
const MAX_CDF_POINTS: usize = 400;

/// Most accounts shown per chart (largest entitled share or budget first).
pub const MAX_ACCOUNTS: usize = 12;

/// The series of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Series {
    pub policy: String,
    pub horizon_s: Time,
    pub bucket_s: Time,
    /// Assigned / available GPU-time per bucket (0 where nothing was available).
    pub occupancy: Vec<f64>,
    /// Σ assigned × util / available GPU-time per bucket.
    pub utilization: Vec<f64>,
    /// Preemptions whose attempt ended (grace over) in the bucket.
    pub preemptions: Vec<u64>,
    /// GPU-hours lost to those preemptions (grace + lost progress).
    pub lost_gpu_hours: Vec<f64>,
    /// Budget, use and demand of every budgeted account per budget period
    /// (`None`: no account has a budget).
    pub budget: Option<BudgetPeriods>,
    /// Queue-time distribution per class with at least one workload.
    pub queue_cdf: BTreeMap<Class, Cdf>,
}

/// The empirical distribution of queue times of one class: `(q, f)` means a
/// fraction `f` of the class's workloads got GPUs within `q` seconds.
/// Workloads submitted after the horizon or rejected at admission are not
/// counted; workloads still waiting are (they keep `f` below 1).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cdf {
    /// Workloads counted (the denominator).
    pub workloads: u64,
    /// Of those, the ones that started within the horizon.
    pub started: u64,
    /// Ascending in both coordinates; `f` is exact at every `q` listed.
    pub points: Vec<(Time, f64)>,
}

/// The smallest round bucket length giving at most [`MAX_BUCKETS`] buckets.
pub fn bucket_length(horizon: Time) -> Time {
    BUCKET_LENGTHS
        .into_iter()
        .find(|b| horizon.div_ceil(*b) <= MAX_BUCKETS)
        .unwrap_or_else(|| horizon.div_ceil(MAX_BUCKETS).max(1))
}

/// Integrates rates over buckets: `add(from, to, rate)` adds
/// `rate × |[from, to) ∩ bucket|` to every bucket in O(1), `finish` sums.
struct Integrator {
    bucket: Time,
    horizon: Time,
    /// Partial amounts, added directly.
    direct: Vec<f64>,
    /// Difference array of whole-bucket amounts.
    diff: Vec<f64>,
}

impl Integrator {
    fn new(bucket: Time, horizon: Time) -> Integrator {
        let n = horizon.div_ceil(bucket).max(1) as usize;
        Integrator { bucket, horizon, direct: vec![0.0; n], diff: vec![0.0; n + 1] }
    }

    fn add(&mut self, from: Time, to: Time, rate: f64) {
        let (from, to) = (from.min(self.horizon), to.min(self.horizon));
        if to <= from {
            return;
        }
        let b = self.bucket;
        let (first, last) = ((from / b) as usize, ((to - 1) / b) as usize);
        if first == last {
            self.direct[first] += rate * (to - from) as f64;
            return;
        }
        self.direct[first] += rate * ((first as Time + 1) * b - from) as f64;
        self.direct[last] += rate * (to - last as Time * b) as f64;
        if last > first + 1 {
            self.diff[first + 1] += rate * b as f64;
            self.diff[last] -= rate * b as f64;
        }
    }

    fn finish(self) -> Vec<f64> {
        let mut run = 0.0;
        self.direct
            .iter()
            .zip(&self.diff)
            .map(|(d, f)| {
                run += f;
                d + run
            })
            .collect()
    }
}

/// The bucket an instant falls in (the horizon itself: the last bucket).
fn bucket_of(t: Time, bucket: Time, n: usize) -> usize {
    ((t / bucket) as usize).min(n - 1)
}

impl Series {
    /// Computes the series of a run from its final state and record.
    pub fn compute(state: &State, out: &SimOutput) -> Series {
        let h = out.horizon_end;
        let b = bucket_length(h);
        let n = h.div_ceil(b).max(1) as usize;
        let available = available(out, b);
        let (mut assigned, mut util) = (Integrator::new(b, h), Integrator::new(b, h));
        let mut preemptions = vec![0u64; n];
        let mut lost = vec![0.0; n];
        for a in &out.attempts {
            assigned.add(a.start, a.end, f64::from(a.gpus));
            util.add(a.start, a.end, f64::from(a.gpus) * a.util);
            if a.outcome == AttemptEnd::Preempted {
                let held = a.end.min(h).saturating_sub(a.start.min(h)) * u64::from(a.gpus);
                let i = bucket_of(a.end.min(h), b, n);
                preemptions[i] += 1;
                lost[i] += (held - a.useful_gpu_s.min(held)) as f64 / 3600.0;
            }
        }
        let per_available = |v: Vec<f64>| -> Vec<f64> {
            v.iter().zip(&available).map(|(x, a)| if *a > 0.0 { x / a } else { 0.0 }).collect()
        };
        Series {
            policy: out.policy.clone(),
            horizon_s: h,
            bucket_s: b,
            occupancy: per_available(assigned.finish()),
            utilization: per_available(util.finish()),
            preemptions,
            lost_gpu_hours: lost,
            budget: budget_periods(state, out),
            queue_cdf: Class::ALL.into_iter().filter_map(|c| queue_cdf(state, h, c).map(|cdf| (c, cdf))).collect(),
        }
    }

    /// Start of every bucket, seconds.
    pub fn bucket_starts(&self) -> impl Iterator<Item = Time> + '_ {
        (0..self.occupancy.len() as Time).map(|i| i * self.bucket_s)
    }
}

/// Available GPU-seconds per bucket, from the in-service step function
/// (every GPU before the first step, as the measures count it).
fn available(out: &SimOutput, bucket: Time) -> Vec<f64> {
    let h = out.horizon_end;
    let mut steps: Vec<(Time, u64)> = out.capacity.iter().map(|s| (s.t, s.gpus)).collect();
    steps.sort_by_key(|s| s.0);
    let mut acc = Integrator::new(bucket, h);
    acc.add(0, steps.first().map_or(h, |s| s.0), out.total_gpus as f64);
    for (i, &(t, gpus)) in steps.iter().enumerate() {
        let next = steps.get(i + 1).map_or(h, |s| s.0);
        acc.add(t, next, gpus as f64);
    }
    acc.finish()
}

/// The accounts the per-account charts show: the top-level accounts of
/// [`top_level`], at most [`MAX_ACCOUNTS`] (largest entitled share first),
/// in path order.
pub fn top_accounts(tree: &AccountTree) -> Vec<AccountId> {
    largest(top_level(tree), MAX_ACCOUNTS, |a| tree.static_share(a))
}

/// The top-level accounts: below the root, descend while the tree has a
/// single child (that has children of its own); the children there.
pub fn top_level(tree: &AccountTree) -> Vec<AccountId> {
    let mut node = AccountId::ROOT;
    while let [only] = tree.account(node).children.as_slice() {
        if tree.account(*only).children.is_empty() {
            break;
        }
        node = *only;
    }
    tree.account(node).children.clone()
}

/// The budgeted accounts whose attainment the page shows: the top-level
/// accounts that have a budget, or else the highest budgeted accounts (no
/// budgeted ancestor); at most [`MAX_ACCOUNTS`], largest budget first, shown
/// in path order.
pub fn budget_accounts(tree: &AccountTree) -> Vec<AccountId> {
    largest(budget_candidates(tree), MAX_ACCOUNTS, |a| tree.account(a).budget_gpu_hours.unwrap_or(0.0))
}

/// Every account [`budget_accounts`] chooses from.
pub fn budget_candidates(tree: &AccountTree) -> Vec<AccountId> {
    let budget = |a: AccountId| tree.account(a).budget_gpu_hours;
    let top: Vec<AccountId> = top_level(tree).into_iter().filter(|a| budget(*a).is_some()).collect();
    if !top.is_empty() {
        return top;
    }
    tree.ids()
        .filter(|a| budget(*a).is_some())
        .filter(|a| tree.ancestry(*a).skip(1).all(|x| budget(x).is_none()))
        .collect()
}

/// The `k` ids with the largest `key` (ties: path order), in path order.
fn largest(mut ids: Vec<AccountId>, k: usize, key: impl Fn(AccountId) -> f64) -> Vec<AccountId> {
    ids.sort_by(|a, b| key(*b).total_cmp(&key(*a)).then(a.cmp(b)));
    ids.truncate(k);
    ids.sort();
    ids
}

/// The queue-time distribution of one class; `None` when the class has no
/// workload.
fn queue_cdf(state: &State, h: Time, class: Class) -> Option<Cdf> {
    let mut waits = Vec::new();
    let mut workloads = 0u64;
    for (spec, run) in state.specs.iter().zip(&state.runs) {
        if spec.class != class || spec.submit > h || run.phase == Phase::Rejected {
            continue;
        }
        workloads += 1;
        if let Some(s) = run.first_start.filter(|s| *s <= h) {
            waits.push(s.saturating_sub(spec.submit));
        }
    }
    if workloads == 0 {
        return None;
    }
    waits.sort_unstable();
    let started = waits.len();
    // The last rank of every distinct value, thinned to at most MAX_CDF_POINTS.
    let mut ranks: Vec<usize> = (0..started).filter(|&i| i + 1 == started || waits[i + 1] != waits[i]).collect();
    if ranks.len() > MAX_CDF_POINTS {
        let picked: Vec<usize> = (1..=MAX_CDF_POINTS).map(|j| (j * started).div_ceil(MAX_CDF_POINTS) - 1).collect();
        ranks = picked.into_iter().map(|r| last_of_value(&waits, r)).collect();
        ranks.dedup();
    }
    let points = ranks.into_iter().map(|r| (waits[r], (r + 1) as f64 / workloads as f64)).collect();
    Some(Cdf { workloads, started: started as u64, points })
}

/// The last index holding the same value as index `r` of a sorted slice.
fn last_of_value(sorted: &[Time], r: usize) -> usize {
    r + sorted[r..].partition_point(|v| *v == sorted[r]) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_lengths_are_round_and_bounded() {
        let cases = [(0, 60), (3600, 60), (2 * 3600, 60), (3 * 3600, 300), (86_400, 600), (30 * 86_400, 21_600)];
        for (h, want) in cases {
            assert_eq!(bucket_length(h), want, "horizon {h}");
        }
        assert!(400 * 86_400 / bucket_length(400 * 86_400) <= MAX_BUCKETS);
    }

    #[test]
    fn integrator_splits_intervals_exactly() {
        let mut i = Integrator::new(10, 35);
        i.add(5, 32, 2.0); // 5..10, 10..20, 20..30, 30..32
        i.add(12, 14, 1.0);
        i.add(30, 99, 1.0); // clipped at 35
        assert_eq!(i.finish(), vec![10.0, 22.0, 20.0, 9.0]);
    }

    #[test]
    fn available_follows_the_capacity_steps() {
        let out = SimOutput {
            policy: "p".into(),
            horizon_end: 250,
            total_gpus: 16,
            added_gpus: Vec::new(),
            attempts: Vec::new(),
            capacity: [(50, 16), (120, 8), (200, 16)]
                .into_iter()
                .map(|(t, gpus)| allot_sim::CapacityStep { t, gpus, ngpus_milli: gpus * 1000 })
                .collect(),
            clusters: Vec::new(),
            log: Vec::new(),
            passes: 0,
            events: 0,
            node_failures: 0,
        };
        // Buckets of 100: 16 × 100; 16 × 20 + 8 × 80; 16 × 50 (the last is partial).
        assert_eq!(available(&out, 100), vec![1600.0, 960.0, 800.0]);
    }

    fn tree(accounts: &[(&str, Option<f64>)]) -> AccountTree {
        let specs: Vec<allot_core::AccountSpec> = accounts
            .iter()
            .map(|(p, b)| allot_core::AccountSpec { path: p.to_string(), budget_gpu_hours: *b, ..Default::default() })
            .collect();
        AccountTree::build(&specs).unwrap()
    }

    #[test]
    fn chosen_accounts() {
        /// (name, accounts with budgets, top accounts, budget accounts).
        type Case = (&'static str, Vec<(&'static str, Option<f64>)>, Vec<&'static str>, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            (
                "single root: its children",
                vec![("org/a", Some(2.0)), ("org/a/x", None), ("org/b", None), ("org/b/y", None)],
                vec!["org/a", "org/b"],
                vec!["org/a"],
            ),
            ("flat leaves", vec![("a", None), ("b", Some(1.0))], vec!["a", "b"], vec!["b"]),
            (
                "budgets below the top level",
                vec![("t/a/x", Some(1.0)), ("t/a/y", Some(3.0)), ("t/b/z", None)],
                vec!["t/a", "t/b"],
                vec!["t/a/x", "t/a/y"],
            ),
        ];
        for (name, accounts, top, budget) in cases {
            let t = tree(&accounts);
            let paths = |ids: Vec<AccountId>| ids.into_iter().map(|a| t.account(a).path.clone()).collect::<Vec<_>>();
            assert_eq!(paths(top_accounts(&t)), top, "{name}: top");
            assert_eq!(paths(budget_accounts(&t)), budget, "{name}: budget");
        }
        // At most MAX_ACCOUNTS, the largest, in path order.
        let many: Vec<(String, Option<f64>)> =
            (0..20).map(|i| (format!("o/a{i:02}"), Some(f64::from(i + 1)))).collect();
        let t = tree(&many.iter().map(|(p, b)| (p.as_str(), *b)).collect::<Vec<_>>());
        let chosen: Vec<String> = budget_accounts(&t).into_iter().map(|a| t.account(a).path.clone()).collect();
        assert_eq!(chosen.len(), MAX_ACCOUNTS);
        assert_eq!(chosen.first().map(String::as_str), Some("o/a08"));
        assert_eq!(chosen.last().map(String::as_str), Some("o/a19"));
    }

    #[test]
    fn last_of_value_skips_ties() {
        let v = [1, 2, 2, 2, 5];
        assert_eq!(last_of_value(&v, 1), 3);
        assert_eq!(last_of_value(&v, 3), 3);
        assert_eq!(last_of_value(&v, 4), 4);
    }
}
