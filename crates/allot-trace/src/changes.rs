//! Account change files (`--account-changes`): the budgets, shares and
//! impacts that were in force, with the times they changed, as
//! `allot trace export` writes them from a server's audit log
//! (docs/compare.md).
//!
//! CSV with the header `t_s,account,field,value`: `t_s` seconds from the
//! trace start, `account` a declared account's path, `field` one of
//! `budget_gpu_hours`, `share`, `impact`, and `value` a finite number > 0, or
//! empty for "the config's own value" (as `null` does in the API). Changes
//! are applied in time order (file order at the same time), each on top of
//! the ones before.

use std::io::Read;
use std::path::Path;

use allot_core::{AccountTree, Time};

use crate::config::{Config, parse_config};
use crate::error::{FormatError, FormatKind, from_csv, quoted};
use crate::lines::{csv_reader, record_line};
use crate::trace::{csv_header, map_header, parse_uint};

const COLUMNS: [&str; 4] = ["t_s", "account", "field", "value"];
/// The account fields a change may set.
pub const FIELDS: [&str; 3] = ["budget_gpu_hours", "share", "impact"];

/// One change of one account's field.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountChange {
    pub t: Time,
    pub account: String,
    pub field: &'static str,
    /// `None`: back to the config's own value.
    pub value: Option<f64>,
}

/// Loads an account change file (CSV).
pub fn load_account_changes(path: &Path, cfg: &Config) -> Result<Vec<AccountChange>, FormatError> {
    let f = std::fs::File::open(path).map_err(|e| FormatError::io(FormatKind::Events, path, e))?;
    parse_account_changes_csv(f, &path.display().to_string(), cfg)
}

/// Parses an account change file; `file` names it in errors. Every account
/// must be declared in `cfg` and every value valid for its field.
pub fn parse_account_changes_csv(
    reader: impl Read,
    file: &str,
    cfg: &Config,
) -> Result<Vec<AccountChange>, FormatError> {
    let mut rdr = csv_reader(csv::ReaderBuilder::new().has_headers(true), reader);
    let header = csv_header(FormatKind::Events, file, &mut rdr)?;
    let index = map_header(FormatKind::Events, file, &header, &COLUMNS, &[0, 1, 2, 3])?;
    let mut out = Vec::new();
    let mut rec = csv::StringRecord::new();
    while rdr.read_record(&mut rec).map_err(|e| from_csv(FormatKind::Events, file, &mut rdr, e))? {
        let line = rec.position().map_or(0, |p| record_line(&mut rdr, p));
        let cell = |c: usize| index[c].map_or("", |i| rec[i].trim());
        let err =
            |c: usize, msg: String| FormatError::new(FormatKind::Events, file, msg).at_line(line).in_field(COLUMNS[c]);
        let t = parse_uint::<u64>(cell(0), u64::MAX).map_err(|m| err(0, m.to_string()))?;
        let account = cell(1);
        let declared = cfg.accounts.get(account).is_some_and(|id| cfg.accounts.account(id).declared);
        if !declared {
            let known: Vec<&str> =
                cfg.accounts.accounts.iter().filter(|a| a.declared).map(|a| a.path.as_str()).collect();
            return Err(err(1, format!("unknown account {} (declared: {})", quoted(account), known.join(", "))));
        }
        let field = FIELDS
            .into_iter()
            .find(|f| *f == cell(2))
            .ok_or_else(|| err(2, format!("unknown field {} (use {})", quoted(cell(2)), FIELDS.join(", "))))?;
        let value = match cell(3) {
            "" => None,
            v => match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 => Some(x),
                _ => return Err(err(3, format!("expected a finite number > 0 or nothing, got {}", quoted(v)))),
            },
        };
        out.push(AccountChange { t, account: account.to_string(), field, value });
    }
    out.sort_by_key(|c| c.t);
    Ok(out)
}

/// The account trees in force after each instant at which something
/// changed, built by the config's own parser from `cfg` with the changes
/// so far (so ids and every other rule stay those of the config).
pub fn trees_in_force(cfg: &Config, changes: &[AccountChange]) -> Result<Vec<(Time, AccountTree)>, FormatError> {
    let fail = |msg: String| FormatError::new(FormatKind::Config, &cfg.path, msg);
    let base: toml::Table = cfg.text.parse().map_err(|e| fail(format!("cannot read the config's TOML: {e}")))?;
    let mut doc = base.clone();
    let mut out: Vec<(Time, AccountTree)> = Vec::new();
    let mut i = 0;
    while i < changes.len() {
        let t = changes[i].t;
        while i < changes.len() && changes[i].t == t {
            let c = &changes[i];
            let value = match c.value {
                Some(v) => Some(v),
                None => account_field(&mut base.clone(), &c.account, c.field).map_err(fail)?,
            };
            set_account_field(&mut doc, &c.account, c.field, value).map_err(fail)?;
            i += 1;
        }
        let text = toml::to_string(&doc).map_err(|e| fail(format!("cannot write the changed config: {e}")))?;
        let at = format!("{} with the account changes up to t_s {t}", cfg.path);
        out.push((t, parse_config(&text, &at)?.accounts));
    }
    Ok(out)
}

