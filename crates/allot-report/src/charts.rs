//! The charts of the comparison report, built from the runs' [`Series`] and
//! [`Report`](allot_sim::report::Report)s. Every chart has a stable id (`chart-…`) and shows one line
//! or bar per policy, in a colour that is the same for a policy everywhere.

use crate::PolicyRun;
use crate::series::{Series, top_accounts, top_level};
use crate::svg::{Axis, BarChart, Bars, Line, LineChart, Rule, Shape, bar_chart, fmt_duration, fmt_num, line_chart};
use std::collections::BTreeMap;

use allot_core::{AccountTree, Class, Contract, Time};
use allot_sim::report::Stats;

/// The budget periods as a reader says them: "7d", "7d from
/// 2026-01-05T00:00:00Z", "calendar months (UTC+02:00)" (BUD-4).
pub fn period_label(c: &Contract) -> String {
    use allot_core::calendar::{Calendar, format_instant, format_utc_offset};
    match c.budget_calendar {
        Calendar::Months { utc_offset: 0 } => "calendar months (UTC)".to_string(),
        Calendar::Months { utc_offset } => format!("calendar months (UTC{})", format_utc_offset(utc_offset)),
        Calendar::Fixed { anchor: 0 } => fmt_duration(c.budget_period),
        Calendar::Fixed { anchor } => format!("{} from {}", fmt_duration(c.budget_period), format_instant(anchor)),
    }
}

/// One chart of the page.
#[derive(Clone, Debug)]
pub struct Figure {
    pub id: String,
    pub svg: String,
    /// One sentence under the chart: what is plotted and how.
    pub caption: String,
}

/// Colour of a policy: fixed for the known policies (Okabe–Ito palette,
/// safe for colour-blind readers), else by position.
pub fn policy_color(name: &str, index: usize) -> String {
    let fixed = match name {
        "allot" => Some("#0072B2"),
        "priority" => Some("#D55E00"),
        "fifo-backfill" => Some("#009E73"),
        "fifo" => Some("#CC79A7"),
        _ => None,
    };
    const OTHERS: [&str; 4] = ["#E69F00", "#56B4E9", "#000000", "#999933"];
    fixed.unwrap_or(OTHERS[index % OTHERS.len()]).to_string()
}

fn color(runs: &[PolicyRun], i: usize) -> String {
    policy_color(&runs[i].report.policy, i)
}

fn horizon(runs: &[PolicyRun]) -> Time {
    runs.iter().map(|r| r.series.horizon_s).max().unwrap_or(0)
}

fn days(t: Time) -> f64 {
    t as f64 / 86_400.0
}

/// A per-bucket step line: each bucket's value from its start to the next.
fn bucket_steps(s: &Series, values: &[f64]) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = s.bucket_starts().zip(values).map(|(t, v)| (days(t), *v)).collect();
    if let Some(&(_, last)) = pts.last() {
        pts.push((days(s.horizon_s), last));
    }
    pts
}

fn per_bucket(runs: &[PolicyRun], get: impl Fn(&Series) -> Vec<f64>) -> Vec<Line> {
    runs.iter()
        .enumerate()
        .map(|(i, r)| Line {
            name: r.report.policy.clone(),
            color: color(runs, i),
            points: bucket_steps(&r.series, &get(&r.series)),
            shape: Shape::Step,
            dashed: false,
        })
        .collect()
}

fn bucket_name(runs: &[PolicyRun]) -> String {
    fmt_duration(runs.first().map_or(3600, |r| r.series.bucket_s))
}

/// Occupancy and utilisation over time, 0–1.
pub fn capacity_charts(runs: &[PolicyRun]) -> Vec<Figure> {
    let h = horizon(runs);
    let b = bucket_name(runs);
    let ratio = |id: &str, title: &str, y: &str, get: fn(&Series) -> Vec<f64>, caption: String| Figure {
        id: id.into(),
        svg: line_chart(&LineChart {
            id: id.into(),
            title: title.into(),
            x: Axis::days(h),
            y: Axis::fixed(y, 0.0, 1.0, 0.2, fmt_num),
            lines: per_bucket(runs, get),
            rules: Vec::new(),
            empty_note: None,
        }),
        caption,
    };
    vec![
        ratio(
            "chart-occupancy",
            "Occupancy over time",
            "occupancy (0–1)",
            |s| s.occupancy.clone(),
            format!("GPU-time assigned to a workload / in-service GPU-time, per {b}."),
        ),
        ratio(
            "chart-utilization",
            "Utilisation over time",
            "utilisation (0–1)",
            |s| s.utilization.clone(),
            format!("GPU-time assigned × the workload's mean utilisation / in-service GPU-time, per {b}."),
        ),
    ]
}

