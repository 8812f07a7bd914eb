//! A Slurm site's shape and account tree, from saved command output
//! (docs/importers.md, "Cluster shape and accounts from Slurm"):
//!
//! * `scontrol show nodes --oneliner`: one node per line; its GPUs from
//!   `Gres=` (`gpu:h100:8(S:0-1)`, `gpu:4`), its `Partitions=`. Nodes without
//!   GPUs are left out. GPU nodes with the same partitions, GPU type and GPUs
//!   per node form one pool.
//! * `sacctmgr show assoc format=Cluster,Account,ParentName,User,Partition,Share
//!   --parsable2`: the accounts (rows without a `User`), their parents
//!   (`ParentName`, or the indentation of `Account` in `tree` output) and
//!   their `Share`; users' `Share` within their account.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::ImportError;
use super::record::sanitize;
use super::sacct::read_lines;
use crate::write::PoolOut;

/// `key=value` pairs of one `scontrol --oneliner` line. A value runs until
/// the next word that looks like `Key=` (values such as `OS=Linux 5.15 #1`
/// contain spaces).
fn oneliner(line: &str) -> Vec<(&str, String)> {
    let is_key = |w: &str| {
        w.split_once('=').is_some_and(|(k, _)| {
            k.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && k.chars().all(|c| c.is_ascii_alphanumeric())
        })
    };
    let mut out: Vec<(&str, String)> = Vec::new();
    for w in line.split_whitespace() {
        match w.split_once('=') {
            Some((k, v)) if is_key(w) => out.push((k, v.to_string())),
            _ => {
                if let Some((_, v)) = out.last_mut() {
                    v.push(' ');
                    v.push_str(w);
                }
            }
        }
    }
    out
}

/// GPU counts by type (`None`: untyped).
pub(crate) type GpuCounts = Vec<(Option<String>, u32)>;

/// GPUs of a `Gres=` value, by type (`None`: untyped), in order.
/// `gpu:h100:8(S:0-1),gpu:a100:2`, `gpu:4`, `gpu:tesla:no_consume:2`,
/// `(null)`. Other GRES (`shard`, `mps`) are ignored.
pub(crate) fn gres_gpus(s: &str) -> Result<GpuCounts, String> {
    let mut out = Vec::new();
    let v = s.trim();
    if v.is_empty() || v == "(null)" {
        return Ok(out);
    }
    // Commas also appear inside the socket list: `gpu:8(S:0,1)`.
    let mut depth = 0;
    let mut items = vec![String::new()];
    for c in v.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(String::new());
                continue;
            }
            _ => {}
        }
        if depth == 0 && c != ')' {
            items.last_mut().expect("one item").push(c);
        }
    }
    for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
        let parts: Vec<&str> = item.split(':').collect();
        if parts[0] != "gpu" {
            continue;
        }
        let count = parts.last().and_then(|c| c.parse::<u32>().ok()).filter(|_| parts.len() >= 2);
        let Some(count) = count else { return Err(format!("GPU count missing in {item:?}")) };
        let ty = parts.get(1).filter(|t| parts.len() >= 3 && **t != "no_consume").map(|t| t.to_string());
        out.push((ty, count));
    }
    Ok(out)
}

/// A Slurm site's GPU nodes grouped into pools.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SlurmShape {
    pub pools: Vec<PoolOut>,
    pub notes: Vec<String>,
}

