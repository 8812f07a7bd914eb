//! SLURM-2: the fair-share factor by Slurm's Fair Tree algorithm
//! (`docs/baselines.md`).
//!
//! The association tree is Allot's account tree with each account's users
//! as leaves beside its sub-accounts: the users declared in its `users`
//! table and every user who has submitted to it. Each association gets a
//! level fair share `LF = S / U` among its siblings: `S` its shares over
//! its and its siblings' shares (an account's `share`, a user's share in
//! its account, default 1), `U` its usage decayed by `PriorityDecayHalfLife`
//! over its and its siblings' usage. `S = 0` gives 0, else `U = 0` gives
//! infinity. Siblings are sorted by `LF`, highest first, users before
//! accounts on a tie, then by name; the tree is walked depth first and each
//! user found gets the next rank: factor `rank / n` for `n` users, the
//! first 1. Ties as documented: sibling users with the same `LF` share a
//! rank; a user tied with a sibling account shares the rank of that
//! account's first user; sibling accounts with the same `LF` have their
//! children merged before descending.
//!
//! With a controller per cluster (`SlurmPolicy::per_cluster`, run on the
//! split tree of `allot_sim::split`, whose root has one account per
//! cluster), each child of the root is ranked alone, as its cluster's own
//! Fair Tree: its users get the ranks `n_c … 1` of its `n_c` users, and
//! usage elsewhere does not count. Users of the root itself belong to no
//! cluster and get no factor (0).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use crate::Time;
use crate::account::AccountId;
use crate::state::State;

/// An association: an account, or a user of an account.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Assoc {
    Account(AccountId),
    User(AccountId, String),
}

/// An association with its level fair share among its siblings.
struct Ranked {
    assoc: Assoc,
    level_fs: f64,
    /// For ordering and reasons: the account path or the user name.
    name: String,
}

/// Fair Tree's result: the factor (0..=1) of every user association.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FairTree {
    factors: BTreeMap<(AccountId, String), f64>,
    users: usize,
}

impl FairTree {
    /// The factor of `user` in `account` (0 for one the tree does not know).
    pub fn factor(&self, account: AccountId, user: &str) -> f64 {
        self.factors.get(&(account, user.to_string())).copied().unwrap_or(0.0)
    }

    /// The number of user associations ranked.
    pub fn users(&self) -> usize {
        self.users
    }

    /// Ranks every user association of `state` as of `now`.
    pub fn compute(state: &State, now: Time) -> FairTree {
        FairTree::compute_in(state, now, false)
    }

    /// The same, with one tree per child of the root when `per_cluster`
    /// (see the module documentation).
    pub(crate) fn compute_in(state: &State, now: Time, per_cluster: bool) -> FairTree {
        let walk = Walk::new(state, now);
        let n = walk.users.values().map(BTreeSet::len).sum::<usize>();
        let mut out = FairTree { factors: BTreeMap::new(), users: n };
        if !per_cluster {
            let mut rank = Rank { rank: n, rnt: n, n };
            walk.descend(&[AccountId::ROOT], false, &mut rank, &mut out.factors);
            return out;
        }
        let tree = &state.accounts;
        let mut per_top: BTreeMap<AccountId, usize> = BTreeMap::new();
        for (&a, users) in &walk.users {
            if let Some(top) = tree.ancestry(a).last() {
                *per_top.entry(top).or_default() += users.len();
            }
        }
        for &top in &tree.account(AccountId::ROOT).children {
            let n = per_top.get(&top).copied().unwrap_or(0);
            let mut rank = Rank { rank: n, rnt: n, n };
            walk.descend(&[top], false, &mut rank, &mut out.factors);
        }
        out
    }
}

/// Rank and rank-without-ties, counting down from the number of users.
struct Rank {
    rank: usize,
    rnt: usize,
    n: usize,
}

/// What the walk reads: the users of each account and the usages.
struct Walk<'a> {
    state: &'a State,
    now: Time,
    users: BTreeMap<AccountId, BTreeSet<String>>,
    member_usage: BTreeMap<(AccountId, String), f64>,
}

