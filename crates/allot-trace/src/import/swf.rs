//! `swf`: the Parallel Workloads Archive's Standard Workload Format. 18
//! whitespace-separated fields per job, `;` comment lines, `-1` unknown:
//! job number, submit time, wait time, run time, allocated processors,
//! average CPU time, used memory, requested processors, requested time,
//! requested memory, status, user id, group id, executable, queue,
//! partition, preceding job, think time.
//!
//! * GPUs = processors (allocated, else requested) / `--procs-per-gpu`,
//!   rounded up (counted when rounded).
//! * team = `g<group id>` (`nogroup` when unknown), user = `u<user id>`.
//! * submit = submit time; work = run time; requested time = time limit.
//! * status 1 completed, 0 failed, 5 cancelled (with no run time: cancelled
//!   before it started, skipped), -1 unknown; partial-execution lines
//!   (2, 3, 4) are skipped: the job's summary line is imported.
//! * Executable, queue, partition, memory, preceding job and think time are
//!   not kept.

use std::path::Path;

use super::error::ImportError;
use super::options::{DEFAULT_PROCS_PER_GPU, ImportOptions};
use super::record::Record;
use super::summary::{Adjustment, ImportSummary, SkipReason};

pub(crate) fn read(path: &Path, opts: &ImportOptions, summary: &mut ImportSummary) -> Result<Vec<Record>, ImportError> {
    let ppg = opts.procs_per_gpu.unwrap_or(DEFAULT_PROCS_PER_GPU);
    if ppg == 0 {
        return Err(ImportError::BadOption("--procs-per-gpu must be at least 1".into()));
    }
    let bytes = std::fs::read(path).map_err(|e| ImportError::io(path, e))?;
    let mut out = Vec::new();
    for raw in bytes.split(|&b| b == b'\n') {
        let text = std::str::from_utf8(raw).map(str::trim);
        if text.is_ok_and(|t| t.is_empty() || t.starts_with(';')) {
            continue;
        }
        summary.rows_read += 1;
        match text.map_err(|_| SkipReason::Malformed).and_then(|t| row(t, ppg, opts)) {
            Ok(r) => out.push(r),
            Err(reason) => summary.skip(reason),
        }
    }
    Ok(out)
}

/// Status names counted in the summary.
fn status_name(code: i64) -> &'static str {
    match code {
        0 => "failed",
        1 => "completed",
        5 => "cancelled",
        _ => "unknown",
    }
}

/// Checks in order: fields, status, GPUs, submit time, run time.
fn row(line: &str, ppg: u32, opts: &ImportOptions) -> Result<Record, SkipReason> {
    let f: Vec<i64> = line
        .split_whitespace()
        .map(|w| w.parse::<i64>().or_else(|_| w.parse::<f64>().map(|v| v.round() as i64)))
        .collect::<Result<_, _>>()
        .map_err(|_| SkipReason::Malformed)?;
    if f.len() != 18 {
        return Err(SkipReason::Malformed);
    }
    let (id, submit, run, alloc, req, req_time, status, user, group) =
        (f[0], f[1], f[3], f[4], f[7], f[8], f[10], f[11], f[12]);
    if matches!(status, 2..=4) {
        return Err(SkipReason::PartialExecution);
    }
    if status == 5 && run <= 0 {
        return Err(SkipReason::CancelledBeforeStart);
    }
    let procs = if alloc > 0 { alloc } else { req };
    if procs == 0 || (procs < 0 && alloc < 0 && req < 0) {
        return Err(if procs == 0 { SkipReason::ZeroGpus } else { SkipReason::BadGpus });
    }
    let procs = u32::try_from(procs).map_err(|_| SkipReason::BadGpus)?;
    let gpus = procs.div_ceil(ppg);
    if submit < 0 {
        return Err(SkipReason::BadDate);
    }
    if run < 0 {
        return Err(SkipReason::NoEndTime);
    }
    let team = if group >= 0 { format!("g{group}") } else { "nogroup".to_string() };
    let user = if user >= 0 { format!("u{user}") } else { team.clone() };
    let mut r = Record::new(id.to_string(), submit, team, user, gpus, run, &opts.defaults);
    if !procs.is_multiple_of(ppg) {
        r.adjusted.push(Adjustment::ProcsRoundedUp);
    }
    r.time_limit_s = u64::try_from(req_time).ok().filter(|t| *t > 0);
    r.status = Some(status_name(status).to_string());
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows() {
        let d = ImportOptions::default();
        let r = row("7 100 5 3600 16 -1 -1 16 7200 -1 1 3 2 -1 1 -1 -1 -1", 4, &d).unwrap();
        assert_eq!((r.id.as_str(), r.submit, r.gpus, r.work_s), ("7", 100, 4, 3600));
        assert_eq!((r.team.as_str(), r.user.as_str(), r.time_limit_s), ("g2", "u3", Some(7200)));
        assert!(r.adjusted.is_empty());
        let r = row("8 100 5 60 -1 -1 -1 6 -1 -1 0 -1 -1 -1 1 -1 -1 -1", 4, &d).unwrap();
        assert_eq!((r.gpus, r.team.as_str(), r.user.as_str(), r.time_limit_s), (2, "nogroup", "nogroup", None));
        assert_eq!(r.adjusted, vec![Adjustment::ProcsRoundedUp]);
        let cases = [
            ("short", "1 2 3", SkipReason::Malformed),
            ("word", "x 100 5 60 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1", SkipReason::Malformed),
            ("partial", "9 100 5 60 4 -1 -1 4 -1 -1 2 1 1 -1 1 -1 -1 -1", SkipReason::PartialExecution),
            ("cancelled", "9 100 5 -1 -1 -1 -1 4 -1 -1 5 1 1 -1 1 -1 -1 -1", SkipReason::CancelledBeforeStart),
            ("no procs", "9 100 5 60 -1 -1 -1 -1 -1 -1 1 1 1 -1 1 -1 -1 -1", SkipReason::BadGpus),
            ("no run time", "9 100 5 -1 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1", SkipReason::NoEndTime),
        ];
        for (name, line, want) in cases {
            assert_eq!(row(line, 1, &d), Err(want), "case {name}");
        }
    }
}
