//! The measures of repeated runs side by side, as a [`Tables`] model (written
//! as Markdown in `summary.md`, as HTML in `report.html`): one column per
//! policy, one row per measure, each cell `mean ± half-width` of the 95%
//! confidence interval over the seeds ([`crate::stats`]).
//!
//! Single runs use `allot_sim::report::measures_tables` instead; both take
//! their rows (labels, units, better directions) from
//! `allot_sim::report::rows`.

use allot_sim::report::rows::{CAUSE_MEASURES, CLUSTER_MEASURES, MEASURES, Row};
use allot_sim::report::{
    Block, CAUSES_TITLE, CLUSTERS_TITLE, MARKS, Report, Table, Tables, Unit, cause_of, cause_section, cluster_section,
    fleet_clusters, preemption_causes,
};

use crate::stats::{MeanCi, mean_ci};
use crate::svg::{fmt_duration, fmt_num};

/// Marks an interval wider than its mean.
pub const WIDE: &str = "†";

/// The note under a table with [`WIDE`] marks.
pub const WIDE_NOTE: &str = "† the 95% interval is wider than the mean itself: the seeds disagree more than the \
                             value says; run more seeds before reading the difference.";

fn write(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Ratio => format!("{v:.3}"),
        Unit::Hours | Unit::Count | Unit::Rate if v.abs() < 10.0 => format!("{v:.2}"),
        Unit::Hours | Unit::Count | Unit::Rate => fmt_num(v.round()),
        Unit::Seconds => fmt_duration(v.max(0.0).round() as u64),
    }
}

/// Whether an interval is wider than its mean (a half-width above the
/// mean's magnitude).
fn wide(m: &MeanCi) -> bool {
    m.half_width.is_some_and(|hw| hw > m.mean.abs())
}

/// One cell: `mean ± half-width` over the runs where the measure is
/// defined, marked [`WIDE`] when the interval is wider than the mean.
pub(crate) fn cell(unit: Unit, m: Option<MeanCi>) -> String {
    match m {
        None => "-".into(),
        Some(m) => match m.half_width {
            Some(hw) if wide(&m) => format!("{} ± {} {WIDE}", write(unit, m.mean), write(unit, hw)),
            Some(hw) => format!("{} ± {}", write(unit, m.mean), write(unit, hw)),
            None => write(unit, m.mean),
        },
    }
}

/// Adds the row of a measure: per column its mean and interval over the
/// seeds; the best mean is marked. Returns whether a cell is [`WIDE`].
fn push<T>(t: &mut Table, row: &Row<T>, runs: &[(String, Vec<Report>)], get: impl Fn(&Report) -> Option<f64>) -> bool {
    let stats: Vec<Option<MeanCi>> =
        runs.iter().map(|(_, rs)| mean_ci(&rs.iter().filter_map(&get).collect::<Vec<f64>>())).collect();
    let means: Vec<Option<f64>> = stats.iter().map(|m| m.map(|m| m.mean)).collect();
    let cells = stats.iter().map(|s| cell(row.unit, *s)).collect();
    t.push_measure_cells(row, cells, &means, |v| write(row.unit, v));
    stats.iter().flatten().any(wide)
}

fn header(first: &str, runs: &[(String, Vec<Report>)]) -> Vec<String> {
    std::iter::once(first.to_string()).chain(runs.iter().map(|r| r.0.clone())).collect()
}

/// Per cluster of a fleet of several (a section each), the cells of
/// [`CLUSTER_MEASURES`] over the seeds; `None` for a fleet of one.
fn clusters_table(runs: &[(String, Vec<Report>)], any_wide: &mut bool) -> Option<Table> {
    let first: Vec<&Report> = runs.first().and_then(|r| r.1.first()).into_iter().collect();
    let clusters = fleet_clusters(&first);
    if clusters.is_empty() {
        return None;
    }
    let mut t = Table::new(header("measure", runs));
    for (name, gpus) in &clusters {
        t.section(&cluster_section(name, *gpus));
        for row in CLUSTER_MEASURES {
            *any_wide |= push(&mut t, row, runs, |r| r.clusters.get(name).and_then(|c| (row.get)(c)));
        }
    }
    Some(t)
}

/// Per cause of preemption in any run (a section each), the cells of
/// [`CAUSE_MEASURES`] over the seeds, a seed without preemptions of a
/// cause counting as none; `None` without any preemption.
fn causes_table(runs: &[(String, Vec<Report>)], any_wide: &mut bool) -> Option<Table> {
    let all: Vec<&Report> = runs.iter().flat_map(|r| r.1.iter()).collect();
    let causes = preemption_causes(&all);
    if causes.is_empty() {
        return None;
    }
    let mut t = Table::new(header("measure", runs));
    for id in &causes {
        t.section(&cause_section(id));
        for row in CAUSE_MEASURES {
            *any_wide |= push(&mut t, row, runs, |r| (row.get)(cause_of(r, id)));
        }
    }
    Some(t)
}

/// The table of repeated runs and the notes on how its cells were computed
/// and marked: `runs` holds, per policy, its reports over the seeds (every
/// policy ran on the same seeds).
pub fn seeds_tables(runs: &[(String, Vec<Report>)]) -> Tables {
    let mut t = Table::new(header("measure", runs));
    let seeds = runs.first().map_or(0, |r| r.1.len());
    t.push_row(std::iter::once("seeds".to_string()).chain(runs.iter().map(|r| r.1.len().to_string())).collect());
    let mut any_wide = false;
    for (section, rows) in MEASURES {
        t.section(section);
        for row in rows.iter().flat_map(|r| r.iter()) {
            any_wide |= push(&mut t, row, runs, row.get);
        }
    }
    let mut blocks = vec![Block::Table(t)];
    let clusters = clusters_table(runs, &mut any_wide);
    let causes = causes_table(runs, &mut any_wide);
    blocks.push(Block::Note(format!(
        "Each cell: mean ± half-width of the 95% confidence interval over {seeds} seeds (Student's t). {MARKS} \
         The best is chosen on the means; intervals that overlap do not tell the policies apart."
    )));
    if any_wide {
        blocks.push(Block::Note(WIDE_NOTE.to_string()));
    }
    if let Some(clusters) = clusters {
        blocks.push(Block::Title(CLUSTERS_TITLE.to_string()));
        blocks.push(Block::Table(clusters));
    }
    if let Some(causes) = causes {
        blocks.push(Block::Title(CAUSES_TITLE.to_string()));
        blocks.push(Block::Table(causes));
    }
    Tables { blocks }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_wider_than_its_mean_is_marked() {
        let m = |mean, hw| Some(MeanCi { n: 3, mean, half_width: Some(hw) });
        assert_eq!(cell(Unit::Ratio, m(0.5, 0.1)), "0.500 ± 0.100");
        assert_eq!(cell(Unit::Ratio, m(0.1, 0.3)), "0.100 ± 0.300 †");
        assert_eq!(cell(Unit::Ratio, m(0.0, 0.0)), "0.000 ± 0.000", "no spread: not wide");
        assert_eq!(cell(Unit::Count, Some(MeanCi { n: 1, mean: 4.0, half_width: None })), "4.00");
        assert_eq!(cell(Unit::Seconds, None), "-");
    }
}