/// Queue-time distributions, one chart per class present in the trace.
pub fn queue_charts(runs: &[PolicyRun]) -> Vec<Figure> {
    let classes: Vec<Class> =
        Class::ALL.into_iter().filter(|c| runs.iter().any(|r| r.series.queue_cdf.contains_key(c))).collect();
    classes
        .into_iter()
        .map(|class| {
            let max_q = runs
                .iter()
                .filter_map(|r| r.series.queue_cdf.get(&class))
                .filter_map(|c| c.points.last().map(|p| p.0 as f64))
                .fold(60.0, f64::max);
            let x = Axis::log_duration("queue time, submit to first start (log scale)", max_q);
            let x_max = match x.scale {
                crate::svg::Scale::Log { max, .. } | crate::svg::Scale::Linear { max, .. } => max,
            };
            let mut counts = Vec::new();
            let lines = runs
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let cdf = r.series.queue_cdf.get(&class)?;
                    counts.push(format!("{}: {} of {} started", r.report.policy, cdf.started, cdf.workloads));
                    let mut pts = vec![(1.0, 0.0)];
                    pts.extend(cdf.points.iter().map(|&(q, f)| ((q as f64).max(1.0), f)));
                    let last = pts.last().map_or(0.0, |p| p.1);
                    pts.push((x_max, last));
                    Some(Line {
                        name: r.report.policy.clone(),
                        color: color(runs, i),
                        points: pts,
                        shape: Shape::Step,
                        dashed: false,
                    })
                })
                .collect();
            let id = format!("chart-queue-cdf-{}", class.as_str());
            let svg = line_chart(&LineChart {
                id: id.clone(),
                title: format!("Queue time CDF: {} workloads", class.as_str()),
                x,
                y: Axis::fixed("fraction of workloads started", 0.0, 1.0, 0.2, fmt_num),
                lines,
                rules: Vec::new(),
                empty_note: None,
            });
            let caption = format!(
                "Fraction of the {} workloads (rejected ones excluded) that got GPUs within a given wait; \
                 waits under 1 s are drawn at 1 s; workloads never started keep a curve below 1 ({}).",
                class.as_str(),
                counts.join("; ")
            );
            Figure { id, svg, caption }
        })
        .collect()
}

/// One statistic of a set of durations, in seconds.
type StatOf = fn(&Stats) -> f64;

/// Interactive time to GPU: p50, p95 and p99 per policy on a log scale,
/// with the target of the interactive lane (grace + one scheduling interval).
pub fn time_to_gpu_chart(runs: &[PolicyRun], contract: &Contract) -> Figure {
    let target = contract.grace + contract.scheduling_interval;
    let stats: Vec<Option<Stats>> = runs.iter().map(|r| r.report.metrics.time_to_gpu_s).collect();
    let max = stats.iter().flatten().map(|s| s.p99 as f64).fold(target as f64, f64::max);
    let fields: [(&str, StatOf); 3] = [("p50", |s| s.p50 as f64), ("p95", |s| s.p95 as f64), ("p99", |s| s.p99 as f64)];
    let bars = runs
        .iter()
        .enumerate()
        .map(|(i, r)| Bars {
            name: r.report.policy.clone(),
            color: color(runs, i),
            values: fields.iter().map(|(_, f)| stats[i].as_ref().map(f)).collect(),
        })
        .collect();
    let none = stats.iter().all(Option::is_none);
    let svg = bar_chart(&BarChart {
        id: "chart-time-to-gpu".into(),
        title: "Interactive time to GPU".into(),
        x_label: "percentile over interactive workloads (submit to first start)".into(),
        y: Axis::log_duration("time to GPU (log scale)", max),
        categories: fields.iter().map(|f| f.0.to_string()).collect(),
        bars,
        value_label: Some(|v| fmt_duration(v.round() as u64)),
        rules: vec![Rule { value: target as f64, label: format!("target {}", fmt_duration(target)) }],
        empty_note: none.then(|| "no interactive workload started".to_string()),
    });
    let caption = format!(
        "Nearest-rank percentiles of the wait of interactive workloads (bars start at 1 s); the dashed line is \
         the interactive lane's target, grace ({}) + one scheduling interval ({}).",
        fmt_duration(contract.grace),
        fmt_duration(contract.scheduling_interval)
    );
    Figure { id: "chart-time-to-gpu".into(), svg, caption }
}

