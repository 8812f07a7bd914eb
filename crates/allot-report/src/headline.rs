//! The headline of a comparison, in plain words and generated from the
//! figures alone: what was compared on what and at which load, then, for
//! each baseline, the largest gains and the largest costs of `allot`
//! against it, with their 95% intervals when there are several seeds
//! (`docs/compare.md`, "Headline"). [`worse_tails`] says where a tail of
//! the queue time or the preemptions got worse (`allot sim`).

use allot_core::{Time, WorkloadSpec};
use allot_sim::report::rows::{Better, MEASURES, Row};
use allot_sim::report::{Report, Unit, write_value};

use crate::stats::{MeanCi, mean_ci};
use crate::table::cell;

/// How many gains and costs the headline names per baseline.
pub const NAMED: usize = 2;

/// A difference smaller than this share of the larger value is not named.
pub const NOTABLE: f64 = 0.05;

/// A load above this is far enough over capacity that any sharing of idle
/// GPUs beats static partitions; the headline says so.
pub const OVERLOAD: f64 = 1.5;

/// What was compared on what.
#[derive(Clone, Debug, PartialEq)]
pub struct Subject {
    /// The trace in words: `trace philly.csv (5,812 workloads)`,
    /// `scenario ai2, seeds 1–5`.
    pub trace: String,
    pub clusters: usize,
    pub gpus: u64,
    /// The arrival window in days ([`load`]).
    pub days: f64,
    /// Demand ÷ capacity ([`load`]); `None` when the window is empty.
    pub load: Option<f64>,
}

/// The load of a trace on `gpus` GPUs: the GPU-time asked for by the
/// workloads submitted in the arrival window `[0, end)` (`end`: `until`,
/// else the last submit) ÷ the GPU-time of the cluster over it; with the
/// window's length in days. `None` for an empty window.
pub fn load(trace: &[WorkloadSpec], gpus: u64, until: Option<Time>) -> (f64, Option<f64>) {
    let end = until.unwrap_or_else(|| trace.iter().map(|w| w.submit).max().unwrap_or(0));
    let asked: u64 = trace.iter().filter(|w| w.submit < end).map(|w| u64::from(w.gpus) * w.work_s).sum();
    let capacity = gpus * end;
    (end as f64 / 86_400.0, (capacity > 0).then(|| asked as f64 / capacity as f64))
}

/// One measure's difference between `allot` and a baseline.
struct Change {
    label: &'static str,
    /// Rows of one family (`interactive p50 … mean`) are named once.
    family: String,
    words: String,
    /// |a − b| / max(|a|, |b|), in 0..=1.
    size: f64,
    gain: bool,
}

/// The headline paragraphs: the subject, then per baseline in `runs` (every
/// column but `allot`'s) the largest gains and costs of the column named
/// `allot` against it. `runs` holds per column its label and its reports
/// over the seeds (one report for a single run).
pub fn headline(subject: &Subject, runs: &[(String, Vec<Report>)], allot: &str) -> Vec<String> {
    let names: Vec<&str> = runs.iter().map(|r| r.0.as_str()).collect();
    let seeds = runs.first().map_or(0, |r| r.1.len());
    let mut first = format!(
        "Compared {} on {}: {} cluster{}, {} GPUs, {:.1} days of arrivals",
        names.join(", "),
        subject.trace,
        subject.clusters,
        if subject.clusters == 1 { "" } else { "s" },
        subject.gpus,
        subject.days
    );
    match subject.load {
        Some(l) if l > OVERLOAD => first.push_str(&format!(
            ". The load is {l:.2}× capacity (GPU-time asked for ÷ GPU-time available): so far over capacity, any \
             policy that shares idle GPUs beats static team partitions."
        )),
        Some(l) => {
            first.push_str(&format!(". The load is {l:.2}× capacity (GPU-time asked for ÷ GPU-time available)."))
        }
        None => first.push('.'),
    }
    if seeds > 1 {
        first.push_str(&format!(" Figures are means over {seeds} seeds, ± the half-width of their 95% interval."));
    }
    let mut out = vec![first];
    let Some((_, mine)) = runs.iter().find(|r| r.0 == allot) else {
        out.push(format!("No column is {allot}: the headline names no gains or costs."));
        return out;
    };
    for (name, theirs) in runs.iter().filter(|r| r.0 != allot) {
        out.push(against(allot, mine, name, theirs));
    }
    out
}

