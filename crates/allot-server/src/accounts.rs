//! Accounts at run time: the live tree (rules ACC-1..ACC-3; the edits are
//! `allot_core::AccountBook`'s), its declarations as the API and the store
//! write them, and the per-account views (budget, used, remaining,
//! fair-share standing).

use allot_core::policy::AllotPolicy;
use allot_core::{AccountBook, AccountEdit, AccountId, AccountTree, Cluster, State, Time};

use crate::views::{AccountDecl, AccountView};

pub use allot_trace::decl::{decl_of, spec_of};

/// The store's rows of a book: every account in id order, with its
/// declaration as JSON (`None`: only implied by a path).
pub fn stored_rows(book: &AccountBook, cluster: &Cluster) -> Vec<(i64, String, Option<String>)> {
    let tree = book.tree();
    tree.ids()
        .map(|id| {
            let path = tree.account(id).path.clone();
            let spec = book.spec(&path).map(|s| serde_json::to_string(&decl_of(s, cluster)).expect("serialises"));
            (i64::from(id.0), path, spec)
        })
        .collect()
}

/// A book from the store's rows (id order) and the config's tree as seed.
pub fn restore_book(
    seed: &AccountTree,
    rows: &[(i64, String, Option<String>)],
    cluster: &Cluster,
) -> Result<AccountBook, String> {
    let mut order = Vec::with_capacity(rows.len());
    let mut specs = Vec::new();
    for (i, (id, path, spec)) in rows.iter().enumerate() {
        if *id != i as i64 + 1 {
            return Err(format!("stored account ids are not 1, 2, …: {path:?} has id {id} at position {}", i + 1));
        }
        order.push(path.clone());
        if let Some(json) = spec {
            let d: AccountDecl =
                serde_json::from_str(json).map_err(|e| format!("stored account {path:?} does not read: {e}"))?;
            specs.push(spec_of(&d, cluster)?);
        }
    }
    AccountBook::restore(seed.declared(), &order, &specs).map_err(|e| e.to_string())
}

/// One line per edit for the API's answer and the log.
pub fn describe(e: &AccountEdit) -> String {
    let num = |v: Option<f64>| v.map_or_else(|| "default".to_string(), |v| v.to_string());
    match e {
        AccountEdit::Create(s) => format!("create {}", s.path),
        AccountEdit::Replace(s) => format!("replace {}", s.path),
        AccountEdit::Set { path, field, value } => format!("{} {path} = {}", field.key(), num(*value)),
        AccountEdit::SetUser { path, user, share } => format!("users.{user} {path} = {}", num(*share)),
        AccountEdit::SetUserBudget { path, user, budget_gpu_hours } => {
            format!("user_budgets.{user} {path} = {}", num(*budget_gpu_hours))
        }
        AccountEdit::Close { path } => format!("close {path}"),
        AccountEdit::Reopen { path } => format!("reopen {path}"),
        AccountEdit::Rename { path, to } => format!("rename {path} -> {to}"),
    }
}

/// Pending and running workloads per account subtree.
fn counts(state: &State) -> (Vec<u64>, Vec<u64>) {
    let tally = |ws: &mut dyn Iterator<Item = allot_core::WorkloadId>| {
        let mut out = vec![0u64; state.accounts.len()];
        for w in ws {
            for a in state.accounts.ancestry(state.spec(w).account) {
                out[a.0 as usize] += 1;
            }
        }
        out
    };
    (tally(&mut state.pending.iter().map(|(_, w)| *w)), tally(&mut state.running.iter().copied()))
}

/// One view per account in path order (a parent precedes its children).
pub fn views(state: &State, now: Time, with_standing: bool) -> Vec<AccountView> {
    let (pending, running) = counts(state);
    // The fair-share tree and the budgets once for every account, not once
    // per account: the view of 100 accounts over 10,000 pending workloads
    // stays one build of each.
    let standings = with_standing.then(|| AllotPolicy::new().standings(state, now));
    state
        .accounts
        .ids_by_path()
        .map(|id| view(state, id, now, standings.as_ref().map(|s| s[id.0 as usize]), &pending, &running))
        .collect()
}

