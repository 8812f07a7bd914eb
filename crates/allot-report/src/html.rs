//! The comparison page: one self-contained HTML file (inline CSS and SVG, no
//! script, no link to anything outside it). It reads top down: the
//! headline in words ([`crate::headline()`]), the assumptions that favour a
//! policy, what was compared and any warning about a run, the headline measures, the charts
//! of [`crate::charts`] (with a legend of the accounts they name), the table
//! of every measure per policy, and last the assumptions (collapsed).

use std::fmt::Write;

use std::collections::BTreeMap;

use allot_core::{AccountId, AccountTree, Class, Cluster, Contract, WorkloadSpec};
use allot_sim::report::{Better, Block, Line, MARKS, MeasureLine, Table, Tables, best_cells};

use crate::PolicyRun;
use crate::charts::{self, Figure};
use crate::series::{budget_accounts, top_accounts};
use crate::svg::{esc, fmt_duration, fmt_num};

/// What the runs assumed: the inputs and how they were made.
pub struct Setup<'a> {
    pub cluster: &'a Cluster,
    pub accounts: &'a AccountTree,
    pub contract: &'a Contract,
    /// The configuration as written (TOML), shown verbatim.
    pub config_text: &'a str,
    /// Where the inputs came from and the behaviour parameters, as
    /// (name, value) rows: files, generator scenario and seeds, `--until`.
    pub source: Vec<(String, String)>,
    /// The workloads of the (first) trace.
    pub trace: &'a [WorkloadSpec],
}

/// The page's content.
pub struct Page<'a> {
    pub title: String,
    pub setup: Setup<'a>,
    /// One run per policy, in the order of the columns; charts show these.
    pub runs: &'a [PolicyRun],
    /// The measures: the tables of `summary.md`, written here as HTML.
    pub measures: &'a Tables,
    /// Remarks printed under the title (e.g. which seed the charts show).
    pub notes: Vec<String>,
    /// Warnings about the runs ([`allot_sim::report::TraceWarning`]),
    /// shown first.
    pub warnings: Vec<String>,
    /// The headline paragraphs ([`crate::headline()`]), shown before
    /// anything else.
    pub headline: Vec<String>,
    /// What the comparison assumed, each saying which policy it favours
    /// ([`assumptions_of`]), listed before the results.
    pub assumed: Vec<String>,
}

