//! The measures of repeated runs side by side, as a [`Tables`] model (written
//! as Markdown in `summary.md`, as HTML in `report.html`): one column per
//! policy, one row per measure, each cell `mean ± half-width` of the 95%
//! confidence interval over the seeds ([`crate::stats`]).
//!
//! Single runs use `allot_sim::report::measures_tables` instead; the rows
//! here follow its sections and names.

use allot_sim::report::{
    Block, CLUSTERS_TITLE, ClusterReport, Report, Stats, Table, Tables, cluster_section, fleet_clusters,
};

use crate::stats::mean_ci;
use crate::svg::{fmt_duration, fmt_num};

/// How a measure's value is written.
#[derive(Copy, Clone)]
enum Unit {
    /// A fraction, three decimals.
    Ratio,
    /// Hours or counts: two decimals below 10, one above.
    Amount,
    /// Seconds, as a compact duration.
    Seconds,
}

type Get = fn(&Report) -> Option<f64>;

/// A row: label, unit and value.
type Row = (&'static str, Unit, Get);

fn stat(s: Option<Stats>, f: fn(&Stats) -> f64) -> Option<f64> {
    s.as_ref().map(f)
}

/// (section, rows of (label, unit, value)).
const ROWS: &[(&str, &[Row])] = &[
    (
        "run",
        &[
            ("horizon", Unit::Seconds, |r| Some(r.horizon_s as f64)),
            ("workloads", Unit::Amount, |r| Some(r.workloads as f64)),
        ],
    ),
    (
        "capacity",
        &[
            ("availability", Unit::Ratio, |r| Some(r.metrics.availability)),
            ("occupancy", Unit::Ratio, |r| Some(r.metrics.occupancy)),
            ("utilization", Unit::Ratio, |r| Some(r.metrics.utilization)),
            ("impact", Unit::Ratio, |r| Some(r.metrics.impact)),
            ("available GPU-h", Unit::Amount, |r| Some(r.metrics.available_gpu_hours)),
            ("assigned GPU-h", Unit::Amount, |r| Some(r.metrics.assigned_gpu_hours)),
        ],
    ),
    (
        "queue time (interactive = time to GPU)",
        &[
            ("all p50", Unit::Seconds, |r| stat(r.metrics.queue_time_s, |s| s.p50 as f64)),
            ("all p95", Unit::Seconds, |r| stat(r.metrics.queue_time_s, |s| s.p95 as f64)),
            ("all p99", Unit::Seconds, |r| stat(r.metrics.queue_time_s, |s| s.p99 as f64)),
            ("all mean", Unit::Seconds, |r| stat(r.metrics.queue_time_s, |s| s.mean)),
            ("batch p50", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.batch, |s| s.p50 as f64)),
            ("batch p95", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.batch, |s| s.p95 as f64)),
            ("batch p99", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.batch, |s| s.p99 as f64)),
            ("batch mean", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.batch, |s| s.mean)),
            ("interactive p50", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.interactive, |s| s.p50 as f64)),
            ("interactive p95", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.interactive, |s| s.p95 as f64)),
            ("interactive p99", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.interactive, |s| s.p99 as f64)),
            ("interactive mean", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.interactive, |s| s.mean)),
            ("service p50", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.service, |s| s.p50 as f64)),
            ("service p95", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.service, |s| s.p95 as f64)),
            ("service p99", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.service, |s| s.p99 as f64)),
            ("service mean", Unit::Seconds, |r| stat(r.metrics.queue_time_by_class.service, |s| s.mean)),
        ],
    ),
    (
        "work",
        &[
            ("completed workloads", Unit::Amount, |r| Some(r.metrics.completed_workloads as f64)),
            ("completed / day", Unit::Amount, |r| Some(r.metrics.throughput_per_day)),
            ("useful GPU-h", Unit::Amount, |r| Some(r.metrics.useful_gpu_hours)),
            ("useful GPU-h / day", Unit::Amount, |r| Some(r.metrics.useful_gpu_hours_per_day)),
            ("JCT p50", Unit::Seconds, |r| stat(r.metrics.jct_s, |s| s.p50 as f64)),
            ("JCT p95", Unit::Seconds, |r| stat(r.metrics.jct_s, |s| s.p95 as f64)),
            ("rejected workloads", Unit::Amount, |r| Some(r.metrics.rejected_workloads as f64)),
            ("unfinished workloads", Unit::Amount, |r| Some(r.metrics.unfinished_workloads as f64)),
        ],
    ),
    (
        "preemption",
        &[
            ("preemptions", Unit::Amount, |r| Some(r.metrics.preemptions as f64)),
            ("overhead GPU-h", Unit::Amount, |r| Some(r.metrics.preemption_overhead_gpu_hours)),
            ("overhead fraction", Unit::Ratio, |r| Some(r.metrics.preemption_overhead_fraction)),
            ("node failures", Unit::Amount, |r| Some(r.metrics.failures as f64)),
            ("lost GPU-h (failures)", Unit::Amount, |r| Some(r.metrics.lost_gpu_hours_failures)),
        ],
    ),
    (
        "fairness",
        &[
            ("budget attainment", Unit::Ratio, |r| r.metrics.budget_attainment),
            ("Jain index", Unit::Ratio, |r| r.metrics.jain_index),
        ],
    ),
];

