//! `philly-pollux`: the Philly subset used by Pollux (OSDI'21),
//! `timestamp,duration,num_gpus,gpu_time,cluster`.
//!
//! `timestamp` is the submit date-time, `duration` the run time in seconds,
//! `cluster` the virtual cluster (the team). There are no job ids and no
//! users: ids are `pollux-<data row>` (1-based) and the user is the team.

use std::path::Path;

use super::error::ImportError;
use super::options::ImportOptions;
use super::record::{Record, open_csv, parse_duration_s, parse_gpus, required_time};
use super::summary::{ImportSummary, SkipReason};

pub(crate) fn read(path: &Path, opts: &ImportOptions, summary: &mut ImportSummary) -> Result<Vec<Record>, ImportError> {
    let src = open_csv(path, &["timestamp", "duration", "num_gpus", "cluster"], &[])?;
    let mut out = Vec::new();
    src.for_each(path, summary, |f, summary| {
        let n = summary.rows_read;
        match row(f, n, opts) {
            Ok(r) => out.push(r),
            Err(reason) => summary.skip(reason),
        }
    })?;
    Ok(out)
}

/// Checks in order: team, GPUs, submit time, duration.
fn row(f: &[&str], n: u64, opts: &ImportOptions) -> Result<Record, SkipReason> {
    let team = f[3].trim();
    if team.is_empty() {
        return Err(SkipReason::MissingTeam);
    }
    let gpus = parse_gpus(f[2])?;
    if gpus == 0 {
        return Err(SkipReason::ZeroGpus);
    }
    let submit = required_time(f[0])?;
    let run = parse_duration_s(f[1])?;
    Ok(Record::new(format!("pollux-{n}"), submit, team.to_string(), team.to_string(), gpus, run, &opts.defaults))
}
