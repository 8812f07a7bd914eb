//! Workload traces (docs/design.md §4): CSV with a header, or JSON Lines with the
//! same keys, one workload per row, returned in file order.
//!
//! Required: `id`, `submit_s`, `account`, `gpus`, `work_s`. Optional, with
//! their defaults when the column is absent or the cell empty: `user`
//! (`default`), `class` (`batch`), `nodes` (0: any packing), `gpu_type`
//! (none: no constraint), `checkpoint_s` (0: never checkpoints), `util`
//! (1.0), `priority` (`normal`), `preemptible` (false), `clusters` (any:
//! the clusters it may run on, comma-separated, FLEET-1), `time_limit_s`
//! (the class's `time_limit`, none by default: CON-6), `checkpoint_on_signal`
//! (false: CON-8, it saves when signalled), `after` (none: DEP-1,
//! `afterok:ID[:ID…]`, several joined by commas, naming earlier rows or
//! arrays), `array`, `array_index`, `array_limit` (none: ARR-1, the row
//! is element `array_index` of the array named `array`, of which at most
//! `array_limit` run at once; every element of an array is a row of its
//! own and gives the same limit), `billing` (not given: SLURM-2, what the
//! `slurm` policy's Fair Tree charges per second it runs, Slurm's `billing`
//! TRES; without it, its normalised GPUs). Every bad value is an
//! error naming the file, the line and the field; nothing is guessed.
//!
//! Rows made in memory (the generator's [`TraceRow`]s) go through the same
//! validator without being written as text ([`check_trace_rows`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use allot_core::{ArrayPart, DepTarget, Dependency, Time, WorkloadId, WorkloadSpec};

use crate::bounds;
use crate::conditions::{MAX_ARRAY_INDEX, MAX_DEPENDENCY_TARGETS, parse_dependencies};
use crate::config::Config;
use crate::error::{FormatError, FormatKind, from_csv, quoted};
use crate::lines::{LineIndex, csv_reader, record_line};
use crate::workload::{RawWorkload, Validator};
use crate::write::{TraceRow, round_util};

/// Trace columns, in documentation order.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Col {
    Id,
    SubmitS,
    Account,
    User,
    Class,
    Gpus,
    Nodes,
    GpuType,
    WorkS,
    CheckpointS,
    Util,
    Priority,
    Preemptible,
    Clusters,
    TimeLimitS,
    CheckpointOnSignal,
    After,
    Array,
    ArrayIndex,
    ArrayLimit,
    Billing,
}

const NCOLS: usize = 21;

/// Column names, indexed by `Col as usize`.
pub(crate) const COLUMNS: [&str; NCOLS] = [
    "id",
    "submit_s",
    "account",
    "user",
    "class",
    "gpus",
    "nodes",
    "gpu_type",
    "work_s",
    "checkpoint_s",
    "util",
    "priority",
    "preemptible",
    "clusters",
    "time_limit_s",
    "checkpoint_on_signal",
    "after",
    "array",
    "array_index",
    "array_limit",
    "billing",
];

const REQUIRED: [Col; 5] = [Col::Id, Col::SubmitS, Col::Account, Col::Gpus, Col::WorkS];

/// Loads a trace; the format follows the extension: `.csv`, or `.jsonl` /
/// `.ndjson` for JSON Lines.
pub fn load_trace(path: &Path, cfg: &Config) -> Result<Vec<WorkloadSpec>, FormatError> {
    let file = path.display().to_string();
    let format = tabular_format(FormatKind::Trace, path)?;
    let f = std::fs::File::open(path).map_err(|e| FormatError::io(FormatKind::Trace, path, e))?;
    match format {
        Tabular::Csv => parse_trace_csv(f, &file, cfg),
        Tabular::Jsonl => parse_trace_jsonl(BufReader::new(f), &file, cfg),
    }
}

/// Parses a CSV trace with a header line; `file` names it in errors.
pub fn parse_trace_csv(reader: impl Read, file: &str, cfg: &Config) -> Result<Vec<WorkloadSpec>, FormatError> {
    let mut rdr = csv_reader(csv::ReaderBuilder::new().has_headers(true), reader);
    let header = csv_header(FormatKind::Trace, file, &mut rdr)?;
    let index = map_header(FormatKind::Trace, file, &header, &COLUMNS, &REQUIRED.map(|c| c as usize))?;
    let mut ctx = TraceCtx::new(file, cfg);
    let mut out = Vec::new();
    let mut rec = csv::StringRecord::new();
    while rdr.read_record(&mut rec).map_err(|e| from_csv(FormatKind::Trace, file, &mut rdr, e))? {
        let line = rec.position().map_or(0, |p| record_line(&mut rdr, p));
        let row: [Option<&str>; NCOLS] = std::array::from_fn(|c| index[c].map(|i| &rec[i]));
        out.push(ctx.workload(&row, line)?);
    }
    ctx.finish(&mut out);
    Ok(out)
}

