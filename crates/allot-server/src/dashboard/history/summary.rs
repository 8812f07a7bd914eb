//! The History page's table of numbers: each measure over the last bucket
//! and over the whole window, side by side.
//!
//! Utilization says what it is. **Declared** is what the submissions
//! declared (Σ GPUs allocated × their `util`, over available GPU-time);
//! **measured** is what GPU telemetry reported (Σ GPUs allocated × the
//! attempt's measured mean, over the same available GPU-time), with the
//! share of the allocated GPU-time telemetry covered beside it. Where no
//! telemetry was reported the measured figures say so ("not measured")
//! instead of showing 0 %; the measures.md utilization (measured where
//! reported, declared elsewhere) keeps its own labelled row.

use maud::{Markup, html};

use super::super::layout::{dur, num, pct, when};
use super::series::{QueueStats, Series, Window, ratio};

/// What a measured figure shows when telemetry reported nothing.
pub const NOT_MEASURED: &str = "not measured (no GPU telemetry reported)";

/// A row: its definition's anchor, its name, the last bucket's and the
/// window's cells.
type Row = (&'static str, &'static str, String, String);

/// The measured share of `used` over `available`, or [`NOT_MEASURED`]
/// when telemetry covered none of the allocated GPU-time.
fn measured(covered: f64, v: f64) -> String {
    if covered > 0.0 { pct(v) } else { NOT_MEASURED.to_string() }
}

/// The utilization rows: declared, measured, the share measured, and
/// measures.md's combination.
fn utilization_rows(s: &Series, last: &dyn Fn(&[f64]) -> f64, total: &dyn Fn(&[f64]) -> f64) -> Vec<Row> {
    let of = |f: &dyn Fn(&[f64]) -> f64, v: &[f64]| ratio(f(v), f(&s.available_s));
    let covered = |f: &dyn Fn(&[f64]) -> f64| {
        let (m, a) = (f(&s.measured_assigned_s), f(&s.assigned_s));
        if m > 0.0 { pct(ratio(m, a)) } else { NOT_MEASURED.to_string() }
    };
    let combined =
        |f: &dyn Fn(&[f64]) -> f64| pct(ratio(f(&s.used_measured_s) + f(&s.used_declared_s), f(&s.available_s)));
    vec![
        (
            "m-utilization-declared",
            "utilization, declared",
            pct(of(last, &s.declared_s)),
            pct(of(total, &s.declared_s)),
        ),
        (
            "m-utilization-measured",
            "utilization, measured",
            measured(last(&s.measured_assigned_s), of(last, &s.used_measured_s)),
            measured(total(&s.measured_assigned_s), of(total, &s.used_measured_s)),
        ),
        ("m-utilization-measured", "allocated GPU-time measured", covered(last), covered(total)),
        ("m-utilization", "utilization (measured where reported, else declared)", combined(last), combined(total)),
    ]
}

