//! The account tree: paths, shares, budgets, impact and legacy pools.
//!
//! Accounts are written as paths (`ai2/olmo/pretrain`). The tree has a
//! virtual root (id 0, path `""`); parents named by a path but not declared
//! are created with defaults. Resolution rules:
//! * share (rule FS-0): an explicit `share`; otherwise, if every sibling
//!   without an explicit share has a budget, the budget; otherwise 1.
//! * impact: own, else inherited from the nearest ancestor, else 1.
//! * legacy pools (rule PRIO-2): those of the nearest account on the path that
//!   lists `legacy_pools`; none means only `shared` pools.

use std::collections::BTreeMap;

use crate::cluster::PoolId;

/// Longest account path, in characters.
pub const MAX_PATH_CHARS: usize = 256;
/// Longest segment of an account path, in characters.
pub const MAX_SEGMENT_CHARS: usize = 64;
/// Most segments of an account path (levels of the tree).
pub const MAX_DEPTH: usize = 16;
/// Most named users of one account, in `users` and in `user_budgets` each.
pub const MAX_USERS: usize = 1_000;

/// Index of an account in [`AccountTree::accounts`]; 0 is the virtual root.
#[derive(serde::Serialize, serde::Deserialize, Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AccountId(pub u32);

impl AccountId {
    pub const ROOT: AccountId = AccountId(0);
}

/// An account as declared in the configuration.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq)]
pub struct AccountSpec {
    pub path: String,
    pub share: Option<f64>,
    pub budget_gpu_hours: Option<f64>,
    pub impact: Option<f64>,
    pub legacy_pools: Option<Vec<PoolId>>,
    /// Cap on GPUs held by `service` workloads of this subtree (rule SVC-2).
    pub max_service_gpus: Option<u32>,
    /// Shares of named users of this account's own work (rule FS-2); a user
    /// not named has share 1.
    pub users: BTreeMap<String, f64>,
    /// Closed (rule ACC-2): takes no new work; its accepted work runs on.
    pub closed: bool,
    /// Budgets of named users of this account's own work, NGH per budget
    /// period (rule BUD-6); a user not named has only the account's budget.
    pub user_budgets: BTreeMap<String, f64>,
}

/// A resolved account.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct Account {
    pub path: String,
    pub parent: Option<AccountId>,
    pub children: Vec<AccountId>,
    pub depth: u32,
    /// Resolved share among siblings (rule FS-0).
    pub share: f64,
    /// Whether `share` was given explicitly.
    pub explicit_share: bool,
    /// Own budget in NGH per budget period, if any.
    pub budget_gpu_hours: Option<f64>,
    /// Own or inherited impact.
    pub impact: f64,
    /// Own or inherited legacy pools (`None`: only shared pools).
    pub legacy_pools: Option<Vec<PoolId>>,
    pub max_service_gpus: Option<u32>,
    /// Whether this account was declared (not only implied by a path).
    pub declared: bool,
    /// Shares of named users of this account's own work (rule FS-2).
    pub users: BTreeMap<String, f64>,
    /// Closed itself or below a closed account (rule ACC-2).
    pub closed: bool,
    /// Closed itself (`closed` may be inherited).
    pub own_closed: bool,
    /// Budgets of named users of this account's own work, NGH per budget
    /// period (rule BUD-6).
    pub user_budgets: BTreeMap<String, f64>,
}

impl Account {
    /// The FS-2 share of `user` in this account: as set, else 1.
    pub fn user_share(&self, user: &str) -> f64 {
        self.users.get(user).copied().unwrap_or(1.0)
    }

    /// The BUD-6 budget of `user` in this account (NGH per period), if set.
    pub fn user_budget(&self, user: &str) -> Option<f64> {
        self.user_budgets.get(user).copied()
    }
}

