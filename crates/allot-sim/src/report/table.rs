//! Reports side by side: a fixed-width text table for the terminal and the
//! same content as Markdown (and, in `allot-report`, as HTML). Every form
//! renders one [`Tables`] model, so they never disagree.

use std::collections::BTreeSet;

use crate::report::{ClusterReport, Report, Stats};

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

    /// A row with one cell per report.
    fn row(&mut self, label: &str, reports: &[&Report], cell: impl Fn(&Report) -> String) {
        let mut cells = vec![label.to_string()];
        cells.extend(reports.iter().map(|r| cell(r)));
        self.push_row(cells);
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

fn opt_ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), ratio)
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

/// A named statistic of a [`Stats`], in whole seconds.
type StatField = (&'static str, fn(&Stats) -> u64);

/// Adds p50/p95/p99/mean rows of a set of durations.
fn stats_rows(t: &mut Table, name: &str, reports: &[&Report], get: impl Fn(&Report) -> Option<Stats>) {
    let fields: [StatField; 4] =
        [("p50", |s| s.p50), ("p95", |s| s.p95), ("p99", |s| s.p99), ("mean", |s| s.mean.round() as u64)];
    for (stat, f) in fields {
        t.row(&format!("{name} {stat}"), reports, |r| opt_duration(get(r).as_ref().map(f)));
    }
}

/// The cluster-wide measures, one column per report.
fn metrics_table(reports: &[&Report]) -> Table {
    let mut header = vec!["measure".to_string()];
    header.extend(reports.iter().map(|r| r.policy.clone()));
    let mut t = Table::new(header);
    t.section("run");
    t.row("horizon", reports, |r| duration(r.horizon_s));
    t.row("workloads", reports, |r| r.workloads.to_string());
    t.section("capacity");
    t.row("availability", reports, |r| ratio(r.metrics.availability));
    t.row("occupancy", reports, |r| ratio(r.metrics.occupancy));
    t.row("utilization", reports, |r| ratio(r.metrics.utilization));
    t.row("impact", reports, |r| ratio(r.metrics.impact));
    t.row("available GPU-h", reports, |r| hours(r.metrics.available_gpu_hours));
    t.row("assigned GPU-h", reports, |r| hours(r.metrics.assigned_gpu_hours));
    t.section("queue time (interactive = time to GPU)");
    stats_rows(&mut t, "all", reports, |r| r.metrics.queue_time_s);
    stats_rows(&mut t, "batch", reports, |r| r.metrics.queue_time_by_class.batch);
    stats_rows(&mut t, "interactive", reports, |r| r.metrics.queue_time_by_class.interactive);
    stats_rows(&mut t, "service", reports, |r| r.metrics.queue_time_by_class.service);
    t.section("work");
    t.row("completed workloads", reports, |r| r.metrics.completed_workloads.to_string());
    t.row("completed / day", reports, |r| format!("{:.1}", r.metrics.throughput_per_day));
    t.row("useful GPU-h", reports, |r| hours(r.metrics.useful_gpu_hours));
    t.row("useful GPU-h / day", reports, |r| hours(r.metrics.useful_gpu_hours_per_day));
    t.row("JCT p50", reports, |r| opt_duration(r.metrics.jct_s.map(|s| s.p50)));
    t.row("JCT p95", reports, |r| opt_duration(r.metrics.jct_s.map(|s| s.p95)));
    t.row("rejected workloads", reports, |r| r.metrics.rejected_workloads.to_string());
    t.row("unfinished workloads", reports, |r| r.metrics.unfinished_workloads.to_string());
    t.section("preemption");
    t.row("preemptions", reports, |r| r.metrics.preemptions.to_string());
    t.row("overhead GPU-h", reports, |r| hours(r.metrics.preemption_overhead_gpu_hours));
    t.row("overhead fraction", reports, |r| ratio(r.metrics.preemption_overhead_fraction));
    t.row("node failures", reports, |r| r.metrics.failures.to_string());
    t.row("lost GPU-h (failures)", reports, |r| hours(r.metrics.lost_gpu_hours_failures));
    t.section("fairness");
    t.row("budget attainment", reports, |r| opt_ratio(r.metrics.budget_attainment));
    t.row("Jain index", reports, |r| opt_ratio(r.metrics.jain_index));
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
        let header = ["account", "entitled", "delivered", "GPU-h", "budget NGH", "used NGH", "queue p50"];
        let mut t = Table::new(header.iter().map(|s| s.to_string()).collect());
        for (path, a) in &r.accounts {
            t.push_row(vec![
                path.clone(),
                ratio(a.entitled_share),
                ratio(a.delivered_share),
                hours(a.gpu_hours),
                a.budget_gpu_hours.map_or_else(|| "-".into(), hours),
                hours(a.used_gpu_hours),
                opt_duration(a.queue_time_p50_s),
            ]);
        }
        return t;
    }
    let mut header = vec!["account".to_string(), "entitled".to_string()];
    header.extend(reports.iter().map(|r| r.policy.clone()));
    let mut t = Table::new(header);
    for p in paths {
        let mut cells = vec![p.clone(), entitled(p)];
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
    let mut header = vec!["measure".to_string()];
    header.extend(reports.iter().map(|r| r.policy.clone()));
    let mut t = Table::new(header);
    for (name, gpus) in &clusters {
        t.section(&cluster_section(name, *gpus));
        let of = |r: &Report| r.clusters.get(name).cloned();
        let num = |f: fn(&ClusterReport) -> String| move |r: &Report| of(r).map_or_else(|| "-".into(), |c| f(&c));
        t.row("availability", reports, num(|c| ratio(c.availability)));
        t.row("occupancy", reports, num(|c| ratio(c.occupancy)));
        t.row("utilization", reports, num(|c| ratio(c.utilization)));
        t.row("available GPU-h", reports, num(|c| hours(c.available_gpu_hours)));
        t.row("assigned GPU-h", reports, num(|c| hours(c.assigned_gpu_hours)));
        t.row("started workloads", reports, num(|c| c.started_workloads.to_string()));
        stats_rows(&mut t, "queue", reports, |r| of(r).and_then(|c| c.queue_time_s));
        stats_rows(&mut t, "interactive", reports, |r| of(r).and_then(|c| c.queue_time_by_class.interactive));
    }
    Some(t)
}

/// Title of the per-cluster table.
pub const CLUSTERS_TITLE: &str = "per cluster (queue times of the workloads that first started there)";

fn accounts_title(reports: &[&Report]) -> &'static str {
    if reports.len() == 1 { "accounts" } else { "delivered share by account" }
}

