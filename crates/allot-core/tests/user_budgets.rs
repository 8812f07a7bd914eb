//! Per-user budgets inside an account (rule BUD-6, `docs/budgets.md`): a
//! user who has used their own budget is over budget for the account's
//! work, with the same rank tier (BUD-1) and victim standing (BUD-2) as an
//! account over budget; the account's budget still binds; users without a
//! budget of their own, and accounts without user budgets, are unchanged.

mod allot_support;

use std::collections::BTreeMap;

use allot_core::calendar::{Calendar, Periods};
use allot_core::policy::AllotPolicy;
use allot_core::{AccountSpec, AccountTree, AccountTreeError, Decision, Ledger, Policy, Rule, State, Time};
use allot_support::{advance, charge_as, pass, preempted, started, sub_wl};
use allot_testkit::{StateBuilder, Wl};

const H: Time = 3600;

/// One 8-GPU node; `org/a` with user shares `users` and user budgets
/// `budgets`, its own budget `budget`; `org/b` without a budget.
fn lab(users: &[(&str, f64)], budgets: &[(&str, f64)], budget: Option<f64>) -> State {
    let table = |xs: &[(&str, f64)]| xs.iter().map(|(u, v)| (u.to_string(), *v)).collect::<BTreeMap<_, _>>();
    StateBuilder::new()
        .pool("p", "H100", 1, 8)
        .account_with("org/a", |a| {
            a.users = table(users);
            a.user_budgets = table(budgets);
            a.budget_gpu_hours = budget;
        })
        .account("org/b")
        .build()
}

/// An 8-GPU batch job of `user` in `account` submitted at `t`.
fn job(state: &mut State, id: &str, account: &str, user: &str, t: Time) -> allot_core::WorkloadId {
    sub_wl(state, Wl::new(id).account(account).user(user).gpus(8).submit(t).work(100_000))
}

#[test]
fn a_user_over_their_budget_yields_to_a_colleague_within() {
    struct Case {
        name: &'static str,
        budgets: &'static [(&'static str, f64)],
        /// Who gets the one node.
        want: &'static str,
        /// The start's rule, and what alice's pending reason says (if she waits).
        rule: Rule,
        alice_waits_because: Option<&'static str>,
    }
    // alice holds user share 100, so FS-2 prefers her (12 NGH / 100 against
    // bob's 5 NGH / 1) unless her own budget says otherwise.
    let cases = [
        Case {
            name: "no user budgets: FS-2 alone (as before BUD-6)",
            budgets: &[],
            want: "alice",
            rule: Rule::FairShare,
            alice_waits_because: None,
        },
        Case {
            name: "alice over her budget: bob first",
            budgets: &[("alice", 10.0)],
            want: "bob",
            rule: Rule::FairShare,
            alice_waits_because: Some(
                "user alice over their budget 12/10 NGH in account org/a this period (BUD-6); in-budget work ranks ahead",
            ),
        },
        Case {
            name: "alice within her budget: FS-2 again",
            budgets: &[("alice", 20.0)],
            want: "alice",
            rule: Rule::FairShare,
            alice_waits_because: None,
        },
        Case {
            name: "only bob over his: alice first",
            budgets: &[("alice", 20.0), ("bob", 4.0)],
            want: "alice",
            rule: Rule::FairShare,
            alice_waits_because: None,
        },
        Case {
            name: "both over: FS-2 among over-budget work (BUD-2)",
            budgets: &[("alice", 10.0), ("bob", 4.0)],
            want: "alice",
            rule: Rule::BudgetOver,
            alice_waits_because: None,
        },
        Case {
            name: "a budget of a user who does not submit changes nothing",
            budgets: &[("carol", 0.001)],
            want: "alice",
            rule: Rule::FairShare,
            alice_waits_because: None,
        },
    ];
    for c in cases {
        let mut state = lab(&[("alice", 100.0)], c.budgets, None);
        charge_as(&mut state, "org/a", "alice", 8, 0, 12.0);
        charge_as(&mut state, "org/a", "bob", 8, 6 * H, 5.0);
        let alice = job(&mut state, "alice", "org/a", "alice", 10 * H);
        job(&mut state, "bob", "org/a", "bob", 10 * H);
        let mut p = AllotPolicy::new();
        let d = pass(&mut p, &mut state, 10 * H);
        assert_eq!(started(&state, &d), [c.want], "{}", c.name);
        assert_eq!(d[0].reason.rule, c.rule, "{}: {}", c.name, d[0].reason);
        if let Some(why) = c.alice_waits_because {
            let r = p.explain(&state, alice, 10 * H);
            assert_eq!(r.rule, Rule::BudgetFirst, "{}: {r}", c.name);
            assert!(r.detail.contains(why), "{}: {r}", c.name);
        }
    }
}