impl<'a> Walk<'a> {
    fn new(state: &'a State, now: Time) -> Walk<'a> {
        let mut users: BTreeMap<AccountId, BTreeSet<String>> = BTreeMap::new();
        for id in state.accounts.ids() {
            let a = state.accounts.account(id);
            if !a.users.is_empty() {
                users.entry(id).or_default().extend(a.users.keys().cloned());
            }
        }
        let mut member_usage = BTreeMap::new();
        for m in 0..state.member_count() {
            let (a, u) = state.member_info(crate::pending::MemberId(m as u32));
            users.entry(a).or_default().insert(u.to_string());
            member_usage.insert((a, u.to_string()), state.ledger.member_priority_decayed_ngs_at(m, now));
        }
        Walk { state, now, users, member_usage }
    }

    /// The children of the (merged) accounts `parents`, each with its level
    /// fair share among the children of its own parent, in Fair Tree order.
    fn children(&self, parents: &[AccountId]) -> Vec<Ranked> {
        let tree = &self.state.accounts;
        let mut out = Vec::new();
        for &p in parents {
            let acc = tree.account(p);
            let mut level: Vec<(Assoc, f64, f64, String)> = Vec::new();
            for &c in &acc.children {
                let a = tree.account(c);
                level.push((
                    Assoc::Account(c),
                    a.share,
                    self.state.ledger.priority_decayed_ngs_at(c, self.now),
                    a.path.clone(),
                ));
            }
            for u in self.users.get(&p).into_iter().flatten() {
                let usage = self.member_usage.get(&(p, u.clone())).copied().unwrap_or(0.0);
                level.push((Assoc::User(p, u.clone()), acc.user_share(u), usage, u.clone()));
            }
            let shares: f64 = level.iter().map(|l| l.1).sum();
            let usage: f64 = level.iter().map(|l| l.2).sum();
            for (assoc, s, u, name) in level {
                out.push(Ranked { assoc, level_fs: level_fs(s, shares, u, usage), name });
            }
        }
        out.sort_by(order);
        out
    }

    /// Visits the children of `parents` in order, ranking users (Fair
    /// Tree's `_calc_tree_fs`); `tied`: the parents tied with the user
    /// visited just before them.
    fn descend(
        &self,
        parents: &[AccountId],
        parent_tied: bool,
        rank: &mut Rank,
        out: &mut BTreeMap<(AccountId, String), f64>,
    ) {
        let kids = self.children(parents);
        let mut prev: Option<f64> = None;
        let mut i = 0;
        while i < kids.len() {
            let k = &kids[i];
            let tied = if i == 0 { parent_tied } else { prev == Some(k.level_fs) };
            match &k.assoc {
                Assoc::User(a, u) => {
                    if !tied {
                        rank.rank = rank.rnt;
                    }
                    out.insert((*a, u.clone()), rank.rank as f64 / rank.n as f64);
                    rank.rnt -= 1;
                    i += 1;
                }
                Assoc::Account(_) => {
                    // Sibling accounts with the same LF are merged.
                    let mut merged = Vec::new();
                    let mut j = i;
                    while j < kids.len() && kids[j].level_fs == k.level_fs {
                        if let Assoc::Account(a) = kids[j].assoc {
                            merged.push(a);
                        }
                        j += 1;
                    }
                    self.descend(&merged, tied, rank, out);
                    i = j;
                }
            }
            prev = Some(k.level_fs);
        }
    }
}

/// `LF = S / U` (0 without shares, infinite without usage).
fn level_fs(share: f64, shares: f64, usage: f64, usages: f64) -> f64 {
    let s = if shares > 0.0 { share / shares } else { 0.0 };
    if s == 0.0 {
        return 0.0;
    }
    let u = if usages > 0.0 { usage / usages } else { 0.0 };
    if u == 0.0 { f64::INFINITY } else { s / u }
}

/// Highest `LF` first, users before accounts on a tie, then by name.
fn order(a: &Ranked, b: &Ranked) -> Ordering {
    let user = |r: &Ranked| matches!(r.assoc, Assoc::Account(_));
    b.level_fs
        .partial_cmp(&a.level_fs)
        .unwrap_or(Ordering::Equal)
        .then_with(|| user(a).cmp(&user(b)))
        .then_with(|| a.name.cmp(&b.name))
        .then_with(|| a.assoc.cmp(&b.assoc))
}