/// Reads saved `scontrol show nodes --oneliner` output. Untyped GPUs get
/// `untyped_model`. A line without `NodeName=` or with a GPU count that
/// cannot be read is an error naming file, line and column.
pub(crate) fn read_nodes(path: &Path, untyped_model: &str, rack_size: u32) -> Result<SlurmShape, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ImportError::io(path, e))?;
    // (partitions, model, GPUs per node) -> node count.
    let mut groups: BTreeMap<(String, String, u32), u32> = BTreeMap::new();
    let (mut no_partition, mut mixed, mut cpu) = (0u32, 0u32, 0u32);
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let kv = oneliner(line);
        let get = |k: &str| kv.iter().find(|(key, _)| *key == k).map(|(_, v)| v.trim());
        if get("NodeName").is_none_or(str::is_empty) {
            return Err(ImportError::at(
                path,
                i + 1,
                "NodeName",
                "not a node line (run `scontrol show nodes --oneliner`)",
            ));
        }
        let gpus = gres_gpus(get("Gres").unwrap_or("")).map_err(|m| ImportError::at(path, i + 1, "Gres", m))?;
        let Some((ty, count)) = gpus.first().cloned() else {
            cpu += 1;
            continue;
        };
        if count == 0 {
            cpu += 1;
            continue;
        }
        mixed += u32::from(gpus.len() > 1);
        let mut parts: Vec<&str> = get("Partitions").unwrap_or("").split(',').filter(|p| !p.is_empty()).collect();
        if parts.is_empty() {
            no_partition += 1;
            continue;
        }
        parts.sort_unstable();
        let model = ty.unwrap_or_else(|| untyped_model.to_string());
        *groups.entry((parts.join("."), model, count)).or_default() += 1;
    }
    if groups.is_empty() {
        return Err(ImportError::bad_file(path, "no GPU node in any partition"));
    }
    let mut notes = vec![format!("{cpu} nodes without GPUs left out")];
    if no_partition > 0 {
        notes.push(format!("{no_partition} GPU nodes in no partition left out"));
    }
    if mixed > 0 {
        notes.push(format!("{mixed} nodes with several GPU types: only the first type's GPUs were kept"));
    }
    let mut taken = std::collections::BTreeSet::new();
    let pools = groups
        .iter()
        .map(|((parts, model, gpn), &nodes)| {
            let sizes = groups.keys().filter(|(p, m, _)| p == parts && m == model).count();
            let m = sanitize(&model.to_lowercase()).0;
            let want = if sizes > 1 { format!("{parts}_{m}x{gpn}") } else { format!("{parts}_{m}") };
            PoolOut {
                cluster: String::new(),
                name: super::sizing::unique_pool_name(&want, &mut taken),
                gpu: model.clone(),
                nodes,
                gpus_per_node: *gpn,
                rack_size: rack_size.min(nodes).max(1),
                shared: true,
            }
        })
        .collect();
    Ok(SlurmShape { pools, notes })
}

/// A Slurm account association: its parent and share (`None`: `parent`,
/// Slurm's "no level of its own").
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct AssocAccount {
    pub parent: Option<String>,
    pub share: Option<f64>,
    /// Users' shares within this account (`None`: `parent`).
    pub users: BTreeMap<String, Option<f64>>,
}

/// The account tree of one Slurm cluster; the top account is `root`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct AssocTree {
    pub accounts: BTreeMap<String, AssocAccount>,
}

const ASSOC_REQUIRED: [&str; 3] = ["Account", "User", "Share"];
const ASSOC_OPTIONAL: [&str; 3] = ["ParentName", "Cluster", "Partition"];

/// A `Share` value: a number in Allot's share range, or `parent`.
fn share(s: &str) -> Result<Option<f64>, String> {
    let v = s.trim();
    if v.eq_ignore_ascii_case("parent") {
        return Ok(None);
    }
    match v.parse::<f64>() {
        Ok(x) if (0.001..=1e6).contains(&x) => Ok(Some(x)),
        _ => Err(format!("share must be a number from 0.001 to 1000000 or `parent`, got {v:?}")),
    }
}

