//! `sacct`: Slurm accounting records, `sacct --parsable2` output of Slurm
//! 22.05 (`|`-separated, a header line, columns in any order, other columns
//! ignored). The command a site runs and every rule below are in
//! docs/importers.md (`sacct`).
//!
//! Records are read in three steps:
//! 1. each line: job steps (`123.batch`), heterogeneous components
//!    (`123+0`) and collapsed never-started array elements (`123_[7-99]`)
//!    are skipped and counted;
//! 2. overlapping pulls: a second record with the same `JobIDRaw` and
//!    `Submit` is a duplicate (the one with an `End` is kept);
//! 3. all records of one `JobIDRaw` (a requeued or preempted job's earlier
//!    attempts, `State=REQUEUED`/`PREEMPTED`) become one workload: submitted
//!    at the first record's `Eligible` (its `Submit` when unknown), with the
//!    final record's GPUs, limit, state and run time.

use std::collections::BTreeMap;
use std::path::Path;

use allot_core::Time;
use chrono::{NaiveDateTime, TimeZone};
use chrono_tz::Tz;

use super::error::ImportError;
use super::options::ImportOptions;
use super::record::Record;
use super::summary::{Adjustment, ImportSummary, SkipReason};

/// Columns every pull must have, in the order of [`Col`].
const REQUIRED: [&str; 16] = [
    "JobIDRaw",
    "JobID",
    "User",
    "Account",
    "Partition",
    "QOS",
    "Submit",
    "Eligible",
    "Start",
    "End",
    "ElapsedRaw",
    "TimelimitRaw",
    "State",
    "ReqTRES",
    "AllocTRES",
    "NNodes",
];

/// Columns read when present (the documented command asks for them).
pub(crate) const OPTIONAL: [&str; 4] = ["ExitCode", "NodeList", "Priority", "Flags"];

/// Positions in [`REQUIRED`].
#[derive(Copy, Clone)]
enum Col {
    Raw = 0,
    JobId,
    User,
    Account,
    Qos = 5,
    Submit,
    Eligible,
    Start,
    End,
    Elapsed,
    Limit,
    State,
    ReqTres,
    AllocTres,
    NNodes,
}

/// The time zone of `--tz` (default UTC).
pub(crate) fn zone(opts: &ImportOptions) -> Result<Tz, ImportError> {
    match opts.time_zone.as_deref() {
        None => Ok(Tz::UTC),
        Some(name) => name.parse::<Tz>().map_err(|_| {
            ImportError::BadOption(format!("--tz {name:?}: not an IANA time zone name (e.g. America/Denver, UTC)"))
        }),
    }
}

/// A header line split into column positions; `line` is its 1-based number.
pub(crate) struct Header {
    pub names: Vec<String>,
    pub line: usize,
    /// The line as read: a later identical line (chunks appended with
    /// their headers) is not a record.
    pub text: String,
}

impl Header {
    /// Positions of `required` (an error naming file, line and column if one
    /// is missing) and `optional` columns; a column named twice is an error.
    pub fn find(&self, path: &Path, required: &[&str], optional: &[&str]) -> Result<Vec<Option<usize>>, ImportError> {
        for (i, n) in self.names.iter().enumerate() {
            if !n.is_empty() && self.names[..i].contains(n) {
                return Err(ImportError::at(path, self.line, n, "column named twice in the header"));
            }
        }
        let pos = |name: &str| self.names.iter().position(|h| h == name);
        let mut out = Vec::with_capacity(required.len() + optional.len());
        for &name in required {
            let Some(i) = pos(name) else {
                let has = self.names.join("|");
                return Err(ImportError::at(
                    path,
                    self.line,
                    name,
                    format!("missing required column (header has: {has})"),
                ));
            };
            out.push(Some(i));
        }
        out.extend(optional.iter().map(|n| pos(n)));
        Ok(out)
    }
}