/// The declared account `path` of a config's TOML (an error lists the
/// declared ones).
fn account_table<'d>(doc: &'d mut toml::Table, path: &str) -> Result<&'d mut toml::Table, String> {
    let accounts = doc.get_mut("accounts").and_then(|a| a.as_array_mut());
    let Some(accounts) = accounts else { return Err("the config declares no [[accounts]]".into()) };
    let declared: Vec<String> =
        accounts.iter().filter_map(|a| a.get("path").and_then(|p| p.as_str()).map(str::to_string)).collect();
    accounts
        .iter_mut()
        .filter_map(|a| a.as_table_mut())
        .find(|a| a.get("path").and_then(|p| p.as_str()) == Some(path))
        .ok_or_else(|| format!("no declared account {path:?} (declared: {})", declared.join(", ")))
}

/// A numeric field of a declared account as the config's TOML gives it.
pub(crate) fn account_field(doc: &mut toml::Table, path: &str, field: &str) -> Result<Option<f64>, String> {
    let account = account_table(doc, path)?;
    Ok(account.get(field).and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64))))
}

/// Sets (or, with `None`, removes) a numeric field of a declared account.
pub(crate) fn set_account_field(
    doc: &mut toml::Table,
    path: &str,
    field: &str,
    value: Option<f64>,
) -> Result<(), String> {
    let account = account_table(doc, path)?;
    match value {
        Some(v) => account.insert(field.to_string(), toml::Value::Float(v)),
        None => account.remove(field),
    };
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two accounts (one with a budget, one with a share), a batch slice.
    pub(crate) const CONFIG: &str = r#"
[cluster]
name = "c"
[[cluster.pools]]
name = "p"
gpu = "h100"
nodes = 2
gpus_per_node = 8
[gpu_types]
h100 = 1.0
[[accounts]]
path = "org/a"
budget_gpu_hours = 100
[[accounts]]
path = "org/b"
share = 2
[contract]
min_slice = { batch = "2h" }
"#;

    fn config() -> Config {
        parse_config(CONFIG, "c.toml").unwrap()
    }

    fn parse(text: &str) -> Result<Vec<AccountChange>, FormatError> {
        parse_account_changes_csv(text.as_bytes(), "ch.csv", &config())
    }

    #[test]
    fn changes_apply_in_time_order_on_top_of_each_other() {
        let cs = parse(
            "t_s,account,field,value\n50,org/a,budget_gpu_hours,\n10,org/a,budget_gpu_hours,300\n10,org/b,share,2\n",
        )
        .unwrap();
        let trees = trees_in_force(&config(), &cs).unwrap();
        let at = |i: usize, path: &str| {
            let (t, tree) = &trees[i];
            let a = tree.account(tree.get(path).unwrap());
            (*t, a.budget_gpu_hours, a.share)
        };
        assert_eq!(trees.len(), 2, "one tree per instant");
        assert_eq!(at(0, "org/a"), (10, Some(300.0), 300.0), "FS-0: its share is its budget");
        assert_eq!(at(0, "org/b"), (10, None, 2.0));
        assert_eq!(at(1, "org/a"), (50, Some(100.0), 100.0), "empty: back to the config's value");
        assert_eq!(at(1, "org/b").2, 2.0, "earlier changes stay");
    }

    #[test]
    fn bad_changes_name_the_line_and_field() {
        let err = |text: &str| parse(text).unwrap_err().to_string();
        let e = err("t_s,account,field,value\n1,org/zz,share,2\n");
        assert!(e.contains("ch.csv:2") && e.contains("declared: org/a, org/b"), "{e}");
        assert!(err("t_s,account,field,value\n1,org/a,quota,2\n").contains("use budget_gpu_hours, share, impact"));
        let e = err("t_s,account,field,value\n1,org/a,share,-2\n");
        assert!(e.contains("value") && e.contains("finite number > 0"), "{e}");
        assert!(err("t_s,account,field,value\nsoon,org/a,share,2\n").contains("t_s"));
        assert!(err("t_s,account,field\n1,org/a,share\n").contains("value"), "a missing column is named");
    }
}
