//! Account change files (`--account-changes`): the changes of the account
//! tree with their times, as `allot trace export` writes them from a
//! server's audit log (docs/compare.md).
//!
//! CSV with the header `t_s,account,field,value`; `t_s` is seconds from the
//! trace start, `account` the account's path then, and `field`:
//! * `budget_gpu_hours`, `share`, `impact`, `users.NAME` (a user's FS-2
//!   share) or `user_budgets.NAME` (a user's BUD-6 budget): `value` a number
//!   within the config's bounds, or empty for "the config's own value" (as
//!   `null` does in the API);
//! * `create` or `replace`: `value` the account's declaration as JSON
//!   ([`crate::decl::AccountDecl`]; empty for a `create` with defaults);
//! * `close`, `reopen`: no value (ACC-2);
//! * `rename`: `value` the new path (ACC-1).
//!
//! Changes are applied in time order (file order at the same time) by the
//! tree's one editor, [`allot_core::AccountBook`], each on top of the ones
//! before, so every account keeps its id (ACC-1); one the tree refuses is an
//! error naming its line.

use std::io::Read;
use std::path::Path;

use allot_core::{AccountBook, AccountEdit, AccountField, AccountSpec, AccountTree, Time};

use crate::bounds;
use crate::config::Config;
use crate::error::{FormatError, FormatKind, from_csv, quoted};
use crate::lines::{csv_reader, record_line};
use crate::trace::{csv_header, map_header, parse_uint};

const COLUMNS: [&str; 4] = ["t_s", "account", "field", "value"];
/// The numeric account fields a change may set.
pub const FIELDS: [&str; 3] = ["budget_gpu_hours", "share", "impact"];
/// The fields of a change file, as its errors list them.
const ALL_FIELDS: &str =
    "budget_gpu_hours, share, impact, users.NAME, user_budgets.NAME, create, replace, close, reopen, rename";

/// One change of the account tree at `t` (seconds from the trace start),
/// from `line` of its file.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountChange {
    pub t: Time,
    pub line: u64,
    pub edit: AccountEdit,
}

/// Loads an account change file (CSV).
pub fn load_account_changes(path: &Path, cfg: &Config) -> Result<Vec<AccountChange>, FormatError> {
    let f = std::fs::File::open(path).map_err(|e| FormatError::io(FormatKind::Events, path, e))?;
    parse_account_changes_csv(f, &path.display().to_string(), cfg)
}

/// A numeric value within `bound`, or `None` for an empty cell.
fn number(v: &str, bound: bounds::FloatBound) -> Result<Option<f64>, String> {
    if v.is_empty() {
        return Ok(None);
    }
    let x: f64 = v.parse().map_err(|_| format!("expected a number or nothing, got {}", quoted(v)))?;
    bound.check(x).map(Some).map_err(|m| m.to_string())
}

/// The edit of one row.
fn edit_of(account: &str, field: &str, value: &str, cfg: &Config) -> Result<AccountEdit, (usize, String)> {
    let path = account.to_string();
    let decl = |v: &str| -> Result<AccountSpec, (usize, String)> {
        if v.is_empty() {
            return Ok(AccountSpec { path: path.clone(), ..Default::default() });
        }
        let d: crate::decl::AccountDecl =
            serde_json::from_str(v).map_err(|e| (3, format!("expected an account declaration (JSON): {e}")))?;
        if d.path != account {
            return Err((3, format!("the declaration is of {}, not of {}", quoted(&d.path), quoted(account))));
        }
        crate::decl::spec_of(&d, &cfg.cluster).map_err(|m| (3, m))
    };
    let empty = |e: AccountEdit| if value.is_empty() { Ok(e) } else { Err((3, format!("{field} takes no value"))) };
    Ok(match field {
        "create" => AccountEdit::Create(decl(value)?),
        "replace" if value.is_empty() => return Err((3, "replace needs the account's declaration (JSON)".into())),
        "replace" => AccountEdit::Replace(decl(value)?),
        "close" => empty(AccountEdit::Close { path })?,
        "reopen" => empty(AccountEdit::Reopen { path })?,
        "rename" if value.is_empty() => return Err((3, "rename needs the new path".into())),
        "rename" => AccountEdit::Rename { path, to: value.to_string() },
        f => {
            if let Some(user) = f.strip_prefix("users.") {
                let share = number(value, bounds::SHARE).map_err(|m| (3, m))?;
                AccountEdit::SetUser { path, user: user.to_string(), share }
            } else if let Some(user) = f.strip_prefix("user_budgets.") {
                let budget_gpu_hours = number(value, bounds::BUDGET_GPU_HOURS).map_err(|m| (3, m))?;
                AccountEdit::SetUserBudget { path, user: user.to_string(), budget_gpu_hours }
            } else {
                let field = AccountField::parse(f)
                    .ok_or_else(|| (2, format!("unknown field {} (use {ALL_FIELDS})", quoted(f))))?;
                let bound = match field {
                    AccountField::Budget => bounds::BUDGET_GPU_HOURS,
                    AccountField::Share => bounds::SHARE,
                    AccountField::Impact => bounds::IMPACT,
                };
                AccountEdit::Set { path, field, value: number(value, bound).map_err(|m| (3, m))? }
            }
        }
    })
}

