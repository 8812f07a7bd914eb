//! The live account tree (rules ACC-1 to ACC-3, `docs/accounts.md`): the
//! declared accounts and the edits that change them — create, set a budget,
//! share or impact or a user's share, close, reopen, rename — applied in one
//! place for the server and the simulator.
//!
//! Every edit keeps the id of every account that exists (ACC-1): workloads,
//! the ledger and the policy's tables stay valid, and a renamed or closed
//! account keeps its usage. New accounts get the next ids. The book also
//! keeps the *seed* (the config's accounts), so that "back to the default"
//! (`null` in the API, an empty value in a change file) means the config's
//! value.

use std::collections::BTreeMap;

use crate::account::{AccountSpec, AccountTree, AccountTreeError};

/// A numeric field of an account that an edit may set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AccountField {
    Budget,
    Share,
    Impact,
}

impl AccountField {
    pub const ALL: [AccountField; 3] = [AccountField::Budget, AccountField::Share, AccountField::Impact];

    /// The field's name in the config, the API and change files.
    pub fn key(self) -> &'static str {
        match self {
            AccountField::Budget => "budget_gpu_hours",
            AccountField::Share => "share",
            AccountField::Impact => "impact",
        }
    }

    pub fn parse(key: &str) -> Option<AccountField> {
        AccountField::ALL.into_iter().find(|f| f.key() == key)
    }

    fn get(self, s: &AccountSpec) -> Option<f64> {
        match self {
            AccountField::Budget => s.budget_gpu_hours,
            AccountField::Share => s.share,
            AccountField::Impact => s.impact,
        }
    }

    fn set(self, s: &mut AccountSpec, v: Option<f64>) {
        match self {
            AccountField::Budget => s.budget_gpu_hours = v,
            AccountField::Share => s.share = v,
            AccountField::Impact => s.impact = v,
        }
    }
}

/// One change of the tree.
#[derive(Clone, Debug, PartialEq)]
pub enum AccountEdit {
    /// A new account, or the declaration of one that a path implied.
    Create(AccountSpec),
    /// A declared account's whole declaration (an import); absent fields
    /// are absent, not the seed's.
    Replace(AccountSpec),
    /// A budget, share or impact; `None`: back to the seed's value.
    Set {
        path: String,
        field: AccountField,
        value: Option<f64>,
    },
    /// A user's FS-2 share; `None`: back to the seed's (else 1).
    SetUser {
        path: String,
        user: String,
        share: Option<f64>,
    },
    /// A user's BUD-6 budget; `None`: back to the seed's (else none).
    SetUserBudget {
        path: String,
        user: String,
        budget_gpu_hours: Option<f64>,
    },
    /// ACC-2: no new work for the account and its subtree.
    Close {
        path: String,
    },
    Reopen {
        path: String,
    },
    /// A new path with the same parent (a new last segment); the subtree
    /// moves with it.
    Rename {
        path: String,
        to: String,
    },
}

impl AccountEdit {
    /// The account the edit is about (before a rename).
    pub fn path(&self) -> &str {
        match self {
            AccountEdit::Create(s) | AccountEdit::Replace(s) => &s.path,
            AccountEdit::Set { path, .. }
            | AccountEdit::SetUser { path, .. }
            | AccountEdit::SetUserBudget { path, .. }
            | AccountEdit::Close { path }
            | AccountEdit::Reopen { path }
            | AccountEdit::Rename { path, .. } => path,
        }
    }

    /// The audit action: `account.create`, `account.budget_gpu_hours`, ….
    pub fn action(&self) -> String {
        let what = match self {
            AccountEdit::Create(_) => "create",
            AccountEdit::Replace(_) => "import",
            AccountEdit::Set { field: AccountField::Budget, .. } => "budget",
            AccountEdit::Set { field, .. } => field.key(),
            AccountEdit::SetUser { .. } => "user_share",
            AccountEdit::SetUserBudget { .. } => "user_budget",
            AccountEdit::Close { .. } => "close",
            AccountEdit::Reopen { .. } => "reopen",
            AccountEdit::Rename { .. } => "rename",
        };
        format!("account.{what}")
    }
}