/// Parses a JSON Lines trace (one object per line, blank lines skipped,
/// `null` = absent); `file` names it in errors.
pub fn parse_trace_jsonl(reader: impl BufRead, file: &str, cfg: &Config) -> Result<Vec<WorkloadSpec>, FormatError> {
    let mut ctx = TraceCtx::new(file, cfg);
    let mut out = Vec::new();
    for (i, text) in reader.lines().enumerate() {
        let line = i as u64 + 1;
        let text = text.map_err(|e| FormatError::new(FormatKind::Trace, file, "cannot read the file").caused_by(e))?;
        if text.trim().is_empty() {
            continue;
        }
        let obj = json_object(FormatKind::Trace, file, line, &text)?;
        let cells = json_cells(FormatKind::Trace, file, line, &obj, &COLUMNS)?;
        let row: [Option<&str>; NCOLS] = std::array::from_fn(|c| cells[c].as_deref());
        out.push(ctx.workload(&row, line)?);
    }
    ctx.finish(&mut out);
    Ok(out)
}

/// Checks rows made in memory (by a generator) as a trace file's rows are
/// checked (the same validator: bounds, accounts, GPU types, fit; unique
/// ids), without writing and reading them as text. A row's line is the one
/// it has in the CSV [`crate::write::write_trace_csv`] writes (the header is
/// line 1); its utilisation is the value that file holds (three decimals).
pub fn check_trace_rows(rows: &[TraceRow], file: &str, cfg: &Config) -> Result<Vec<WorkloadSpec>, FormatError> {
    let mut ctx = TraceCtx::new(file, cfg);
    let mut out = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let line = i as u64 + 2;
        let submit = bounds::SUBMIT_S.check(r.submit_s).map_err(|m| ctx.err(line, Col::SubmitS, m))?;
        fn text(v: &str) -> Option<&str> {
            Some(v.trim()).filter(|v| !v.is_empty())
        }
        let raw = RawWorkload {
            id: text(&r.id).ok_or_else(|| ctx.err(line, Col::Id, "empty id"))?,
            submit,
            account: text(&r.account).ok_or_else(|| ctx.err(line, Col::Account, "missing value"))?,
            user: text(&r.user).unwrap_or("default"),
            class: Some(r.class.as_str()),
            gpus: u64::from(r.gpus),
            nodes: u64::from(r.nodes),
            gpu_type: text(&r.gpu_type),
            work_s: Some(r.work_s),
            checkpoint_s: r.checkpoint_s,
            util: round_util(r.util),
            priority: Some(r.priority.as_str()),
            preemptible: r.preemptible,
            clusters: text(&r.clusters),
            time_limit_s: r.time_limit_s,
            checkpoint_on_signal: r.checkpoint_on_signal,
            billing: r.billing,
        };
        let mut spec = ctx.checked(&raw, line)?;
        let index = r.array_index.map(|i| i.to_string());
        let limit = r.array_limit.map(|i| i.to_string());
        let cond = [text(&r.after), text(&r.array), index.as_deref(), limit.as_deref()];
        ctx.conditions(&mut spec, cond, line)?;
        out.push(spec);
    }
    ctx.finish(&mut out);
    Ok(out)
}

// ---------------------------------------------------------------- shared with events

/// The two tabular encodings every input file comes in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tabular {
    Csv,
    Jsonl,
}

/// The encoding named by a path's extension.
pub(crate) fn tabular_format(kind: FormatKind, path: &Path) -> Result<Tabular, FormatError> {
    let file = path.display().to_string();
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("csv") => Ok(Tabular::Csv),
        Some("jsonl" | "ndjson") => Ok(Tabular::Jsonl),
        Some(other) => Err(FormatError::new(
            kind,
            file,
            format!("unsupported file extension `.{other}` (use .csv, .jsonl or .ndjson)"),
        )),
        None => Err(FormatError::new(kind, file, "the file has no extension (use .csv, .jsonl or .ndjson)")),
    }
}

