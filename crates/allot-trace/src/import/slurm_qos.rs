//! `--slurm-qos`: a site's QOS table, from saved `sacctmgr show qos
//! format=Name,Priority,UsageFactor,Preempt,PreemptMode --parsable2`
//! (columns in any order, others ignored; docs/importers.md), mapped to
//! Allot's priority labels for the `slurm` policy's QOS factor (SLURM-1)
//! and preemption (SLURM-5).
//!
//! The QOS the imported jobs use are ranked by `Priority` into the four
//! labels: one distinct priority is `normal`; two are `normal` and `high`;
//! three `low`, `normal`, `high`; four all of `low` … `urgent`. With more
//! than four, the three highest keep `normal`, `high`, `urgent` and every
//! lower one is merged into `low` (noted). Each label's QOS priority goes to
//! `[slurm] qos_priority`, and the site's largest QOS priority (used by a
//! job or not) to `qos_priority_max`, so the model divides as Slurm does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use allot_core::Priority;
use allot_core::policy::SlurmParams;

use super::error::ImportError;
use super::record::Record;
use super::sacct::read_lines;
use super::summary::ImportSummary;

/// One QOS of the table.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Qos {
    pub priority: u32,
    pub usage_factor: f64,
    /// The QOS this one may preempt (`Preempt`).
    pub preempt: Vec<String>,
    /// `PreemptMode`, lower-cased; empty means `cluster`.
    pub preempt_mode: String,
}

/// The site's QOS by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct QosTable {
    pub qos: BTreeMap<String, Qos>,
}

const REQUIRED: [&str; 2] = ["Name", "Priority"];
const OPTIONAL: [&str; 3] = ["UsageFactor", "Preempt", "PreemptMode"];

/// Reads saved `sacctmgr show qos … --parsable2` output. A row with the
/// wrong number of fields, an empty or repeated name, a priority or usage
/// factor that is not a number, or a `Preempt` entry naming a QOS not in
/// the file is an error naming file, line and column.
pub(crate) fn read_qos(path: &Path) -> Result<QosTable, ImportError> {
    let (header, rows) = read_lines(path)?;
    let cols = header.find(path, &REQUIRED, &OPTIONAL)?;
    let mut table = QosTable::default();
    let mut lines: BTreeMap<String, usize> = BTreeMap::new();
    for (n, text) in rows {
        let f = header.fields(path, n, text.as_deref())?;
        let get = |k: usize| cols[k].map_or("", |i| f[i].trim());
        let name = get(0);
        if name.is_empty() {
            return Err(ImportError::at(path, n, "Name", "empty QOS name"));
        }
        if lines.contains_key(name) {
            return Err(ImportError::at(path, n, "Name", format!("QOS {name:?} listed twice")));
        }
        let priority = get(1).parse::<u32>().map_err(|_| {
            ImportError::at(path, n, "Priority", format!("{:?} is not a priority (0 to 4294967295)", get(1)))
        })?;
        let usage_factor = match get(2) {
            "" => 1.0,
            v => v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0).ok_or_else(|| {
                ImportError::at(path, n, "UsageFactor", format!("{v:?} is not a usage factor (a number from 0)"))
            })?,
        };
        let preempt = get(3).split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
        let preempt_mode = get(4).to_ascii_lowercase();
        lines.insert(name.to_string(), n);
        table.qos.insert(name.to_string(), Qos { priority, usage_factor, preempt, preempt_mode });
    }
    for (name, q) in &table.qos {
        if let Some(p) = q.preempt.iter().find(|p| !table.qos.contains_key(*p)) {
            let msg = format!("QOS {name:?} preempts {p:?}, which is not listed");
            return Err(ImportError::at(path, lines[name], "Preempt", msg));
        }
    }
    if table.qos.is_empty() {
        return Err(ImportError::bad_file(path, "no QOS row: save `sacctmgr show qos … --parsable2` into this file"));
    }
    Ok(table)
}

/// The labels of `k` distinct priorities, lowest first (`k` ≤ 4).
fn labels(k: usize) -> &'static [Priority] {
    use Priority::*;
    match k {
        0 | 1 => &[Normal],
        2 => &[Normal, High],
        3 => &[Low, Normal, High],
        _ => &[Low, Normal, High, Urgent],
    }
}

/// What the QOS of the imported jobs became.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct QosMap {
    /// The label of each known QOS a job uses.
    pub label: BTreeMap<String, Priority>,
    /// The QOS priority each label stands for.
    pub qos_priority: [u32; 4],
    /// The site's largest QOS priority.
    pub max: u32,
}