impl Header {
    /// The fields of data line `n` of a site file (sacctmgr's), which
    /// must be UTF-8 and as many as the header's: an error naming the line.
    pub fn fields<'a>(&self, path: &Path, n: usize, text: Option<&'a str>) -> Result<Vec<&'a str>, ImportError> {
        let Some(text) = text else { return Err(ImportError::at(path, n, "", "not UTF-8")) };
        let f: Vec<&str> = text.split('|').collect();
        if f.len() != self.names.len() {
            let msg = format!("{} fields, the header has {}", f.len(), self.names.len());
            return Err(ImportError::at(path, n, "", msg));
        }
        Ok(f)
    }
}

/// A data line: its 1-based number and its text (`None`: not UTF-8).
pub(crate) type DataLine = (usize, Option<String>);

/// The lines of a `|`-separated file: the header (first non-blank line) and
/// the data lines with their 1-based numbers; repeats of the header line
/// are left out. Lines that are not UTF-8 are
/// kept as `None` (a malformed record).
pub(crate) fn read_lines(path: &Path) -> Result<(Header, Vec<DataLine>), ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::io(path, e))?;
    let mut header: Option<Header> = None;
    let mut rows = Vec::new();
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = std::str::from_utf8(raw).ok().map(str::to_string);
        if text.as_deref().is_some_and(|t| t.trim().is_empty()) {
            continue;
        }
        if let (Some(h), Some(t)) = (&header, &text)
            && *t == h.text
        {
            // The header of a further chunk appended to the file.
            continue;
        }
        if header.is_none() {
            let Some(t) = text else {
                return Err(ImportError::at(path, i + 1, "", "the header line is not UTF-8"));
            };
            let names = t.trim_start_matches('\u{feff}').split('|').map(|s| s.trim().to_string()).collect();
            header = Some(Header { names, line: i + 1, text: t });
            continue;
        }
        rows.push((i + 1, text));
    }
    let header = header.ok_or_else(|| ImportError::bad_file(path, "empty file: no header line"))?;
    Ok((header, rows))
}

/// A Slurm time: epoch seconds (`SLURM_TIME_FORMAT=%s`) or an ISO local time
/// without offset in `tz`; `Unknown`, `None`, empty and 0 are absent. A
/// local time that occurs twice (the autumn change) is its first instant; one
/// that does not exist (the spring gap) is unparsable.
pub(crate) fn slurm_time(s: &str, tz: Tz) -> Result<Option<i64>, SkipReason> {
    let t = s.trim();
    if t.is_empty() || matches!(t, "Unknown" | "None" | "0") {
        return Ok(None);
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<i64>().map(Some).map_err(|_| SkipReason::BadDate);
    }
    let naive = NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S").map_err(|_| SkipReason::BadDate)?;
    tz.from_local_datetime(&naive).earliest().map(|d| Some(d.timestamp())).ok_or(SkipReason::BadDate)
}

/// `TimelimitRaw` (minutes) as seconds; `Partition_Limit`, `UNLIMITED`,
/// `None`, `Unknown`, empty and 0 are no limit.
pub(crate) fn time_limit(s: &str) -> Result<Option<Time>, SkipReason> {
    match s.trim() {
        "" | "Partition_Limit" | "UNLIMITED" | "None" | "Unknown" | "0" => Ok(None),
        v => v.parse::<u64>().map(|m| Some(m * 60)).map_err(|_| SkipReason::BadDuration),
    }
}

/// GPUs of a TRES list (`billing=8,cpu=8,gres/gpu=2,gres/gpu:h100=2`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TresGpus {
    pub count: u32,
    /// The one typed entry's type; `None` when untyped or of several types.
    pub gpu_type: Option<String>,
    /// Several typed entries: no one type can be required.
    pub mixed: bool,
}

/// Reads the GPUs of a TRES list: `gres/gpu=N` when present, else the sum of
/// the typed `gres/gpu:TYPE=N` entries; the type is kept when exactly one
/// typed entry is present.
pub(crate) fn tres_gpus(s: &str) -> Result<TresGpus, SkipReason> {
    let (mut total, mut typed) = (None, Vec::new());
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((k, v)) = item.split_once('=') else { return Err(SkipReason::BadGpus) };
        if k == "gres/gpu" {
            total = Some(v.parse::<u32>().map_err(|_| SkipReason::BadGpus)?);
        } else if let Some(t) = k.strip_prefix("gres/gpu:") {
            typed.push((t.to_string(), v.parse::<u32>().map_err(|_| SkipReason::BadGpus)?));
        }
    }
    let count = match total {
        Some(n) => n,
        None => typed.iter().try_fold(0u32, |a, (_, n)| a.checked_add(*n)).ok_or(SkipReason::BadGpus)?,
    };
    let mixed = typed.len() > 1;
    let gpu_type = if typed.len() == 1 { typed.pop().map(|t| t.0) } else { None };
    Ok(TresGpus { count, gpu_type, mixed })
}