/// The last bucket and the whole window, side by side.
pub fn summary(s: &Series, w: &Window) -> Markup {
    let n = w.buckets();
    let total = |v: &[f64]| v.iter().sum::<f64>();
    let last = |v: &[f64]| v.last().copied().unwrap_or(0.0);
    let all_q: Vec<i64> = s.queue_times.iter().flatten().copied().collect();
    let (wq, lq) = (QueueStats::of(&all_q), QueueStats::of(s.queue_times.last().map_or(&[], Vec::as_slice)));
    let cap = |v: f64, len: i64| ratio(v, s.total_gpus as f64 * len as f64);
    let last_len = w.bucket;
    let mut rows: Vec<Row> = vec![
        (
            "m-availability",
            "availability",
            pct(cap(last(&s.available_s), last_len)),
            pct(cap(total(&s.available_s), w.to - w.from)),
        ),
        (
            "m-occupancy",
            "occupancy (GPUs allocated)",
            pct(ratio(last(&s.assigned_s), last(&s.available_s))),
            pct(ratio(total(&s.assigned_s), total(&s.available_s))),
        ),
    ];
    rows.extend(utilization_rows(s, &last, &total));
    rows.extend([
        (
            "m-queue-length",
            "queue length (mean)",
            num(last(&s.waiting_s) / last_len as f64),
            num(total(&s.waiting_s) / (w.to - w.from) as f64),
        ),
        ("m-queue-time", "workloads started", lq.map_or(0, |q| q.n).to_string(), wq.map_or(0, |q| q.n).to_string()),
        ("m-queue-time", "queue time p50", qdur(lq.map(|q| q.p50)), qdur(wq.map(|q| q.p50))),
        ("m-queue-time", "queue time p90", qdur(lq.map(|q| q.p90)), qdur(wq.map(|q| q.p90))),
        ("m-queue-time", "queue time p95", qdur(lq.map(|q| q.p95)), qdur(wq.map(|q| q.p95))),
        ("m-queue-time", "queue time p99", qdur(lq.map(|q| q.p99)), qdur(wq.map(|q| q.p99))),
        (
            "m-queue-time",
            "queue time mean",
            qdur(lq.map(|q| q.mean.round() as i64)),
            qdur(wq.map(|q| q.mean.round() as i64)),
        ),
        (
            "m-preemptions",
            "preemptions",
            s.preemptions.last().copied().unwrap_or(0).to_string(),
            s.preemptions.iter().sum::<u64>().to_string(),
        ),
        (
            "m-availability",
            "available GPU-hours",
            num(round2(last(&s.available_s) / 3600.0)),
            num(round2(total(&s.available_s) / 3600.0)),
        ),
        (
            "m-occupancy",
            "assigned GPU-hours",
            num(round2(last(&s.assigned_s) / 3600.0)),
            num(round2(total(&s.assigned_s) / 3600.0)),
        ),
    ]);
    html! {
        div.table-wrap { table.history-summary {
            caption.muted { "The last bucket (from " (when(w.start(n.saturating_sub(1)))) ") and the whole window" }
            thead { tr { th scope="col" { "Measure" } th.num scope="col" { "Last bucket" } th.num scope="col" { "Window" } } }
            tbody {
                @for (id, name, l, t) in &rows {
                    tr { th scope="row" { a href={ "#" (id) } { (name) } } td.num { (l) } td.num { (t) } }
                }
            }
        } }
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn qdur(v: Option<i64>) -> String {
    v.map_or_else(|| "—".into(), dur)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(measured_assigned: f64, used_measured: f64) -> Series {
        Series {
            total_gpus: 2,
            available_s: vec![100.0, 100.0],
            assigned_s: vec![50.0, 100.0],
            declared_s: vec![50.0, 100.0],
            used_declared_s: vec![50.0, 100.0 - measured_assigned],
            measured_assigned_s: vec![0.0, measured_assigned],
            used_measured_s: vec![0.0, used_measured],
            ..Default::default()
        }
    }

    fn cells(s: &Series) -> Vec<(&'static str, String, String)> {
        let total = |v: &[f64]| v.iter().sum::<f64>();
        let last = |v: &[f64]| v.last().copied().unwrap_or(0.0);
        utilization_rows(s, &last, &total).into_iter().map(|(_, n, l, t)| (n, l, t)).collect()
    }

    /// Declared and measured are apart and named; nothing measured says so
    /// rather than 0 %.
    #[test]
    fn utilization_says_what_is_declared_and_what_is_measured() {
        let none = cells(&series(0.0, 0.0));
        assert_eq!(none[0], ("utilization, declared", "100.0 %".into(), "75.0 %".into()));
        assert_eq!(none[1], ("utilization, measured", NOT_MEASURED.into(), NOT_MEASURED.into()));
        assert_eq!(none[2].1, NOT_MEASURED);
        assert_eq!(
            none[3],
            ("utilization (measured where reported, else declared)", "100.0 %".into(), "75.0 %".into())
        );
        // Half of the last bucket's allocated GPU-time measured at 40 %.
        let some = cells(&series(50.0, 20.0));
        assert_eq!(some[1], ("utilization, measured", "20.0 %".into(), "10.0 %".into()));
        assert_eq!(some[2], ("allocated GPU-time measured", "50.0 %".into(), "33.3 %".into()));
        assert_eq!(some[3].1, "70.0 %", "20 measured + 50 declared of 100");
        // Measured at 0 % is a measurement, not its absence.
        assert_eq!(cells(&series(50.0, 0.0))[1].1, "0.0 %");
    }
}
