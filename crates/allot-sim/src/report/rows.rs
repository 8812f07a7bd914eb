//! The measures the tables show, in order, once for every form (text,
//! Markdown, HTML, single runs and means over seeds): each row's label, unit,
//! which direction is better, and how to read its value from a report.
//! Labels and definitions: `docs/measures.md`.

use crate::report::{CauseReport, ClusterReport, Report, Stats};

/// Which direction of a measure is better.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
    /// An input or a size (the horizon, the GPUs in service), or a measure
    /// whose best value is a matter of the site's goals.
    Neither,
}

impl Better {
    /// `↑`, `↓` or `—`, written after a measure's label.
    pub fn arrow(self) -> &'static str {
        match self {
            Better::Higher => "↑",
            Better::Lower => "↓",
            Better::Neither => "—",
        }
    }

    /// The arrow in words.
    pub fn says(self) -> &'static str {
        match self {
            Better::Higher => "higher is better",
            Better::Lower => "lower is better",
            Better::Neither => "neither direction is better",
        }
    }
}

/// What the arrows after the labels mean.
pub const DIRECTIONS: &str = "↑ higher is better, ↓ lower is better, — neither (an input or a size).";

/// How a value is written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A fraction, three decimals.
    Ratio,
    /// GPU-hours.
    Hours,
    /// A number of things.
    Count,
    /// Things per day, one decimal.
    Rate,
    /// A duration in seconds.
    Seconds,
}

/// One row of a table: a measure of a report of type `T`.
pub struct Row<T> {
    pub label: &'static str,
    pub unit: Unit,
    pub better: Better,
    /// Shown in the report's headline table too.
    pub headline: bool,
    /// The value; `None` where the measure is undefined.
    pub get: fn(&T) -> Option<f64>,
}

const fn row<T>(label: &'static str, unit: Unit, better: Better, get: fn(&T) -> Option<f64>) -> Row<T> {
    Row { label, unit, better, headline: false, get }
}

/// [`row`], shown in the headline table too.
const fn head<T>(label: &'static str, unit: Unit, better: Better, get: fn(&T) -> Option<f64>) -> Row<T> {
    Row { label, unit, better, headline: true, get }
}

fn stat(s: Option<Stats>, f: fn(&Stats) -> f64) -> Option<f64> {
    s.as_ref().map(f)
}

fn p50(s: &Stats) -> f64 {
    s.p50 as f64
}

fn p95(s: &Stats) -> f64 {
    s.p95 as f64
}

fn p99(s: &Stats) -> f64 {
    s.p99 as f64
}

fn mean(s: &Stats) -> f64 {
    s.mean.round()
}

use Better::{Higher, Lower, Neither};
use Unit::{Count, Hours, Rate, Ratio, Seconds};

/// The p50, p95, p99 and mean rows (lower is better) of the durations
/// `$get` reads, labelled `$name p50` …; `$head` says whether the p50 and
/// the p95 are in the headline.
macro_rules! durations {
    ($name:literal, $get:expr, $head:expr) => {
        &[
            duration(concat!($name, " p50"), $head[0], |r| stat($get(r), p50)),
            duration(concat!($name, " p95"), $head[1], |r| stat($get(r), p95)),
            duration(concat!($name, " p99"), false, |r| stat($get(r), p99)),
            duration(concat!($name, " mean"), false, |r| stat($get(r), mean)),
        ]
    };
}

/// A duration of which lower is better.
const fn duration(label: &'static str, headline: bool, get: fn(&Report) -> Option<f64>) -> Row<Report> {
    Row { label, unit: Seconds, better: Lower, headline, get }
}