/// The label of an account below the common prefix of those shown.
fn short_paths(paths: &[String]) -> Vec<String> {
    let prefix = match paths.first().and_then(|p| p.rsplit_once('/')) {
        Some((parent, _)) if paths.iter().all(|p| p.starts_with(&format!("{parent}/"))) => parent.len() + 1,
        _ => 0,
    };
    paths.iter().map(|p| p[prefix..].to_string()).collect()
}

/// Whether an account's name is an opaque id rather than a name: four or
/// more hexadecimal digits with at least one digit (Philly's virtual
/// clusters are `6214e9`, `11cb48`, …).
pub fn is_opaque(name: &str) -> bool {
    let last = name.rsplit('/').next().unwrap_or(name);
    last.len() >= 4 && last.chars().all(|c| c.is_ascii_hexdigit()) && last.chars().any(|c| c.is_ascii_digit())
}

/// `A`, `B`, … `Z`, `AA`, `AB`, …
fn letters(mut i: usize) -> String {
    let mut out = Vec::new();
    loop {
        out.push(b'A' + (i % 26) as u8);
        if i < 26 {
            break;
        }
        i = i / 26 - 1;
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII")
}

/// The labels of the accounts the charts show, by path: their paths below
/// the common parent, or letters in path order when any of those is an
/// opaque id ([`is_opaque`]); the page's legend maps each label to its
/// account.
pub fn account_labels(paths: &[String]) -> Vec<String> {
    let short = short_paths(paths);
    if short.iter().any(|s| is_opaque(s)) { (0..paths.len()).map(letters).collect() } else { short }
}

/// `" (12 of 15, largest … first)"` when some accounts are left out.
fn shown_of(shown: usize, all: usize, by: &str) -> String {
    if shown < all { format!(" ({shown} of {all}, {by} first)") } else { String::new() }
}

/// Delivered vs entitled share of the top-level accounts, labelled by
/// `labels` (path → label, [`account_labels`]).
pub fn share_chart(runs: &[PolicyRun], tree: &AccountTree, labels: &BTreeMap<String, String>) -> Figure {
    let ids = top_accounts(tree);
    let paths: Vec<String> = ids.iter().map(|a| tree.account(*a).path.clone()).collect();
    let categories = paths.iter().map(|p| labels.get(p).cloned().unwrap_or_else(|| p.clone())).collect();
    let mut bars = vec![Bars {
        name: "entitled".into(),
        color: "#9a9a9a".into(),
        values: ids.iter().map(|a| Some(tree.static_share(*a))).collect(),
    }];
    bars.extend(runs.iter().enumerate().map(|(i, r)| Bars {
        name: format!("{} delivered", r.report.policy),
        color: color(runs, i),
        values: paths.iter().map(|p| r.report.accounts.get(p).map(|a| a.delivered_share)).collect(),
    }));
    let max = bars.iter().flat_map(|b| b.values.iter().flatten()).fold(0.0f64, |m, v| m.max(*v)).min(1.0);
    let svg = bar_chart(&BarChart {
        id: "chart-share".into(),
        title: "Delivered vs entitled share per account".into(),
        x_label: format!("account ({})", if paths.len() < tree.len() - 1 { "top level" } else { "all" }),
        y: Axis::linear("share of the cluster (0–1)", 0.0, max.max(0.05), fmt_num),
        categories,
        bars,
        value_label: None,
        rules: Vec::new(),
        empty_note: ids.is_empty().then(|| "no account".to_string()),
    });
    let caption = format!(
        "Entitled: the static share from the account tree (product of share / sum of sibling shares). \
         Delivered: the account subtree's fraction of all assigned GPU-time. Accounts: see the legend above{}.",
        shown_of(paths.len(), top_level(tree).len(), "largest entitled share")
    );
    Figure { id: "chart-share".into(), svg, caption }
}

/// Budget attainment per budget period: for each policy, Σ min(used, B) /
/// Σ min(demand, B) over the budgeted accounts within the period (the
/// report's `budget_attainment`, period by period); `None` when no account
/// has a budget.
pub fn budget_attainment_chart(runs: &[PolicyRun], contract: &Contract) -> Option<Figure> {
    let h = horizon(runs);
    let mut periods = 0;
    let lines: Vec<Line> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let b = r.series.budget.as_ref()?;
            periods = periods.max(b.periods.len());
            let mut pts = Vec::new();
            for (k, &(start, end)) in b.periods.iter().enumerate() {
                if let Some(v) = b.period_attainment(k) {
                    pts.push((days(start), v));
                    pts.push((days(end), v));
                }
            }
            let name = r.report.policy.clone();
            Some(Line { name, color: color(runs, i), points: pts, shape: Shape::Line, dashed: false })
        })
        .collect();
    if lines.is_empty() {
        return None;
    }
    let id = "chart-budget-attainment";
    let empty = lines.iter().all(|l| l.points.is_empty());
    let svg = line_chart(&LineChart {
        id: id.into(),
        title: "Budget attainment per budget period".into(),
        x: Axis::days(h),
        y: Axis::fixed("budget attainment (0–1)", 0.0, 1.0, 0.2, fmt_num),
        lines,
        rules: Vec::new(),
        empty_note: empty.then(|| "no budgeted account wanted GPUs".to_string()),
    });
    let caption = format!(
        "Per budget period ({}, {periods} within the horizon): the part of the demand that the budgets covered \
         and that was met, Σ min(used, budget) / Σ min(wanted, budget) over every budgeted account; 1 when every \
         account got all it wanted up to its budget. A period with no budgeted demand has no value.",
        period_label(contract)
    );
    Some(Figure { id: id.into(), svg, caption })
}