/// Why an edit was refused. Nothing changed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EditError {
    #[error("unknown account {path:?} (accounts: {})", known.join(", "))]
    Unknown { path: String, known: Vec<String> },
    #[error("account {0:?} exists already")]
    Exists(String),
    #[error("account {path:?} is closed (ACC-2: {closed:?} is closed); reopen it first")]
    Closed { path: String, closed: String },
    #[error("account {0:?} is not closed")]
    NotClosed(String),
    #[error("cannot rename {path:?} to {to:?}: {why}")]
    BadRename { path: String, to: String, why: &'static str },
    #[error(transparent)]
    Tree(#[from] AccountTreeError),
}

impl EditError {
    /// The request field the error is about, for `{"error","field"}`.
    pub fn field(&self) -> &'static str {
        match self {
            EditError::BadRename { .. } => "to",
            EditError::Tree(AccountTreeError::BadNumber { field, .. }) => field,
            EditError::Tree(AccountTreeError::TooManyUsers { field, .. }) => field,
            EditError::Tree(AccountTreeError::BadUser { .. } | AccountTreeError::BadUserShare { .. }) => "users",
            EditError::Tree(AccountTreeError::BadBudgetUser { .. } | AccountTreeError::BadUserBudget { .. }) => {
                "user_budgets"
            }
            _ => "path",
        }
    }
}

/// The declared accounts, the tree they resolve to (ids kept, ACC-1) and
/// the seed.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountBook {
    seed: BTreeMap<String, AccountSpec>,
    specs: BTreeMap<String, AccountSpec>,
    tree: AccountTree,
}

/// Sets `user`'s value in a table of a declaration (`None`: removes it).
fn set_user(table: &mut BTreeMap<String, f64>, user: &str, v: Option<f64>) {
    match v {
        Some(v) => table.insert(user.to_string(), v),
        None => table.remove(user),
    };
}

fn by_path(specs: &[AccountSpec]) -> BTreeMap<String, AccountSpec> {
    specs.iter().map(|s| (s.path.clone(), s.clone())).collect()
}

impl AccountBook {
    /// The book of a config's tree: the seed and the accounts are its
    /// declared ones, ids in path order.
    pub fn seed(tree: &AccountTree) -> AccountBook {
        let specs = by_path(tree.declared());
        AccountBook { seed: specs.clone(), specs, tree: tree.clone() }
    }

    /// A book restored from a store: `order` gives every account's path in
    /// id order (implied parents too), `specs` the declared accounts now and
    /// `seed` the config's declared accounts.
    pub fn restore(seed: &[AccountSpec], order: &[String], specs: &[AccountSpec]) -> Result<AccountBook, EditError> {
        let tree = AccountTree::build_ordered(order, specs)?;
        Ok(AccountBook { seed: by_path(seed), specs: by_path(specs), tree })
    }

    pub fn tree(&self) -> &AccountTree {
        &self.tree
    }

    /// A config reload's declared accounts become the seed: what `null`
    /// (the config's value) means in later edits.
    pub fn reseed(&mut self, seed: &[AccountSpec]) {
        self.seed = by_path(seed);
    }

    pub fn into_tree(self) -> AccountTree {
        self.tree
    }

    /// The declared accounts now, in path order.
    pub fn specs(&self) -> impl Iterator<Item = &AccountSpec> {
        self.specs.values()
    }

    pub fn spec(&self, path: &str) -> Option<&AccountSpec> {
        self.specs.get(path)
    }

    fn unknown(&self, path: &str) -> EditError {
        let known = self.tree.ids_by_path().map(|id| self.tree.account(id).path.clone()).collect();
        EditError::Unknown { path: path.to_string(), known }
    }