/// The cluster-wide measures of a report, by section (its rows in one
/// or more runs).
pub const MEASURES: &[(&str, &[&[Row<Report>]])] = &[
    (
        "run",
        &[&[
            row("horizon", Seconds, Neither, |r| Some(r.horizon_s as f64)),
            row("workloads", Count, Neither, |r| Some(r.workloads as f64)),
        ]],
    ),
    (
        "capacity",
        &[&[
            row("availability", Ratio, Neither, |r| Some(r.metrics.availability)),
            head("occupancy", Ratio, Higher, |r| Some(r.metrics.occupancy)),
            head("utilization", Ratio, Higher, |r| Some(r.metrics.utilization)),
            row("impact", Ratio, Higher, |r| Some(r.metrics.impact)),
            row("available GPU-h", Hours, Neither, |r| Some(r.metrics.available_gpu_hours)),
            row("assigned GPU-h", Hours, Higher, |r| Some(r.metrics.assigned_gpu_hours)),
        ]],
    ),
    (
        "queue time (interactive = time to GPU)",
        &[
            durations!("all", |r: &Report| r.metrics.queue_time_s, [true, true]),
            durations!("batch", |r: &Report| r.metrics.queue_time_by_class.batch, [false, false]),
            durations!("interactive", |r: &Report| r.metrics.queue_time_by_class.interactive, [false, true]),
            durations!("service", |r: &Report| r.metrics.queue_time_by_class.service, [false, false]),
        ],
    ),
    (
        "outcome (each workload exactly one)",
        &[&[
            head("completed workloads", Count, Higher, |r| Some(r.metrics.completed_workloads as f64)),
            row("failed workloads", Count, Neither, |r| Some(r.metrics.failed_workloads as f64)),
            row("cancelled workloads", Count, Neither, |r| Some(r.metrics.cancelled_workloads as f64)),
            head("idle-reclaimed workloads", Count, Neither, |r| Some(r.metrics.idle_reclaimed_workloads as f64)),
            head("rejected workloads", Count, Lower, |r| Some(r.metrics.rejected_workloads as f64)),
            head("unfinished workloads", Count, Lower, |r| Some(r.metrics.unfinished_workloads as f64)),
        ]],
    ),
    (
        "work",
        &[&[
            row("completed / day", Rate, Higher, |r| Some(r.metrics.throughput_per_day)),
            head("useful GPU-h", Hours, Higher, |r| Some(r.metrics.useful_gpu_hours)),
            row("useful GPU-h / day", Hours, Higher, |r| Some(r.metrics.useful_gpu_hours_per_day)),
            row("JCT p50", Seconds, Lower, |r| stat(r.metrics.jct_s, p50)),
            row("JCT p95", Seconds, Lower, |r| stat(r.metrics.jct_s, p95)),
        ]],
    ),
    (
        "preemption and failures",
        &[&[
            head("preemptions", Count, Lower, |r| Some(r.metrics.preemptions as f64)),
            row("overhead GPU-h", Hours, Lower, |r| Some(r.metrics.preemption_overhead_gpu_hours)),
            row("overhead fraction", Ratio, Lower, |r| Some(r.metrics.preemption_overhead_fraction)),
            row("node failures", Count, Neither, |r| Some(r.metrics.node_failures as f64)),
            row("attempts killed by failures", Count, Lower, |r| Some(r.metrics.failures as f64)),
            row("lost GPU-h (failures)", Hours, Lower, |r| Some(r.metrics.lost_gpu_hours_failures)),
        ]],
    ),
    (
        "fairness",
        &[&[
            head("budget attainment", Ratio, Higher, |r| r.metrics.budget_attainment),
            head("Jain index", Ratio, Higher, |r| r.metrics.jain_index),
        ]],
    ),
];

/// The measures of one cluster of a fleet.
pub const CLUSTER_MEASURES: &[Row<ClusterReport>] = &[
    row("availability", Ratio, Neither, |c| Some(c.availability)),
    row("occupancy", Ratio, Higher, |c| Some(c.occupancy)),
    row("utilization", Ratio, Higher, |c| Some(c.utilization)),
    row("available GPU-h", Hours, Neither, |c| Some(c.available_gpu_hours)),
    row("assigned GPU-h", Hours, Higher, |c| Some(c.assigned_gpu_hours)),
    row("started workloads", Count, Higher, |c| Some(c.started_workloads as f64)),
    row("queue p50", Seconds, Lower, |c| stat(c.queue_time_s, p50)),
    row("queue p95", Seconds, Lower, |c| stat(c.queue_time_s, p95)),
    row("queue p99", Seconds, Lower, |c| stat(c.queue_time_s, p99)),
    row("queue mean", Seconds, Lower, |c| stat(c.queue_time_s, mean)),
    row("interactive p50", Seconds, Lower, |c| stat(c.queue_time_by_class.interactive, p50)),
    row("interactive p95", Seconds, Lower, |c| stat(c.queue_time_by_class.interactive, p95)),
];

/// The measures of the preemptions of one cause ([`CauseReport`]).
pub const CAUSE_MEASURES: &[Row<CauseReport>] = &[
    row("preemptions", Count, Lower, |c| Some(c.preemptions as f64)),
    row("overhead GPU-h", Hours, Lower, |c| Some(c.overhead_gpu_hours)),
    row("of which grace GPU-h", Hours, Lower, |c| Some(c.grace_gpu_hours)),
    row("of which progress lost GPU-h", Hours, Lower, |c| Some(c.progress_lost_gpu_hours)),
    row("preemptor started within 5 min (share)", Ratio, Higher, |c| share(c.preemptor_started, c.with_preemptor)),
    row("preemptor then idle-reclaimed (share)", Ratio, Lower, |c| share(c.preemptor_idle_reclaimed, c.with_preemptor)),
    row("victim later preempted its preemptor (share)", Ratio, Lower, |c| share(c.returned, c.with_preemptor)),
];