const STYLE: &str = "
body{font-family:sans-serif;color:#222;margin:24px auto;max-width:1300px;padding:0 16px;line-height:1.4}
h1{font-size:26px;margin-bottom:4px}h2{font-size:20px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:36px}
h3{font-size:16px;margin:18px 0 6px}
nav a{margin-right:14px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(620px,1fr));gap:18px 24px}
figure{margin:0}figcaption{font-size:13px;color:#555;max-width:620px;margin-top:2px}
svg.chart{display:block;border:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:6px 0 12px}
th,td{border:1px solid #d4d4d4;padding:3px 8px;text-align:right;vertical-align:top}
th:first-child,td:first-child{text-align:left}
thead th{background:#f0f0f0}
tr.section th{background:#fafafa;text-align:left;font-weight:bold}
table.kv td:first-child{font-weight:bold}table.kv td,table.kv th{text-align:left}
table.legend td:nth-child(2),table.legend th:nth-child(2){text-align:left}
td.best{font-weight:bold;background:#e3f2e1}
span.dir{color:#666;margin-left:4px}
.warn{background:#fff4e5;border:1px solid #e0a040;padding:6px 12px;margin:12px 0}
.warn ul{margin:4px 0;padding-left:20px}
details{margin:8px 0}summary{cursor:pointer;font-weight:bold}
pre{background:#f7f7f7;border:1px solid #ddd;padding:8px;font-size:12px;overflow:auto}
.note{color:#555}
p.headline{font-size:16px}
";

/// The assumptions of a comparison, in the order the reports list them:
/// what the config's writer assumed (`[provenance] assumed`: an importer's
/// checkpoints and utilisation, budgets from the same trace, a scenario's
/// load), then whether each policy reclaims idle GPUs (CON-9), then the
/// load measured on the trace.
pub fn assumptions_of(assumed: &[String], idle_reclaim: &[(String, bool)], load: Option<f64>) -> Vec<String> {
    let mut out = assumed.to_vec();
    if !idle_reclaim.is_empty() {
        let list = |on: bool| {
            let names: Vec<&str> = idle_reclaim.iter().filter(|x| x.1 == on).map(|x| x.0.as_str()).collect();
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        };
        out.push(format!(
            "idle reclaim (CON-9): on for {}; off for {} (--idle-reclaim-baselines turns it on for the baselines; \
             sessions it ends are counted as idle-reclaimed, not completed: favours the policies it is on for in \
             queue times, against them in completed workloads)",
            list(true),
            list(false)
        ));
    }
    if let Some(l) = load {
        out.push(format!(
            "load: the trace asks for {l:.2}× the GPU-time of the cluster over its arrivals{}",
            if l > crate::headline::OVERLOAD {
                " (far over capacity: favours every policy that shares idle GPUs over static partitions)"
            } else {
                ""
            }
        ));
    }
    out
}

/// Renders the page.
pub fn render(page: &Page) -> String {
    let s = &page.setup;
    let mut h = String::with_capacity(1 << 16);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" \
         content=\"width=device-width\"><title>{t}</title><style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n",
        t = esc(&page.title)
    );
    for p in &page.headline {
        let _ = writeln!(h, "<p class=\"headline\">{}</p>", esc(p));
    }
    if !page.assumed.is_empty() {
        h.push_str("<h2 id=\"assumed\">Assumptions behind the results</h2>\n<ul>");
        for a in &page.assumed {
            let _ = write!(h, "<li>{}</li>", esc(a));
        }
        h.push_str("</ul>\n");
    }
    let policies: Vec<&str> = page.runs.iter().map(|r| r.report.policy.as_str()).collect();
    let horizon = page.runs.iter().map(|r| r.report.horizon_s).max().unwrap_or(0);
    let _ = writeln!(
        h,
        "<p>Policies: <b>{}</b>. Cluster <b>{}</b>: {} GPUs. {} workloads; horizon {} ({} days).</p>",
        esc(&policies.join(", ")),
        esc(&s.cluster.name),
        s.cluster.total_gpus(),
        s.trace.len(),
        fmt_duration(horizon),
        fmt_num((horizon as f64 / 86_400.0 * 10.0).round() / 10.0)
    );
    for n in &page.notes {
        let _ = writeln!(h, "<p class=\"note\">{}</p>", esc(n));
    }
    warnings(&mut h, &page.warnings);
    h.push_str(
        "<nav><a href=\"#headline\">At a glance</a><a href=\"#capacity\">Occupancy</a>\
         <a href=\"#queue\">Queue time</a><a href=\"#shares\">Shares and budgets</a>\
         <a href=\"#preemption\">Preemption</a><a href=\"#measures\">Every measure</a>\
         <a href=\"#assumptions\">Assumptions</a></nav>\n",
    );
    headline(&mut h, page.measures);
    let runs = page.runs;
    let mut queue = charts::queue_charts(runs);
    queue.push(charts::time_to_gpu_chart(runs, s.contract));
    section(&mut h, "capacity", "Occupancy and utilisation", None, &charts::capacity_charts(runs));
    section(&mut h, "queue", "Queue time and interactive time to GPU", None, &queue);
    shares(&mut h, runs, s);
    section(&mut h, "preemption", "Preemption", None, &charts::preemption_charts(runs));
    h.push_str("<section id=\"measures\"><h2>Every measure</h2>\n");
    measures(&mut h, page.measures, "table-measures");
    h.push_str("</section>\n");
    assumptions(&mut h, s);
    h.push_str("</body></html>\n");
    h
}

/// The warnings, in a box of their own; nothing without any.
fn warnings(h: &mut String, warnings: &[String]) {
    if warnings.is_empty() {
        return;
    }
    h.push_str("<div class=\"warn\" id=\"warnings\"><b>Warnings</b><ul>");
    for w in warnings {
        let _ = write!(h, "<li>{}</li>", esc(w));
    }
    h.push_str("</ul></div>\n");
}

/// The headline: the rows of the first table of measures marked as
/// headline ([`allot_sim::report::rows`]), as the full table writes them.
fn headline(h: &mut String, tables: &Tables) {
    let Some(t) = tables.blocks.iter().find_map(|b| if let Block::Table(t) = b { Some(t) } else { None }) else {
        return;
    };
    let mut top = Table::new(t.header.clone());
    top.lines = t.lines.iter().filter(|l| matches!(l, Line::Measure(m) if m.headline)).cloned().collect();
    h.push_str("<section id=\"headline\"><h2>At a glance</h2>\n");
    measures_table(h, &top, " id=\"table-headline\"");
    let _ = writeln!(
        h,
        "<p class=\"note\">{} Every measure is under <a href=\"#measures\">Every measure</a>.</p>",
        esc(MARKS)
    );
    h.push_str("</section>\n");
}

/// Shares and budgets: the legend of the accounts the charts name, the
/// share chart, budget attainment per period and per account.
fn shares(h: &mut String, runs: &[PolicyRun], s: &Setup) {
    let tree = s.accounts;
    let mut ids = top_accounts(tree);
    ids.extend(budget_accounts(tree));
    ids.sort();
    ids.dedup();
    let paths: Vec<String> = ids.iter().map(|a| tree.account(*a).path.clone()).collect();
    let labels: BTreeMap<String, String> = paths.iter().cloned().zip(charts::account_labels(&paths)).collect();
    h.push_str("<section id=\"shares\"><h2>Shares and budgets</h2>\n");
    legend(h, &ids, &labels, s);
    let mut figures = vec![charts::share_chart(runs, tree, &labels)];
    figures.extend(charts::budget_attainment_chart(runs, s.contract));
    grid(h, &figures);
    match budget_table(runs, tree, &ids, &labels) {
        Some(t) => {
            h.push_str("<h3>Budget attainment per account</h3>\n");
            measures_table(h, &t, " id=\"table-budget-attainment\"");
            h.push_str(
                "<p class=\"note\">Each account's Σ min(used, budget) / Σ min(wanted, budget) over its budget \
                 periods (its subtree's NGH); - where it wanted nothing. The best value of a row is in bold.</p>\n",
            );
        }
        None => h.push_str("<p class=\"note\">No account has a budget: there is no budget attainment to show.</p>\n"),
    }
    h.push_str("</section>\n");
}

/// The accounts the charts name: label, path, entitled share, budget, and
/// what the trace asked of them.
fn legend(h: &mut String, ids: &[AccountId], labels: &BTreeMap<String, String>, s: &Setup) {
    let tree = s.accounts;
    h.push_str("<h3>Accounts in the charts</h3>\n");
    let mut rows = vec![
        ["label", "account", "entitled share", "budget NGH / period", "workloads", "GPU-h requested"]
            .map(String::from)
            .to_vec(),
    ];
    for &a in ids {
        let acc = tree.account(a);
        let ws: Vec<&WorkloadSpec> = s.trace.iter().filter(|w| tree.ancestry(w.account).any(|x| x == a)).collect();
        let gpu_h: f64 = ws.iter().map(|w| f64::from(w.gpus) * w.work_s as f64 / 3600.0).sum();
        rows.push(vec![
            labels.get(&acc.path).cloned().unwrap_or_default(),
            acc.path.clone(),
            format!("{:.3}", tree.static_share(a)),
            acc.budget_gpu_hours.map_or_else(|| "-".into(), fmt_num),
            fmt_num(ws.len() as f64),
            fmt_num(gpu_h.round()),
        ]);
    }
    table(h, "legend", &rows);
}

/// Budget attainment per budgeted account of `ids` (rows) and policy
/// (columns), the best marked; `None` when no account has a budget.
fn budget_table(
    runs: &[PolicyRun],
    tree: &AccountTree,
    ids: &[AccountId],
    labels: &BTreeMap<String, String>,
) -> Option<Table> {
    runs.iter().find_map(|r| r.series.budget.as_ref())?;
    let mut header = vec!["account".to_string(), "budget NGH / period".to_string()];
    header.extend(runs.iter().map(|r| r.report.policy.clone()));
    let mut t = Table::new(header);
    for &a in ids {
        let acc = tree.account(a);
        let Some(budget) = acc.budget_gpu_hours else { continue };
        let values: Vec<Option<f64>> = runs
            .iter()
            .map(|r| {
                let b = r.series.budget.as_ref()?;
                b.account_attainment(b.accounts.iter().position(|x| x.account == acc.path)?)
            })
            .collect();
        let text = |v: f64| format!("{v:.3}");
        let label = labels.get(&acc.path).map_or_else(|| acc.path.clone(), |l| format!("{l}: {}", acc.path));
        let mut cells = vec![label, fmt_num(budget)];
        cells.extend(values.iter().map(|v| v.map_or_else(|| "-".into(), text)));
        let mut best = vec![false];
        best.extend(best_cells(&values, Better::Higher, text));
        t.lines.push(Line::Measure(MeasureLine { cells, better: Better::Higher, best, headline: false }));
    }
    Some(t)
}

fn section(h: &mut String, id: &str, title: &str, note: Option<&str>, figures: &[Figure]) {
    let _ = writeln!(h, "<section id=\"{id}\"><h2>{}</h2>", esc(title));
    if let Some(n) = note {
        let _ = writeln!(h, "<p class=\"note\">{}</p>", esc(n));
    }
    grid(h, figures);
    h.push_str("</section>\n");
}

fn grid(h: &mut String, figures: &[Figure]) {
    h.push_str("<div class=\"grid\">\n");
    for f in figures {
        let _ = writeln!(h, "<figure>{}<figcaption>{}</figcaption></figure>", f.svg, esc(&f.caption));
    }
    h.push_str("</div>\n");
}

/// A table from rows of cells; the first row is the header.
fn table(h: &mut String, class: &str, rows: &[Vec<String>]) {
    let _ = write!(h, "<table class=\"{class}\">");
    for (i, row) in rows.iter().enumerate() {
        let tag = if i == 0 { "th" } else { "td" };
        h.push_str(if i == 0 { "<thead><tr>" } else { "<tr>" });
        for c in row {
            let _ = write!(h, "<{tag}>{}</{tag}>", esc(c));
        }
        h.push_str(if i == 0 { "</tr></thead>" } else { "</tr>" });
    }
    h.push_str("</table>\n");
}

/// The inputs, then (collapsed) the cluster, contract, accounts, workload
/// mix and configuration file.
fn assumptions(h: &mut String, s: &Setup) {
    h.push_str("<section id=\"assumptions\"><h2>Assumptions</h2>\n<h3>Inputs</h3>\n");
    let mut rows = vec![vec!["input".to_string(), "value".to_string()]];
    rows.extend(s.source.iter().map(|(k, v)| vec![k.clone(), v.clone()]));
    table(h, "kv", &rows);
    h.push_str(
        "<details><summary>Cluster, contract, accounts, workload mix and configuration file</summary>\n\
         <h3>Cluster</h3>\n",
    );
    let mut rows =
        vec![["pool", "GPU", "weight", "nodes", "GPUs/node", "GPUs", "rack size", "shared"].map(String::from).to_vec()];
    for p in &s.cluster.pools {
        let g = &s.cluster.gpu_types[p.gpu.0 as usize];
        rows.push(vec![
            p.name.clone(),
            g.name.clone(),
            fmt_num(g.weight),
            p.nodes.to_string(),
            p.gpus_per_node.to_string(),
            (p.nodes * p.gpus_per_node).to_string(),
            p.rack_size.to_string(),
            if p.shared { "yes" } else { "no" }.into(),
        ]);
    }
    table(h, "pools", &rows);
    h.push_str("<h3>Contract</h3>\n");
    let c = s.contract;
    let d = fmt_duration;
    let rows: Vec<Vec<String>> = [
        ("parameter", "value".to_string()),
        ("budget period", crate::charts::period_label(c)),
        ("usage half-life", d(c.usage_half_life)),
        (
            "minimum slice",
            format!(
                "batch {}, interactive {}, service {}",
                d(c.min_slice.batch),
                d(c.min_slice.interactive),
                d(c.min_slice.service)
            ),
        ),
        ("grace", d(c.grace)),
        ("interactive lane", format!("≤ {} GPUs, ≤ {}", c.interactive_max_gpus, d(c.interactive_max_duration))),
        ("scheduling interval", d(c.scheduling_interval)),
    ]
    .into_iter()
    .map(|(k, v)| vec![k.to_string(), v])
    .collect();
    table(h, "kv", &rows);
    accounts_table(h, s.accounts);
    trace_table(h, s.trace);
    let _ = writeln!(h, "<h3>Configuration file</h3><pre>{}</pre></details>\n</section>", esc(s.config_text));
}

fn accounts_table(h: &mut String, tree: &AccountTree) {
    h.push_str("<h3>Accounts</h3>\n");
    let mut rows =
        vec![["account", "share", "entitled share", "budget NGH / period", "impact"].map(String::from).to_vec()];
    for a in tree.ids() {
        let acc = tree.account(a);
        rows.push(vec![
            acc.path.clone(),
            fmt_num(acc.share),
            format!("{:.3}", tree.static_share(a)),
            acc.budget_gpu_hours.map_or_else(|| "-".into(), fmt_num),
            fmt_num(acc.impact),
        ]);
    }
    table(h, "accounts", &rows);
}

fn trace_table(h: &mut String, trace: &[WorkloadSpec]) {
    h.push_str("<h3>Workloads</h3>\n");
    let mut rows = vec![
        ["class", "workloads", "GPU-h requested", "mean GPUs", "largest gang", "mean util"].map(String::from).to_vec(),
    ];
    let all: Vec<Option<Class>> = Class::ALL.into_iter().map(Some).chain([None]).collect();
    for class in all {
        let ws: Vec<&WorkloadSpec> = trace.iter().filter(|w| class.is_none_or(|c| w.class == c)).collect();
        if ws.is_empty() {
            continue;
        }
        let n = ws.len() as f64;
        let gpu_h: f64 = ws.iter().map(|w| f64::from(w.gpus) * w.work_s as f64 / 3600.0).sum();
        rows.push(vec![
            class.map_or("all", Class::as_str).to_string(),
            ws.len().to_string(),
            fmt_num(gpu_h.round()),
            format!("{:.1}", ws.iter().map(|w| f64::from(w.gpus)).sum::<f64>() / n),
            ws.iter().map(|w| w.gpus).max().unwrap_or(0).to_string(),
            format!("{:.2}", ws.iter().map(|w| w.util).sum::<f64>() / n),
        ]);
    }
    table(h, "trace", &rows);
}

/// Writes the measures: titles as `<h3>`, notes as paragraphs, tables with
/// section rows spanning every column; the first table gets `id`.
fn measures(h: &mut String, tables: &Tables, id: &str) {
    let mut first = true;
    for b in &tables.blocks {
        match b {
            Block::Title(t) => {
                let _ = writeln!(h, "<h3>{}</h3>", esc(t));
            }
            Block::Note(n) => {
                let _ = writeln!(h, "<p>{}</p>", esc(n));
            }
            Block::Table(t) => {
                let id_attr = if first { format!(" id=\"{}\"", esc(id)) } else { String::new() };
                first = false;
                measures_table(h, t, &id_attr);
            }
        }
    }
}

fn measures_table(h: &mut String, t: &Table, id_attr: &str) {
    let _ = write!(h, "<table{id_attr}><thead><tr>");
    for c in &t.header {
        let _ = write!(h, "<th>{}</th>", esc(c));
    }
    h.push_str("</tr></thead><tbody>\n");
    for line in &t.lines {
        match line {
            Line::Section(s) => {
                let _ = writeln!(h, "<tr class=\"section\"><th colspan=\"{}\">{}</th></tr>", t.header.len(), esc(s));
            }
            Line::Row(cells) => {
                h.push_str("<tr>");
                for c in cells {
                    let _ = write!(h, "<td>{}</td>", esc(c));
                }
                h.push_str("</tr>\n");
            }
            Line::Measure(m) => {
                let (arrow, says) = (m.better.arrow(), m.better.says());
                let _ =
                    write!(h, "<tr><td>{}<span class=\"dir\" title=\"{says}\">{arrow}</span></td>", esc(&m.cells[0]));
                for (c, best) in m.cells.iter().skip(1).zip(&m.best) {
                    let class = if *best { " class=\"best\"" } else { "" };
                    let _ = write!(h, "<td{class}>{}</td>", esc(c));
                }
                h.push_str("</tr>\n");
            }
        }
    }
    h.push_str("</tbody></table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_tables_become_html() {
        let mut t = Table::new(vec!["measure".into(), "a".into(), "b".into()]);
        t.section("capacity");
        t.push_row(vec!["occ | x".into(), "0.5".into(), "1".into()]);
        let mut accounts = Table::new(vec!["account".into(), "a".into()]);
        accounts.push_row(vec!["org".into(), "1".into()]);
        let tables = Tables {
            blocks: vec![
                Block::Table(t),
                Block::Title("delivered share by account".into()),
                Block::Table(accounts),
                Block::Note("a <note>".into()),
            ],
        };
        let mut h = String::new();
        measures(&mut h, &tables, "t");
        assert!(h.starts_with("<table id=\"t\"><thead><tr><th>measure</th><th>a</th><th>b</th></tr></thead>"), "{h}");
        assert!(h.contains("<tr class=\"section\"><th colspan=\"3\">capacity</th></tr>"));
        assert!(h.contains("<td>occ | x</td><td>0.5</td><td>1</td>"));
        assert!(h.contains("<h3>delivered share by account</h3>"));
        assert!(h.ends_with("<p>a &lt;note&gt;</p>\n"), "{h}");
        assert_eq!(h.matches("<table").count(), 2);
        assert_eq!(h.matches(" id=").count(), 1);
    }
}