    /// The closed account at or above `path`, if any.
    fn closed_at(&self, path: &str) -> Option<String> {
        let id = self.tree.get(path)?;
        self.tree.ancestry(id).map(|a| self.tree.account(a)).find(|a| a.own_closed).map(|a| a.path.clone())
    }

    /// The book after `edit`, or why not (`self` is unchanged either way).
    pub fn apply(&self, edit: &AccountEdit) -> Result<AccountBook, EditError> {
        let mut specs = self.specs.clone();
        let mut seed = self.seed.clone();
        let mut order = self.tree.paths_in_id_order();
        let path = edit.path();
        if !matches!(edit, AccountEdit::Create(_)) && !specs.contains_key(path) {
            // An account only implied by a path is declared by its first edit.
            if self.tree.get(path).is_none_or(|id| id == crate::AccountId::ROOT) {
                return Err(self.unknown(path));
            }
            specs.insert(path.to_string(), AccountSpec { path: path.to_string(), ..Default::default() });
        }
        match edit {
            AccountEdit::Create(s) => {
                if specs.contains_key(&s.path) {
                    return Err(EditError::Exists(s.path.clone()));
                }
                let parent = s.path.rsplit_once('/').map(|(p, _)| p);
                if let Some(closed) = parent.and_then(|p| self.closed_at(p)) {
                    return Err(EditError::Closed { path: s.path.clone(), closed });
                }
                specs.insert(s.path.clone(), s.clone());
            }
            AccountEdit::Replace(s) => {
                specs.insert(s.path.clone(), s.clone());
            }
            AccountEdit::Set { field, value, .. } => {
                let v = value.or_else(|| seed.get(path).and_then(|s| field.get(s)));
                field.set(specs.get_mut(path).expect("known"), v);
            }
            AccountEdit::SetUser { user, share, .. } => {
                let v = share.or_else(|| seed.get(path).and_then(|s| s.users.get(user).copied()));
                set_user(&mut specs.get_mut(path).expect("known").users, user, v);
            }
            AccountEdit::SetUserBudget { user, budget_gpu_hours, .. } => {
                let v = budget_gpu_hours.or_else(|| seed.get(path).and_then(|s| s.user_budgets.get(user).copied()));
                set_user(&mut specs.get_mut(path).expect("known").user_budgets, user, v);
            }
            AccountEdit::Close { .. } => {
                let s = specs.get_mut(path).expect("known");
                if s.closed {
                    return Err(EditError::Closed { path: path.to_string(), closed: path.to_string() });
                }
                s.closed = true;
            }
            AccountEdit::Reopen { .. } => {
                if !specs[path].closed {
                    return Err(EditError::NotClosed(path.to_string()));
                }
                let parent = path.rsplit_once('/').map(|(p, _)| p);
                if let Some(closed) = parent.and_then(|p| self.closed_at(p)) {
                    return Err(EditError::Closed { path: path.to_string(), closed });
                }
                specs.get_mut(path).expect("known").closed = false;
            }
            AccountEdit::Rename { to, .. } => {
                let bad = |why| Err(EditError::BadRename { path: path.to_string(), to: to.clone(), why });
                let parent = |p: &str| p.rsplit_once('/').map(|(p, _)| p.to_string());
                if parent(path) != parent(to) {
                    return bad("a rename keeps the parent (only the last segment changes)");
                }
                if self.tree.get(to).is_some() {
                    return bad("that account exists already");
                }
                let moved = |p: &str| -> Option<String> {
                    if p == path {
                        Some(to.clone())
                    } else {
                        p.strip_prefix(path).filter(|r| r.starts_with('/')).map(|r| format!("{to}{r}"))
                    }
                };
                for p in &mut order {
                    if let Some(n) = moved(p) {
                        *p = n;
                    }
                }
                let rekey = |m: BTreeMap<String, AccountSpec>| -> BTreeMap<String, AccountSpec> {
                    m.into_values()
                        .map(|mut s| {
                            if let Some(n) = moved(&s.path) {
                                s.path = n;
                            }
                            (s.path.clone(), s)
                        })
                        .collect()
                };
                specs = rekey(specs);
                seed = rekey(seed);
            }
        }
        let list: Vec<AccountSpec> = specs.values().cloned().collect();
        let tree = AccountTree::build_ordered(&order, &list)?;
        Ok(AccountBook { seed, specs, tree })
    }