#[test]
fn the_accounts_budget_still_binds_whatever_the_users() {
    struct Case {
        name: &'static str,
        account_budget: Option<f64>,
        want: &'static str,
        /// Part of the pending reason of the one that waits.
        why: &'static str,
    }
    let cases = [
        Case {
            name: "account within: FS-1 (org/a used less)",
            account_budget: None,
            want: "org/a",
            why: "no GPUs left after better-ranked work",
        },
        Case {
            name: "account over: alice's ample budget does not lift it (BUD-1)",
            account_budget: Some(10.0),
            want: "org/b",
            why: "account org/a over budget 12/10 NGH this period; in-budget work ranks ahead",
        },
    ];
    for c in cases {
        let mut state = lab(&[], &[("alice", 100.0)], c.account_budget);
        charge_as(&mut state, "org/a", "alice", 8, 0, 12.0);
        charge_as(&mut state, "org/b", "u", 8, 6 * H, 20.0);
        let a = job(&mut state, "org/a", "org/a", "alice", 10 * H);
        let b = job(&mut state, "org/b", "org/b", "u", 10 * H);
        let mut p = AllotPolicy::new();
        let d = pass(&mut p, &mut state, 10 * H);
        assert_eq!(started(&state, &d), [c.want], "{}", c.name);
        let waiting = if c.want == "org/a" { b } else { a };
        let r = p.explain(&state, waiting, 10 * H);
        assert!(r.detail.contains(c.why), "{}: {r}", c.name);
        let own = state.user_projection(state.accounts.get("org/a").unwrap(), "alice", 10 * H).unwrap();
        assert_eq!((own.used_ngh, own.budget_ngh), (12.0, Some(100.0)), "{}", c.name);
    }
}

/// Runs passes every `step` seconds from `from` to `to`, advancing time.
fn run(p: &mut AllotPolicy, state: &mut State, from: Time, to: Time, step: Time) -> Vec<(Time, Decision)> {
    let mut out = Vec::new();
    let mut t = from;
    while t <= to {
        advance(state, t);
        out.extend(pass(p, state, t).into_iter().map(|d| (t, d)));
        t += step;
    }
    out
}

#[test]
fn a_user_who_runs_past_their_budget_is_preemptible_at_once() {
    // alice starts in budget (1 NGH of her own) and reaches it after 450 s
    // on 8 GPUs; the policy wakes up then. At 1,000 s carol, who waits,
    // preempts her at once, inside her slice, as BUD-2 treats an account
    // over budget.
    for (name, budgets, wake, preempts) in [
        ("with a user budget", &[("alice", 1.0)][..], true, true),
        ("without: slice and fair share as before", &[][..], false, false),
    ] {
        let mut state = lab(&[], budgets, None);
        let mut p = AllotPolicy::new();
        job(&mut state, "alice", "org/a", "alice", 0);
        job(&mut state, "carol", "org/a", "carol", 0);
        let d = pass(&mut p, &mut state, 0);
        assert_eq!(started(&state, &d), ["alice"], "{name}");
        let next = p.next_wakeup(&state, 0);
        assert_eq!(next == Some(450), wake, "{name}: {next:?}");
        let d = pass(&mut p, &mut state, 1000);
        let got = preempted(&state, &d);
        if preempts {
            assert_eq!(got, [("alice".to_string(), "carol".to_string(), Rule::BudgetOver)], "{name}");
            let r = &d[0].reason;
            assert!(r.detail.contains("user alice over their budget 2.22/1 NGH in account org/a"), "{name}: {r}");
            assert!(r.detail.contains("preemptible at once by in-budget carol"), "{name}: {r}");
        } else {
            assert!(got.is_empty(), "{name}: {got:?}");
        }
    }
}