fn view(
    state: &State,
    id: AccountId,
    now: Time,
    standing: Option<allot_core::policy::Standing>,
    pending: &[u64],
    running: &[u64],
) -> AccountView {
    let a = state.accounts.account(id);
    let u = state.ledger.at(id, now);
    let p = state.ledger.projection(&state.accounts, id, now);
    let parent = a.parent.filter(|p| *p != AccountId::ROOT).map(|p| state.accounts.account(p).path.clone());
    AccountView {
        path: a.path.clone(),
        parent,
        depth: a.depth,
        share: a.share,
        explicit_share: a.explicit_share,
        budget_gpu_hours: a.budget_gpu_hours,
        used_gpu_hours: p.used_ngh,
        carried_gpu_hours: p.carried_ngh,
        remaining_gpu_hours: p.remaining_ngh,
        burn_gpu_hours_per_hour: p.burn_ngh_per_hour,
        projected_exhaustion_t: p.exhaustion.map(|t| t as i64),
        charged_gpu_hours: u.charged_gpu_s as f64 / 3600.0,
        allocated_gpus: u.alloc_gpus,
        entitled_share: state.accounts.static_share(id),
        fair_share: standing.map(|s| s.value),
        entitled_now: standing.map(|s| s.entitled),
        using_share: standing.map(|s| s.using()),
        over_budget: standing.map(|s| s.over_budget),
        pending: pending[id.0 as usize],
        running: running[id.0 as usize],
        period_start_t: p.period_start as i64,
        period_end_t: p.period_end.min(i64::MAX as u64) as i64,
        impact: a.impact,
        users: a.users.clone(),
        user_budgets: a.user_budgets.clone(),
        closed: a.closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The view carries the core's projection: 2 NGH/h from t = 0 against a
    /// 10 NGH budget runs out at 5 h, inside the 10 h period; the CLI says so.
    #[test]
    fn the_view_shows_the_projection() {
        let mut state = allot_testkit::StateBuilder::new()
            .pool("p", "H100", 1, 8)
            .account_with("org/a", |a| a.budget_gpu_hours = Some(10.0))
            .account("org/b")
            .contract(|c| c.budget_period = 10 * 3600)
            .build();
        let a = state.accounts.get("org/a").unwrap();
        let tree = state.accounts.clone();
        state.ledger.change(&tree, a, 0, 2, 1.0);
        let list = views(&state, 2 * 3600, false);
        let v = list.iter().find(|v| v.path == "org/a").unwrap();
        assert_eq!((v.used_gpu_hours, v.remaining_gpu_hours, v.burn_gpu_hours_per_hour), (4.0, Some(6.0), 2.0));
        assert_eq!((v.projected_exhaustion_t, v.period_start_t, v.period_end_t), (Some(5 * 3600), 0, 10 * 3600));
        let b = list.iter().find(|v| v.path == "org/b").unwrap();
        assert_eq!((b.remaining_gpu_hours, b.projected_exhaustion_t), (None, None), "no budget, nothing runs out");
        let table = crate::client::render::accounts(&list);
        let row = table.lines().find(|l| l.trim_start().starts_with("a ")).unwrap();
        assert!(row.ends_with("Thu 01-01 05:00"), "{table}");
    }

    /// The standings built once for the whole tree are each account's own.
    #[test]
    fn standings_of_the_tree_are_each_accounts() {
        let mut state = allot_testkit::StateBuilder::new()
            .pool("p", "H100", 1, 8)
            .account_with("org/a", |a| a.budget_gpu_hours = Some(1.0))
            .account("org/a/x")
            .account("org/b")
            .build();
        let tree = state.accounts.clone();
        state.ledger.change(&tree, state.accounts.get("org/a/x").unwrap(), 0, 6, 1.0);
        state.ledger.change(&tree, state.accounts.get("org/b").unwrap(), 0, 2, 1.0);
        let now = 3 * 3600;
        let policy = AllotPolicy::new();
        for v in views(&state, now, true) {
            assert_eq!(v.fair_share, policy.fair_share_value(&state, &v.path, now), "{}", v.path);
            assert_eq!(v.over_budget, policy.over_budget(&state, &v.path, now), "{}", v.path);
            assert_eq!(v.entitled_now, policy.entitlement(&state, &v.path, now), "{}", v.path);
        }
        let a = views(&state, now, true).into_iter().find(|v| v.path == "org/a").unwrap();
        assert_eq!(a.over_budget, Some(true), "18 NGH used of 1");
    }

    /// Issue 30, point 3: an account holding half the GPUs, alone with
    /// work among three equal accounts, reads as using 50 % and entitled to
    /// all of it now (a third when all have work), not "0.50 · below share"
    /// beside "entitled 33.3 %".
    #[test]
    fn standing_is_one_notion_in_words() {
        let mut state = allot_testkit::StateBuilder::new()
            .pool("p", "H100", 1, 8)
            .account("org/a")
            .account("org/b")
            .account("org/c")
            .build();
        // org/a holds 4 of the 8 GPUs.
        let w = allot_testkit::Wl::new("w").account("org/a").gpus(4).work(100_000).build(&state);
        let w = state.submit(w);
        let d = allot_core::Policy::schedule(&mut AllotPolicy::new(), &state, 0);
        for allot_core::Decision { action, reason } in d {
            if let allot_core::Action::Start { workload, alloc } = action {
                state.start(workload, alloc, 0, reason);
            }
        }
        assert!(state.run(w).phase.holds_gpus());
        let a = views(&state, 0, true).into_iter().find(|v| v.path == "org/a").unwrap();
        assert!((a.entitled_share - 1.0 / 3.0).abs() < 1e-9);
        let words = a.standing_words().expect("the allot policy's standing");
        assert!(
            words.starts_with("recent use and GPUs held come to 25 % of the GPUs, entitled to 100 % now (33 % when all have work): below its share"),
            "{words}"
        );
    }
}
