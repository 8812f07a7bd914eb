//! Seeded sampling helpers: log-normal and Poisson draws, weighted choices
//! and arrival times following an hour-of-week profile. Everything draws
//! from the one generator passed in, in a fixed order.

use allot_core::Time;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Uniform in `[lo, hi)` (or `lo` when the range is empty).
pub(crate) fn uniform(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    if hi > lo { rng.gen_range(lo..hi) } else { lo }
}

/// A standard normal draw (Box–Muller).
pub(crate) fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.gen_range(0.0..1.0);
    let u2: f64 = rng.gen_range(0.0..1.0);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Log-normal with the given median and sigma, clamped, in whole seconds.
pub(crate) fn lognormal_s(rng: &mut ChaCha8Rng, median: f64, sigma: f64, min: Time, max: Time) -> Time {
    let v = median * (sigma * normal(rng)).exp();
    (v.round() as Time).clamp(min, max.max(min))
}

/// A Poisson draw (Knuth; for the small means used here).
pub(crate) fn poisson(rng: &mut ChaCha8Rng, mean: f64) -> u32 {
    if mean <= 0.0 {
        return 0;
    }
    let limit = (-mean).exp();
    let (mut k, mut p) = (0u32, 1.0f64);
    loop {
        p *= rng.gen_range(0.0..1.0);
        if p <= limit || k >= 1000 {
            return k;
        }
        k += 1;
    }
}

/// Index chosen with probability proportional to its weight.
pub(crate) fn weighted<T>(rng: &mut ChaCha8Rng, items: &[(T, f64)]) -> usize {
    let total: f64 = items.iter().map(|(_, w)| *w).sum();
    let mut x = uniform(rng, 0.0, total);
    for (i, (_, w)) in items.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    items.len() - 1
}

/// Relative submission rate per hour of a weekday, for batch work.
pub(crate) const BATCH_WEEKDAY: [f64; 24] = [
    0.5, 0.45, 0.4, 0.4, 0.4, 0.45, 0.5, 0.6, 0.8, 1.0, 1.2, 1.2, 1.1, 1.1, 1.2, 1.2, 1.2, 1.1, 1.0, 0.9, 0.8, 0.7,
    0.6, 0.55,
];

/// Weekend batch rate relative to the same weekday hour.
pub(crate) const BATCH_WEEKEND: f64 = 0.35;

/// Relative start rate of interactive debugging bursts per hour of a
/// working day: 9:00–18:00 with a lunch dip, little before or after.
pub(crate) const INTERACTIVE_DAY: [f64; 24] = [
    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.02, 0.2, 0.7, 1.0, 1.0, 0.6, 0.9, 1.0, 1.0, 0.9, 0.6, 0.3, 0.15, 0.08, 0.05,
    0.03, 0.0,
];

/// Share of an interactive user's weekday sessions they also run on a
/// weekend day.
pub(crate) const INTERACTIVE_WEEKEND: f64 = 0.08;

/// Whether day `d` of the horizon (day 0 is a Monday) is a weekend day.
pub(crate) fn is_weekend(day: u64) -> bool {
    day % 7 >= 5
}

/// Arrival times over a horizon with a per-hour rate.
pub(crate) struct Arrivals {
    /// Cumulative rate at the end of each hour of the horizon.
    cumulative: Vec<f64>,
}

impl Arrivals {
    /// The batch profile over `days`.
    pub fn batch(days: u32) -> Arrivals {
        let mut cumulative = Vec::with_capacity(days as usize * 24);
        let mut acc = 0.0;
        for d in 0..u64::from(days) {
            let f = if is_weekend(d) { BATCH_WEEKEND } else { 1.0 };
            for w in BATCH_WEEKDAY {
                acc += w * f;
                cumulative.push(acc);
            }
        }
        Arrivals { cumulative }
    }

    /// A time in seconds from the start of the horizon.
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> Time {
        let total = *self.cumulative.last().expect("horizon of at least one day");
        let x = uniform(rng, 0.0, total);
        let hour = self.cumulative.partition_point(|&c| c <= x).min(self.cumulative.len() - 1);
        hour as Time * 3600 + rng.gen_range(0..3600)
    }
}

/// An hour of a working day drawn from [`INTERACTIVE_DAY`].
pub(crate) fn interactive_hour(rng: &mut ChaCha8Rng) -> Time {
    let items: Vec<(usize, f64)> = INTERACTIVE_DAY.iter().copied().enumerate().collect();
    weighted(rng, &items) as Time
}
