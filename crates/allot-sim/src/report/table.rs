//! Reports side by side: a fixed-width text table for the terminal and the
//! same content as Markdown (and, in `allot-report`, as HTML). Every form
//! renders one [`Tables`] model, so they never disagree.

use std::collections::BTreeSet;

use crate::report::rows::{Better, CAUSE_MEASURES, CLUSTER_MEASURES, DIRECTIONS, MEASURES, Row, Unit, best_cells};
use crate::report::{CauseReport, ClusterReport, Report};

/// A table: a header and lines that are either section titles or rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    pub header: Vec<String>,
    pub lines: Vec<Line>,
}

/// A line of a [`Table`].
#[derive(Clone, Debug, PartialEq)]
pub enum Line {
    /// A section title, on a line of its own.
    Section(String),
    /// One cell per column of the header.
    Row(Vec<String>),
    /// A measure: its label and one cell per column, which direction is
    /// better and which cells hold the row's best value.
    Measure(MeasureLine),
}

/// A measure's row of a [`Table`].
#[derive(Clone, Debug, PartialEq)]
pub struct MeasureLine {
    /// The label, then one cell per value column.
    pub cells: Vec<String>,
    pub better: Better,
    /// Per value column (after the label): whether it holds the best value
    /// ([`best_cells`]).
    pub best: Vec<bool>,
    /// Shown in the report's headline table too.
    pub headline: bool,
}

impl MeasureLine {
    /// The label with its direction: `occupancy ↑`.
    pub fn label(&self) -> String {
        format!("{} {}", self.cells[0], self.better.arrow())
    }
}

/// Tables with their titles and notes, in the order they are read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tables {
    pub blocks: Vec<Block>,
}

/// A part of [`Tables`].
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Table(Table),
    /// A title over the table that follows.
    Title(String),
    /// A remark (e.g. how the cells were computed).
    Note(String),
}

impl Table {
    pub fn new(header: Vec<String>) -> Table {
        Table { header, lines: Vec::new() }
    }

    /// Adds a section title.
    pub fn section(&mut self, title: &str) {
        self.lines.push(Line::Section(title.to_string()));
    }

    /// Adds a row of cells (one per column of the header).
    pub fn push_row(&mut self, cells: Vec<String>) {
        self.lines.push(Line::Row(cells));
    }

    /// Adds the row of a measure: its label, one value per column (`None`:
    /// undefined, written `-`) written by `text`, its best cells marked.
    pub fn push_measure<T>(&mut self, row: &Row<T>, values: &[Option<f64>], text: impl Fn(f64) -> String) {
        let cells = values.iter().map(|v| v.map_or_else(|| "-".into(), &text)).collect();
        self.push_measure_cells(row, cells, values, text);
    }

    /// [`Table::push_measure`] with cells written otherwise (e.g. with an
    /// interval): the best cells are those of the best `values` as `text`
    /// writes them.
    pub fn push_measure_cells<T>(
        &mut self,
        row: &Row<T>,
        cells: Vec<String>,
        values: &[Option<f64>],
        text: impl Fn(f64) -> String,
    ) {
        let best = best_cells(values, row.better, text);
        let cells = std::iter::once(row.label.to_string()).chain(cells).collect();
        self.lines.push(Line::Measure(MeasureLine { cells, better: row.better, best, headline: row.headline }));
    }

    /// Whether any row has a direction (the table then needs the legend of
    /// [`DIRECTIONS`]).
    pub fn has_measures(&self) -> bool {
        self.lines.iter().any(|l| matches!(l, Line::Measure(_)))
    }
}

impl Tables {
    /// Renders every block as Markdown, a blank line between blocks: tables
    /// as pipe tables (section titles as bold rows), titles in bold, notes
    /// as paragraphs.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        for (i, b) in self.blocks.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            match b {
                Block::Table(t) => out.push_str(&render_markdown(t)),
                Block::Title(s) => out.push_str(&format!("**{s}**\n")),
                Block::Note(s) => out.push_str(&format!("{s}\n")),
            }
        }
        out
    }
}

fn ratio(v: f64) -> String {
    format!("{v:.3}")
}

/// GPU-hours: two decimals below 10, one above.
fn hours(v: f64) -> String {
    if v.abs() < 10.0 { format!("{v:.2}") } else { format!("{v:.1}") }
}

/// A duration in seconds, compact: `45s`, `12m05s`, `3h07m`, `2d04h`.
fn duration(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn opt_duration(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), duration)
}

