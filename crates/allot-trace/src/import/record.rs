//! A source row after format-specific parsing and before normalisation, plus
//! the field parsers and the CSV reading the formats share.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use allot_core::{Class, Priority, Time};
use chrono::NaiveDateTime;

use super::error::ImportError;
use super::options::RowDefaults;
use super::summary::{Adjustment, ImportSummary, SkipReason};
use crate::lines::{LineIndex, csv_reader, record_line};

/// One importable source row.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Record {
    pub id: String,
    /// Submit time in the source's own clock (seconds).
    pub submit: i64,
    /// Raw team / virtual cluster name.
    pub team: String,
    pub user: String,
    pub gpus: u32,
    /// Node count the source recorded, if any.
    pub source_nodes: Option<u32>,
    /// Single-node by nature (a pod), whatever its size.
    pub single_node: bool,
    pub work_s: Time,
    pub gpu_type: Option<String>,
    pub class: Class,
    pub priority: Priority,
    pub preemptible: bool,
    pub util: f64,
    pub checkpoint_s: Time,
    /// Changes made while reading; counted only if the row is imported.
    pub adjusted: Vec<Adjustment>,
    /// The source's job state (`Pass`, `COMPLETED`, `Running`, …).
    pub status: Option<String>,
    /// CON-6 time limit per attempt (sacct, SWF).
    pub time_limit_s: Option<Time>,
    /// ARR-1: the array and index this row is an element of (sacct).
    pub array: Option<(String, u32)>,
    /// sacct: the job's QOS (`--slurm-qos` maps it to a priority label).
    pub qos: Option<String>,
    /// sacct: the `billing=` TRES of its allocation (SLURM-2).
    pub billing: Option<u64>,
}

impl Record {
    /// A record with the defaults for everything the source does not say.
    /// A zero run time is raised to 1 s (and noted).
    pub fn new(id: String, submit: i64, team: String, user: String, gpus: u32, run_s: i64, d: &RowDefaults) -> Self {
        let mut adjusted = Vec::new();
        if run_s <= 0 {
            adjusted.push(Adjustment::ZeroWorkRaised);
        }
        Record {
            id,
            submit,
            team,
            user,
            gpus,
            source_nodes: None,
            single_node: false,
            work_s: run_s.max(1) as Time,
            gpu_type: None,
            class: d.class,
            priority: d.priority,
            preemptible: d.preemptible,
            util: d.util,
            checkpoint_s: d.checkpoint_s,
            adjusted,
            status: None,
            time_limit_s: None,
            array: None,
            qos: None,
            billing: None,
        }
    }
}

/// A time field: absent (empty, `None`, `null`, `NaN`) or a time in seconds.
pub(crate) fn parse_time(s: &str) -> Result<Option<i64>, SkipReason> {
    let t = s.trim();
    if t.is_empty() || matches!(t, "None" | "none" | "null" | "NULL" | "NaN" | "nan" | "NaT") {
        return Ok(None);
    }
    if let Ok(v) = t.parse::<i64>() {
        return Ok(Some(v));
    }
    if let Ok(v) = t.parse::<f64>() {
        return if v.is_finite() { Ok(Some(v.round() as i64)) } else { Err(SkipReason::BadDate) };
    }
    for fmt in ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(t, fmt) {
            return Ok(Some(dt.and_utc().timestamp()));
        }
    }
    Err(SkipReason::BadDate)
}

/// A time field that must be present.
pub(crate) fn required_time(s: &str) -> Result<i64, SkipReason> {
    parse_time(s)?.ok_or(SkipReason::BadDate)
}

/// A duration in seconds (integer or float), rounded; negative is a skip.
pub(crate) fn parse_duration_s(s: &str) -> Result<i64, SkipReason> {
    let t = s.trim();
    if let Ok(v) = t.parse::<i64>() {
        return check_duration(v);
    }
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() => check_duration(v.round() as i64),
        _ => Err(SkipReason::BadDuration),
    }
}

/// Rejects negative durations.
pub(crate) fn check_duration(v: i64) -> Result<i64, SkipReason> {
    if v < 0 { Err(SkipReason::NegativeDuration) } else { Ok(v) }
}

/// A non-negative GPU count (integer, or a float with no fraction).
pub(crate) fn parse_gpus(s: &str) -> Result<u32, SkipReason> {
    let t = s.trim();
    if let Ok(v) = t.parse::<u32>() {
        return Ok(v);
    }
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= f64::from(u32::MAX) => Ok(v as u32),
        _ => Err(SkipReason::BadGpus),
    }
}

/// Replaces characters not allowed in an account path segment by `_`.
pub(crate) fn sanitize(name: &str) -> (String, bool) {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.chars().all(ok) {
        return (name.to_string(), false);
    }
    (name.chars().map(|c| if ok(c) { c } else { '_' }).collect(), true)
}

