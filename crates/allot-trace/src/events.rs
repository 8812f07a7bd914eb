//! Node event files (`--events`): node failures, repairs, drains and
//! undrains with a time and a node name, and nodes that appear (`add`,
//! MNT-5).
//!
//! CSV with the header `t_s,node,event`, or JSON Lines with the same keys.
//! `t_s` is seconds from the trace start, `node` is `<pool>-<index>` and
//! `event` is `fail`, `repair`, `drain`, `undrain` or `add`. Events are
//! returned sorted by time; events at the same time keep their file order.
//!
//! `add` names a node that does not exist yet: `<pool>-<index>` whose
//! `<pool>` is a pool of the config (`<cluster>/<pool>` in a fleet) and
//! whose `<index>` is a number (any number no node of the fleet or no
//! earlier `add` has taken). The node joins that pool in service
//! ([`allot_core::Engine::add_node`]). Adds are returned apart from the
//! health changes ([`NodeEvents::added`]), in time order, each with the id
//! it will get: nodes are appended, so the k-th add (from 0, in time
//! order) to a fleet of N nodes gets `NodeId(N + k)`. Events after an
//! `add` (in time, then file order) may name the node; one that names it
//! before its `add` is an error, as is an `add` of a name that exists.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use allot_core::{AddNodeError, Cluster, NodeAdded, NodeEvent, NodeEventKind, NodeEvents};

use crate::config::Config;
use crate::error::{FormatError, FormatKind, from_csv, quoted};
use crate::lines::{csv_reader, record_line};
use crate::trace::{Tabular, csv_header, json_cells, json_object, map_header, parse_uint, tabular_format};

const COLUMNS: [&str; 3] = ["t_s", "node", "event"];
/// An operator's four, and a cluster outage's two (FLEET-3, FLEET-4),
/// which a store exported by a live server holds.
const KINDS: [NodeEventKind; 6] = [
    NodeEventKind::Fail,
    NodeEventKind::Repair,
    NodeEventKind::Drain,
    NodeEventKind::Undrain,
    NodeEventKind::Outage,
    NodeEventKind::Return,
];
/// The event that adds a node (MNT-5).
const ADD: &str = "add";

/// Loads an events file; the format follows the extension (`.csv`,
/// `.jsonl`, `.ndjson`).
pub fn load_events(path: &Path, cfg: &Config) -> Result<NodeEvents, FormatError> {
    let file = path.display().to_string();
    let format = tabular_format(FormatKind::Events, path)?;
    let f = std::fs::File::open(path).map_err(|e| FormatError::io(FormatKind::Events, path, e))?;
    match format {
        Tabular::Csv => parse_events_csv(f, &file, cfg),
        Tabular::Jsonl => parse_events_jsonl(BufReader::new(f), &file, cfg),
    }
}

/// Parses a CSV events file with a header line; `file` names it in errors.
pub fn parse_events_csv(reader: impl Read, file: &str, cfg: &Config) -> Result<NodeEvents, FormatError> {
    let mut rdr = csv_reader(csv::ReaderBuilder::new().has_headers(true), reader);
    let header = csv_header(FormatKind::Events, file, &mut rdr)?;
    let index = map_header(FormatKind::Events, file, &header, &COLUMNS, &[0, 1, 2])?;
    let mut rows = Vec::new();
    let mut rec = csv::StringRecord::new();
    while rdr.read_record(&mut rec).map_err(|e| from_csv(FormatKind::Events, file, &mut rdr, e))? {
        let line = rec.position().map_or(0, |p| record_line(&mut rdr, p));
        let row: [Option<&str>; 3] = std::array::from_fn(|c| index[c].map(|i| &rec[i]));
        rows.push(row_of(file, &row, line)?);
    }
    resolve(file, &cfg.cluster, rows)
}

/// Parses a JSON Lines events file; `file` names it in errors.
pub fn parse_events_jsonl(reader: impl BufRead, file: &str, cfg: &Config) -> Result<NodeEvents, FormatError> {
    let mut rows = Vec::new();
    for (i, text) in reader.lines().enumerate() {
        let line = i as u64 + 1;
        let text = text.map_err(|e| FormatError::new(FormatKind::Events, file, "cannot read the file").caused_by(e))?;
        if text.trim().is_empty() {
            continue;
        }
        let obj = json_object(FormatKind::Events, file, line, &text)?;
        let cells = json_cells(FormatKind::Events, file, line, &obj, &COLUMNS)?;
        let row: [Option<&str>; 3] = std::array::from_fn(|c| cells[c].as_deref());
        rows.push(row_of(file, &row, line)?);
    }
    resolve(file, &cfg.cluster, rows)
}

/// One row, its node name not resolved yet: `kind` is `None` for `add`.
struct Row {
    t: u64,
    node: String,
    kind: Option<NodeEventKind>,
    line: u64,
}

