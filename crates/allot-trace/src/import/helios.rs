//! `helios`: the Helios / Acme `cluster_log.csv` layout,
//! `job_id,user,vc,gpu_num,node_num,state,submit_time,start_time,end_time,duration`
//! (extra columns such as `jobname`, `cpu_num` or `queue` are ignored).
//!
//! Times are date-times (`2020-04-01 00:00:09`) or integer seconds. The run
//! time is `duration` when present, else `end_time - start_time`. CPU-only
//! jobs (`gpu_num` 0) are skipped as zero-GPU rows. Jobs of every `state`
//! are imported; the summary counts them.

use std::path::Path;

use super::error::ImportError;
use super::options::ImportOptions;
use super::record::{Record, check_duration, open_csv, parse_duration_s, parse_gpus, parse_time, required_time};
use super::summary::{ImportSummary, SkipReason};

const REQUIRED: [&str; 4] = ["job_id", "vc", "gpu_num", "submit_time"];
const OPTIONAL: [&str; 6] = ["user", "node_num", "state", "start_time", "end_time", "duration"];

pub(crate) fn read(path: &Path, opts: &ImportOptions, summary: &mut ImportSummary) -> Result<Vec<Record>, ImportError> {
    let src = open_csv(path, &REQUIRED, &OPTIONAL)?;
    if src.columns[9].is_none() && (src.columns[7].is_none() || src.columns[8].is_none()) {
        return Err(ImportError::MissingColumn {
            path: path.to_path_buf(),
            column: "duration",
            header: "neither `duration` nor both `start_time` and `end_time`".to_string(),
        });
    }
    let mut out = Vec::new();
    src.for_each(path, summary, |f, summary| match row(f, opts) {
        Ok(r) => out.push(r),
        Err(reason) => summary.skip(reason),
    })?;
    Ok(out)
}

/// Checks in order: team, GPUs, submit time, run time.
fn row(f: &[&str], opts: &ImportOptions) -> Result<Record, SkipReason> {
    let (id, team, gpus, submit) = (f[0].trim(), f[1].trim(), f[2], f[3]);
    let (user, nodes, start, end, duration) = (f[4].trim(), f[5].trim(), f[7], f[8], f[9]);
    if team.is_empty() {
        return Err(SkipReason::MissingTeam);
    }
    let gpus = parse_gpus(gpus)?;
    if gpus == 0 {
        return Err(SkipReason::ZeroGpus);
    }
    let submit = required_time(submit)?;
    let run = if !duration.trim().is_empty() {
        parse_duration_s(duration)?
    } else {
        let start = parse_time(start)?.ok_or(SkipReason::NeverStarted)?;
        let end = parse_time(end)?.ok_or(SkipReason::NoEndTime)?;
        check_duration(end - start)?
    };
    let user = if user.is_empty() { team } else { user };
    let mut r = Record::new(id.to_string(), submit, team.to_string(), user.to_string(), gpus, run, &opts.defaults);
    r.source_nodes = parse_gpus(nodes).ok().filter(|n| *n > 0);
    r.status = Some(f[6].trim().to_string()).filter(|s| !s.is_empty());
    Ok(r)
}