/// One baseline's sentence.
fn against(allot: &str, mine: &[Report], name: &str, theirs: &[Report]) -> String {
    let mut changes = changes(mine, theirs);
    changes.sort_by(|a, b| b.size.total_cmp(&a.size));
    let pick = |gain: bool| {
        let mut seen: Vec<&str> = Vec::new();
        let mut out = Vec::new();
        for c in changes.iter().filter(|c| c.gain == gain) {
            if out.len() < NAMED && !seen.contains(&c.family.as_str()) {
                seen.push(&c.family);
                out.push(c.words.clone());
            }
        }
        out
    };
    let (gains, costs) = (pick(true), pick(false));
    let gained = if gains.is_empty() {
        format!("{allot} gained nothing by {:.0}% or more", NOTABLE * 100.0)
    } else {
        format!("{allot} {}", gains.join(" and "))
    };
    let cost = if costs.is_empty() {
        format!("it cost nothing by {:.0}% or more", NOTABLE * 100.0)
    } else {
        format!("in return it {}", costs.join(" and "))
    };
    format!("Against {name}, {gained}; {cost}.")
}

/// Every notable difference of a measure with a direction.
fn changes(mine: &[Report], theirs: &[Report]) -> Vec<Change> {
    let mut out = Vec::new();
    for (section, blocks) in MEASURES {
        for row in blocks.iter().flat_map(|b| b.iter()).filter(|r| r.better != Better::Neither) {
            let values = |rs: &[Report]| rs.iter().filter_map(|r| (row.get)(r)).collect::<Vec<f64>>();
            let (Some(a), Some(b)) = (mean_ci(&values(mine)), mean_ci(&values(theirs))) else { continue };
            let size = (a.mean - b.mean).abs() / a.mean.abs().max(b.mean.abs()).max(f64::MIN_POSITIVE);
            if size < NOTABLE {
                continue;
            }
            let up = a.mean > b.mean;
            let gain = up == (row.better == Better::Higher);
            let verb = match (row.better, gain) {
                (Better::Lower, true) => "cut",
                (Better::Higher, false) | (Better::Neither, _) => "lowered",
                _ => "raised",
            };
            // A single run is written as the tables of one run write it;
            // means over seeds with their intervals.
            let value = |m: MeanCi| match m.half_width {
                None => write_value(row.unit, m.mean),
                Some(_) => cell(row.unit, Some(m)),
            };
            let words = format!("{verb} {} from {} to {}", describe(section, row), value(b), value(a));
            out.push(Change { label: row.label, family: family(row.label).to_string(), words, size, gain });
        }
    }
    out
}

/// A row's measure in words: queue-time percentiles name their class.
fn describe(section: &str, row: &Row<Report>) -> String {
    if section.starts_with("queue time")
        && row.unit == Unit::Seconds
        && let Some((class, stat)) = row.label.split_once(' ')
    {
        let class = if class == "all" { "all work".to_string() } else { format!("{class} work") };
        return format!("the {stat} queue time of {class}");
    }
    format!("the {}", row.label)
}

/// The family of a row: its label without a trailing statistic; the
/// preemption overhead in GPU-hours and as a fraction are one.
fn family(label: &str) -> &str {
    if label.starts_with("overhead") {
        return "overhead";
    }
    ["p50", "p95", "p99", "mean"].iter().find_map(|s| label.strip_suffix(s).map(str::trim_end)).unwrap_or(label)
}

/// `allot sim` with several policies: per other report, a sentence when
/// the report named `allot` has a worse tail (the p99 queue time of a
/// class) or more preemptions than it; nothing when none got worse.
pub fn worse_tails(reports: &[&Report], allot: &str) -> Vec<String> {
    let Some(mine) = reports.iter().find(|r| r.policy == allot) else { return Vec::new() };
    let mine = std::slice::from_ref(*mine);
    let mut out = Vec::new();
    for theirs in reports.iter().filter(|r| r.policy != allot) {
        let worse: Vec<String> = changes(mine, std::slice::from_ref(*theirs))
            .into_iter()
            .filter(|c| !c.gain && (c.label.ends_with(" p99") || c.label == "preemptions"))
            .map(|c| c.words)
            .collect();
        if !worse.is_empty() {
            out.push(format!("Worse under {allot} than under {}: it {}.", theirs.policy, worse.join(", and ")));
        }
    }
    out
}