impl QosTable {
    /// Ranks the QOS that `used` names (QOS → jobs) into labels.
    pub fn map(&self, used: &BTreeMap<String, u64>) -> (QosMap, Vec<String>) {
        let mut notes = Vec::new();
        // Distinct priorities of the known QOS used, lowest first, with their jobs.
        let mut by_prio: BTreeMap<u32, (Vec<&str>, u64)> = BTreeMap::new();
        for (name, jobs) in used {
            if let Some(q) = self.qos.get(name) {
                let e = by_prio.entry(q.priority).or_default();
                e.0.push(name);
                e.1 += jobs;
            }
        }
        let prios: Vec<u32> = by_prio.keys().copied().collect();
        let k = prios.len();
        let max = self.qos.values().map(|q| q.priority).max().unwrap_or(0);
        let mut out = QosMap { label: BTreeMap::new(), qos_priority: [0; 4], max };
        let (low, top, names_of): (&[u32], &[u32], &[Priority]) =
            if k > 4 { (&prios[..k - 3], &prios[k - 3..], &labels(4)[1..]) } else { (&[], &prios, labels(k)) };
        if !low.is_empty() {
            // The lowest k − 3 share `low`, at the priority most of their jobs
            // have (ties: the higher; max_by_key keeps the last maximum).
            let at = *low.iter().max_by_key(|p| by_prio[p].1).expect("k > 4");
            out.qos_priority[Priority::Low as usize] = at;
            let names: Vec<String> =
                low.iter().flat_map(|p| by_prio[p].0.iter().map(move |n| format!("{n} ({p})"))).collect();
            notes.push(format!(
                "{k} distinct QOS priorities for 4 labels: QOS {} merged into label low at priority {at}",
                names.join(", ")
            ));
            for p in low {
                for n in &by_prio[p].0 {
                    out.label.insert(n.to_string(), Priority::Low);
                }
            }
        }
        for (p, l) in top.iter().zip(names_of) {
            out.qos_priority[*l as usize] = *p;
            for n in &by_prio[p].0 {
                out.label.insert(n.to_string(), *l);
            }
        }
        let desc: Vec<String> = Priority::ALL
            .iter()
            .filter_map(|l| {
                let names: Vec<&str> = out.label.iter().filter(|(_, x)| *x == l).map(|(n, _)| n.as_str()).collect();
                (!names.is_empty())
                    .then(|| format!("{} = {} ({})", l.as_str(), out.qos_priority[*l as usize], names.join(", ")))
            })
            .collect();
        if !desc.is_empty() {
            notes.push(format!(
                "QOS as priority labels: {}; the QOS factor divides by the largest QOS priority, {}",
                desc.join("; "),
                out.max
            ));
        }
        let discounted: Vec<String> = out
            .label
            .keys()
            .filter_map(|n| {
                let f = self.qos[n].usage_factor;
                (f != 1.0).then(|| format!("{n} {f}"))
            })
            .collect();
        if !discounted.is_empty() {
            notes.push(format!(
                "UsageFactor not modelled (fair share counts these QOS' usage in full): {}",
                discounted.join(", ")
            ));
        }
        (out, notes)
    }

    /// Whether a job of `qos` may be preempted (SLURM-5): a QOS used by a
    /// job of a higher label lists it in `Preempt` and its `PreemptMode` is
    /// not `off`. A `Preempt` entry the label order cannot follow (a QOS
    /// preempting one of the same or a higher label) is noted.
    fn preemptible(&self, map: &QosMap, notes: &mut Vec<String>) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut unfollowed = Vec::new();
        for (p, lp) in &map.label {
            for q in &self.qos[p].preempt {
                match map.label.get(q) {
                    Some(lq) if lq < lp && self.qos[q].preempt_mode != "off" => {
                        out.insert(q.clone());
                    }
                    Some(lq) if lq < lp => {}
                    Some(_) => unfollowed.push(format!("{p} preempts {q}")),
                    None => {}
                }
            }
        }
        if !unfollowed.is_empty() {
            notes.push(format!(
                "QOS preemption the label order cannot follow (a preemptor must have a higher label): {}",
                unfollowed.join(", ")
            ));
        }
        out
    }
}

/// Labels `records` by their QOS; returns the `[slurm]` values and notes.
/// A QOS not in the table (or none) keeps the default label (counted).
pub(crate) fn apply(table: &QosTable, records: &mut [Record], summary: &mut ImportSummary) -> QosMap {
    let mut used: BTreeMap<String, u64> = BTreeMap::new();
    for r in records.iter() {
        *used.entry(r.qos.clone().unwrap_or_default()).or_default() += 1;
    }
    let (map, mut notes) = table.map(&used);
    let preemptible = table.preemptible(&map, &mut notes);
    let mut unknown: BTreeMap<String, u64> = BTreeMap::new();
    for r in records.iter_mut() {
        let q = r.qos.clone().unwrap_or_default();
        match map.label.get(&q) {
            Some(l) => {
                r.priority = *l;
                r.preemptible |= preemptible.contains(&q);
            }
            None => *unknown.entry(q).or_default() += 1,
        }
    }
    if !unknown.is_empty() {
        let n: u64 = unknown.values().sum();
        let list: Vec<String> =
            unknown.iter().map(|(q, k)| format!("{} {k}", if q.is_empty() { "(empty)" } else { q })).collect();
        notes.push(format!("{n} jobs with a QOS not in the QOS file kept the default label: {}", list.join(", ")));
    }
    summary.notes.extend(notes);
    map
}

