//! What-if sweeps (`allot compare --vary`, docs/compare.md): changes to a
//! config's accounts and contract, one run per value.
//!
//! A sweep is `KEY=V1,V2,…`:
//! * `budget:<account>`, `share:<account>`, `impact:<account>` — the
//!   account's `budget_gpu_hours`, `share` or `impact`; a value is a number
//!   (the new value) or a change relative to the config's own value, `+20%`
//!   or `-10%` (an error where the config gives the account none);
//! * `contract.<key>` or `contract.<table>.<key>` (e.g.
//!   `contract.min_slice.batch`, `contract.usage_half_life`) — the value as
//!   it would be written in the config (`1h`, `4`, `true`);
//! * `slurm.<key>` or `slurm.<table>.<key>` (e.g. `slurm.weight_fairshare`,
//!   `slurm.partition_priority.H100`) — a knob of the `slurm` policy's
//!   `[slurm]` table, written the same way.
//!
//! A variation applies its changes to the config's TOML and reads the result
//! with the config's own parser, so a varied config is checked exactly as a
//! file is and its errors name the sweep. Several sweeps combine: every
//! combination of their values is one variation. The first variation is
//! always the config as given (`base`).

use allot_core::AccountEdit;

use crate::changes::{AccountChange, account_field, set_account_field};
use crate::config::{Config, parse_config};

/// At most this many variations (the product of the sweeps' value counts,
/// with the base).
pub const MAX_VARIATIONS: usize = 64;

/// What a sweep changes.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// A field of a declared account.
    Account { path: String, field: &'static str },
    /// A key of `[contract]`, as its path of table names.
    Contract(Vec<String>),
    /// A key of `[slurm]`, as its path of table names.
    Slurm(Vec<String>),
}

/// One value of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// `+p%` / `-p%` of the config's value (accounts only).
    Relative(f64),
    /// The value as written (a number for accounts).
    Set(String),
}

/// One `--vary` option: a target and its values, with their text.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    pub key: String,
    pub target: Target,
    pub values: Vec<(String, Change)>,
}

/// One combination of sweep values: a label and its changes.
#[derive(Clone, Debug, PartialEq)]
pub struct Variation {
    /// `base`, or the changes as `key=value` joined by `, `.
    pub label: String,
    pub changes: Vec<(String, Target, Change)>,
}

/// A bad sweep, or a varied config that is not valid.
#[derive(Debug, thiserror::Error)]
pub enum VaryError {
    #[error("--vary {0:?}: expected KEY=VALUE[,VALUE…] (e.g. budget:org/llm=+20% or contract.min_slice.batch=1h,2h)")]
    Form(String),
    #[error(
        "--vary {0:?}: unknown key (use budget:<account>, share:<account>, impact:<account>, contract.<key> or slurm.<key>, e.g. contract.min_slice.batch or slurm.weight_fairshare)"
    )]
    Key(String),
    #[error("--vary {key}: value {value:?}: {message}")]
    Value { key: String, value: String, message: String },
    #[error("--vary: {count} variations (the product of the sweeps' values, with the base); at most {MAX_VARIATIONS}")]
    TooMany { count: usize },
    #[error("--vary {key}: {message}")]
    Apply { key: String, message: String },
    #[error("--vary {label}: the varied config is not valid: {source}")]
    Invalid {
        label: String,
        #[source]
        source: Box<crate::error::FormatError>,
    },
}