/// A value of one run as the tables write it.
pub fn write_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Ratio => ratio(v),
        Unit::Hours => hours(v),
        Unit::Count => format!("{v:.0}"),
        Unit::Rate => format!("{v:.1}"),
        Unit::Seconds => duration(v.max(0.0).round() as u64),
    }
}

/// The header of a table with one column per report.
fn policy_header(first: &str, reports: &[&Report]) -> Vec<String> {
    std::iter::once(first.to_string()).chain(reports.iter().map(|r| r.policy.clone())).collect()
}

/// The cluster-wide measures, one column per report.
fn metrics_table(reports: &[&Report]) -> Table {
    let mut t = Table::new(policy_header("measure", reports));
    for (section, rows) in MEASURES {
        t.section(section);
        for row in rows.iter().flat_map(|r| r.iter()) {
            let values: Vec<Option<f64>> = reports.iter().map(|r| (row.get)(r)).collect();
            t.push_measure(row, &values, |v| write_value(row.unit, v));
        }
    }
    t
}

/// Per account: the full detail of one report, or the delivered share of
/// each report side by side.
fn accounts_table(reports: &[&Report]) -> Table {
    let paths: BTreeSet<&String> = reports.iter().flat_map(|r| r.accounts.keys()).collect();
    let entitled = |p: &String| {
        reports.iter().find_map(|r| r.accounts.get(p)).map_or_else(|| "-".into(), |a| ratio(a.entitled_share))
    };
    if let [r] = reports {
        let header = ["account", "entitled", "demanded", "delivered", "GPU-h", "budget NGH", "used NGH", "queue p50"];
        let mut t = Table::new(header.iter().map(|s| s.to_string()).collect());
        for (path, a) in &r.accounts {
            t.push_row(vec![
                path.clone(),
                ratio(a.entitled_share),
                ratio(a.demand_share),
                ratio(a.delivered_share),
                hours(a.gpu_hours),
                a.budget_gpu_hours.map_or_else(|| "-".into(), hours),
                hours(a.used_gpu_hours),
                opt_duration(a.queue_time_p50_s),
            ]);
        }
        return t;
    }
    let demanded = |p: &String| {
        reports.iter().find_map(|r| r.accounts.get(p)).map_or_else(|| "-".into(), |a| ratio(a.demand_share))
    };
    let mut header = policy_header("account", reports);
    header.insert(1, "entitled".to_string());
    header.insert(2, "demanded".to_string());
    let mut t = Table::new(header);
    for p in paths {
        let mut cells = vec![p.clone(), entitled(p), demanded(p)];
        cells
            .extend(reports.iter().map(|r| r.accounts.get(p).map_or_else(|| "-".into(), |a| ratio(a.delivered_share))));
        t.push_row(cells);
    }
    t
}

/// The clusters of a fleet of several, in config order, by the names of the
/// first report (every report of one comparison ran on the same fleet).
pub fn fleet_clusters(reports: &[&Report]) -> Vec<(String, u64)> {
    let mut cs: Vec<(&String, &ClusterReport)> =
        reports.first().map(|r| r.clusters.iter().collect()).unwrap_or_default();
    cs.sort_by_key(|(_, c)| c.index);
    cs.into_iter().map(|(name, c)| (name.clone(), c.gpus)).collect()
}

/// Title of the per-cluster section of cluster `name` of `gpus` GPUs.
pub fn cluster_section(name: &str, gpus: u64) -> String {
    format!("cluster {name} ({gpus} GPUs)")
}

/// Per cluster of a fleet (a section each), the capacity and queue-time
/// measures, one column per report; `None` for a fleet of one.
fn clusters_table(reports: &[&Report]) -> Option<Table> {
    let clusters = fleet_clusters(reports);
    if clusters.is_empty() {
        return None;
    }
    let mut t = Table::new(policy_header("measure", reports));
    for (name, gpus) in &clusters {
        t.section(&cluster_section(name, *gpus));
        for row in CLUSTER_MEASURES {
            let values: Vec<Option<f64>> =
                reports.iter().map(|r| r.clusters.get(name).and_then(|c| (row.get)(c))).collect();
            t.push_measure(row, &values, |v| write_value(row.unit, v));
        }
    }
    Some(t)
}

/// Title of the per-cluster table.
pub const CLUSTERS_TITLE: &str = "per cluster (queue times of the workloads that first started there)";

/// Title of the preemption loss table.
pub const CAUSES_TITLE: &str = "preemption loss by cause (the rule that signalled each victim)";