impl QosMap {
    /// Writes the labels' QOS priorities and the site's largest into `p`.
    pub fn apply_to(&self, p: &mut SlurmParams) {
        p.qos_priority = self.qos_priority;
        p.qos_priority_max = Some(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("allot-qos-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("qos.txt");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn table(rows: &[(&str, u32)]) -> QosTable {
        let qos = rows
            .iter()
            .map(|(n, p)| {
                let q = Qos { priority: *p, usage_factor: 1.0, preempt: Vec::new(), preempt_mode: String::new() };
                (n.to_string(), q)
            })
            .collect();
        QosTable { qos }
    }

    #[test]
    fn the_real_table_reads_in_its_own_column_order() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm-real/sacctmgr-qos.txt");
        let t = read_qos(&path).unwrap();
        let got: Vec<(&str, u32, f64)> = t.qos.iter().map(|(n, q)| (n.as_str(), q.priority, q.usage_factor)).collect();
        assert_eq!(got, [("high", 100, 1.0), ("low", 0, 0.5), ("normal", 0, 1.0)]);
    }

    #[test]
    fn qos_rank_by_priority_into_labels() {
        use Priority::*;
        struct Case {
            name: &'static str,
            qos: &'static [(&'static str, u32)],
            /// QOS → jobs using it.
            used: &'static [(&'static str, u64)],
            want: &'static [(&'static str, Priority)],
            prio: [u32; 4],
            merged: bool,
        }
        for c in [
            Case {
                name: "one priority is normal",
                qos: &[("normal", 0), ("low", 0)],
                used: &[("normal", 3), ("low", 1)],
                want: &[("low", Normal), ("normal", Normal)],
                prio: [0, 0, 0, 0],
                merged: false,
            },
            Case {
                name: "two: normal and high; the unused top still divides",
                qos: &[("normal", 0), ("high", 100), ("top", 1000)],
                used: &[("normal", 3), ("high", 1)],
                want: &[("high", High), ("normal", Normal)],
                prio: [0, 0, 100, 0],
                merged: false,
            },
            Case {
                name: "three: low, normal, high",
                qos: &[("a", 5), ("b", 10), ("c", 20)],
                used: &[("a", 1), ("b", 1), ("c", 1)],
                want: &[("a", Low), ("b", Normal), ("c", High)],
                prio: [5, 10, 20, 0],
                merged: false,
            },
            Case {
                name: "six: the three lowest merged into low at the most used",
                qos: &[("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5), ("f", 6)],
                used: &[("a", 1), ("b", 5), ("c", 2), ("d", 1), ("e", 1), ("f", 1)],
                want: &[("a", Low), ("b", Low), ("c", Low), ("d", Normal), ("e", High), ("f", Urgent)],
                prio: [2, 4, 5, 6],
                merged: true,
            },
        ] {
            let t = table(c.qos);
            let used: BTreeMap<String, u64> = c.used.iter().map(|(n, k)| (n.to_string(), *k)).collect();
            let (m, notes) = t.map(&used);
            let got: Vec<(&str, Priority)> = m.label.iter().map(|(n, l)| (n.as_str(), *l)).collect();
            assert_eq!(got, c.want, "{}", c.name);
            assert_eq!(m.qos_priority, c.prio, "{}", c.name);
            assert_eq!(m.max, c.qos.iter().map(|q| q.1).max().unwrap(), "{}", c.name);
            assert_eq!(notes.iter().any(|n| n.contains("merged into label low")), c.merged, "{}: {notes:?}", c.name);
        }
    }

    #[test]
    fn preempt_lists_make_lower_labels_preemptible() {
        let mut t = table(&[("normal", 0), ("high", 100), ("scav", 0)]);
        t.qos.get_mut("high").unwrap().preempt = vec!["normal".into()];
        t.qos.get_mut("normal").unwrap().preempt = vec!["high".into()];
        let used: BTreeMap<String, u64> = [("normal".to_string(), 1), ("high".to_string(), 1)].into();
        let (m, mut notes) = t.map(&used);
        assert_eq!(t.preemptible(&m, &mut notes), ["normal".to_string()].into());
        assert!(notes.iter().any(|n| n.contains("normal preempts high")), "{notes:?}");
    }

    #[test]
    fn bad_rows_name_file_line_and_column() {
        for (name, text, says) in [
            ("bad priority", "Priority|Name\nx|normal\n", ":2: column \"Priority\": \"x\" is not a priority"),
            ("no name column", "Priority\n0\n", ":1: column \"Name\": missing required column"),
            ("twice", "Name|Priority\na|0\na|1\n", ":3: column \"Name\": QOS \"a\" listed twice"),
            ("bad factor", "Name|Priority|UsageFactor\na|0|-1\n", ":2: column \"UsageFactor\""),
            ("unknown preemptee", "Name|Priority|Preempt\na|0|b\n", ":2: column \"Preempt\": QOS \"a\" preempts \"b\""),
            ("fields", "Name|Priority\na|0|1\n", ":2: column \"\": 3 fields, the header has 2"),
        ] {
            let path = write(name.replace(' ', "-").as_str(), text);
            let e = read_qos(&path).unwrap_err().to_string();
            assert!(e.starts_with(&path.display().to_string()) && e.contains(says), "{name}: {e}");
            std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
        }
    }
}
