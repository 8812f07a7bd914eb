//! The columns of `allot queue` and `allot history`, and `--format`'s
//! choice of them: one cell function per column, one table writer.

use std::fmt::Write;

use crate::views::WorkloadView;

pub(crate) fn age(now: i64, t: i64) -> String {
    let s = (now - t).max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

pub(crate) fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// A workload's id as users address it: `12_3` for an array's element.
pub fn display_id(w: &WorkloadView) -> String {
    w.array.as_ref().map_or_else(|| w.id.clone(), |a| a.element.clone())
}

/// A workload's name as listings show it: the one given, or its program.
pub fn shown_name(w: &WorkloadView) -> String {
    w.name.clone().unwrap_or_else(|| w.command.first().cloned().unwrap_or_default())
}

/// A duration in seconds as `[D-]HH:MM:SS`, as Slurm writes it.
pub fn clock(s: i64) -> String {
    let s = s.max(0);
    let (d, h, m, sec) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    if d > 0 { format!("{d}-{h:02}:{m:02}:{sec:02}") } else { format!("{h:02}:{m:02}:{sec:02}") }
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS` (UTC).
pub(crate) fn utc(t: i64) -> String {
    allot_core::calendar::format_instant(t.max(0) as u64).trim_end_matches('Z').replacen('T', " ", 1)
}

/// A column of a workload listing.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Col {
    Id,
    Name,
    Account,
    User,
    Class,
    Gpus,
    State,
    Cluster,
    Nodes,
    Elapsed,
    TimeLeft,
    Age,
    Submitted,
    Started,
    Ended,
    Waited,
    Ran,
    Attempts,
    GpuHours,
    Util,
    Reason,
}

/// Each column: its `--format` name, header, widest cell (0: any) and
/// whether it is right-aligned.
const COLUMNS: [(Col, &str, &str, usize, bool); 21] = [
    (Col::Id, "id", "ID", 0, true),
    (Col::Name, "name", "NAME", 14, false),
    (Col::Account, "account", "ACCOUNT", 20, false),
    (Col::User, "user", "USER", 10, false),
    (Col::Class, "class", "CLASS", 0, false),
    (Col::Gpus, "gpus", "GPUS", 0, true),
    (Col::State, "state", "STATE", 0, false),
    (Col::Cluster, "cluster", "CLUSTER", 12, false),
    (Col::Nodes, "nodes", "NODES", 16, false),
    (Col::Elapsed, "elapsed", "ELAPSED", 0, true),
    (Col::TimeLeft, "timeleft", "TIME LEFT", 0, true),
    (Col::Age, "age", "AGE", 0, true),
    (Col::Submitted, "submitted", "SUBMITTED (UTC)", 0, false),
    (Col::Started, "started", "STARTED (UTC)", 0, false),
    (Col::Ended, "ended", "ENDED (UTC)", 0, false),
    (Col::Waited, "waited", "WAITED", 0, true),
    (Col::Ran, "ran", "RAN", 0, true),
    (Col::Attempts, "attempts", "ATT", 0, true),
    (Col::GpuHours, "gpuh", "GPU-H", 0, true),
    (Col::Util, "util", "MEASURED UTIL", 0, true),
    (Col::Reason, "reason", "REASON", 60, false),
];

/// `allot queue`'s columns (CLUSTER only in a fleet of several).
pub const QUEUE: &[Col] = &[
    Col::Id,
    Col::Name,
    Col::Account,
    Col::User,
    Col::Class,
    Col::Gpus,
    Col::State,
    Col::Cluster,
    Col::Nodes,
    Col::Elapsed,
    Col::TimeLeft,
    Col::Age,
    Col::Reason,
];

/// `allot history`'s columns.
pub const HISTORY: &[Col] = &[
    Col::Id,
    Col::Name,
    Col::Account,
    Col::State,
    Col::Submitted,
    Col::Waited,
    Col::Ran,
    Col::Attempts,
    Col::GpuHours,
    Col::Util,
    Col::Reason,
];

/// Seconds `w`'s attempts have held GPUs at `now`: its ended attempts'
/// (GPU-hours over GPUs) and, running, the current one's.
fn ran_s(w: &WorkloadView, now: i64) -> i64 {
    let ended = (w.gpu_hours * 3600.0 / f64::from(w.gpus.max(1))).round() as i64;
    let current = match w.state.as_str() {
        "running" | "stopping" => w.started_t.map_or(0, |s| (now - s).max(0)),
        _ => 0,
    };
    ended + current
}

/// Seconds `w` has waited at `now` (or waited, ended): its life so far less
/// what it ran.
fn waited_s(w: &WorkloadView, now: i64) -> i64 {
    (w.end_t.unwrap_or(now) - w.submit_t - ran_s(w, now)).max(0)
}

impl Col {
    fn spec(self) -> (&'static str, &'static str, usize, bool) {
        let (_, name, head, width, right) = COLUMNS.iter().find(|c| c.0 == self).copied().expect("every column listed");
        (name, head, width, right)
    }

    /// Its `--format` name (`ran`, `waited`, …).
    pub fn name(self) -> &'static str {
        self.spec().0
    }

    /// Parses `--format`: column names joined by commas.
    pub fn parse_list(s: &str) -> Result<Vec<Col>, String> {
        let names: Vec<&str> = COLUMNS.iter().map(|c| c.1).collect();
        s.split(',')
            .map(str::trim)
            .map(|n| {
                COLUMNS
                    .iter()
                    .find(|c| c.1.eq_ignore_ascii_case(n))
                    .map(|c| c.0)
                    .ok_or_else(|| format!("unknown column {n:?} (columns: {})", names.join(", ")))
            })
            .collect()
    }

    /// The cell of workload `w` at `now` (Unix seconds): the text `allot
    /// queue` and `allot history` print, which the dashboard's History
    /// table shows too.
    ///
    /// STARTED is its first attempt's start; ENDED when it ended. RAN and WAITED are `sacct`'s sense over every attempt: RAN the
    /// seconds its attempts held GPUs (not the span from the first start
    /// to the end, which counts the waits between attempts), WAITED the
    /// rest of its life so far (the first wait and each wait after a
    /// requeue or preemption).
    pub fn cell(self, w: &WorkloadView, now: i64) -> String {
        let holding = w.state == "running" || w.state == "stopping";
        let elapsed = w.started_t.filter(|_| holding).map(|s| now - s);
        let dash = || "-".to_string();
        match self {
            Col::Id => display_id(w),
            Col::Name => shown_name(w),
            Col::Account => w.account.clone(),
            Col::User => w.user.clone(),
            Col::Class => w.class.clone(),
            Col::Gpus => w.gpus.to_string(),
            Col::State => {
                // `held` is a pending workload's (HOLD-1), as `--state held` selects.
                if w.held && w.state == "pending" { "held".into() } else { w.state.clone() }
            }
            Col::Cluster => w.cluster.clone().unwrap_or_else(dash),
            Col::Nodes if holding && !w.on_nodes.is_empty() => w.on_nodes.join(","),
            Col::Nodes => dash(),
            Col::Elapsed => elapsed.map_or_else(dash, clock),
            Col::TimeLeft => match (elapsed, w.time_limit_s) {
                (Some(e), Some(l)) => clock(l as i64 - e),
                (None, Some(l)) => clock(l as i64),
                _ => dash(),
            },
            Col::Age => age(now, w.submit_t),
            Col::Submitted => utc(w.submit_t),
            Col::Started => w.first_start_t.map_or_else(dash, utc),
            Col::Ended => w.end_t.map_or_else(dash, utc),
            Col::Waited => clock(waited_s(w, now)),
            Col::Ran => w.first_start_t.map_or_else(dash, |_| clock(ran_s(w, now))),
            Col::Attempts => w.attempts.to_string(),
            Col::GpuHours => format!("{:.2}", w.gpu_hours),
            Col::Util => w.measured_util.map_or_else(dash, |u| format!("{:.0}%", u * 100.0)),
            Col::Reason => w.reason.clone().unwrap_or_default(),
        }
    }
}

/// A table of `ws` with `cols`; cells wider than their column are cut
/// (`long`: never), the last column is not padded.
pub fn table(ws: &[WorkloadView], now: i64, cols: &[Col], long: bool) -> String {
    let cells: Vec<Vec<String>> = ws
        .iter()
        .map(|w| {
            cols.iter()
                .map(|c| {
                    let (_, _, max, _) = c.spec();
                    let v = c.cell(w, now);
                    if max == 0 || long { v } else { cut(&v, max) }
                })
                .collect()
        })
        .collect();
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| cells.iter().map(|r| r[i].chars().count()).chain([c.spec().1.len()]).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    let mut line = |row: &[&str]| {
        let mut l = String::new();
        for (i, (v, c)) in row.iter().zip(cols).enumerate() {
            let last = i + 1 == cols.len();
            let pad = widths[i].saturating_sub(v.chars().count());
            if c.spec().3 {
                let _ = write!(l, "{}{v}", " ".repeat(pad));
            } else if last {
                l.push_str(v);
            } else {
                let _ = write!(l, "{v}{}", " ".repeat(pad));
            }
            if !last {
                l.push_str("  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&cols.iter().map(|c| c.spec().1).collect::<Vec<_>>());
    for r in &cells {
        line(&r.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_every_column_once_and_refuses_others() {
        let all: Vec<&str> = COLUMNS.iter().map(|c| c.1).collect();
        assert_eq!(Col::parse_list(&all.join(",")).unwrap().len(), COLUMNS.len());
        assert_eq!(Col::parse_list("ID, State").unwrap(), [Col::Id, Col::State]);
        let e = Col::parse_list("id,bogus").unwrap_err();
        assert!(e.starts_with("unknown column \"bogus\" (columns: id, name, account"), "{e}");
    }
}
