//! `philly`: Microsoft Philly's `cluster_job_log` (msr-fiddle/philly-traces),
//! a JSON array of jobs (JSON Lines is accepted too):
//!
//! ```json
//! {"status": "Pass", "vc": "6214e9", "jobid": "application_…", "user": "…",
//!  "submitted_time": "2017-10-03 11:08:23",
//!  "attempts": [{"start_time": "…", "end_time": "…",
//!                "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}]}]}
//! ```
//!
//! GPUs are those of the first attempt (the trace's own definition); the
//! source node count is its number of `detail` machines. The run time is the
//! sum of all attempts' run times: the GPU time the job actually held,
//! without the requeue gaps between attempts. Jobs of every status
//! (`Pass`, `Killed`, `Failed`) are imported; the summary counts them.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::error::ImportError;
use super::options::ImportOptions;
use super::record::{Record, check_duration, parse_time};
use super::summary::{ImportSummary, SkipReason};

#[derive(Deserialize)]
struct Job {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    vc: Option<String>,
    #[serde(default)]
    jobid: Option<Value>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    submitted_time: Option<Value>,
    #[serde(default)]
    attempts: Option<Vec<Attempt>>,
}

#[derive(Deserialize)]
struct Attempt {
    #[serde(default)]
    start_time: Option<Value>,
    #[serde(default)]
    end_time: Option<Value>,
    #[serde(default)]
    detail: Option<Vec<Detail>>,
}

#[derive(Deserialize)]
struct Detail {
    #[serde(default)]
    gpus: Option<Vec<Value>>,
}

/// A JSON time: a string in one of the accepted forms, a number, or null.
fn time(v: &Option<Value>) -> Result<Option<i64>, SkipReason> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_time(s),
        Some(Value::Number(n)) => {
            n.as_f64().filter(|f| f.is_finite()).map(|f| Some(f.round() as i64)).ok_or(SkipReason::BadDate)
        }
        Some(_) => Err(SkipReason::BadDate),
    }
}

fn json_error(path: &Path, e: serde_json::Error) -> ImportError {
    ImportError::Json { path: path.to_path_buf(), line: e.line(), column: e.column(), source: e }
}

pub(crate) fn read(path: &Path, opts: &ImportOptions, summary: &mut ImportSummary) -> Result<Vec<Record>, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ImportError::io(path, e))?;
    let jobs: Vec<Job> = if text.trim_start().starts_with('[') {
        serde_json::from_str(&text).map_err(|e| json_error(path, e))?
    } else {
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Job>()
            .collect::<Result<_, _>>()
            .map_err(|e| json_error(path, e))?
    };
    let mut out = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        summary.rows_read += 1;
        match record(job, i + 1, opts) {
            Ok(r) => out.push(r),
            Err(reason) => summary.skip(reason),
        }
    }
    Ok(out)
}

/// Checks in order: team, attempts, GPUs, submit time, attempt times.
fn record(job: &Job, n: usize, opts: &ImportOptions) -> Result<Record, SkipReason> {
    let team = job.vc.as_deref().map(str::trim).filter(|v| !v.is_empty()).ok_or(SkipReason::MissingTeam)?;
    let attempts = job.attempts.as_deref().unwrap_or(&[]);
    let first = attempts.first().ok_or(SkipReason::NeverStarted)?;
    let details = first.detail.as_deref().unwrap_or(&[]);
    let gpus: usize = details.iter().map(|d| d.gpus.as_ref().map_or(0, Vec::len)).sum();
    if gpus == 0 {
        return Err(SkipReason::ZeroGpus);
    }
    let submit = time(&job.submitted_time)?.ok_or(SkipReason::BadDate)?;
    let mut run = 0i64;
    for a in attempts {
        let start = time(&a.start_time)?.ok_or(SkipReason::NeverStarted)?;
        let end = time(&a.end_time)?.ok_or(SkipReason::NoEndTime)?;
        run += check_duration(end - start)?;
    }
    let id = match &job.jobid {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(Value::Number(v)) => v.to_string(),
        _ => format!("philly-{n}"),
    };
    let user = job.user.as_deref().map(str::trim).filter(|u| !u.is_empty()).unwrap_or(team);
    let gpus = u32::try_from(gpus).map_err(|_| SkipReason::BadGpus)?;
    let mut r = Record::new(id, submit, team.to_string(), user.to_string(), gpus, run, &opts.defaults);
    r.status = job.status.clone();
    r.source_nodes = Some(details.iter().filter(|d| d.gpus.as_ref().is_some_and(|g| !g.is_empty())).count() as u32);
    Ok(r)
}