/// Parses an account change file; `file` names it in errors. Each change
/// must be one the tree accepts, in order, on top of `cfg`'s accounts.
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
    let err = |line: u64, c: usize, msg: String| {
        FormatError::new(FormatKind::Events, file, msg).at_line(line).in_field(COLUMNS[c])
    };
    while rdr.read_record(&mut rec).map_err(|e| from_csv(FormatKind::Events, file, &mut rdr, e))? {
        let line = rec.position().map_or(0, |p| record_line(&mut rdr, p));
        let cell = |c: usize| index[c].map_or("", |i| rec[i].trim());
        let t = parse_uint::<u64>(cell(0), u64::MAX).map_err(|m| err(line, 0, m.to_string()))?;
        let edit = edit_of(cell(1), cell(2), cell(3), cfg).map_err(|(c, m)| err(line, c, m))?;
        out.push(AccountChange { t, line, edit });
    }
    out.sort_by_key(|c| c.t);
    let mut book = AccountBook::seed(&cfg.accounts);
    for c in &out {
        book = book.apply(&c.edit).map_err(|e| err(c.line, 1, e.to_string()))?;
    }
    Ok(out)
}

/// The account trees in force after each instant at which something
/// changed, each from the one before by the tree's editor (ids kept,
/// ACC-1), starting from `cfg`'s.
pub fn trees_in_force(cfg: &Config, changes: &[AccountChange]) -> Result<Vec<(Time, AccountTree)>, FormatError> {
    let mut book = AccountBook::seed(&cfg.accounts);
    let mut out: Vec<(Time, AccountTree)> = Vec::new();
    for (i, c) in changes.iter().enumerate() {
        book = book.apply(&c.edit).map_err(|e| {
            FormatError::new(FormatKind::Events, &cfg.path, format!("account change of line {}: {e}", c.line))
        })?;
        if changes.get(i + 1).is_none_or(|n| n.t != c.t) {
            out.push((c.t, book.tree().clone()));
        }
    }
    Ok(out)
}

/// The tree after every change: every account that ever existed, under its
/// last path — the tree a replay's trace is read against (its workloads
/// carry the accounts' paths as the server has them now).
pub fn last_tree(cfg: &Config, trees: &[(Time, AccountTree)]) -> AccountTree {
    trees.last().map_or_else(|| cfg.accounts.clone(), |(_, t)| t.clone())
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
    use crate::config::parse_config;

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
        assert!(e.contains("ch.csv:2") && e.contains("accounts: org, org/a, org/b"), "{e}");
        assert!(err("t_s,account,field,value\n1,org/a,quota,2\n").contains("use budget_gpu_hours, share, impact"));
        let e = err("t_s,account,field,value\n1,org/a,share,-2\n");
        assert!(e.contains("value") && e.contains("between"), "{e}");
        assert!(err("t_s,account,field,value\nsoon,org/a,share,2\n").contains("t_s"));
        assert!(err("t_s,account,field\n1,org/a,share\n").contains("value"), "a missing column is named");
        let e = err("t_s,account,field,value\n1,org/a,close,\n2,org/a,close,\n");
        assert!(e.contains("ch.csv:3") && e.contains("closed"), "closing twice: {e}");
        let e = err("t_s,account,field,value\n1,org/a,rename,other/a\n");
        assert!(e.contains("keeps the parent"), "{e}");
        let e = err("t_s,account,field,value\n1,org/c,create,{\"path\":\"org/d\"}\n");
        assert!(e.contains("not of \"org/c\""), "{e}");
        assert!(err("t_s,account,field,value\n1,org/a,close,now\n").contains("takes no value"));
    }

    /// Created, renamed and closed accounts keep their ids across trees
    /// (ACC-1): a trace read against the last tree refers to the same
    /// accounts in every earlier one.
    #[test]
    fn the_live_tree_replays_with_its_ids() {
        let cs = parse(concat!(
            "t_s,account,field,value\n",
            "5,org/c,create,\"{\"\"path\"\":\"\"org/c\"\",\"\"budget_gpu_hours\"\":7}\"\n",
            "5,org/c,users.alice,3\n",
            "9,org/a,rename,org/z\n",
            "9,org/b,close,\n",
        ))
        .unwrap();
        let trees = trees_in_force(&config(), &cs).unwrap();
        assert_eq!(trees.len(), 2);
        let (t5, five) = &trees[0];
        let c = five.get("org/c").unwrap();
        assert_eq!((*t5, five.account(c).budget_gpu_hours, five.account(c).user_share("alice")), (5, Some(7.0), 3.0));
        let last = last_tree(&config(), &trees);
        let base = &config().accounts;
        assert_eq!(last.get("org/z"), base.get("org/a"), "renamed: the same id");
        assert_eq!(last.get("org/c"), Some(c), "created: the next id, kept");
        assert!(last.account(last.get("org/b").unwrap()).closed && !five.account(five.get("org/b").unwrap()).closed);
        assert_eq!(last.get("org/a"), None);
    }
}