/// Reads saved `sacctmgr show assoc … --parsable2` output. Parents come
/// from `ParentName` when the column is there, else from the indentation of
/// `Account` (`sacctmgr show assoc tree`), else every account is a child of
/// `root`. Associations of several clusters, bad shares and unknown parents
/// are errors naming file, line and column.
pub(crate) fn read_assoc(path: &Path) -> Result<AssocTree, ImportError> {
    let (mut header, rows) = read_lines(path)?;
    // Slurm 22.05 titles it ParentName (tests/fixtures/slurm-real); a
    // "Par Name" title is read as the same column.
    for n in &mut header.names {
        if n == "Par Name" {
            *n = "ParentName".to_string();
        }
    }
    let cols = header.find(path, &ASSOC_REQUIRED, &ASSOC_OPTIONAL)?;
    let mut tree = AssocTree::default();
    let mut cluster: Option<String> = None;
    // Tree form: the last account seen at each depth.
    let mut stack: Vec<String> = Vec::new();
    for (n, text) in rows {
        let f = header.fields(path, n, text.as_deref())?;
        let get = |k: usize| cols[k].map_or("", |i| f[i]);
        let c = get(4).trim();
        match &cluster {
            Some(have) if !c.is_empty() && have != c => {
                let msg = format!("associations of clusters {have} and {c}: pull one cluster (`cluster={have}`)");
                return Err(ImportError::at(path, n, "Cluster", msg));
            }
            None if !c.is_empty() => cluster = Some(c.to_string()),
            _ => {}
        }
        let raw_account = get(0);
        let account = raw_account.trim().to_string();
        if account.is_empty() {
            return Err(ImportError::at(path, n, "Account", "empty account"));
        }
        let user = get(1).trim();
        let sh = share(get(2)).map_err(|m| ImportError::at(path, n, "Share", m))?;
        if !user.is_empty() {
            // The first association of a user in an account wins (partition ones repeat it).
            tree.accounts.entry(account).or_default().users.entry(user.to_string()).or_insert(sh);
            continue;
        }
        let parent = if cols[3].is_some() {
            Some(get(3).trim().to_string()).filter(|p| !p.is_empty())
        } else {
            let depth = raw_account.len() - raw_account.trim_start().len();
            stack.truncate(depth);
            let p = if depth == 0 { None } else { stack.last().cloned() };
            stack.push(account.clone());
            p
        };
        let parent = parent.or_else(|| (account != "root").then(|| "root".to_string()));
        let a = tree.accounts.entry(account).or_default();
        a.parent = parent;
        a.share = sh;
    }
    for (name, a) in &tree.accounts {
        if let Some(p) = &a.parent
            && p != "root"
            && !tree.accounts.contains_key(p)
        {
            let msg = format!("account {name:?} has parent {p:?}, which is not listed");
            return Err(ImportError::at(path, header.line, "ParentName", msg));
        }
    }
    if tree.accounts.keys().any(|a| tree.path(a).is_none()) {
        return Err(ImportError::bad_file(path, "the account parents form a cycle"));
    }
    Ok(tree)
}

impl AssocTree {
    /// Sanitized path segments from below `root` down to `account`; `None`
    /// for a cycle.
    pub fn path(&self, account: &str) -> Option<Vec<String>> {
        let mut segs = Vec::new();
        let mut cur = Some(account.to_string());
        while let Some(a) = cur.filter(|a| a != "root") {
            if segs.len() > self.accounts.len() {
                return None;
            }
            segs.push(sanitize(&a).0);
            cur = self.accounts.get(&a).and_then(|x| x.parent.clone());
        }
        segs.reverse();
        Some(segs)
    }

    /// The account whose sanitized name is `team`.
    pub fn by_sanitized(&self, team: &str) -> Option<&str> {
        self.accounts.keys().find(|a| sanitize(a).0 == team).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_forms() {
        let h = |t: &str, n| (Some(t.to_string()), n);
        let cases: [(&str, &str, Result<GpuCounts, ()>); 7] = [
            ("typed with sockets", "gpu:h100:8(S:0-1)", Ok(vec![h("h100", 8)])),
            ("untyped", "gpu:4", Ok(vec![(None, 4)])),
            ("socket list with comma", "gpu:a100:4(S:0,1),shard:8", Ok(vec![h("a100", 4)])),
            ("two types", "gpu:a100:2,gpu:t4:1", Ok(vec![h("a100", 2), h("t4", 1)])),
            ("no_consume", "gpu:tesla:no_consume:2", Ok(vec![h("tesla", 2)])),
            ("null", "(null)", Ok(vec![])),
            ("no count", "gpu:h100", Err(())),
        ];
        for (name, input, want) in cases {
            assert_eq!(gres_gpus(input).map_err(|_| ()), want, "case {name}");
        }
    }

    #[test]
    fn oneliner_values_may_contain_spaces() {
        let kv = oneliner("NodeName=g1 OS=Linux 5.15.0 #1 SMP Gres=gpu:2 Reason=down for fix [root@2025]");
        let keys: Vec<&str> = kv.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["NodeName", "OS", "Gres", "Reason"]);
        assert_eq!(kv[1].1, "Linux 5.15.0 #1 SMP");
        assert_eq!(kv[2].1, "gpu:2");
    }

    #[test]
    fn shares() {
        assert_eq!(share("10"), Ok(Some(10.0)));
        assert_eq!(share("parent"), Ok(None));
        assert!(share("0").is_err());
        assert!(share("lots").is_err());
    }
}