/// Parses one `--vary` option.
pub fn parse_sweep(text: &str) -> Result<Sweep, VaryError> {
    let (key, values) = text.split_once('=').ok_or_else(|| VaryError::Form(text.to_string()))?;
    let key = key.trim();
    let target = if let Some((field, path)) = key.split_once(':') {
        let field = match field {
            "budget" => "budget_gpu_hours",
            "share" => "share",
            "impact" => "impact",
            _ => return Err(VaryError::Key(key.to_string())),
        };
        if path.is_empty() {
            return Err(VaryError::Key(key.to_string()));
        }
        Target::Account { path: path.to_string(), field }
    } else if let Some((table, rest)) = key.split_once('.').filter(|(t, _)| ["contract", "slurm"].contains(t)) {
        let parts: Vec<String> = rest.split('.').map(str::to_string).collect();
        if parts.iter().any(|p| p.is_empty()) || parts.len() > 2 {
            return Err(VaryError::Key(key.to_string()));
        }
        if table == "contract" { Target::Contract(parts) } else { Target::Slurm(parts) }
    } else {
        return Err(VaryError::Key(key.to_string()));
    };
    let mut out = Vec::new();
    for v in values.split(',').map(str::trim) {
        let bad =
            |message: &str| VaryError::Value { key: key.to_string(), value: v.to_string(), message: message.into() };
        if v.is_empty() {
            return Err(bad("empty value"));
        }
        let change = match (&target, v.strip_suffix('%')) {
            (Target::Account { .. }, Some(p)) => {
                let p: f64 = p.parse().map_err(|_| bad("expected a change such as +20% or -10%"))?;
                if !p.is_finite() || !(v.starts_with('+') || v.starts_with('-')) {
                    return Err(bad("expected a change such as +20% or -10%"));
                }
                Change::Relative(p)
            }
            (Target::Account { .. }, None) => {
                let n: f64 = v.parse().map_err(|_| bad("expected a number or a change such as +20%"))?;
                if !n.is_finite() {
                    return Err(bad("expected a finite number"));
                }
                Change::Set(v.to_string())
            }
            (Target::Contract(_) | Target::Slurm(_), _) => Change::Set(v.to_string()),
        };
        out.push((v.to_string(), change));
    }
    Ok(Sweep { key: key.to_string(), target, values: out })
}

/// Every combination of the sweeps' values, after the base.
pub fn variations(sweeps: &[Sweep]) -> Result<Vec<Variation>, VaryError> {
    let count = sweeps.iter().map(|s| s.values.len()).product::<usize>() + usize::from(!sweeps.is_empty());
    if count > MAX_VARIATIONS {
        return Err(VaryError::TooMany { count });
    }
    let mut combos: Vec<Vec<(String, Target, Change)>> = vec![Vec::new()];
    for s in sweeps {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                s.values.iter().map(move |(text, change)| {
                    let mut c = c.clone();
                    c.push((format!("{}={text}", s.key), s.target.clone(), change.clone()));
                    c
                })
            })
            .collect();
    }
    let mut out = vec![Variation { label: "base".into(), changes: Vec::new() }];
    if !sweeps.is_empty() {
        out.extend(combos.into_iter().map(|changes| Variation {
            label: changes.iter().map(|c| c.0.as_str()).collect::<Vec<_>>().join(", "),
            changes,
        }));
    }
    Ok(out)
}

impl Variation {
    /// The config with this variation's changes, read by the config's parser.
    pub fn apply(&self, config: &Config) -> Result<Config, VaryError> {
        if self.changes.is_empty() {
            return Ok(config.clone());
        }
        let mut doc: toml::Table = config.text.parse().map_err(|e: toml::de::Error| VaryError::Apply {
            key: self.label.clone(),
            message: format!("cannot read the config's TOML: {e}"),
        })?;
        for (key, target, change) in &self.changes {
            let fail = |message: String| VaryError::Apply { key: key.clone(), message };
            match target {
                Target::Account { path, field } => set_account(&mut doc, path, field, change).map_err(fail)?,
                Target::Contract(keys) => set_table(&mut doc, "contract", keys, change).map_err(fail)?,
                Target::Slurm(keys) => set_table(&mut doc, "slurm", keys, change).map_err(fail)?,
            }
        }
        let text = toml::to_string(&doc).map_err(|e| VaryError::Apply {
            key: self.label.clone(),
            message: format!("cannot write the varied config: {e}"),
        })?;
        let mut varied = parse_config(&text, &format!("{} ({})", config.path, self.label))
            .map_err(|e| VaryError::Invalid { label: self.label.clone(), source: Box::new(e) })?;
        varied.path = config.path.clone();
        Ok(varied)
    }
}