    /// The book after every edit of `edits` in order, or the first refusal
    /// (`self` is unchanged either way): as [`AccountBook::apply`] one by
    /// one, but a value edit (a budget, share or impact, a user's share or
    /// budget) of a declared account changes the declaration in place and
    /// the tree is resolved again once, before the next edit that reads it
    /// (a create, close, reopen, rename, import) and at the end. So a
    /// change of N users' shares costs one resolution of the tree, not N.
    pub fn apply_all(&self, edits: &[AccountEdit]) -> Result<AccountBook, EditError> {
        let mut book = self.clone();
        let mut stale = false;
        for e in edits {
            if book.set_in_place(e) {
                stale = true;
                continue;
            }
            if stale {
                book.resolve()?;
                stale = false;
            }
            book = book.apply(e)?;
        }
        if stale {
            book.resolve()?;
        }
        Ok(book)
    }

    /// A value edit of a declared account, made on the declaration alone
    /// (the tree is then stale); false for any other edit.
    fn set_in_place(&mut self, edit: &AccountEdit) -> bool {
        let path = edit.path();
        let seed = self.seed.get(path);
        let Some(spec) = self.specs.get_mut(path) else { return false };
        match edit {
            AccountEdit::Set { field, value, .. } => {
                field.set(spec, value.or_else(|| seed.and_then(|s| field.get(s))));
            }
            AccountEdit::SetUser { user, share, .. } => {
                let v = share.or_else(|| seed.and_then(|s| s.users.get(user).copied()));
                set_user(&mut spec.users, user, v);
            }
            AccountEdit::SetUserBudget { user, budget_gpu_hours, .. } => {
                let v = budget_gpu_hours.or_else(|| seed.and_then(|s| s.user_budgets.get(user).copied()));
                set_user(&mut spec.user_budgets, user, v);
            }
            _ => return false,
        }
        true
    }

    /// Resolves the tree again from the declarations, ids kept.
    fn resolve(&mut self) -> Result<(), EditError> {
        let list: Vec<AccountSpec> = self.specs.values().cloned().collect();
        self.tree = AccountTree::build_ordered(&self.tree.paths_in_id_order(), &list)?;
        Ok(())
    }

