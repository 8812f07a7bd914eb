//! Node event files (`--events`): node failures, repairs, drains and
//! undrains with a time and a node name.
//!
//! CSV with the header `t_s,node,event`, or JSON Lines with the same keys.
//! `t_s` is seconds from the trace start, `node` is `<pool>-<index>` and
//! `event` is `fail`, `repair`, `drain` or `undrain`. Events are returned
//! sorted by time; events at the same time keep their file order.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use allot_core::{Cluster, NodeEvent, NodeEventKind};

use crate::config::Config;
use crate::error::{FormatError, FormatKind, from_csv, quoted};
use crate::lines::{csv_reader, record_line};
use crate::trace::{Tabular, csv_header, json_cells, json_object, map_header, parse_uint, tabular_format};

const COLUMNS: [&str; 3] = ["t_s", "node", "event"];
const KINDS: [NodeEventKind; 4] =
    [NodeEventKind::Fail, NodeEventKind::Repair, NodeEventKind::Drain, NodeEventKind::Undrain];

/// Loads an events file; the format follows the extension (`.csv`,
/// `.jsonl`, `.ndjson`).
pub fn load_events(path: &Path, cfg: &Config) -> Result<Vec<NodeEvent>, FormatError> {
    let file = path.display().to_string();
    let format = tabular_format(FormatKind::Events, path)?;
    let f = std::fs::File::open(path).map_err(|e| FormatError::io(FormatKind::Events, path, e))?;
    match format {
        Tabular::Csv => parse_events_csv(f, &file, cfg),
        Tabular::Jsonl => parse_events_jsonl(BufReader::new(f), &file, cfg),
    }
}

/// Parses a CSV events file with a header line; `file` names it in errors.
pub fn parse_events_csv(reader: impl Read, file: &str, cfg: &Config) -> Result<Vec<NodeEvent>, FormatError> {
    let mut rdr = csv_reader(csv::ReaderBuilder::new().has_headers(true), reader);
    let header = csv_header(FormatKind::Events, file, &mut rdr)?;
    let index = map_header(FormatKind::Events, file, &header, &COLUMNS, &[0, 1, 2])?;
    let mut out = Vec::new();
    let mut rec = csv::StringRecord::new();
    while rdr.read_record(&mut rec).map_err(|e| from_csv(FormatKind::Events, file, &mut rdr, e))? {
        let line = rec.position().map_or(0, |p| record_line(&mut rdr, p));
        let row: [Option<&str>; 3] = std::array::from_fn(|c| index[c].map(|i| &rec[i]));
        out.push(event(file, &cfg.cluster, &row, line)?);
    }
    out.sort_by_key(|e| e.t);
    Ok(out)
}

/// Parses a JSON Lines events file; `file` names it in errors.
pub fn parse_events_jsonl(reader: impl BufRead, file: &str, cfg: &Config) -> Result<Vec<NodeEvent>, FormatError> {
    let mut out = Vec::new();
    for (i, text) in reader.lines().enumerate() {
        let line = i as u64 + 1;
        let text = text.map_err(|e| FormatError::new(FormatKind::Events, file, "cannot read the file").caused_by(e))?;
        if text.trim().is_empty() {
            continue;
        }
        let obj = json_object(FormatKind::Events, file, line, &text)?;
        let cells = json_cells(FormatKind::Events, file, line, &obj, &COLUMNS)?;
        let row: [Option<&str>; 3] = std::array::from_fn(|c| cells[c].as_deref());
        out.push(event(file, &cfg.cluster, &row, line)?);
    }
    out.sort_by_key(|e| e.t);
    Ok(out)
}

fn event(file: &str, cluster: &Cluster, row: &[Option<&str>; 3], line: u64) -> Result<NodeEvent, FormatError> {
    let err =
        |c: usize, msg: String| FormatError::new(FormatKind::Events, file, msg).at_line(line).in_field(COLUMNS[c]);
    let get = |c: usize| row[c].map(str::trim).filter(|v| !v.is_empty()).ok_or_else(|| err(c, "missing value".into()));
    let t = parse_uint::<u64>(get(0)?, u64::MAX).map_err(|m| err(0, m.to_string()))?;
    let name = get(1)?;
    let node = cluster.node_by_name(name).ok_or_else(|| err(1, unknown_node(cluster, name)))?;
    let kind_text = get(2)?;
    let kind = KINDS
        .into_iter()
        .find(|k| k.as_str().eq_ignore_ascii_case(kind_text))
        .ok_or_else(|| err(2, format!("unknown event {} (use fail, repair, drain or undrain)", quoted(kind_text))))?;
    Ok(NodeEvent { t, node, kind })
}

/// Explains why a node name does not resolve.
fn unknown_node(cluster: &Cluster, name: &str) -> String {
    let pool = name.rsplit_once('-').and_then(|(p, _)| cluster.pool_by_name(p));
    match pool {
        Some(p) => {
            let p = cluster.pool(p);
            format!(
                "unknown node {}: pool {} has nodes {}-0 to {}-{}",
                quoted(name),
                p.name,
                p.name,
                p.name,
                p.nodes - 1
            )
        }
        None => {
            let pools: Vec<&str> = cluster.pools.iter().map(|p| p.name.as_str()).collect();
            format!("unknown node {} (nodes are named <pool>-<index>; pools: {})", quoted(name), pools.join(", "))
        }
    }
}