/// The `billing=N` of a TRES list (`None`: the list has none); a value
/// that is not a whole number skips the record.
fn billing(s: &str) -> Result<Option<u64>, SkipReason> {
    match s.split(',').find_map(|i| i.trim().strip_prefix("billing=")) {
        None => Ok(None),
        Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
            v.parse().map(Some).map_err(|_| SkipReason::BadBilling)
        }
        Some(_) => Err(SkipReason::BadBilling),
    }
}

/// The billing of a record: `AllocTRES`'s, else `ReqTRES`'s (a job that
/// never started has no allocation; a pull may lack it).
fn billing_of(alloc: &str, req: &str) -> Result<Option<u64>, SkipReason> {
    match billing(alloc)? {
        Some(b) => Ok(Some(b)),
        None => billing(req),
    }
}

/// One allocation record after step 2, with its fields as text.
struct Line {
    fields: Vec<String>,
}

impl Line {
    fn get(&self, cols: &[Option<usize>], c: Col) -> &str {
        cols[c as usize].and_then(|i| self.fields.get(i)).map_or("", |s| s.as_str())
    }
}

/// What kind of record a `JobID` names, or why it is skipped.
fn classify(job_id: &str) -> Result<(), SkipReason> {
    if job_id.contains('.') {
        Err(SkipReason::JobStep)
    } else if job_id.contains('+') {
        Err(SkipReason::Heterogeneous)
    } else if job_id.contains("_[") {
        Err(SkipReason::ArrayNeverStarted)
    } else {
        Ok(())
    }
}

/// The array and index of an element id `123_4`.
fn array_of(job_id: &str) -> Option<(String, u32)> {
    let (base, idx) = job_id.split_once('_')?;
    let ok = !base.is_empty() && base.bytes().all(|b| b.is_ascii_digit());
    idx.parse::<u32>().ok().filter(|_| ok).map(|i| (base.to_string(), i))
}

/// One parsed record of a job.
struct Attempt {
    job_id: String,
    user: String,
    account: String,
    qos: String,
    submit: i64,
    eligible: Option<i64>,
    start: Option<i64>,
    end: Option<i64>,
    elapsed: Result<i64, SkipReason>,
    limit: Option<Time>,
    /// First word of `State` (`CANCELLED by 1234` → `CANCELLED`).
    state: String,
    gpus: TresGpus,
    /// `billing=` of `AllocTRES`, else of `ReqTRES`, if there.
    billing: Option<u64>,
    allocated: bool,
    nodes: Option<u32>,
}

fn attempt(l: &Line, cols: &[Option<usize>], tz: Tz) -> Result<Attempt, SkipReason> {
    let g = |c| l.get(cols, c).trim();
    let submit = slurm_time(g(Col::Submit), tz)?.ok_or(SkipReason::BadDate)?;
    let alloc = g(Col::AllocTres);
    let gpus = if alloc.is_empty() { tres_gpus(g(Col::ReqTres))? } else { tres_gpus(alloc)? };
    let elapsed = match g(Col::Elapsed).parse::<i64>() {
        Ok(v) if v < 0 => Err(SkipReason::NegativeDuration),
        Ok(v) => Ok(v),
        Err(_) => Err(SkipReason::BadDuration),
    };
    Ok(Attempt {
        job_id: g(Col::JobId).to_string(),
        user: g(Col::User).to_string(),
        account: g(Col::Account).to_string(),
        qos: g(Col::Qos).to_string(),
        submit,
        eligible: slurm_time(g(Col::Eligible), tz)?,
        start: slurm_time(g(Col::Start), tz)?,
        end: slurm_time(g(Col::End), tz)?,
        elapsed,
        limit: time_limit(g(Col::Limit))?,
        state: g(Col::State).split_whitespace().next().unwrap_or("").to_string(),
        gpus,
        billing: billing_of(alloc, g(Col::ReqTres))?,
        allocated: !alloc.is_empty(),
        nodes: g(Col::NNodes).parse::<u32>().ok().filter(|n| *n > 0),
    })
}