#[test]
fn no_user_budget_gives_the_same_decisions_as_before() {
    // A busy account with three users, with and without a budget for a user
    // who never submits: every decision of every pass is the same.
    let decisions = |budgets: &[(&str, f64)]| {
        let mut state = lab(&[("alice", 2.0)], budgets, Some(40.0));
        for (i, user) in ["alice", "bob", "dave"].iter().cycle().take(12).enumerate() {
            let t = i as Time * 1800;
            sub_wl(&mut state, Wl::new(format!("a{i}")).account("org/a").user(user).gpus(4).submit(t).work(3 * H));
            sub_wl(&mut state, Wl::new(format!("b{i}")).account("org/b").gpus(2).submit(t).work(2 * H).preemptible());
        }
        let mut p = AllotPolicy::new();
        let out = run(&mut p, &mut state, 0, 30 * H, 600);
        out.into_iter().map(|(t, d)| format!("{t} {:?} {}", d.action, d.reason)).collect::<Vec<_>>()
    };
    let before = decisions(&[]);
    assert!(before.len() > 20, "the scenario decides something: {}", before.len());
    assert_eq!(decisions(&[("erin", 1.0)]), before);
}

#[test]
fn members_follow_the_accounts_calendar_and_carry_over() {
    // A member who is the account's only user: the same used and carried
    // NGH as the account (BUD-4, BUD-5), at every instant read.
    let tree = AccountTree::build(&[AccountSpec { path: "org/a".into(), ..Default::default() }]).unwrap();
    let a = tree.get("org/a").unwrap();
    let periods = Periods { length: 10 * H, calendar: Calendar::Fixed { anchor: 0 } };
    for (name, holds, at) in [
        ("same period", &[(0, 3)][..], 5),
        ("carried from the period before", &[(0, 3)][..], 15),
        ("a hold across the boundary", &[(2, 14)][..], 15),
        ("an idle period between", &[(0, 9)][..], 25),
    ] {
        let mut l = Ledger::new(&tree, periods, 0.5, 7 * 24 * H);
        for &(s, e) in holds {
            l.change(&tree, a, s * H, 1, 1.0);
            l.change_member(0, s * H, 1, 1.0);
            l.change(&tree, a, e * H, -1, 1.0);
            l.change_member(0, e * H, -1, 1.0);
        }
        let budget = 10.0;
        let mut t = tree.clone();
        t.accounts[a.0 as usize].budget_gpu_hours = Some(budget);
        let acc = l.projection(&t, a, at * H);
        let own = l.member_projection(0, Some(budget), at * H);
        assert_eq!((own.used_ngh, own.carried_ngh), (acc.used_ngh, acc.carried_ngh), "{name}");
        assert_eq!((own.remaining_ngh, own.exhaustion), (acc.remaining_ngh, acc.exhaustion), "{name}");
        assert_eq!(l.member_available_ngs(0, budget, at * H), l.available_ngs(a, budget, at * H), "{name}");
    }
}

#[test]
fn bad_user_budgets_are_clear_errors() {
    let build = |user: &str, v: f64| {
        let mut a = AccountSpec { path: "org/a".into(), ..Default::default() };
        a.user_budgets.insert(user.into(), v);
        AccountTree::build(&[a])
    };
    for (name, user, v, says) in [
        ("negative", "alice", -1.0, "account \"org/a\": user_budgets.alice must be a finite number > 0 (got -1)"),
        ("zero", "alice", 0.0, "user_budgets.alice must be a finite number > 0 (got 0)"),
        ("NaN", "alice", f64::NAN, "user_budgets.alice must be a finite number > 0 (got NaN)"),
        ("infinite", "alice", f64::INFINITY, "user_budgets.alice must be a finite number > 0 (got inf)"),
        ("bad name", "a b", 1.0, "invalid user name \"a b\" in user_budgets"),
    ] {
        let e = build(user, v).unwrap_err();
        assert!(
            matches!(&e, AccountTreeError::BadUserBudget { user: u, .. } | AccountTreeError::BadBudgetUser { user: u, .. } if u == user),
            "{name}: {e:?}"
        );
        assert!(e.to_string().contains(says), "{name}: {e}");
    }
    let t = build("alice", 50.0).unwrap();
    let acc = t.account(t.get("org/a").unwrap());
    assert_eq!((acc.user_budget("alice"), acc.user_budget("bob")), (Some(50.0), None));
}
