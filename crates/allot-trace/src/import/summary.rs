//! The import summary: rows read, imported and skipped (per reason), and the
//! adjustments made to imported rows. Nothing is dropped or changed silently;
//! the CLI prints this summary to stderr at the end of every import.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::options::Format;

/// Why a source row was not imported.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// The row could not be read as a record (bad UTF-8, missing fields).
    Malformed,
    /// No team / virtual cluster / qos value.
    MissingTeam,
    /// GPU count is 0 (CPU-only job or pod).
    ZeroGpus,
    /// GPU count or fraction is not a number.
    BadGpus,
    /// A submit, start or end time that cannot be parsed.
    BadDate,
    /// A duration that is not a number.
    BadDuration,
    /// Run time below zero (end before start).
    NegativeDuration,
    /// Never started: no attempts, no start or scheduled time.
    NeverStarted,
    /// Started but no end time.
    NoEndTime,
    /// Larger than every pool of a fixed-size cluster.
    TooLarge,
    /// sacct: cancelled before it started (no start time).
    CancelledBeforeStart,
    /// sacct: a collapsed row of array elements that never started (`123_[76-999]`).
    ArrayNeverStarted,
    /// sacct: a component of a heterogeneous job (`123+0`).
    Heterogeneous,
    /// sacct: a job step (`123.batch`, `123.0`): the pull lacked `--allocations`.
    JobStep,
    /// sacct: the same `JobIDRaw` and `Submit` read again (overlapping pulls).
    Duplicate,
    /// SWF: a partial-execution line (status 2, 3, 4); its job's summary line is imported.
    PartialExecution,
    /// sacct: a `billing=` of `AllocTRES` (or `ReqTRES`) that is not a whole number.
    BadBilling,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Malformed => "malformed record",
            SkipReason::MissingTeam => "missing team / virtual cluster",
            SkipReason::ZeroGpus => "zero GPUs",
            SkipReason::BadGpus => "unparsable GPU count",
            SkipReason::BadDate => "unparsable date/time",
            SkipReason::BadDuration => "unparsable duration",
            SkipReason::NegativeDuration => "negative duration",
            SkipReason::NeverStarted => "never started",
            SkipReason::NoEndTime => "no end time",
            SkipReason::TooLarge => "larger than any pool",
            SkipReason::CancelledBeforeStart => "cancelled before it started",
            SkipReason::ArrayNeverStarted => "array elements that never started (collapsed row)",
            SkipReason::Heterogeneous => "heterogeneous job component",
            SkipReason::JobStep => "job step (pull without --allocations)",
            SkipReason::Duplicate => "duplicate record (overlapping pulls)",
            SkipReason::PartialExecution => "partial-execution line",
            SkipReason::BadBilling => "unparsable billing TRES",
        }
    }
}

/// A change made to an imported row.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Adjustment {
    /// A fractional GPU request (`gpu_milli < 1000`) rounded up to whole GPUs.
    FractionalGpuRoundedUp,
    /// A zero run time raised to the 1 s minimum.
    ZeroWorkRaised,
    /// Node count of the source differs from the packing written.
    NodesRepacked,
    /// A GPU model constraint dropped (alternatives, or a model no pool has).
    GpuTypeDropped,
    /// Team or user name characters outside `[A-Za-z0-9._-]` replaced by `_`.
    NameSanitized,
    /// A repeated job id made unique with a `-<n>` suffix.
    DuplicateIdRenamed,
    /// sacct: records of a requeued or preempted job merged into one workload.
    AttemptsMerged,
    /// SWF: processors not a multiple of `--procs-per-gpu`, rounded up to whole GPUs.
    ProcsRoundedUp,
}

impl Adjustment {
    pub fn as_str(self) -> &'static str {
        match self {
            Adjustment::FractionalGpuRoundedUp => "fractional GPU rounded up to whole GPUs",
            Adjustment::ZeroWorkRaised => "zero run time raised to 1 s",
            Adjustment::NodesRepacked => "node count repacked to the pool node size",
            Adjustment::GpuTypeDropped => "GPU model constraint dropped",
            Adjustment::NameSanitized => "name characters replaced",
            Adjustment::DuplicateIdRenamed => "duplicate id renamed",
            Adjustment::AttemptsMerged => "requeued/preempted attempts merged into one workload",
            Adjustment::ProcsRoundedUp => "processors rounded up to whole GPUs",
        }
    }
}

/// What an import read, imported, skipped and changed.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportSummary {
    pub format: Format,
    pub input: PathBuf,
    /// Source records read (CSV data rows, JSON jobs).
    pub rows_read: u64,
    pub imported: u64,
    pub skipped: BTreeMap<SkipReason, u64>,
    pub adjusted: BTreeMap<Adjustment, u64>,
    /// Source job states of the imported rows (e.g. `Pass`, `COMPLETED`).
    pub statuses: BTreeMap<String, u64>,
    /// How the written cluster was sized, and any caveats.
    pub notes: Vec<String>,
}

impl ImportSummary {
    pub fn new(format: Format, input: PathBuf) -> Self {
        ImportSummary {
            format,
            input,
            rows_read: 0,
            imported: 0,
            skipped: BTreeMap::new(),
            adjusted: BTreeMap::new(),
            statuses: BTreeMap::new(),
            notes: Vec::new(),
        }
    }

    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }

    /// Count for one skip reason (0 if none).
    pub fn skips(&self, reason: SkipReason) -> u64 {
        self.skipped.get(&reason).copied().unwrap_or(0)
    }

    /// Count for one adjustment (0 if none).
    pub fn adjustments(&self, adj: Adjustment) -> u64 {
        self.adjusted.get(&adj).copied().unwrap_or(0)
    }

    pub(crate) fn skip(&mut self, reason: SkipReason) {
        *self.skipped.entry(reason).or_default() += 1;
    }

    pub(crate) fn adjust(&mut self, adj: Adjustment) {
        *self.adjusted.entry(adj).or_default() += 1;
    }

    pub(crate) fn status(&mut self, status: &str) {
        if let Some(n) = self.statuses.get_mut(status) {
            *n += 1;
        } else {
            self.statuses.insert(status.to_string(), 1);
        }
    }
}

impl fmt::Display for ImportSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "import {} from {}: {} rows read, {} imported, {} skipped",
            self.format,
            self.input.display(),
            self.rows_read,
            self.imported,
            self.skipped_total()
        )?;
        for (reason, n) in &self.skipped {
            writeln!(f, "  skipped  {n:>8}  {}", reason.as_str())?;
        }
        for (adj, n) in &self.adjusted {
            writeln!(f, "  adjusted {n:>8}  {}", adj.as_str())?;
        }
        if !self.statuses.is_empty() {
            let s: Vec<String> = self.statuses.iter().map(|(k, v)| format!("{k} {v}")).collect();
            writeln!(f, "  source states of imported rows: {}", s.join(", "))?;
        }
        for n in &self.notes {
            writeln!(f, "  note: {n}")?;
        }
        Ok(())
    }
}