/// What the merged attempts of requeued jobs amount to (for the summary).
#[derive(Default)]
struct Requeues {
    jobs: u64,
    earlier: u64,
    gpu_s: u64,
}

pub(crate) fn read(path: &Path, opts: &ImportOptions, summary: &mut ImportSummary) -> Result<Vec<Record>, ImportError> {
    let tz = zone(opts)?;
    let (header, rows) = read_lines(path)?;
    let cols = header.find(path, &REQUIRED, &OPTIONAL)?;
    // Steps 1 and 2: one record per (JobIDRaw, Submit), in file order.
    let mut kept: Vec<Line> = Vec::new();
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (_, text) in rows {
        summary.rows_read += 1;
        let Some(text) = text else {
            summary.skip(SkipReason::Malformed);
            continue;
        };
        let fields: Vec<String> = text.split('|').map(str::to_string).collect();
        if fields.len() != header.names.len() {
            summary.skip(SkipReason::Malformed);
            continue;
        }
        let line = Line { fields };
        if let Err(reason) = classify(line.get(&cols, Col::JobId).trim()) {
            summary.skip(reason);
            continue;
        }
        let key = (line.get(&cols, Col::Raw).trim().to_string(), line.get(&cols, Col::Submit).trim().to_string());
        let ended = |l: &Line| slurm_time(l.get(&cols, Col::End), tz).is_ok_and(|t| t.is_some());
        match seen.get(&key) {
            Some(&i) => {
                if !ended(&kept[i]) && ended(&line) {
                    kept[i] = line;
                }
                summary.skip(SkipReason::Duplicate);
            }
            None => {
                seen.insert(key, kept.len());
                kept.push(line);
            }
        }
    }
    // Step 3: the records of each JobIDRaw, in order of first appearance.
    let mut jobs: Vec<Vec<Attempt>> = Vec::new();
    let mut by_raw: BTreeMap<String, usize> = BTreeMap::new();
    for line in &kept {
        match attempt(line, &cols, tz) {
            Ok(a) => {
                let raw = line.get(&cols, Col::Raw).trim().to_string();
                let i = *by_raw.entry(raw).or_insert_with(|| {
                    jobs.push(Vec::new());
                    jobs.len() - 1
                });
                jobs[i].push(a);
            }
            Err(reason) => summary.skip(reason),
        }
    }
    let mut out = Vec::with_capacity(jobs.len());
    let mut requeues = Requeues::default();
    // (billing, GPUs) of each imported job's last record that has a billing.
    let mut billed: Vec<(u64, u32)> = Vec::new();
    for mut attempts in jobs {
        // Stable: records with the same Submit keep their file order.
        attempts.sort_by_key(|a| a.submit);
        let n = attempts.len() as u64;
        match workload(&attempts, opts) {
            Ok((r, lost_gpu_s)) => {
                let last = &attempts[attempts.len() - 1];
                billed.extend(last.billing.map(|b| (b, last.gpus.count)));
                if n > 1 {
                    requeues.jobs += 1;
                    requeues.earlier += n - 1;
                    requeues.gpu_s += lost_gpu_s;
                }
                out.push(r);
            }
            Err(reason) => {
                for _ in 0..n {
                    summary.skip(reason);
                }
            }
        }
    }
    if requeues.jobs > 0 {
        summary.notes.push(format!(
            "{} requeued or preempted jobs: {} earlier attempts merged into their workloads; those attempts held {:.1} GPU-hours before they were requeued",
            requeues.jobs,
            requeues.earlier,
            requeues.gpu_s as f64 / 3600.0
        ));
    }
    // Fair Tree's usage is the billing TRES: the trace's `billing` column
    // carries it, and the slurm policy charges it (SLURM-2); a job without
    // one is charged its normalised GPU-seconds.
    let other = billed.iter().filter(|(b, g)| *b != u64::from(*g)).count();
    if other > 0 {
        summary.notes.push(format!(
            "{other} of {} jobs were billed other than by their GPUs (TRES billing): the slurm policy's fair \
             share charges billing-seconds, as Slurm's does (docs/baselines.md)",
            billed.len()
        ));
    }
    let unbilled = out.len() - billed.len();
    if unbilled > 0 && !billed.is_empty() {
        summary.notes.push(format!(
            "{unbilled} of {} jobs have no billing in AllocTRES or ReqTRES: the slurm policy's fair share charges \
             them normalised GPU-seconds, the others billing-seconds (docs/baselines.md)",
            out.len()
        ));
    }
    if tz != Tz::UTC {
        summary.notes.push(format!("times without an offset read in {}", tz.name()));
    }
    Ok(out)
}