/// An open CSV file with the positions of the columns asked for.
pub(crate) struct CsvSource {
    pub reader: csv::Reader<LineIndex<BufReader<File>>>,
    pub columns: Vec<Option<usize>>,
}

/// Opens `path` and finds `required` columns (an error if one is missing)
/// and `optional` columns (`None` if missing), in that order.
pub(crate) fn open_csv(path: &Path, required: &[&'static str], optional: &[&str]) -> Result<CsvSource, ImportError> {
    let file = File::open(path).map_err(|e| ImportError::io(path, e))?;
    let mut reader = csv_reader(csv::ReaderBuilder::new().flexible(true), BufReader::with_capacity(1 << 16, file));
    let header = match reader.headers() {
        Ok(h) => h.clone(),
        Err(e) => return Err(csv_fatal(path, &mut reader, e)),
    };
    let find = |name: &str| header.iter().position(|h| h.trim().trim_start_matches('\u{feff}') == name);
    let mut columns = Vec::with_capacity(required.len() + optional.len());
    for &name in required {
        let Some(i) = find(name) else {
            let header = header.iter().collect::<Vec<_>>().join(",");
            return Err(ImportError::MissingColumn { path: path.to_path_buf(), column: name, header });
        };
        columns.push(Some(i));
    }
    columns.extend(optional.iter().map(|n| find(n)));
    Ok(CsvSource { reader, columns })
}

/// A CSV error that ends the import (I/O); others skip one record.
fn csv_fatal<R: Read>(path: &Path, reader: &mut csv::Reader<LineIndex<R>>, e: csv::Error) -> ImportError {
    let line = e.position().map_or(String::new(), |p| format!(" at line {}", record_line(reader, p)));
    ImportError::bad_file(path, format!("cannot read CSV{line}: {e}"))
}

impl CsvSource {
    /// Reads every record, calling `row` with the column values (empty string
    /// for a column a short row lacks); records the CSV reader rejects are
    /// skipped as [`SkipReason::Malformed`].
    pub fn for_each(
        mut self,
        path: &Path,
        summary: &mut ImportSummary,
        mut row: impl FnMut(&[&str], &mut ImportSummary),
    ) -> Result<(), ImportError> {
        let mut rec = csv::StringRecord::new();
        loop {
            match self.reader.read_record(&mut rec) {
                Ok(false) => return Ok(()),
                Ok(true) => {
                    // Keeps the line index short (and the line of a later error right).
                    rec.position().map(|p| record_line(&mut self.reader, p));
                    summary.rows_read += 1;
                    let mut fields: Vec<&str> = Vec::with_capacity(self.columns.len());
                    let mut missing = 0;
                    for c in &self.columns {
                        match c.and_then(|i| rec.get(i)) {
                            Some(v) => fields.push(v),
                            None => {
                                missing += usize::from(c.is_some());
                                fields.push("");
                            }
                        }
                    }
                    if missing > 0 {
                        summary.skip(SkipReason::Malformed);
                    } else {
                        row(&fields, summary);
                    }
                }
                Err(e) if matches!(e.kind(), csv::ErrorKind::Io(_)) => {
                    return Err(csv_fatal(path, &mut self.reader, e));
                }
                Err(_) => {
                    summary.rows_read += 1;
                    summary.skip(SkipReason::Malformed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_in_every_accepted_form() {
        let cases = [
            ("date-time", "2017-10-09 07:01:55", Ok(Some(1_507_532_515))),
            ("iso", "2017-10-09T07:01:55", Ok(Some(1_507_532_515))),
            ("fraction", "2017-10-09 07:01:55.25", Ok(Some(1_507_532_515))),
            ("integer", "42", Ok(Some(42))),
            ("float", "41.6", Ok(Some(42))),
            ("empty", " ", Ok(None)),
            ("none", "None", Ok(None)),
            ("garbage", "2017-13-45 xx", Err(SkipReason::BadDate)),
        ];
        for (name, input, want) in cases {
            assert_eq!(parse_time(input), want, "case {name}");
        }
    }

    #[test]
    fn durations_and_gpus() {
        assert_eq!(parse_duration_s("66.0"), Ok(66));
        assert_eq!(parse_duration_s("-3"), Err(SkipReason::NegativeDuration));
        assert_eq!(parse_duration_s("x"), Err(SkipReason::BadDuration));
        assert_eq!(parse_gpus("8"), Ok(8));
        assert_eq!(parse_gpus("8.0"), Ok(8));
        assert_eq!(parse_gpus("0.5"), Err(SkipReason::BadGpus));
        assert_eq!(parse_gpus("-1"), Err(SkipReason::BadGpus));
    }

    #[test]
    fn sanitize_replaces_only_bad_characters() {
        assert_eq!(sanitize("vc6YE"), ("vc6YE".to_string(), false));
        assert_eq!(sanitize("a b/c"), ("a_b_c".to_string(), true));
    }
}