/// `part / whole`, undefined without a whole.
fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// Which cells of a row hold its best value: the value optimal in the
/// row's direction, compared as written (`text`), so that values written
/// alike tie. None is marked for a row with no direction, with fewer than
/// two defined values, or whose defined values are all written alike.
pub fn best_cells(values: &[Option<f64>], better: Better, text: impl Fn(f64) -> String) -> Vec<bool> {
    let none = vec![false; values.len()];
    let defined: Vec<f64> = values.iter().flatten().copied().filter(|v| v.is_finite()).collect();
    let optimum = match better {
        Better::Higher => defined.iter().copied().reduce(f64::max),
        Better::Lower => defined.iter().copied().reduce(f64::min),
        Better::Neither => None,
    };
    let Some(optimum) = optimum.filter(|_| defined.len() > 1) else { return none };
    let best = text(optimum);
    let marked: Vec<bool> = values.iter().map(|v| v.is_some_and(|v| v.is_finite() && text(v) == best)).collect();
    if marked.iter().filter(|m| **m).count() == defined.len() { none } else { marked }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measures() -> impl Iterator<Item = &'static Row<Report>> {
        MEASURES.iter().flat_map(|(_, runs)| runs.iter().flat_map(|rows| rows.iter()))
    }

    #[test]
    fn best_cells_follow_the_direction_and_the_written_value() {
        let fmt = |v: f64| format!("{v:.3}");
        /// (name, values, direction, marked).
        type Case = (&'static str, Vec<Option<f64>>, Better, Vec<bool>);
        let cases: Vec<Case> = vec![
            ("higher", vec![Some(0.2), Some(0.5), Some(0.4)], Higher, vec![false, true, false]),
            ("lower", vec![Some(0.2), Some(0.5), Some(0.4)], Lower, vec![true, false, false]),
            ("neither", vec![Some(0.2), Some(0.5)], Neither, vec![false, false]),
            ("undefined cells are never best", vec![None, Some(3.0), Some(1.0)], Higher, vec![false, true, false]),
            ("one defined value: no contest", vec![None, Some(3.0)], Higher, vec![false, false]),
            ("all written alike: no best", vec![Some(0.5001), Some(0.4999)], Higher, vec![false, false]),
            ("ties as written", vec![Some(0.5001), Some(0.4999), Some(0.1)], Higher, vec![true, true, false]),
        ];
        for (name, values, better, want) in cases {
            assert_eq!(best_cells(&values, better, fmt), want, "{name}");
        }
    }

    #[test]
    fn labels_are_unique_and_failures_are_counted_apart_from_the_attempts_they_killed() {
        let labels: Vec<&str> = measures().map(|r| r.label).collect();
        let mut unique = labels.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), labels.len(), "{labels:?}");
        let find = |l: &str| measures().find(|r| r.label == l).unwrap();
        let mut r: Report = serde_json::from_value(serde_json::json!({
            "policy": "p", "horizon_s": 1, "workloads": 0, "accounts": {}, "passes": 0, "events": 0,
            "metrics": {"availability": 1.0, "occupancy": 0.0, "utilization": 0.0, "impact": 0.0,
                "budget_attainment": null, "jain_index": null, "queue_time_s": null,
                "queue_time_by_class": {"batch": null, "interactive": null, "service": null},
                "completed_workloads": 0, "throughput_per_day": 0.0, "useful_gpu_hours": 0.0, "preemptions": 0,
                "preemption_overhead_gpu_hours": 0.0, "preemption_overhead_fraction": 0.0, "time_to_gpu_s": null,
                "rejected_workloads": 0, "unfinished_workloads": 0, "failures": 5, "lost_gpu_hours_failures": 0.0,
                "assigned_gpu_hours": 0.0, "available_gpu_hours": 0.0, "useful_gpu_hours_per_day": 0.0,
                "jct_s": null}
        }))
        .expect("a report without node_failures (older files) reads");
        r.metrics.node_failures = 2;
        assert_eq!((find("node failures").get)(&r), Some(2.0));
        assert_eq!((find("attempts killed by failures").get)(&r), Some(5.0));
        assert_eq!(find("occupancy").better, Higher);
        assert_eq!(find("all p95").better, Lower);
        assert_eq!(find("horizon").better, Neither);
        assert!(find("interactive p95").headline && !find("interactive p99").headline);
        assert_eq!(find("service mean").unit, Seconds);
    }
}