/// The header line of a CSV file.
pub(crate) fn csv_header<R: Read>(
    kind: FormatKind,
    file: &str,
    rdr: &mut csv::Reader<LineIndex<R>>,
) -> Result<csv::StringRecord, FormatError> {
    match rdr.headers() {
        Ok(h) => Ok(h.clone()),
        Err(e) => Err(from_csv(kind, file, rdr, e)),
    }
}

/// Maps header positions to columns: `out[column] = Some(position)`.
/// Unknown, duplicate and missing required columns are errors on line 1.
pub(crate) fn map_header(
    kind: FormatKind,
    file: &str,
    header: &csv::StringRecord,
    names: &[&str],
    required: &[usize],
) -> Result<Vec<Option<usize>>, FormatError> {
    let err = |field: &str, msg: String| FormatError::new(kind, file, msg).at_line(1).in_field(field);
    if header.iter().all(|h| h.trim().is_empty()) {
        return Err(FormatError::new(kind, file, format!("empty file: expected a header line ({})", names.join(",")))
            .at_line(1));
    }
    let mut index = vec![None; names.len()];
    for (pos, h) in header.iter().enumerate() {
        let h = h.trim();
        let Some(col) = names.iter().position(|n| *n == h) else {
            return Err(err(h, format!("unknown column (columns are {})", names.join(", "))));
        };
        if index[col].is_some() {
            return Err(err(h, "column appears twice in the header".to_string()));
        }
        index[col] = Some(pos);
    }
    if let Some(&missing) = required.iter().find(|&&c| index[c].is_none()) {
        return Err(err(names[missing], "missing required column".to_string()));
    }
    Ok(index)
}

/// One JSON Lines line as an object.
pub(crate) fn json_object(
    kind: FormatKind,
    file: &str,
    line: u64,
    text: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, FormatError> {
    serde_json::from_str(text).map_err(|e| {
        let msg = if e.is_syntax() || e.is_eof() {
            format!("invalid json at column {}", e.column())
        } else {
            "expected one json object per line".to_string()
        };
        FormatError::new(kind, file, msg).at_line(line).caused_by(e)
    })
}

/// A JSON object's values as text cells, indexed like `names`; `null` is absent.
pub(crate) fn json_cells<'a>(
    kind: FormatKind,
    file: &str,
    line: u64,
    obj: &'a serde_json::Map<String, serde_json::Value>,
    names: &[&str],
) -> Result<Vec<Option<Cow<'a, str>>>, FormatError> {
    use serde_json::Value;
    let mut cells = vec![None; names.len()];
    for (k, v) in obj {
        let err = |msg: String| FormatError::new(kind, file, msg).at_line(line).in_field(k.as_str());
        let Some(col) = names.iter().position(|n| n == k) else {
            return Err(err(format!("unknown field (fields are {})", names.join(", "))));
        };
        cells[col] = match v {
            Value::Null => None,
            Value::String(s) => Some(Cow::Borrowed(s.as_str())),
            Value::Number(n) => Some(Cow::Owned(n.to_string())),
            Value::Bool(b) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
            Value::Array(_) | Value::Object(_) => {
                return Err(err("expected a string, number or boolean".to_string()));
            }
        };
    }
    Ok(cells)
}

/// A cell whose text is not a value of its column's kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CellError {
    #[error("expected a non-negative integer, got {}", quoted(.0))]
    NotAnInteger(String),
    #[error("{text} is too large (at most {max})")]
    TooLarge { text: String, max: u64 },
    #[error("expected a number between 0 and 1, got {}", quoted(.0))]
    NotANumber(String),
    #[error("expected true or false (or 1 or 0), got {}", quoted(.0))]
    NotABoolean(String),
}

/// A non-negative integer, strictly: digits only, at most `max`.
pub(crate) fn parse_uint<T: TryFrom<u64>>(v: &str, max: u64) -> Result<T, CellError> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CellError::NotAnInteger(v.to_string()));
    }
    v.parse::<u64>()
        .ok()
        .filter(|n| *n <= max)
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| CellError::TooLarge { text: v.to_string(), max })
}

// ---------------------------------------------------------------- rows

struct TraceCtx<'a> {
    file: &'a str,
    validator: Validator<'a>,
    /// Line of the first occurrence of every id.
    seen: HashMap<String, u64>,
    /// Rows so far.
    rows: u32,
    /// Submit time of every row so far.
    submits: Vec<Time>,
    /// Index and submit time of every row, by id.
    index_of: HashMap<String, (u32, Time)>,
    /// Arrays so far, by name.
    arrays: HashMap<String, ArrayAcc>,
}

