//! Per-team GPU counts for the legacy pools, read from a file instead of the
//! observed peak demand.
//!
//! Two layouts are accepted:
//! * long: a header and `team,gpus` rows;
//! * wide: a header `date,<team>,<team>,…[,total]` and one row per day, such
//!   as `helios_earth_vc_gpus.csv`. The day with the largest total (first on
//!   ties) is used, so the sizes are one real snapshot of the partition.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::ImportError;
use crate::lines::{csv_reader, record_line};

/// Team name (as in the trace) → GPUs.
pub(crate) fn read_legacy_sizes(path: &Path) -> Result<BTreeMap<String, u64>, ImportError> {
    let file = std::fs::File::open(path).map_err(|e| ImportError::io(path, e))?;
    let mut reader = csv_reader(&mut csv::ReaderBuilder::new(), std::io::BufReader::new(file));
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| ImportError::bad_file(path, format!("cannot read the header: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut rows = Vec::new();
    let mut rec = csv::StringRecord::new();
    loop {
        let read = reader.read_record(&mut rec);
        let pos = read.as_ref().map_or_else(|e| e.position(), |_| rec.position()).cloned();
        let line = pos.map_or(0, |p| record_line(&mut reader, &p));
        if !read.map_err(|e| ImportError::bad_file(path, format!("line {line}: {e}")))? {
            break;
        }
        let mut values = Vec::with_capacity(rec.len().saturating_sub(1));
        for (j, v) in rec.iter().enumerate().skip(1) {
            let n = parse_count(v).ok_or_else(|| {
                let col = header.get(j).map_or("?", String::as_str);
                ImportError::bad_file(path, format!("line {line}: column {col:?}: expected a GPU count, got {v:?}"))
            })?;
            values.push(n);
        }
        rows.push((rec.get(0).unwrap_or("").trim().to_string(), values));
    }
    if header.len() == 2 {
        return Ok(rows.into_iter().map(|(team, v)| (team, v.first().copied().unwrap_or(0))).collect());
    }
    if header.len() < 2 {
        return Err(ImportError::bad_file(path, "expected `team,gpus` rows or a `date,<team>…` table"));
    }
    let total_col = header.iter().skip(1).position(|h| h == "total");
    let total = |v: &[u64]| match total_col {
        Some(c) => v.get(c).copied().unwrap_or(0),
        None => v.iter().sum(),
    };
    let mut best: Option<&Vec<u64>> = None;
    for (_, v) in &rows {
        if best.is_none_or(|b| total(v) > total(b)) {
            best = Some(v);
        }
    }
    let best = best.ok_or_else(|| ImportError::bad_file(path, "no rows"))?;
    Ok(header
        .iter()
        .skip(1)
        .enumerate()
        .filter(|(c, _)| Some(*c) != total_col)
        .map(|(c, team)| (team.clone(), best.get(c).copied().unwrap_or(0)))
        .collect())
}

fn parse_count(s: &str) -> Option<u64> {
    let t = s.trim();
    t.parse::<u64>()
        .ok()
        .or_else(|| t.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).map(|v| v.ceil() as u64))
}
