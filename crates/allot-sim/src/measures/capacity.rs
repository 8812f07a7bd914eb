//! Available GPU-time: the integral of the in-service GPUs over the horizon;
//! total GPU-time: the integral of the GPUs that exist (MNT-5: a node added
//! at run time counts from its add on).

use allot_core::Time;

use crate::record::{CapacityStep, SimOutput};

/// Length of `[lo, hi) ∩ [a, b)`.
pub(crate) fn overlap(lo: Time, hi: Time, a: Time, b: Time) -> Time {
    hi.min(b).saturating_sub(lo.max(a))
}

/// `num / den`, or 0 when the denominator is 0 (an empty horizon or cluster).
pub(crate) fn ratio(num: f64, den: f64) -> f64 {
    if den > 0.0 { num / den } else { 0.0 }
}

/// Available GPU-seconds over `[0, horizon_end]`: `out.capacity` is a step
/// function (each step holds from its `t` to the next step's). Before the
/// first step, and when there is no step at all, every GPU counts as in
/// service. Steps at the same instant: the last one recorded holds.
pub(crate) fn available_gpu_s(out: &SimOutput) -> u64 {
    integrate(&out.capacity, out.total_gpus, out.horizon_end)
}

/// Total GPU-seconds over `[0, h]`: `total` GPUs throughout, and each of
/// the `added` (when, GPUs) from when it was added (MNT-5), so a fleet that
/// grows is never measured against its final (or initial) size.
pub(crate) fn total_gpu_s(total: u64, added: &[(Time, u64)], h: Time) -> u64 {
    total * h + added.iter().map(|&(t, gpus)| gpus * h.saturating_sub(t)).sum::<u64>()
}

/// [`available_gpu_s`] of any step function over `[0, h]`, with `total`
/// GPUs in service before its first step.
pub(crate) fn integrate(capacity: &[CapacityStep], total: u64, h: Time) -> u64 {
    let mut steps: Vec<(Time, u64)> = capacity.iter().map(|s| (s.t, s.gpus)).collect();
    steps.sort_by_key(|s| s.0); // stable: same-instant steps keep their order
    let first = steps.first().map_or(h, |s| s.0);
    let mut sum = total * first.min(h);
    for (i, &(t, gpus)) in steps.iter().enumerate() {
        let next = steps.get(i + 1).map_or(h, |s| s.0);
        sum += gpus * overlap(t, next, 0, h);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(h: Time, steps: &[(Time, u64)]) -> SimOutput {
        SimOutput {
            policy: "p".into(),
            horizon_end: h,
            total_gpus: 16,
            added_gpus: Vec::new(),
            attempts: Vec::new(),
            capacity: steps.iter().map(|&(t, gpus)| CapacityStep { t, gpus, ngpus_milli: gpus * 1000 }).collect(),
            clusters: Vec::new(),
            log: Vec::new(),
            passes: 0,
            events: 0,
            node_failures: 0,
        }
    }

    /// (name, horizon, steps (t, gpus), available GPU-seconds).
    type Case = (&'static str, Time, &'static [(Time, u64)], u64);

    #[test]
    fn integrates_the_step_function_within_the_horizon() {
        let cases: &[Case] = &[
            ("no steps: all in service", 100, &[], 1600),
            ("one step at 0", 100, &[(0, 16)], 1600),
            ("node down half the time", 100, &[(0, 16), (50, 8)], 1200),
            ("down and back", 100, &[(0, 16), (20, 8), (60, 16)], 1280),
            ("step after the horizon ignored", 100, &[(0, 16), (150, 0)], 1600),
            ("same instant: last holds", 100, &[(0, 16), (50, 0), (50, 8)], 1200),
            ("before the first step: total", 100, &[(40, 8)], 640 + 480),
            ("empty horizon", 0, &[(0, 16)], 0),
        ];
        for (name, h, steps, want) in cases {
            assert_eq!(available_gpu_s(&out(*h, steps)), *want, "{name}");
        }
    }

    /// (name, GPUs added (t, gpus), total GPU-seconds over [0, 100] with 16 at the start).
    type AddCase = (&'static str, &'static [(Time, u64)], u64);

    #[test]
    fn total_gpu_time_counts_added_gpus_from_their_add() {
        let cases: &[AddCase] = &[
            ("no node added", &[], 1600),
            ("8 GPUs from t=50", &[(50, 8)], 1600 + 400),
            ("added at 0: the whole horizon", &[(0, 8)], 2400),
            ("added after the horizon: nothing", &[(150, 8)], 1600),
            ("two adds", &[(20, 8), (90, 4)], 1600 + 640 + 40),
        ];
        for (name, added, want) in cases {
            assert_eq!(total_gpu_s(16, added, 100), *want, "{name}");
        }
    }

    #[test]
    fn overlap_and_ratio() {
        assert_eq!(overlap(10, 20, 0, 15), 5);
        assert_eq!(overlap(10, 20, 20, 30), 0);
        assert_eq!(overlap(30, 20, 0, 100), 0);
        assert_eq!(ratio(1.0, 0.0), 0.0);
        assert_eq!(ratio(1.0, 4.0), 0.25);
    }
}
