//! Queue and completion times: nearest-rank percentiles and means.

use allot_core::{Class, Phase, State, Time};

use crate::report::{ClassStats, Stats};

/// The value of nearest rank `⌈pct/100 · n⌉` (at least 1) in `sorted`,
/// which must be non-empty and ascending.
pub(crate) fn nearest_rank(sorted: &[u64], pct: u64) -> u64 {
    let n = sorted.len() as u64;
    let rank = (pct * n).div_ceil(100).max(1);
    sorted[(rank - 1) as usize]
}

/// p50/p95/p99 by nearest rank and the mean; `None` for no values.
pub(crate) fn stats(mut values: Vec<u64>) -> Option<Stats> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let sum: u128 = values.iter().map(|v| u128::from(*v)).sum();
    Some(Stats {
        p50: nearest_rank(&values, 50),
        p95: nearest_rank(&values, 95),
        p99: nearest_rank(&values, 99),
        mean: sum as f64 / values.len() as f64,
    })
}

/// Queue time (first start − first queued: the submission, or when its
/// conditions were first met, HOLD-1, DEP-1, ARR-1) of every workload that started within
/// the horizon, with its index; and the JCT (end − submit) of every workload
/// that finished within it.
pub(crate) struct Times {
    /// `(workload index, class, queue seconds)`.
    pub queue: Vec<(usize, Class, Time)>,
    pub jct: Vec<Time>,
}

impl Times {
    pub(crate) fn collect(state: &State, horizon_end: Time) -> Times {
        let mut queue = Vec::new();
        let mut jct = Vec::new();
        for (i, (spec, run)) in state.specs.iter().zip(&state.runs).enumerate() {
            if let Some(s) = run.first_start.filter(|s| *s <= horizon_end) {
                queue.push((i, spec.class, s.saturating_sub(run.queued.unwrap_or(spec.submit))));
            }
            if run.phase == Phase::Finished
                && let Some(e) = run.end.filter(|e| *e <= horizon_end)
            {
                jct.push(e.saturating_sub(spec.submit));
            }
        }
        Times { queue, jct }
    }

    /// Queue-time statistics of one class, or of all when `class` is
    /// `None`, over the workloads (by index) `keep` accepts.
    pub(crate) fn queue_stats_of(&self, class: Option<Class>, keep: impl Fn(usize) -> bool) -> Option<Stats> {
        let of = |(i, c, _): &&(usize, Class, Time)| class.is_none_or(|k| k == *c) && keep(*i);
        stats(self.queue.iter().filter(of).map(|q| q.2).collect())
    }

    /// Statistics of every class and per class, over the workloads `keep`
    /// accepts.
    pub(crate) fn class_stats(&self, keep: impl Fn(usize) -> bool + Copy) -> (Option<Stats>, ClassStats) {
        let by_class = ClassStats {
            batch: self.queue_stats_of(Some(Class::Batch), keep),
            interactive: self.queue_stats_of(Some(Class::Interactive), keep),
            service: self.queue_stats_of(Some(Class::Service), keep),
        };
        (self.queue_stats_of(None, keep), by_class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_on_known_lists() {
        let five = [15, 20, 35, 40, 50];
        let cases: &[(&str, &[u64], u64, u64)] = &[
            ("five: p50 is rank 3", &five, 50, 35),
            ("five: p30 is rank 2", &five, 30, 20),
            ("five: p95 is rank 5", &five, 95, 50),
            ("five: p0 is rank 1", &five, 0, 15),
            ("one value", &[7], 99, 7),
            ("ten: p50 is rank 5", &[10, 20, 30, 40, 50, 60, 70, 80, 90, 100], 50, 50),
            ("ten: p95 is rank 10", &[10, 20, 30, 40, 50, 60, 70, 80, 90, 100], 95, 100),
        ];
        for (name, values, pct, want) in cases {
            assert_eq!(nearest_rank(values, *pct), *want, "{name}");
        }
    }

    #[test]
    fn stats_sorts_and_averages() {
        let s = stats((1..=100).rev().collect()).unwrap();
        assert_eq!((s.p50, s.p95, s.p99), (50, 95, 99));
        assert_eq!(s.mean, 50.5);
        let s = stats(vec![50, 15, 40, 35, 20]).unwrap();
        assert_eq!((s.p50, s.p95, s.p99, s.mean), (35, 50, 50, 32.0));
        assert_eq!(stats(Vec::new()), None);
    }
}
