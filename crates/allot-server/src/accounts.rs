//! Accounts at run time: the config's tree with the budgets and shares set
//! through the API applied on top, and the per-account views (budget, used,
//! remaining, fair-share standing).

use std::collections::BTreeMap;

use allot_core::policy::AllotPolicy;
use allot_core::{AccountId, AccountSpec, AccountTree, State, Time};

use crate::views::AccountView;

/// Budget and share overrides by path: `Some(v)` replaces the config's
/// value, `None` returns to it (`PATCH … null`, `allot budget set … default`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    pub budget: BTreeMap<String, Option<f64>>,
    pub share: BTreeMap<String, Option<f64>>,
}

/// The declared accounts of a resolved tree, as specs that rebuild it.
/// Inherited values (impact, legacy pools) are written out explicitly,
/// which resolves to the same tree.
pub fn base_specs(tree: &AccountTree) -> Vec<AccountSpec> {
    tree.ids()
        .map(|id| tree.account(id))
        .filter(|a| a.declared)
        .map(|a| AccountSpec {
            path: a.path.clone(),
            share: a.explicit_share.then_some(a.share),
            budget_gpu_hours: a.budget_gpu_hours,
            impact: Some(a.impact),
            legacy_pools: a.legacy_pools.clone(),
            max_service_gpus: a.max_service_gpus,
            users: a.users.clone(),
            user_budgets: a.user_budgets.clone(),
        })
        .collect()
}

/// The tree with overrides applied. Ids stay the same: they follow the
/// sorted set of paths, which overrides never change.
pub fn build_tree(base: &[AccountSpec], o: &Overrides) -> Result<AccountTree, allot_core::AccountTreeError> {
    let mut specs: Vec<AccountSpec> = base.to_vec();
    let set = o.budget.iter().chain(&o.share).filter(|(_, v)| v.is_some());
    let paths: Vec<String> = set.map(|(p, _)| p.clone()).collect();
    for p in &paths {
        if !specs.iter().any(|s| &s.path == p) {
            specs.push(AccountSpec { path: p.clone(), ..Default::default() });
        }
    }
    for s in &mut specs {
        if let Some(Some(b)) = o.budget.get(&s.path) {
            s.budget_gpu_hours = Some(*b);
        }
        if let Some(Some(v)) = o.share.get(&s.path) {
            s.share = Some(*v);
        }
    }
    AccountTree::build(&specs)
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

/// One view per account in path order.
pub fn views(state: &State, now: Time, with_standing: bool) -> Vec<AccountView> {
    let (pending, running) = counts(state);
    let policy = AllotPolicy::new();
    state.accounts.ids().map(|id| view(state, id, now, with_standing, &policy, &pending, &running)).collect()
}

fn view(
    state: &State,
    id: AccountId,
    now: Time,
    with_standing: bool,
    policy: &AllotPolicy,
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
        fair_share: if with_standing { policy.fair_share_value(state, &a.path, now) } else { None },
        over_budget: if with_standing { policy.over_budget(state, &a.path, now) } else { None },
        pending: pending[id.0 as usize],
        running: running[id.0 as usize],
        period_start_t: p.period_start as i64,
        period_end_t: p.period_end.min(i64::MAX as u64) as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_returns_to_the_config() {
        let base = vec![AccountSpec { path: "org/a".into(), budget_gpu_hours: Some(10.0), ..Default::default() }];
        let budget = |o: &Overrides| {
            let t = build_tree(&base, o).unwrap();
            t.account(t.get("org/a").unwrap()).budget_gpu_hours
        };
        let mut o = Overrides::default();
        o.budget.insert("org/a".into(), Some(5.0));
        assert_eq!(budget(&o), Some(5.0), "override");
        o.budget.insert("org/a".into(), None);
        assert_eq!(budget(&o), Some(10.0), "null: the config's value, not no budget");
        o.share.insert("org/new".into(), None);
        assert!(build_tree(&base, &o).unwrap().get("org/new").is_none(), "a null adds no account");
    }

    #[test]
    fn user_shares_survive_a_rebuild_with_overrides() {
        let mut a = AccountSpec { path: "org/a".into(), ..Default::default() };
        a.users.insert("alice".into(), 2.0);
        let tree = AccountTree::build(&[a]).unwrap();
        let mut o = Overrides::default();
        o.share.insert("org/a".into(), Some(3.0));
        let t = build_tree(&base_specs(&tree), &o).unwrap();
        let acc = t.account(t.get("org/a").unwrap());
        assert_eq!((acc.share, acc.user_share("alice"), acc.user_share("bob")), (3.0, 2.0, 1.0));
    }

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
}