/// An array of a trace as its rows are read.
struct ArrayAcc {
    id: u64,
    limit: Option<u32>,
    /// Rows of its elements.
    members: Vec<u32>,
    indices: std::collections::BTreeSet<u32>,
}

impl<'a> TraceCtx<'a> {
    fn new(file: &'a str, cfg: &'a Config) -> Self {
        TraceCtx {
            file,
            validator: Validator::for_config(cfg),
            seen: HashMap::new(),
            rows: 0,
            submits: Vec::new(),
            index_of: HashMap::new(),
            arrays: HashMap::new(),
        }
    }

    fn err(&self, line: u64, col: Col, message: impl ToString) -> FormatError {
        FormatError::new(FormatKind::Trace, self.file, message.to_string())
            .at_line(line)
            .in_field(COLUMNS[col as usize])
    }

    /// One row: every cell parsed, then the workload checked against the
    /// config (`crate::workload`).
    fn workload(&mut self, row: &[Option<&str>; NCOLS], line: u64) -> Result<WorkloadSpec, FormatError> {
        let get = |c: Col| row[c as usize].map(str::trim).filter(|v| !v.is_empty());
        let req = |c: Col| get(c).ok_or_else(|| self.err(line, c, "missing value"));
        // Digits first (the kind of value); bounds are the validator's.
        let uint = |c: Col, v: &str| parse_uint::<u64>(v, u64::MAX).map_err(|m| self.err(line, c, m));

        let id = get(Col::Id).ok_or_else(|| self.err(line, Col::Id, "empty id"))?;
        let submit = uint(Col::SubmitS, req(Col::SubmitS)?)?;
        let submit = bounds::SUBMIT_S.check(submit).map_err(|m| self.err(line, Col::SubmitS, m))?;
        let raw = RawWorkload {
            id,
            submit,
            account: req(Col::Account)?,
            user: get(Col::User).unwrap_or("default"),
            class: get(Col::Class),
            gpus: uint(Col::Gpus, req(Col::Gpus)?)?,
            nodes: get(Col::Nodes).map_or(Ok(0), |v| uint(Col::Nodes, v))?,
            gpu_type: get(Col::GpuType),
            work_s: Some(uint(Col::WorkS, req(Col::WorkS)?)?),
            checkpoint_s: get(Col::CheckpointS).map_or(Ok(0), |v| uint(Col::CheckpointS, v))?,
            util: get(Col::Util).map_or(Ok(1.0), |v| self.util(line, v))?,
            priority: get(Col::Priority),
            preemptible: get(Col::Preemptible).map_or(Ok(false), |v| self.boolean(line, Col::Preemptible, v))?,
            clusters: get(Col::Clusters),
            time_limit_s: get(Col::TimeLimitS).map(|v| uint(Col::TimeLimitS, v)).transpose()?,
            checkpoint_on_signal: get(Col::CheckpointOnSignal)
                .map_or(Ok(false), |v| self.boolean(line, Col::CheckpointOnSignal, v))?,
            billing: get(Col::Billing).map(|v| uint(Col::Billing, v)).transpose()?,
        };
        let mut spec = self.checked(&raw, line)?;
        let cond = [get(Col::After), get(Col::Array), get(Col::ArrayIndex), get(Col::ArrayLimit)];
        self.conditions(&mut spec, cond, line)?;
        Ok(spec)
    }