    /// The edits that turn this book's accounts into `want` (an import):
    /// creations, replacements of accounts whose declaration differs, and
    /// closings of open accounts that `want` does not list. Renames cannot
    /// be told from a close and a create, so none is made.
    pub fn diff(&self, want: &[AccountSpec]) -> Vec<AccountEdit> {
        let want = by_path(want);
        let mut out = Vec::new();
        for (path, w) in &want {
            match self.specs.get(path) {
                None => out.push(AccountEdit::Create(w.clone())),
                Some(have) if have != w => out.push(AccountEdit::Replace(w.clone())),
                Some(_) => {}
            }
        }
        for (path, have) in &self.specs {
            if !want.contains_key(path) && !have.closed {
                out.push(AccountEdit::Close { path: path.clone() });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(path: &str) -> AccountSpec {
        AccountSpec { path: path.into(), ..Default::default() }
    }

    fn book() -> AccountBook {
        let mut a = spec("org/a");
        a.budget_gpu_hours = Some(10.0);
        a.users.insert("alice".into(), 2.0);
        AccountBook::seed(&AccountTree::build(&[a, spec("org/b/x"), spec("org/c")]).unwrap())
    }

    fn id(b: &AccountBook, p: &str) -> u32 {
        b.tree().get(p).unwrap_or_else(|| panic!("{p} exists")).0
    }

    /// ACC-1: every edit keeps the ids of the accounts there were.
    #[test]
    fn edits_keep_every_id() {
        let b = book();
        let before: Vec<(String, u32)> = b.tree().ids().map(|i| (b.tree().account(i).path.clone(), i.0)).collect();
        let edits = [
            AccountEdit::Create(spec("org/aa/new")),
            AccountEdit::Set { path: "org/c".into(), field: AccountField::Share, value: Some(3.0) },
            AccountEdit::Close { path: "org/c".into() },
            AccountEdit::Rename { path: "org/b".into(), to: "org/bee".into() },
        ];
        let mut now = b.clone();
        for e in &edits {
            now = now.apply(e).unwrap_or_else(|err| panic!("{e:?}: {err}"));
            let renamed = matches!(e, AccountEdit::Rename { .. });
            for (p, i) in &before {
                let p = if renamed { p.replacen("org/b", "org/bee", 1) } else { p.clone() };
                assert_eq!(id(&now, &p), *i, "{p} after {e:?}");
            }
        }
        let n = before.len() as u32;
        assert_eq!((id(&now, "org/aa"), id(&now, "org/aa/new")), (n + 1, n + 2), "new ones next, parents first");
        assert_eq!(now.tree().account(now.tree().get("org/bee/x").unwrap()).path, "org/bee/x", "the subtree moved");
        assert!(now.tree().get("org/b").is_none() && now.tree().get("org/b/x").is_none());
        assert!(now.tree().account(now.tree().get("org/c").unwrap()).closed);
        assert_eq!(b, book(), "apply leaves the book it was called on as it was");
    }

    #[test]
    fn null_is_the_seeds_value_and_users_follow() {
        let b = book();
        let set = |b: &AccountBook, v| {
            b.apply(&AccountEdit::Set { path: "org/a".into(), field: AccountField::Budget, value: v }).unwrap()
        };
        let budget = |b: &AccountBook| b.tree().account(b.tree().get("org/a").unwrap()).budget_gpu_hours;
        assert_eq!(budget(&set(&b, Some(4.0))), Some(4.0));
        assert_eq!(budget(&set(&set(&b, Some(4.0)), None)), Some(10.0), "back to the config's");
        let user = |b: &AccountBook, u: &str, v| {
            b.apply(&AccountEdit::SetUser { path: "org/a".into(), user: u.into(), share: v }).unwrap()
        };
        let share = |b: &AccountBook, u: &str| b.tree().account(b.tree().get("org/a").unwrap()).user_share(u);
        assert_eq!(share(&user(&b, "bob", Some(3.0)), "bob"), 3.0);
        assert_eq!(share(&user(&user(&b, "alice", Some(5.0)), "alice", None), "alice"), 2.0, "the config's 2");
        assert_eq!(share(&user(&user(&b, "bob", Some(3.0)), "bob", None), "bob"), 1.0, "none in the config: 1");
        let c = b.apply(&AccountEdit::Create(spec("org/n"))).unwrap();
        let c =
            c.apply(&AccountEdit::Set { path: "org/n".into(), field: AccountField::Impact, value: Some(5.0) }).unwrap();
        let c = c.apply(&AccountEdit::Set { path: "org/n".into(), field: AccountField::Impact, value: None }).unwrap();
        assert_eq!(c.tree().account(c.tree().get("org/n").unwrap()).impact, 1.0, "not in the config: inherited");
    }

    /// Refusals name what was wrong; nothing changes.
    #[test]
    fn refusals() {
        let b = book();
        let closed = b.apply(&AccountEdit::Close { path: "org/b".into() }).unwrap();
        let cases: [(&AccountBook, AccountEdit, &str); 10] = [
            (
                &b,
                AccountEdit::Close { path: "org/zz".into() },
                "unknown account \"org/zz\" (accounts: org, org/a, org/b, org/b/x, org/c)",
            ),
            (&b, AccountEdit::Create(spec("org/a")), "exists already"),
            (&b, AccountEdit::Create(spec("org/a b")), "invalid account path"),
            (
                &b,
                AccountEdit::Set { path: "org/a".into(), field: AccountField::Share, value: Some(-1.0) },
                "share must be a finite number > 0",
            ),
            (
                &b,
                AccountEdit::SetUser { path: "org/a".into(), user: "no one".into(), share: Some(1.0) },
                "invalid user name",
            ),
            (&b, AccountEdit::Rename { path: "org/a".into(), to: "other/a".into() }, "keeps the parent"),
            (&b, AccountEdit::Rename { path: "org/a".into(), to: "org/c".into() }, "exists already"),
            (&b, AccountEdit::Reopen { path: "org/a".into() }, "is not closed"),
            (&closed, AccountEdit::Create(spec("org/b/y")), "\"org/b\" is closed"),
            (&closed, AccountEdit::Close { path: "org/b".into() }, "is closed"),
        ];
        for (book, e, want) in cases {
            let err = book.apply(&e).expect_err(want).to_string();
            assert!(err.contains(want), "{e:?}: {err}");
        }
        let implied =
            b.apply(&AccountEdit::Close { path: "org".into() }).expect("an implied account is declared by its edit");
        assert!(implied.spec("org").is_some_and(|s| s.closed));
    }

    /// A batch gives the book one by one would, with one resolution of
    /// the tree for a run of value edits; a refusal anywhere changes nothing.
    #[test]
    fn apply_all_is_apply_one_by_one() {
        let b = book();
        let mut edits: Vec<AccountEdit> = (0..50)
            .map(|i| AccountEdit::SetUser { path: "org/a".into(), user: format!("u{i}"), share: Some(1.0 + i as f64) })
            .collect();
        edits.push(AccountEdit::SetUser { path: "org/a".into(), user: "alice".into(), share: None });
        edits.push(AccountEdit::SetUserBudget { path: "org/a".into(), user: "u1".into(), budget_gpu_hours: Some(2.0) });
        edits.push(AccountEdit::Set { path: "org/b/x".into(), field: AccountField::Share, value: Some(3.0) });
        edits.push(AccountEdit::Rename { path: "org/b".into(), to: "org/bee".into() });
        edits.push(AccountEdit::Set { path: "org/bee/x".into(), field: AccountField::Impact, value: Some(2.0) });
        edits.push(AccountEdit::Close { path: "org".into() });
        let mut one_by_one = b.clone();
        for e in &edits {
            one_by_one = one_by_one.apply(e).unwrap_or_else(|err| panic!("{e:?}: {err}"));
        }
        assert_eq!(b.apply_all(&edits).unwrap(), one_by_one);
        let mut bad = edits.clone();
        bad.insert(3, AccountEdit::SetUser { path: "org/a".into(), user: "no one".into(), share: Some(1.0) });
        assert!(b.apply_all(&bad).unwrap_err().to_string().contains("invalid user name"));
        let too_many: Vec<AccountEdit> = (0..=crate::account::MAX_USERS)
            .map(|i| AccountEdit::SetUser { path: "org/c".into(), user: format!("u{i}"), share: Some(1.0) })
            .collect();
        let e = b.apply_all(&too_many).unwrap_err();
        assert_eq!((e.field(), e.to_string().contains("at most 1000")), ("users", true), "{e}");
    }

    #[test]
    fn diff_makes_the_file_s_tree() {
        let b = book();
        let mut a = spec("org/a");
        a.share = Some(5.0);
        let want = [a, spec("org/b/x"), spec("org/new")];
        let edits = b.diff(&want);
        assert_eq!(
            edits,
            [
                AccountEdit::Replace(want[0].clone()),
                AccountEdit::Create(spec("org/new")),
                AccountEdit::Close { path: "org/c".into() }
            ]
        );
        let mut after = b;
        for e in &edits {
            after = after.apply(e).unwrap();
        }
        let acc = after.tree().account(after.tree().get("org/a").unwrap());
        assert_eq!((acc.share, acc.budget_gpu_hours, acc.users.len()), (5.0, None, 0), "absent means absent");
        assert!(after.diff(&want).is_empty(), "nothing left to do");
    }
}