/// Errors building the tree.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AccountTreeError {
    #[error("no accounts declared")]
    Empty,
    #[error("invalid account path {0:?}: use non-empty segments of letters, digits, '-', '_', '.' separated by '/'")]
    BadPath(String),
    /// A path of valid segments past a bound (its length, a segment's, its
    /// depth); the path is shown cut to its first 64 characters.
    #[error("invalid account path {}: {why}", shown(.path))]
    PathTooLong { path: String, why: String },
    #[error("account {}: {count} users in {field}, at most {}", shown(.path), MAX_USERS)]
    TooManyUsers { path: String, field: &'static str, count: usize },
    #[error("account {0:?} is declared twice")]
    Duplicate(String),
    #[error("account {path:?}: {field} must be a finite number > 0 (got {value})")]
    BadNumber { path: String, field: &'static str, value: f64 },
    #[error("account {path:?}: invalid user name {user:?} in users: use letters, digits, '-', '_', '.'")]
    BadUser { path: String, user: String },
    #[error("account {path:?}: users.{user} must be a finite number > 0 (got {value})")]
    BadUserShare { path: String, user: String, value: f64 },
    #[error("account {0:?} cannot keep its id: its parent comes after it")]
    BadOrder(String),
    #[error("account {path:?}: invalid user name {user:?} in user_budgets: use letters, digits, '-', '_', '.'")]
    BadBudgetUser { path: String, user: String },
    #[error("account {path:?}: user_budgets.{user} must be a finite number > 0 (got {value})")]
    BadUserBudget { path: String, user: String, value: f64 },
}

/// The resolved tree.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct AccountTree {
    pub accounts: Vec<Account>,
    by_path: BTreeMap<String, AccountId>,
    /// The declared specs it was built from, in path order.
    declared: Vec<AccountSpec>,
}

/// A path as an error shows it: quoted, cut to its first 64 characters.
fn shown(path: &str) -> String {
    let n = path.chars().count();
    if n <= 64 {
        format!("{path:?}")
    } else {
        let head: String = path.chars().take(64).collect();
        format!("{head:?}… ({n} characters)")
    }
}

/// Whether `path` may name an account: non-empty segments of letters,
/// digits, `-`, `_`, `.` separated by `/`, at most [`MAX_PATH_CHARS`]
/// characters, [`MAX_SEGMENT_CHARS`] per segment and [`MAX_DEPTH`]
/// segments. The one check of every way an account comes to be (a config,
/// the API, the command line, a stored tree, a change file): each builds its
/// tree through [`AccountTree::build_ordered`], which calls it.
pub fn check_path(path: &str) -> Result<(), AccountTreeError> {
    let too_long = |why: String| Err(AccountTreeError::PathTooLong { path: path.to_string(), why });
    let chars = path.chars().count();
    if chars > MAX_PATH_CHARS {
        return too_long(format!("{chars} characters, at most {MAX_PATH_CHARS}"));
    }
    let depth = path.split('/').count();
    if depth > MAX_DEPTH {
        return too_long(format!("{depth} levels, at most {MAX_DEPTH}"));
    }
    if !path.split('/').all(valid_segment) {
        return Err(AccountTreeError::BadPath(path.to_string()));
    }
    if let Some(seg) = path.split('/').find(|s| s.chars().count() > MAX_SEGMENT_CHARS) {
        return too_long(format!(
            "segment {} has {} characters, at most {MAX_SEGMENT_CHARS}",
            shown(seg),
            seg.chars().count()
        ));
    }
    Ok(())
}

/// Whether `user` is a well-formed user name (FS-2, BUD-6): the same
/// characters as an account path's segment.
pub fn valid_user_name(user: &str) -> bool {
    valid_segment(user)
}