/// Renders a table as fixed-width text: first column left-aligned (rows
/// indented under section titles), the others right-aligned.
fn render_text(t: &Table) -> String {
    let cols = t.header.len();
    let mut width: Vec<usize> = t.header.iter().map(|h| h.chars().count()).collect();
    let indent = if t.lines.iter().any(|l| matches!(l, Line::Section(_))) { 2 } else { 0 };
    // Section titles sit on lines of their own and do not widen the column.
    for l in &t.lines {
        if let Line::Row(cells) = l {
            width[0] = width[0].max(cells[0].chars().count() + indent);
            for (w, c) in width.iter_mut().zip(cells).skip(1) {
                *w = (*w).max(c.chars().count());
            }
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
    for l in &t.lines {
        match l {
            Line::Section(s) => out.push_str(&format!("{s}\n")),
            Line::Row(cells) => out.push_str(&line(cells, indent)),
        }
    }
    out
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// Renders a table as Markdown: section titles become bold rows.
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
        }
    }
    out
}

/// The reports side by side as a fixed-width text table, one column per
/// policy, in sections (run, capacity, queue time, work, preemption,
/// fairness), followed by a per-account table: full detail for a single
/// report, the delivered share per policy for several. A fleet of several
/// clusters gets a per-cluster table between the two.
pub fn summary_table(reports: &[&Report]) -> String {
    if reports.is_empty() {
        return String::new();
    }
    let accounts = accounts_table(reports);
    let mut out = render_text(&metrics_table(reports));
    if let Some(clusters) = clusters_table(reports) {
        out.push_str(&format!("\n{CLUSTERS_TITLE}\n{}", render_text(&clusters)));
    }
    if !accounts.lines.is_empty() {
        out.push_str(&format!("\n{}\n{}", accounts_title(reports), render_text(&accounts)));
    }
    out
}

/// The content of [`summary_table`] as a [`Tables`] model: the measures,
/// then (when there are accounts) the per-account table under its title.
pub fn measures_tables(reports: &[&Report]) -> Tables {
    if reports.is_empty() {
        return Tables::default();
    }
    let accounts = accounts_table(reports);
    let mut blocks = vec![Block::Table(metrics_table(reports))];
    if let Some(clusters) = clusters_table(reports) {
        blocks.push(Block::Title(CLUSTERS_TITLE.to_string()));
        blocks.push(Block::Table(clusters));
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