/// One workload from the records of one `JobIDRaw` (sorted by submit).
/// Checks in order: team, GPUs, started, ended, run time. Returns the record
/// and the GPU-seconds the earlier attempts held.
fn workload(attempts: &[Attempt], opts: &ImportOptions) -> Result<(Record, u64), SkipReason> {
    let (first, last) = (&attempts[0], &attempts[attempts.len() - 1]);
    if last.account.is_empty() {
        return Err(SkipReason::MissingTeam);
    }
    if last.gpus.count == 0 {
        return Err(SkipReason::ZeroGpus);
    }
    let cancelled = last.state == "CANCELLED";
    let never_ran = last.start.is_none() || (cancelled && !last.allocated && last.elapsed == Ok(0));
    if never_ran || last.state == "PENDING" {
        return Err(if cancelled { SkipReason::CancelledBeforeStart } else { SkipReason::NeverStarted });
    }
    if last.end.is_none() || matches!(last.state.as_str(), "RUNNING" | "REQUEUED" | "SUSPENDED" | "RESIZING") {
        return Err(SkipReason::NoEndTime);
    }
    let elapsed = last.elapsed?;
    // TIMEOUT: the work is the limit that was hit, so the replay runs it to
    // its limit and ends it there, as Slurm did.
    let run = match (last.state.as_str(), last.limit) {
        ("TIMEOUT", Some(l)) => elapsed.max(l as i64),
        _ => elapsed,
    };
    let submit = first.eligible.map_or(first.submit, |e| e.max(first.submit));
    let user = if last.user.is_empty() { &last.account } else { &last.user };
    let mut r = Record::new(
        last.job_id.clone(),
        submit,
        last.account.clone(),
        user.clone(),
        last.gpus.count,
        run,
        &opts.defaults,
    );
    r.gpu_type = last.gpus.gpu_type.clone();
    if last.gpus.mixed {
        r.adjusted.push(Adjustment::GpuTypeDropped);
    }
    r.source_nodes = last.nodes;
    r.time_limit_s = last.limit;
    r.array = array_of(&last.job_id);
    r.status = Some(last.state.clone()).filter(|s| !s.is_empty());
    r.qos = Some(last.qos.clone()).filter(|q| !q.is_empty());
    r.billing = last.billing;
    let earlier = &attempts[..attempts.len() - 1];
    if !earlier.is_empty() {
        r.adjusted.push(Adjustment::AttemptsMerged);
    }
    let lost = earlier.iter().map(|a| u64::from(a.gpus.count) * a.elapsed.unwrap_or(0).max(0) as u64).sum();
    Ok((r, lost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_epoch_and_local_forms() {
        let denver: Tz = "America/Denver".parse().unwrap();
        let cases = [
            ("epoch", "1748779200", Tz::UTC, Ok(Some(1_748_779_200))),
            ("iso utc", "2025-06-01T12:00:00", Tz::UTC, Ok(Some(1_748_779_200))),
            // MDT is UTC-6 in June.
            ("iso denver", "2025-06-01T06:00:00", denver, Ok(Some(1_748_779_200))),
            ("unknown", "Unknown", denver, Ok(None)),
            ("none", "None", denver, Ok(None)),
            ("zero", "0", Tz::UTC, Ok(None)),
            // 2025-03-09 02:30 does not exist in Denver (the spring change).
            ("gap", "2025-03-09T02:30:00", denver, Err(SkipReason::BadDate)),
            // 2025-11-02 01:30 occurs twice: the first (MDT, UTC-6) is taken.
            ("fold", "2025-11-02T01:30:00", denver, Ok(Some(1_762_068_600))),
            ("offset", "2025-06-01T12:00:00+02:00", Tz::UTC, Err(SkipReason::BadDate)),
        ];
        for (name, input, tz, want) in cases {
            assert_eq!(slurm_time(input, tz), want, "case {name}");
        }
    }

    #[test]
    fn tres_gives_gpus_and_type() {
        let t = |count, ty: Option<&str>, mixed| TresGpus { count, gpu_type: ty.map(str::to_string), mixed };
        let cases = [
            ("both forms", "billing=8,cpu=8,gres/gpu=2,gres/gpu:h100=2,mem=64G,node=1", Ok(t(2, Some("h100"), false))),
            ("untyped", "cpu=4,gres/gpu=4,mem=16G,node=1", Ok(t(4, None, false))),
            ("typed only", "cpu=4,gres/gpu:a100=3,node=1", Ok(t(3, Some("a100"), false))),
            ("two types", "gres/gpu=3,gres/gpu:a100=1,gres/gpu:h100=2", Ok(t(3, None, true))),
            ("cpu only", "billing=1,cpu=1,mem=4G,node=1", Ok(t(0, None, false))),
            ("empty", "", Ok(t(0, None, false))),
            ("bad count", "gres/gpu=x", Err(SkipReason::BadGpus)),
        ];
        for (name, input, want) in cases {
            assert_eq!(tres_gpus(input), want, "case {name}");
        }
    }

    #[test]
    fn billing_from_alloc_else_req() {
        let cases = [
            ("in both", "billing=2,cpu=2,gres/gpu=1", "billing=1,cpu=1,gres/gpu=1", Ok(Some(2))),
            ("absent", "cpu=2,gres/gpu=1", "cpu=2,gres/gpu=1", Ok(None)),
            ("empty lists", "", "", Ok(None)),
            ("in ReqTRES only", "", "billing=7,cpu=7,gres/gpu=2", Ok(Some(7))),
            ("alloc without it", "cpu=2,gres/gpu=1", "billing=3,cpu=3", Ok(Some(3))),
            ("zero", "billing=0,cpu=1", "", Ok(Some(0))),
            ("fraction", "billing=1.5,cpu=1", "", Err(SkipReason::BadBilling)),
            ("negative", "billing=-1,cpu=1", "", Err(SkipReason::BadBilling)),
            ("empty value", "billing=,cpu=1", "", Err(SkipReason::BadBilling)),
            ("past u64", "billing=99999999999999999999", "", Err(SkipReason::BadBilling)),
            ("bad in ReqTRES only", "", "billing=x", Err(SkipReason::BadBilling)),
            // AllocTRES has one: ReqTRES is not read.
            ("bad ReqTRES unread", "billing=4", "billing=x", Ok(Some(4))),
        ];
        for (name, alloc, req, want) in cases {
            assert_eq!(billing_of(alloc, req), want, "case {name}");
        }
    }

    #[test]
    fn limits_are_minutes() {
        assert_eq!(time_limit("60"), Ok(Some(3600)));
        assert_eq!(time_limit("Partition_Limit"), Ok(None));
        assert_eq!(time_limit("UNLIMITED"), Ok(None));
        assert_eq!(time_limit("1-00:00:00"), Err(SkipReason::BadDuration));
    }

    #[test]
    fn job_ids() {
        assert_eq!(classify("123"), Ok(()));
        assert_eq!(classify("123_4"), Ok(()));
        assert_eq!(classify("123.batch"), Err(SkipReason::JobStep));
        assert_eq!(classify("123+1"), Err(SkipReason::Heterogeneous));
        assert_eq!(classify("123_[76-999]"), Err(SkipReason::ArrayNeverStarted));
        assert_eq!(array_of("123_4"), Some(("123".to_string(), 4)));
        assert_eq!(array_of("123"), None);
    }
}