fn field_error(file: &str, line: u64, c: usize, msg: String) -> FormatError {
    FormatError::new(FormatKind::Events, file, msg).at_line(line).in_field(COLUMNS[c])
}

fn row_of(file: &str, row: &[Option<&str>; 3], line: u64) -> Result<Row, FormatError> {
    let err = |c: usize, msg: String| field_error(file, line, c, msg);
    let get = |c: usize| row[c].map(str::trim).filter(|v| !v.is_empty()).ok_or_else(|| err(c, "missing value".into()));
    let t = parse_uint::<u64>(get(0)?, u64::MAX).map_err(|m| err(0, m.to_string()))?;
    let node = get(1)?.to_string();
    let kind_text = get(2)?;
    let kind = if kind_text.eq_ignore_ascii_case(ADD) {
        None
    } else {
        let kind = KINDS.into_iter().find(|k| k.as_str().eq_ignore_ascii_case(kind_text)).ok_or_else(|| {
            err(
                2,
                format!(
                    "unknown event {} (use fail, repair, drain, undrain, outage, return or add)",
                    quoted(kind_text)
                ),
            )
        })?;
        Some(kind)
    };
    Ok(Row { t, node, kind, line })
}

/// Sorts the rows stably by time and resolves their node names in that
/// order, on a copy of the fleet that grows by each `add` (MNT-5), so
/// that an added node has the id the engine will give it.
fn resolve(file: &str, cluster: &Cluster, mut rows: Vec<Row>) -> Result<NodeEvents, FormatError> {
    rows.sort_by_key(|r| r.t);
    let mut fleet = if rows.iter().any(|r| r.kind.is_none()) { Some(cluster.clone()) } else { None };
    let mut out = NodeEvents::default();
    for r in &rows {
        let at = fleet.as_ref().unwrap_or(cluster);
        let err = |msg: String| field_error(file, r.line, 1, msg);
        match r.kind {
            Some(kind) => {
                let node = at.node_by_name(&r.node).ok_or_else(|| err(unresolved(at, &rows, r)))?;
                out.changes.push(NodeEvent { t: r.t, node, kind });
            }
            None => {
                let fleet = fleet.as_mut().expect("a copy of the fleet when there are adds");
                let pool = added_pool(fleet, &r.node).map_err(err)?;
                let node = fleet.add_node(pool, r.node.as_str()).map_err(|e| err(e.to_string()))?;
                out.added.push(NodeAdded { t: r.t, pool, name: r.node.clone(), node });
            }
        }
    }
    Ok(out)
}

/// The pool an `add` names: `<pool>-<index>` of an existing pool, a
/// number as index, a name no node has.
fn added_pool(fleet: &Cluster, name: &str) -> Result<allot_core::PoolId, String> {
    let Some((pool, index)) = name.rsplit_once('-') else {
        return Err(format!("node {} to add is not named <pool>-<index>", quoted(name)));
    };
    let Some(p) = fleet.pool_by_name(pool) else {
        let pools: Vec<&str> = fleet.pools.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "node {} to add names no pool {} (pools: {})",
            quoted(name),
            quoted(pool),
            pools.join(", ")
        ));
    };
    if index.parse::<u32>().is_err() {
        return Err(format!("node {} to add has index {}, not a number", quoted(name), quoted(index)));
    }
    if fleet.node_by_name(name).is_some() {
        return Err(format!("node {} to add already exists", quoted(name)));
    }
    Ok(p)
}

/// Explains why the node of a health event does not resolve: added later
/// in the file's time order, or unknown.
fn unresolved(at: &Cluster, rows: &[Row], r: &Row) -> String {
    match rows.iter().find(|a| a.kind.is_none() && a.node == r.node) {
        Some(a) => {
            format!("node {} is named before it is added (added at t_s={}, line {})", quoted(&r.node), a.t, a.line)
        }
        None => unknown_node(at, &r.node),
    }
}

/// The fleet once every node of `events` was added (MNT-5), e.g. to check
/// a trace against what the replay will have; a copy of `cluster` when no
/// node is. Events resolved by this module against `cluster` are never
/// refused; events of another fleet may be.
pub fn fleet_after(cluster: &Cluster, events: &NodeEvents) -> Result<Cluster, AddNodeError> {
    let mut fleet = cluster.clone();
    for a in &events.added {
        fleet.add_node(a.pool, a.name.as_str())?;
    }
    Ok(fleet)
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
                p.laid_out().saturating_sub(1)
            )
        }
        None => {
            let pools: Vec<&str> = cluster.pools.iter().map(|p| p.name.as_str()).collect();
            format!("unknown node {} (nodes are named <pool>-<index>; pools: {})", quoted(name), pools.join(", "))
        }
    }
}