impl Variation {
    /// The account changes of a replay ([`crate::changes`]) under this
    /// variation: a relative change of an account's field scales every
    /// later value of it too (an empty value, "the config's", is the varied
    /// config's already); a value set holds for the whole run, so the
    /// changes of that field are dropped.
    pub fn adjust(&self, changes: &[AccountChange]) -> Vec<AccountChange> {
        let mut out = Vec::with_capacity(changes.len());
        'next: for c in changes {
            let mut c = c.clone();
            for (_, target, change) in &self.changes {
                let Target::Account { path, field } = target else { continue };
                let AccountEdit::Set { path: p, field: f, value } = &mut c.edit else { continue };
                if path != p || *field != f.key() {
                    continue;
                }
                match change {
                    Change::Set(_) => continue 'next,
                    Change::Relative(r) => *value = value.map(|v| v * (1.0 + r / 100.0)),
                }
            }
            out.push(c);
        }
        out
    }
}

fn set_account(doc: &mut toml::Table, path: &str, field: &str, change: &Change) -> Result<(), String> {
    let value = match change {
        Change::Set(v) => v.parse::<f64>().map_err(|_| format!("{v:?} is not a number"))?,
        Change::Relative(p) => {
            let Some(current) = account_field(doc, path, field)? else {
                return Err(format!(
                    "account {path:?} has no {field} of its own in the config to change by {p:+}%: give a value"
                ));
            };
            current * (1.0 + p / 100.0)
        }
    };
    set_account_field(doc, path, field, Some(value))
}

