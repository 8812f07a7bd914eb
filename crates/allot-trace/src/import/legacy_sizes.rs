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

/// Team name (as in the trace) → GPUs.
pub(crate) fn read_legacy_sizes(path: &Path) -> Result<BTreeMap<String, u64>, ImportError> {
    let mut reader = csv::ReaderBuilder::new().from_path(path).map_err(|e| match e.into_kind() {
        csv::ErrorKind::Io(io) => ImportError::io(path, io),
        other => ImportError::bad_file(path, format!("{other:?}")),
    })?;
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| ImportError::bad_file(path, format!("cannot read the header: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut rows = Vec::new();
    for (i, rec) in reader.records().enumerate() {
        let rec = rec.map_err(|e| ImportError::bad_file(path, format!("line {}: {e}", i + 2)))?;
        let mut values = Vec::with_capacity(rec.len().saturating_sub(1));
        for (j, v) in rec.iter().enumerate().skip(1) {
            let n = parse_count(v).ok_or_else(|| {
                let col = header.get(j).map_or("?", String::as_str);
                ImportError::bad_file(path, format!("line {}: column {col:?}: expected a GPU count, got {v:?}", i + 2))
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