fn write(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Ratio => format!("{v:.3}"),
        Unit::Amount if v.abs() < 10.0 => format!("{v:.2}"),
        Unit::Amount => fmt_num(v.round()),
        Unit::Seconds => fmt_duration(v.max(0.0).round() as u64),
    }
}

/// One cell: `mean ± half-width` over the runs where the measure is defined.
fn cell(reports: &[Report], unit: Unit, get: Get) -> String {
    cell_by(reports, unit, get)
}

/// [`cell`] of any value of a report.
fn cell_by(reports: &[Report], unit: Unit, get: impl Fn(&Report) -> Option<f64>) -> String {
    let values: Vec<f64> = reports.iter().filter_map(get).collect();
    match mean_ci(&values) {
        None => "-".into(),
        Some(m) => match m.half_width {
            Some(hw) => format!("{} ± {}", write(unit, m.mean), write(unit, hw)),
            None => write(unit, m.mean),
        },
    }
}

type ClusterGet = fn(&ClusterReport) -> Option<f64>;

/// The rows of each cluster of a fleet: label, unit and value.
const CLUSTER_ROWS: &[(&str, Unit, ClusterGet)] = &[
    ("availability", Unit::Ratio, |c| Some(c.availability)),
    ("occupancy", Unit::Ratio, |c| Some(c.occupancy)),
    ("utilization", Unit::Ratio, |c| Some(c.utilization)),
    ("available GPU-h", Unit::Amount, |c| Some(c.available_gpu_hours)),
    ("assigned GPU-h", Unit::Amount, |c| Some(c.assigned_gpu_hours)),
    ("started workloads", Unit::Amount, |c| Some(c.started_workloads as f64)),
    ("queue p50", Unit::Seconds, |c| stat(c.queue_time_s, |s| s.p50 as f64)),
    ("queue p95", Unit::Seconds, |c| stat(c.queue_time_s, |s| s.p95 as f64)),
    ("queue p99", Unit::Seconds, |c| stat(c.queue_time_s, |s| s.p99 as f64)),
    ("queue mean", Unit::Seconds, |c| stat(c.queue_time_s, |s| s.mean)),
    ("interactive p50", Unit::Seconds, |c| stat(c.queue_time_by_class.interactive, |s| s.p50 as f64)),
    ("interactive p95", Unit::Seconds, |c| stat(c.queue_time_by_class.interactive, |s| s.p95 as f64)),
];

/// Per cluster of a fleet of several (a section each), the cells of
/// [`CLUSTER_ROWS`] over the seeds; `None` for a fleet of one.
fn clusters_table(runs: &[(String, Vec<Report>)]) -> Option<Table> {
    let first: Vec<&Report> = runs.first().and_then(|r| r.1.first()).into_iter().collect();
    let clusters = fleet_clusters(&first);
    if clusters.is_empty() {
        return None;
    }
    let mut t = Table::new(std::iter::once("measure".to_string()).chain(runs.iter().map(|r| r.0.clone())).collect());
    for (name, gpus) in &clusters {
        t.section(&cluster_section(name, *gpus));
        for (label, unit, get) in CLUSTER_ROWS {
            let cells = runs.iter().map(|(_, rs)| cell_by(rs, *unit, |r| r.clusters.get(name).and_then(get)));
            t.push_row(std::iter::once(label.to_string()).chain(cells).collect());
        }
    }
    Some(t)
}

/// The table of repeated runs and the note on how its cells were computed:
/// `runs` holds, per policy, its reports over the seeds (every policy ran on
/// the same seeds).
pub fn seeds_tables(runs: &[(String, Vec<Report>)]) -> Tables {
    let mut t = Table::new(std::iter::once("measure".to_string()).chain(runs.iter().map(|r| r.0.clone())).collect());
    let seeds = runs.first().map_or(0, |r| r.1.len());
    t.push_row(std::iter::once("seeds".to_string()).chain(runs.iter().map(|r| r.1.len().to_string())).collect());
    for (section, rows) in ROWS {
        t.section(section);
        for (label, unit, get) in *rows {
            let cells = std::iter::once(label.to_string()).chain(runs.iter().map(|(_, rs)| cell(rs, *unit, *get)));
            t.push_row(cells.collect());
        }
    }
    let note = format!("Each cell: mean ± half-width of the 95% confidence interval over {seeds} seeds (Student's t).");
    let mut blocks = vec![Block::Table(t)];
    if let Some(clusters) = clusters_table(runs) {
        blocks.push(Block::Title(CLUSTERS_TITLE.to_string()));
        blocks.push(Block::Table(clusters));
    }
    blocks.push(Block::Note(note));
    Tables { blocks }
}