/// A cumulative line: the running total at the end of every bucket.
fn cumulative(s: &Series, values: &[f64]) -> Vec<(f64, f64)> {
    let mut total = 0.0;
    let mut pts = vec![(0.0, 0.0)];
    for (t, v) in s.bucket_starts().zip(values) {
        total += v;
        pts.push((days((t + s.bucket_s).min(s.horizon_s)), total));
    }
    pts
}

/// The total of a per-bucket series, per run.
fn lines_total(runs: &[PolicyRun], get: fn(&Series) -> Vec<f64>) -> Vec<f64> {
    runs.iter().map(|r| get(&r.series).iter().sum()).collect()
}

/// Preemptions and GPU-hours lost to them, cumulative over time.
pub fn preemption_charts(runs: &[PolicyRun]) -> Vec<Figure> {
    let h = horizon(runs);
    let chart = |id: &str, title: &str, y: &str, get: fn(&Series) -> Vec<f64>, caption: &str| {
        let lines: Vec<Line> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| Line {
                name: r.report.policy.clone(),
                color: color(runs, i),
                points: cumulative(&r.series, &get(&r.series)),
                shape: Shape::Line,
                dashed: false,
            })
            .collect();
        let max = lines.iter().filter_map(|l| l.points.last()).map(|p| p.1).fold(0.0f64, f64::max);
        let svg = line_chart(&LineChart {
            id: id.into(),
            title: title.into(),
            x: Axis::days(h),
            y: Axis::linear(y, 0.0, max.max(1.0), fmt_num),
            lines,
            rules: Vec::new(),
            empty_note: (max == 0.0).then(|| "none in any run".to_string()),
        });
        let totals: Vec<String> = runs
            .iter()
            .zip(&lines_total(runs, get))
            .map(|(r, t)| format!("{} {}", r.report.policy, fmt_num((t * 10.0).round() / 10.0)))
            .collect();
        Figure { id: id.into(), svg, caption: format!("{caption} Totals: {}.", totals.join(", ")) }
    };
    vec![
        chart(
            "chart-preemptions",
            "Preemptions over time",
            "preemptions since the start",
            |s| s.preemptions.iter().map(|p| *p as f64).collect(),
            "Attempts stopped by a preemption (policy or drain), counted when their grace ends; running total.",
        ),
        chart(
            "chart-lost-gpu-hours",
            "GPU-hours lost to preemption over time",
            "GPU-h lost since the start",
            |s| s.lost_gpu_hours.clone(),
            "Grace time plus progress since the last checkpoint of preempted attempts; running total.",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_paths_drop_the_common_parent() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(short_paths(&p(&["org/llm", "org/mm"])), ["llm", "mm"]);
        assert_eq!(short_paths(&p(&["a", "b"])), ["a", "b"]);
        assert_eq!(short_paths(&p(&["x/a", "y/b"])), ["x/a", "y/b"]);
    }

    #[test]
    fn opaque_ids_get_letters_and_names_stay() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for (name, opaque) in
            [("6214e9", true), ("philly/11cb48", true), ("llm", false), ("cafe", false), ("a1", false)]
        {
            assert_eq!(is_opaque(name), opaque, "{name}");
        }
        assert_eq!(account_labels(&p(&["philly/6214e9", "philly/11cb48", "philly/ee9e8c"])), ["A", "B", "C"]);
        assert_eq!(account_labels(&p(&["org/llm", "org/mm"])), ["llm", "mm"]);
        assert_eq!([0, 25, 26, 27, 701, 702].map(letters), ["A", "Z", "AA", "AB", "ZZ", "AAA"]);
    }
}