fn valid_segment(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The first entry of a user table (`users`, `user_budgets`) that is
/// invalid: `(user, None)` for a bad name, `(user, Some(value))` for a value
/// that is not a finite number > 0.
fn bad_user_entry(map: &BTreeMap<String, f64>) -> Option<(String, Option<f64>)> {
    map.iter().find_map(|(user, &v)| {
        if !valid_segment(user) {
            Some((user.clone(), None))
        } else {
            (!(v.is_finite() && v > 0.0)).then(|| (user.clone(), Some(v)))
        }
    })
}

impl AccountTree {
    /// Builds the tree from declared accounts (any order): ids follow the
    /// sorted paths, so parents precede children.
    pub fn build(specs: &[AccountSpec]) -> Result<AccountTree, AccountTreeError> {
        AccountTree::build_ordered(&[], specs)
    }

    /// Builds the tree giving the paths of `order` the ids 1, 2, … in that
    /// order (rule ACC-1: a live tree keeps every account's id, new ones are
    /// appended), then the other paths of `specs` in path order. Each path of
    /// `order` must come after its parent's; paths of `order` that `specs`
    /// does not declare are implied accounts with defaults.
    pub fn build_ordered(order: &[String], specs: &[AccountSpec]) -> Result<AccountTree, AccountTreeError> {
        if specs.is_empty() {
            return Err(AccountTreeError::Empty);
        }
        let root = Account {
            path: String::new(),
            parent: None,
            children: Vec::new(),
            depth: 0,
            share: 1.0,
            explicit_share: true,
            budget_gpu_hours: None,
            impact: 1.0,
            legacy_pools: None,
            max_service_gpus: None,
            declared: false,
            users: BTreeMap::new(),
            closed: false,
            own_closed: false,
            user_budgets: BTreeMap::new(),
        };
        let mut tree = AccountTree { accounts: vec![root], by_path: BTreeMap::new(), declared: Vec::new() };
        tree.by_path.insert(String::new(), AccountId::ROOT);
        for (i, p) in order.iter().enumerate() {
            check_path(p)?;
            if tree.ensure(p).0 as usize != i + 1 {
                return Err(AccountTreeError::BadOrder(p.clone()));
            }
        }
        let mut sorted: Vec<&AccountSpec> = specs.iter().collect();
        sorted.sort_by(|a, b| a.path.cmp(&b.path));
        tree.declared = sorted.iter().map(|s| (*s).clone()).collect();
        for s in sorted {
            check_path(&s.path)?;
            for (field, table) in [("users", &s.users), ("user_budgets", &s.user_budgets)] {
                if table.len() > MAX_USERS {
                    return Err(AccountTreeError::TooManyUsers { path: s.path.clone(), field, count: table.len() });
                }
            }
            for (field, v) in [("share", s.share), ("budget_gpu_hours", s.budget_gpu_hours), ("impact", s.impact)] {
                if let Some(v) = v
                    && !(v.is_finite() && v > 0.0)
                {
                    return Err(AccountTreeError::BadNumber { path: s.path.clone(), field, value: v });
                }
            }
            let path = || s.path.clone();
            match bad_user_entry(&s.users) {
                Some((user, None)) => return Err(AccountTreeError::BadUser { path: path(), user }),
                Some((user, Some(value))) => return Err(AccountTreeError::BadUserShare { path: path(), user, value }),
                None => {}
            }
            match bad_user_entry(&s.user_budgets) {
                Some((user, None)) => return Err(AccountTreeError::BadBudgetUser { path: path(), user }),
                Some((user, Some(value))) => return Err(AccountTreeError::BadUserBudget { path: path(), user, value }),
                None => {}
            }
            let id = tree.ensure(&s.path);
            let a = &mut tree.accounts[id.0 as usize];
            if a.declared {
                return Err(AccountTreeError::Duplicate(s.path.clone()));
            }
            a.declared = true;
            a.explicit_share = s.share.is_some();
            a.share = s.share.unwrap_or(1.0);
            a.budget_gpu_hours = s.budget_gpu_hours;
            a.impact = s.impact.unwrap_or(f64::NAN);
            a.legacy_pools = s.legacy_pools.clone();
            a.max_service_gpus = s.max_service_gpus;
            a.users = s.users.clone();
            a.own_closed = s.closed;
            a.user_budgets = s.user_budgets.clone();
        }
        tree.resolve();
        Ok(tree)
    }

    fn ensure(&mut self, path: &str) -> AccountId {
        if let Some(&id) = self.by_path.get(path) {
            return id;
        }
        let (parent, depth) = match path.rsplit_once('/') {
            Some((p, _)) => {
                let pid = self.ensure(p);
                (pid, self.accounts[pid.0 as usize].depth + 1)
            }
            None => (AccountId::ROOT, 1),
        };
        let id = AccountId(self.accounts.len() as u32);
        self.accounts.push(Account {
            path: path.to_string(),
            parent: Some(parent),
            children: Vec::new(),
            depth,
            share: 1.0,
            explicit_share: false,
            budget_gpu_hours: None,
            impact: f64::NAN,
            legacy_pools: None,
            max_service_gpus: None,
            declared: false,
            users: BTreeMap::new(),
            closed: false,
            own_closed: false,
            user_budgets: BTreeMap::new(),
        });
        self.accounts[parent.0 as usize].children.push(id);
        self.by_path.insert(path.to_string(), id);
        id
    }

    /// Resolves inherited fields and default shares; parents precede
    /// children in id order (path order, or creation order: ACC-1).
    fn resolve(&mut self) {
        for i in 1..self.accounts.len() {
            let parent = self.accounts[i].parent.expect("non-root has a parent").0 as usize;
            debug_assert!(parent < i, "a parent's id precedes its children's");
            self.accounts[i].closed = self.accounts[i].own_closed || self.accounts[parent].closed;
            if self.accounts[i].impact.is_nan() {
                self.accounts[i].impact = self.accounts[parent].impact;
            }
            if self.accounts[i].legacy_pools.is_none() {
                self.accounts[i].legacy_pools = self.accounts[parent].legacy_pools.clone();
            }
        }
        for i in 0..self.accounts.len() {
            let kids = self.accounts[i].children.clone();
            let implicit: Vec<AccountId> =
                kids.iter().copied().filter(|k| !self.accounts[k.0 as usize].explicit_share).collect();
            let by_budget =
                !implicit.is_empty() && implicit.iter().all(|k| self.accounts[k.0 as usize].budget_gpu_hours.is_some());
            for k in implicit {
                let a = &mut self.accounts[k.0 as usize];
                a.share = if by_budget { a.budget_gpu_hours.unwrap_or(1.0) } else { 1.0 };
            }
        }
    }

    pub fn get(&self, path: &str) -> Option<AccountId> {
        self.by_path.get(path).copied()
    }

    pub fn account(&self, id: AccountId) -> &Account {
        &self.accounts[id.0 as usize]
    }

    pub fn len(&self) -> usize {
        self.accounts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.accounts.len() <= 1
    }

    /// The account and its ancestors up to (excluding) the root, leaf first.
    pub fn ancestry(&self, id: AccountId) -> impl Iterator<Item = AccountId> + '_ {
        let mut cur = Some(id);
        std::iter::from_fn(move || {
            let c = cur?;
            if c == AccountId::ROOT {
                return None;
            }
            cur = self.accounts[c.0 as usize].parent;
            Some(c)
        })
    }

    /// Whether `a` is `ancestor` or lies below it.
    pub fn is_within(&self, a: AccountId, ancestor: AccountId) -> bool {
        ancestor == AccountId::ROOT || self.ancestry(a).any(|x| x == ancestor)
    }

    /// Static entitled share of the whole cluster: the product over the path
    /// of share / Σ sibling shares.
    pub fn static_share(&self, id: AccountId) -> f64 {
        let mut f = 1.0;
        for a in self.ancestry(id) {
            let acc = self.account(a);
            let parent = self.account(acc.parent.expect("non-root"));
            let total: f64 = parent.children.iter().map(|c| self.account(*c).share).sum();
            f *= acc.share / total;
        }
        f
    }

    /// Ids of all accounts except the root, parents first: in path order
    /// for a tree built from a config, in creation order once accounts are
    /// created live (ACC-1).
    pub fn ids(&self) -> impl Iterator<Item = AccountId> {
        (1..self.accounts.len() as u32).map(AccountId)
    }

    /// The declared accounts as given (inherited values not filled in), in
    /// path order: building from them gives this tree's accounts again.
    pub fn declared(&self) -> &[AccountSpec] {
        &self.declared
    }

    /// Ids of all accounts except the root, in path order (for listings).
    pub fn ids_by_path(&self) -> impl Iterator<Item = AccountId> + '_ {
        self.by_path.values().copied().filter(|id| *id != AccountId::ROOT)
    }

    /// Every path except the root's, in id order: with
    /// [`AccountTree::build_ordered`], the order that keeps the ids.
    pub fn paths_in_id_order(&self) -> Vec<String> {
        self.accounts[1..].iter().map(|a| a.path.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(path: &str) -> AccountSpec {
        AccountSpec { path: path.into(), ..Default::default() }
    }

    #[test]
    fn user_shares_default_to_one_and_bad_ones_are_refused() {
        let mut a = spec("org/a");
        a.users.insert("alice".into(), 2.0);
        let t = AccountTree::build(std::slice::from_ref(&a)).unwrap();
        let acc = t.account(t.get("org/a").unwrap());
        assert_eq!((acc.user_share("alice"), acc.user_share("bob")), (2.0, 1.0));
        for v in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let mut b = a.clone();
            b.users.insert("bob".into(), v);
            let e = AccountTree::build(&[b]).unwrap_err();
            assert!(matches!(&e, AccountTreeError::BadUserShare { user, .. } if user == "bob"), "{v}: {e}");
        }
        let mut b = a.clone();
        b.users.insert("no one".into(), 1.0);
        assert!(matches!(AccountTree::build(&[b]), Err(AccountTreeError::BadUser { .. })));
    }

    #[test]
    fn implicit_parents_and_inheritance() {
        let mut team = spec("org/team");
        team.legacy_pools = Some(vec![PoolId(1)]);
        team.impact = Some(3.0);
        let t = AccountTree::build(&[spec("org/team/p1"), team, spec("org/other")]).unwrap();
        let p1 = t.get("org/team/p1").unwrap();
        assert_eq!(t.account(p1).legacy_pools, Some(vec![PoolId(1)]));
        assert_eq!(t.account(p1).impact, 3.0);
        assert_eq!(t.account(t.get("org/other").unwrap()).legacy_pools, None);
        assert_eq!(t.account(t.get("org").unwrap()).impact, 1.0);
        assert_eq!(t.ancestry(p1).count(), 3);
    }

    #[test]
    fn default_share_follows_budget_when_all_siblings_have_one() {
        let mut a = spec("x/a");
        a.budget_gpu_hours = Some(300.0);
        let mut b = spec("x/b");
        b.budget_gpu_hours = Some(100.0);
        let t = AccountTree::build(&[a, b]).unwrap();
        assert!((t.static_share(t.get("x/a").unwrap()) - 0.75).abs() < 1e-12);
        let mut c = spec("y/c");
        c.budget_gpu_hours = Some(300.0);
        let t = AccountTree::build(&[c, spec("y/d")]).unwrap();
        assert!((t.static_share(t.get("y/c").unwrap()) - 0.5).abs() < 1e-12);
    }

    /// Paths are bounded in length, segment and depth, checked in one
    /// place; the error names the bound and shows the path cut short.
    #[test]
    fn paths_are_bounded() {
        let seg = "s".repeat(MAX_SEGMENT_CHARS);
        let deep = vec!["a"; MAX_DEPTH].join("/");
        let long = [seg.as_str(); 4].join("/");
        for ok in [seg.as_str(), deep.as_str(), "org/a-1/b_2.c"] {
            assert_eq!(check_path(ok), Ok(()), "{ok}");
        }
        assert_eq!(long.len(), 4 * MAX_SEGMENT_CHARS + 3, "a 259-character path of valid segments");
        let huge = "x".repeat(200_000);
        let cases = [
            (format!("{deep}/a"), "17 levels, at most 16"),
            (format!("org/{seg}s"), "has 65 characters, at most 64"),
            (long, "259 characters, at most 256"),
            (huge, "200000 characters, at most 256"),
        ];
        for (path, says) in cases {
            let e = check_path(&path).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(says), "{msg}");
            assert!(msg.len() < 300, "the path is cut short: {msg}");
            assert!(matches!(AccountTree::build(&[spec(&path)]), Err(AccountTreeError::PathTooLong { .. })));
        }
        assert!(matches!(check_path("a//b"), Err(AccountTreeError::BadPath(_))));
    }

    #[test]
    fn users_per_account_are_bounded() {
        let mut a = spec("org/a");
        a.users = (0..MAX_USERS).map(|i| (format!("u{i}"), 1.0)).collect();
        assert!(AccountTree::build(std::slice::from_ref(&a)).is_ok(), "1,000 users");
        a.users.insert("one-more".into(), 1.0);
        let e = AccountTree::build(std::slice::from_ref(&a)).unwrap_err();
        assert_eq!(e.to_string(), "account \"org/a\": 1001 users in users, at most 1000");
        let mut b = spec("org/b");
        b.user_budgets = (0..=MAX_USERS).map(|i| (format!("u{i}"), 1.0)).collect();
        assert!(matches!(AccountTree::build(&[b]), Err(AccountTreeError::TooManyUsers { field: "user_budgets", .. })));
    }

    #[test]
    fn rejects_duplicates_bad_paths_and_numbers() {
        assert!(matches!(AccountTree::build(&[spec("a"), spec("a")]), Err(AccountTreeError::Duplicate(_))));
        assert!(matches!(AccountTree::build(&[spec("a//b")]), Err(AccountTreeError::BadPath(_))));
        let mut s = spec("a");
        s.share = Some(-1.0);
        assert!(matches!(AccountTree::build(&[s]), Err(AccountTreeError::BadNumber { field: "share", .. })));
        assert_eq!(AccountTree::build(&[]), Err(AccountTreeError::Empty));
    }
}