/// The causes of preemption in any of `reports`, the costliest first (by
/// the GPU-hours they lost over all reports), then by id.
pub fn preemption_causes(reports: &[&Report]) -> Vec<String> {
    let mut lost: std::collections::BTreeMap<&String, f64> = std::collections::BTreeMap::new();
    for r in reports {
        for (k, c) in &r.preemption_causes {
            *lost.entry(k).or_default() += c.overhead_gpu_hours;
        }
    }
    let mut causes: Vec<(&String, f64)> = lost.into_iter().collect();
    causes.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    causes.into_iter().map(|(k, _)| k.clone()).collect()
}

/// Title of the section of one cause: its rule id and statement.
pub fn cause_section(id: &str) -> String {
    match allot_core::Rule::ALL.iter().find(|r| r.id() == id) {
        Some(r) => format!("{id}: {}", r.title()),
        None => format!("{id}: no signal recorded"),
    }
}

/// The measures of cause `id` in `r` (all zero where it had none).
pub fn cause_of<'r>(r: &'r Report, id: &str) -> &'r CauseReport {
    static NONE: CauseReport = CauseReport {
        preemptions: 0,
        overhead_gpu_hours: 0.0,
        grace_gpu_hours: 0.0,
        progress_lost_gpu_hours: 0.0,
        with_preemptor: 0,
        preemptor_started: 0,
        preemptor_idle_reclaimed: 0,
        returned: 0,
    };
    r.preemption_causes.get(id).unwrap_or(&NONE)
}

/// Per cause of preemption (a section each), what its preemptions cost and
/// bought, one column per report; `None` without any preemption.
fn causes_table(reports: &[&Report]) -> Option<Table> {
    let causes = preemption_causes(reports);
    if causes.is_empty() {
        return None;
    }
    let mut t = Table::new(policy_header("measure", reports));
    for id in &causes {
        t.section(&cause_section(id));
        for row in CAUSE_MEASURES {
            let values: Vec<Option<f64>> = reports.iter().map(|r| (row.get)(cause_of(r, id))).collect();
            t.push_measure(row, &values, |v| write_value(row.unit, v));
        }
    }
    Some(t)
}

fn accounts_title(reports: &[&Report]) -> &'static str {
    if reports.len() == 1 {
        "accounts (demanded: share of all GPU-time asked for, to judge delivered against)"
    } else {
        "delivered share by account, beside its entitled and demanded shares"
    }
}

/// A line's cells as text: a measure's label gets its arrow.
fn text_cells(l: &Line) -> Option<Vec<String>> {
    match l {
        Line::Section(_) => None,
        Line::Row(cells) => Some(cells.clone()),
        Line::Measure(m) => {
            let mut cells = m.cells.clone();
            cells[0] = m.label();
            Some(cells)
        }
    }
}

