//! A [`Statement`] as CSV (one row per period and account, for
//! spreadsheets) or Markdown (one table per period, for people); its JSON is
//! its serde form. NGH and hours are written with three decimals in CSV and
//! as [`format_ngh`] in Markdown.

use std::fmt::Write;

use super::compute::{AccountLine, Statement};
use crate::calendar::format_instant;
use crate::ledger::format_ngh;

/// How a statement is written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
    Markdown,
}

impl Format {
    /// `json`, `csv` or `md` (also `markdown`).
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "json" => Some(Format::Json),
            "csv" => Some(Format::Csv),
            "md" | "markdown" => Some(Format::Markdown),
            _ => None,
        }
    }

    /// The names [`Format::parse`] reads, for messages.
    pub const NAMES: &'static str = "json, csv, md";
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// The period's end as written: empty for the single period without end.
fn end_text(end: Option<i64>) -> String {
    end.map(|e| format_instant(e as u64)).unwrap_or_default()
}

/// One CSV row per period and account; a `<type>_gpu_hours` column per GPU
/// type. Cells need no quoting (account paths, numbers, instants).
pub fn to_csv(s: &Statement) -> String {
    let mut out = String::from(
        "period_start,period_end,account,budget_gpu_hours,carried_gpu_hours,used_gpu_hours,\
         over_budget_gpu_hours,demand_gpu_hours,attainment,started,queue_p50_s,queue_p95_s,never_started",
    );
    for t in &s.gpu_types {
        let _ = write!(out, ",{t}_gpu_hours");
    }
    out.push('\n');
    for p in &s.periods {
        for a in &p.accounts {
            let _ = write!(
                out,
                "{},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{},{},{},{}",
                format_instant(p.start as u64),
                end_text(p.end),
                a.account,
                opt(a.budget_gpu_hours),
                a.carried_gpu_hours,
                a.used_gpu_hours,
                a.over_budget_gpu_hours,
                a.demand_gpu_hours,
                opt(a.attainment.map(|x| format!("{x:.3}"))),
                a.started,
                opt(a.queue_p50_s),
                opt(a.queue_p95_s),
                a.never_started,
            );
            for t in &s.gpu_types {
                let _ = write!(out, ",{:.3}", a.raw_gpu_hours.get(t).copied().unwrap_or(0.0));
            }
            out.push('\n');
        }
    }
    out
}

/// One Markdown table per period.
pub fn to_markdown(s: &Statement) -> String {
    let mut out = format!("# Budget statement as of {}\n", format_instant(s.as_of as u64));
    for p in &s.periods {
        let end = p.end.map_or_else(|| "…".to_string(), |e| format_instant(e as u64));
        let _ = write!(out, "\n## {} – {end}\n\n", format_instant(p.start as u64));
        out.push_str("| account | budget NGH | carried | used | over budget | attainment | GPU-hours by type | started | queue p50 / p95 | never started |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|---|---:|---|---:|\n");
        for a in &p.accounts {
            out.push_str(&markdown_row(a));
        }
    }
    out
}

fn markdown_row(a: &AccountLine) -> String {
    let ngh = |x: f64| format_ngh(x);
    let by_type: Vec<String> =
        a.raw_gpu_hours.iter().filter(|(_, h)| **h > 0.0).map(|(t, h)| format!("{t} {}", ngh(*h))).collect();
    let queue = match (a.queue_p50_s, a.queue_p95_s) {
        (Some(m), Some(p)) => format!("{m} s / {p} s"),
        _ => "–".to_string(),
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {queue} | {} |\n",
        a.account,
        a.budget_gpu_hours.map_or_else(|| "–".to_string(), ngh),
        ngh(a.carried_gpu_hours),
        ngh(a.used_gpu_hours),
        ngh(a.over_budget_gpu_hours),
        a.attainment.map_or_else(|| "–".to_string(), |x| format!("{:.0} %", x * 100.0)),
        if by_type.is_empty() { "–".to_string() } else { by_type.join(", ") },
        a.started,
        a.never_started,
    )
}