/// Sets `[name] <keys…> = <change>` (`name` is `contract` or `slurm`).
fn set_table(doc: &mut toml::Table, name: &str, keys: &[String], change: &Change) -> Result<(), String> {
    let Change::Set(text) = change else { return Err("relative changes apply only to accounts".into()) };
    let value = if let Ok(i) = text.parse::<i64>() {
        toml::Value::Integer(i)
    } else if let Ok(b) = text.parse::<bool>() {
        toml::Value::Boolean(b)
    } else if let Ok(f) = text.parse::<f64>()
        && f.is_finite()
    {
        toml::Value::Float(f)
    } else {
        toml::Value::String(text.clone())
    };
    let mut table = doc.entry(name).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let (last, parents) = keys.split_last().expect("a table key has at least one part");
    for k in parents {
        let t = table.as_table_mut().ok_or_else(|| format!("[{name}] is not a table"))?;
        table = t.entry(k.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    }
    let t = table.as_table_mut().ok_or_else(|| format!("{name}.{} is not a table", parents.join(".")))?;
    t.insert(last.clone(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_core::AccountField;

    fn config() -> Config {
        parse_config(crate::changes::tests::CONFIG, "c.toml").unwrap()
    }

    fn vary(opts: &[&str]) -> Result<Vec<Config>, VaryError> {
        let sweeps = opts.iter().map(|o| parse_sweep(o)).collect::<Result<Vec<_>, _>>()?;
        variations(&sweeps)?.iter().map(|v| v.apply(&config())).collect()
    }

    fn budget(c: &Config, path: &str) -> Option<f64> {
        c.accounts.account(c.accounts.get(path).unwrap()).budget_gpu_hours
    }

    #[test]
    fn budgets_shares_and_the_contract_vary() {
        let cs = vary(&["budget:org/a=+20%,-50%,300"]).unwrap();
        let budgets: Vec<Option<f64>> = cs.iter().map(|c| budget(c, "org/a")).collect();
        assert_eq!(budgets, [Some(100.0), Some(120.0), Some(50.0), Some(300.0)], "base first, then each value");
        let cs = vary(&["contract.min_slice.batch=1h,4h", "share:org/b=1,3"]).unwrap();
        assert_eq!(cs.len(), 5, "base and the 2 × 2 combinations");
        let slices: Vec<u64> = cs.iter().map(|c| c.contract.min_slice.batch).collect();
        assert_eq!(slices, [7200, 3600, 3600, 14400, 14400]);
        let b = cs[2].accounts.get("org/b").unwrap();
        assert_eq!(cs[2].accounts.account(b).share, 3.0);
        // A knob of the slurm policy, read by the config's own parser.
        let cs = vary(&["slurm.weight_fairshare=10000", "slurm.bf_interval=1m"]).unwrap();
        assert_eq!((cs[0].contract.slurm.weight_fairshare, cs[0].contract.slurm.bf_interval), (0, 30));
        assert_eq!((cs[1].contract.slurm.weight_fairshare, cs[1].contract.slurm.bf_interval), (10_000, 60));
        let e = vary(&["slurm.weight_fairness=1"]).unwrap_err().to_string();
        assert!(e.contains("slurm.weight_fairness=1") && e.contains("weight_fairness"), "{e}");
        let vs = variations(&[parse_sweep("contract.usage_half_life=1d").unwrap()]).unwrap();
        assert_eq!(vs[1].label, "contract.usage_half_life=1d");
        assert_eq!(vs[1].apply(&config()).unwrap().contract.usage_half_life, 86_400);
    }

    #[test]
    fn a_variation_adjusts_the_account_changes_of_a_replay() {
        let ch = |t, account: &str, field, value| AccountChange {
            t,
            line: t,
            edit: AccountEdit::Set { path: account.into(), field, value },
        };
        let changes = [
            ch(10, "org/a", AccountField::Budget, Some(200.0)),
            ch(20, "org/a", AccountField::Budget, None),
            ch(30, "org/b", AccountField::Share, Some(4.0)),
        ];
        let vs = variations(&[parse_sweep("budget:org/a=+50%,80").unwrap()]).unwrap();
        assert_eq!(vs[0].adjust(&changes), changes, "the base replays them as they were");
        assert_eq!(
            vs[1].adjust(&changes),
            [ch(10, "org/a", AccountField::Budget, Some(300.0)), changes[1].clone(), changes[2].clone()],
            "+50% of every value in force"
        );
        assert_eq!(vs[2].adjust(&changes), [changes[2].clone()], "80 for the whole run");
    }

    #[test]
    fn bad_sweeps_say_what_is_wrong() {
        let err = |o: &[&str]| vary(o).unwrap_err().to_string();
        assert!(err(&["budget:org/a"]).contains("expected KEY=VALUE"), "{}", err(&["budget:org/a"]));
        assert!(err(&["quota:org/a=1"]).contains("unknown key"));
        assert!(err(&["budget:org/zz=+1%"]).contains("declared: org/a, org/b"), "{}", err(&["budget:org/zz=+1%"]));
        assert!(err(&["budget:org/b=+20%"]).contains("no budget_gpu_hours of its own"));
        assert!(err(&["budget:org/a=lots"]).contains("expected a number"));
        assert!(err(&["budget:org/a=20%"]).contains("+20% or -10%"));
        assert!(err(&["budget:org/a=-100%"]).contains("not valid"), "{}", err(&["budget:org/a=-100%"]));
        let e = err(&["contract.min_slice.lunch=1h"]);
        assert!(e.contains("contract.min_slice.lunch=1h") && e.contains("lunch"), "{e}");
        assert!(err(&["contract.grace=soon"]).contains("grace"), "{}", err(&["contract.grace=soon"]));
        let many = ["share:org/b=1,2,3,4,5,6,7,8", "contract.grace=1s,2s,3s,4s,5s,6s,7s,8s,9s"];
        assert!(err(&many).contains("at most 64"));
    }
}