/// Renders a table as fixed-width text: first column left-aligned (rows
/// indented under section titles), the others right-aligned.
fn render_text(t: &Table) -> String {
    let cols = t.header.len();
    let mut width: Vec<usize> = t.header.iter().map(|h| h.chars().count()).collect();
    let indent = if t.lines.iter().any(|l| matches!(l, Line::Section(_))) { 2 } else { 0 };
    let rows: Vec<Option<Vec<String>>> = t.lines.iter().map(text_cells).collect();
    // Section titles sit on lines of their own and do not widen the column.
    for cells in rows.iter().flatten() {
        width[0] = width[0].max(cells[0].chars().count() + indent);
        for (w, c) in width.iter_mut().zip(cells).skip(1) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String], indent: usize| {
        let mut s = format!("{:indent$}{:<w$}", "", cells[0], w = width[0] - indent);
        for (c, w) in cells.iter().zip(&width).skip(1) {
            s.push_str(&format!("  {c:>w$}"));
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&t.header, 0);
    out.push_str(&"-".repeat(width.iter().sum::<usize>() + 2 * (cols - 1)));
    out.push('\n');
    for (l, cells) in t.lines.iter().zip(&rows) {
        match (l, cells) {
            (Line::Section(s), _) => out.push_str(&format!("{s}\n")),
            (_, Some(cells)) => out.push_str(&line(cells, indent)),
            (_, None) => {}
        }
    }
    out
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// Renders a table as Markdown: section titles become bold rows, a
/// measure's label gets its arrow and its best values are bold.
fn render_markdown(t: &Table) -> String {
    let cols = t.header.len();
    let row = |cells: &[String]| format!("| {} |\n", cells.iter().map(|c| md_cell(c)).collect::<Vec<_>>().join(" | "));
    let mut out = row(&t.header);
    out.push_str(&format!("|:---|{}\n", "---:|".repeat(cols - 1)));
    for l in &t.lines {
        match l {
            Line::Section(s) => {
                let mut cells = vec![format!("**{s}**")];
                cells.resize(cols, String::new());
                out.push_str(&row(&cells));
            }
            Line::Row(cells) => out.push_str(&row(cells)),
            Line::Measure(m) => {
                let mut cells = vec![m.label()];
                for (c, best) in m.cells.iter().skip(1).zip(&m.best) {
                    cells.push(if *best { format!("**{c}**") } else { c.clone() });
                }
                out.push_str(&row(&cells));
            }
        }
    }
    out
}

/// The reports side by side as a fixed-width text table, one column per
/// policy, in sections (run, capacity, queue time, work, preemption and
/// failures, fairness), each measure's label followed by the direction
/// that is better, then a per-account table: full detail for a single
/// report, the delivered share per policy for several. A fleet of several
/// clusters gets a per-cluster table between the two, and runs with
/// preemptions a table of their loss by cause.
pub fn summary_table(reports: &[&Report]) -> String {
    if reports.is_empty() {
        return String::new();
    }
    let accounts = accounts_table(reports);
    let mut out = render_text(&metrics_table(reports));
    out.push_str(&format!("{DIRECTIONS}\n"));
    if let Some(clusters) = clusters_table(reports) {
        out.push_str(&format!("\n{CLUSTERS_TITLE}\n{}", render_text(&clusters)));
    }
    if let Some(causes) = causes_table(reports) {
        out.push_str(&format!("\n{CAUSES_TITLE}\n{}", render_text(&causes)));
    }
    if !accounts.lines.is_empty() {
        out.push_str(&format!("\n{}\n{}", accounts_title(reports), render_text(&accounts)));
    }
    out
}

/// What the arrows and the bold values of the tables mean.
pub const MARKS: &str =
    "↑ higher is better, ↓ lower is better, — neither (an input or a size); the best value of a row is in bold.";

/// The content of [`summary_table`] as a [`Tables`] model: the measures
/// and the meaning of their marks, then (when there are accounts) the
/// per-account table under its title.
pub fn measures_tables(reports: &[&Report]) -> Tables {
    if reports.is_empty() {
        return Tables::default();
    }
    let accounts = accounts_table(reports);
    let mut blocks = vec![Block::Table(metrics_table(reports)), Block::Note(MARKS.to_string())];
    if let Some(clusters) = clusters_table(reports) {
        blocks.push(Block::Title(CLUSTERS_TITLE.to_string()));
        blocks.push(Block::Table(clusters));
    }
    if let Some(causes) = causes_table(reports) {
        blocks.push(Block::Title(CAUSES_TITLE.to_string()));
        blocks.push(Block::Table(causes));
    }
    if !accounts.lines.is_empty() {
        blocks.push(Block::Title(accounts_title(reports).to_string()));
        blocks.push(Block::Table(accounts));
    }
    Tables { blocks }
}

/// The content of [`summary_table`] as Markdown tables.
pub fn markdown_table(reports: &[&Report]) -> String {
    measures_tables(reports).markdown()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_compact() {
        let cases = [(0, "0s"), (59, "59s"), (60, "1m00s"), (725, "12m05s"), (3600, "1h00m"), (11_220, "3h07m")];
        for (s, want) in cases {
            assert_eq!(duration(s), want, "{s}");
        }
        assert_eq!(duration(2 * 86_400 + 4 * 3600 + 59), "2d04h");
    }

    #[test]
    fn text_columns_line_up() {
        let mut t = Table::new(vec!["measure".into(), "a".into(), "longer".into()]);
        t.section("capacity");
        t.push_row(vec!["occupancy".into(), "0.500".into(), "1.000".into()]);
        let text = render_text(&t);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "measure          a  longer");
        assert_eq!(lines[1], "-".repeat(26));
        assert_eq!(lines[2], "capacity");
        assert_eq!(lines[3], "  occupancy  0.500   1.000");
        let md = render_markdown(&t);
        assert_eq!(
            md,
            "| measure | a | longer |\n|:---|---:|---:|\n| **capacity** |  |  |\n| occupancy | 0.500 | 1.000 |\n"
        );
    }
}