    /// A row's conditions (DEP-1, ARR-1): `[after, array, array_index,
    /// array_limit]` cells. Dependencies name earlier rows (their index in
    /// the trace is the [`WorkloadId`] given) or arrays (all their
    /// elements so far), submitted no later than this row.
    fn conditions(&mut self, spec: &mut WorkloadSpec, cells: [Option<&str>; 4], line: u64) -> Result<(), FormatError> {
        let [after, array, index, limit] = cells;
        let me = self.rows;
        self.rows += 1;
        if let Some(text) = after {
            let deps = parse_dependencies(text).map_err(|e| self.err(line, Col::After, e))?;
            // An array named twice, or with one of its elements, is
            // waited for once: a set, and a bound on the expanded size.
            let mut seen = std::collections::HashSet::new();
            for (kind, id) in deps {
                let targets: Vec<u32> = match (self.index_of.get(&id), self.arrays.get(&id)) {
                    (Some(&(i, _)), _) if i != me => vec![i],
                    (_, Some(a)) => a.members.clone(),
                    _ => {
                        let m = format!("{} names no earlier row or array of this trace", quoted(&id));
                        return Err(self.err(line, Col::After, m));
                    }
                };
                for i in targets {
                    let submit = self.submits[i as usize];
                    if submit > spec.submit {
                        let m =
                            format!("{} is submitted at {submit} s, after this row ({} s)", quoted(&id), spec.submit);
                        return Err(self.err(line, Col::After, m));
                    }
                    if seen.insert((kind, i)) {
                        spec.after.push(Dependency { kind, on: DepTarget::Workload(WorkloadId(i)) });
                    }
                    if spec.after.len() > MAX_DEPENDENCY_TARGETS {
                        let m = format!(
                            "the dependencies name more than {MAX_DEPENDENCY_TARGETS} workloads once arrays are expanded"
                        );
                        return Err(self.err(line, Col::After, m));
                    }
                }
            }
        }
        self.index_of.insert(spec.id.clone(), (me, spec.submit));
        self.submits.push(spec.submit);
        let Some(name) = array else {
            if index.is_some() || limit.is_some() {
                let col = if index.is_some() { Col::ArrayIndex } else { Col::ArrayLimit };
                return Err(self.err(line, col, "given without an array (the array column names it)"));
            }
            return Ok(());
        };
        let index =
            index.ok_or_else(|| self.err(line, Col::ArrayIndex, "missing value (an element's index in its array)"))?;
        let index: u32 =
            parse_uint(index, u64::from(MAX_ARRAY_INDEX)).map_err(|m| self.err(line, Col::ArrayIndex, m))?;
        let limit: Option<u32> = limit
            .map(|v| parse_uint::<u32>(v, u64::from(u32::MAX)).map_err(|m| self.err(line, Col::ArrayLimit, m)))
            .transpose()?;
        if limit == Some(0) {
            return Err(self.err(line, Col::ArrayLimit, "0: at least 1 element must be able to run"));
        }
        let next = self.arrays.len() as u64;
        let acc = self.arrays.entry(name.to_string()).or_insert_with(|| ArrayAcc {
            id: next,
            limit,
            members: Vec::new(),
            indices: Default::default(),
        });
        if acc.limit != limit {
            let m = format!("array {} was given the limit {:?} on an earlier row", quoted(name), acc.limit);
            return Err(self.err(line, Col::ArrayLimit, m));
        }
        if !acc.indices.insert(index) {
            return Err(self.err(line, Col::ArrayIndex, format!("array {} has element {index} twice", quoted(name))));
        }
        acc.members.push(me);
        spec.array = Some(ArrayPart { array: acc.id, index, count: 0, limit });
        Ok(())
    }

    /// Every array element learns its array's size.
    fn finish(&self, out: &mut [WorkloadSpec]) {
        for a in self.arrays.values() {
            for &m in &a.members {
                if let Some(p) = out[m as usize].array.as_mut() {
                    p.count = a.members.len() as u32;
                }
            }
        }
    }

    /// A row's values checked by the validator; its id must be new.
    fn checked(&mut self, raw: &RawWorkload, line: u64) -> Result<WorkloadSpec, FormatError> {
        // A checked field's name is its column's.
        let spec = self.validator.check(raw).map_err(|e| {
            FormatError::new(FormatKind::Trace, self.file, e.to_string()).at_line(line).in_field(e.field.as_str())
        })?;
        self.claim_id(line, raw.id)?;
        Ok(spec)
    }

    /// Records the id's first line; a second occurrence is an error.
    fn claim_id(&mut self, line: u64, id: &str) -> Result<(), FormatError> {
        match self.seen.entry(id.to_string()) {
            Entry::Occupied(first) => {
                let msg = format!("duplicate id {} (first on line {})", quoted(id), first.get());
                Err(self.err(line, Col::Id, msg))
            }
            Entry::Vacant(slot) => {
                slot.insert(line);
                Ok(())
            }
        }
    }

    /// A number; its bound is the validator's.
    fn util(&self, line: u64, v: &str) -> Result<f64, FormatError> {
        v.parse::<f64>().map_err(|_| self.err(line, Col::Util, CellError::NotANumber(v.to_string())))
    }

    fn boolean(&self, line: u64, col: Col, v: &str) -> Result<bool, FormatError> {
        if v.eq_ignore_ascii_case("true") || v == "1" {
            Ok(true)
        } else if v.eq_ignore_ascii_case("false") || v == "0" {
            Ok(false)
        } else {
            Err(self.err(line, col, CellError::NotABoolean(v.to_string())))
        }
    }
}
